//! One Redis master: the single-instance primitives (`SET NX PX`, compare-and-delete) with a
//! hard per-call time limit.

use std::sync::OnceLock;
use std::time::Duration;

use fred::clients::Client;
use fred::interfaces::ClientLike;
use fred::types::config::Options;
use fred::types::{ClusterHash, CustomCommand, Value};

use crate::outcome::{NodeError, NodeVote};

/// A Lua script and its SHA1, sent with `EVALSHA` (falling back to `EVAL` on `NOSCRIPT`).
pub(crate) struct Script {
    source: &'static str,
    sha1: OnceLock<String>,
}

impl Script {
    const fn new(source: &'static str) -> Self {
        Self {
            source,
            sha1: OnceLock::new(),
        }
    }

    /// The SHA1 `EVALSHA` names the script by, computed once.
    fn sha1(&self) -> &str {
        self.sha1.get_or_init(|| fred::util::sha1_hash(self.source))
    }
}

/// Compare-and-delete: delete the key only if it still holds our token (distlock spec, "Correct
/// implementation with a single instance"). Returns 1 if deleted, 0 otherwise.
pub(crate) static RELEASE: Script = Script::new(
    r#"if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("del", KEYS[1]) else return 0 end"#,
);

/// Compare-and-pexpire: give the key a new ttl only if it still holds our token (distlock
/// spec, "Making the algorithm more reliable: Extending the lock"). A key that is gone is never
/// re-created. Returns 1 if extended, 0 otherwise.
pub(crate) static EXTEND: Script = Script::new(
    r#"if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("pexpire", KEYS[1], ARGV[2]) else return 0 end"#,
);

/// `SET key token NX PX ttl` that also reads the resource's fencing counter (0 if none), in
/// one round trip: `{1 | 0, counter}`.
pub(crate) static ACQUIRE_FENCED: Script = Script::new(
    r#"local ok = redis.call("set", KEYS[1], ARGV[1], "NX", "PX", ARGV[2])
return {ok and 1 or 0, tonumber(redis.call("get", KEYS[2]) or "0") or 0}"#,
);

/// Raises the fencing counter to `ARGV[1]` if it is lower (a max register: it never goes
/// down). Returns the counter as it was before: below `ARGV[1]` means confirmed.
pub(crate) static FENCE: Script = Script::new(
    r#"local cur = tonumber(redis.call("get", KEYS[1]) or "0") or 0
if cur < tonumber(ARGV[1]) then redis.call("set", KEYS[1], ARGV[1]) end
return cur"#,
);

/// Every script a node runs, preloaded on each (re)connection.
const SCRIPTS: [&Script; 4] = [&RELEASE, &EXTEND, &ACQUIRE_FENCED, &FENCE];

/// Slack added to the outer `tokio::time::timeout` over fred's own per-command timeout, so that
/// fred's typed `Timeout` normally wins and the outer one only catches a stuck client.
const OUTER_SLACK: Duration = Duration::from_millis(5);

/// A client for one independent master and its display label (`host:port`, no credentials).
#[derive(Clone)]
pub(crate) struct Node {
    pub(crate) client: Client,
    pub(crate) label: String,
}

impl Node {
    /// Per-call options: a hard timeout, one attempt (fred must not silently re-send a `SET NX`
    /// after a reconnect) and fail-fast when the client is not connected. Sent through
    /// `custom()` on `WithOptions`, the one path where fred honours them for scripts too
    /// (fred.rs#353: `with_options(..).eval(..)` drops them).
    fn options(limit: Duration) -> Options {
        Options {
            timeout: Some(limit),
            max_attempts: Some(1),
            fail_fast: true,
            ..Options::default()
        }
    }

    async fn call(
        &self,
        command: &'static str,
        args: Vec<Value>,
        limit: Duration,
    ) -> Result<Value, NodeError> {
        let cmd = CustomCommand::new_static(command, ClusterHash::FirstKey, false);
        let client = self.client.with_options(&Self::options(limit));
        match tokio::time::timeout(
            limit + OUTER_SLACK,
            client.custom::<Value, Value>(cmd, args),
        )
        .await
        {
            Err(_) => Err(NodeError::Timeout(limit)),
            Ok(Err(e)) => Err(NodeError::from_fred(&e, limit)),
            Ok(Ok(value)) => Ok(value),
        }
    }

    /// `SET key token NX PX ttl` (Redlock step 2 on one node).
    pub(crate) async fn try_lock(
        &self,
        key: &str,
        token: &str,
        ttl_ms: u64,
        limit: Duration,
    ) -> NodeVote {
        let args = vec![
            Value::from(key),
            Value::from(token),
            Value::from("NX"),
            Value::from("PX"),
            Value::from(ttl_ms.to_string()),
        ];
        match self.call("SET", args, limit).await {
            Ok(Value::Null) => NodeVote::Held,
            Ok(_) => NodeVote::Acquired,
            Err(e) => NodeVote::Failed(e),
        }
    }

    /// Runs `script` on `keys` and `args`: `EVALSHA`, then `EVAL` when the node answers
    /// `NOSCRIPT` (script caches are empty after every restart or `SCRIPT FLUSH`).
    pub(crate) async fn eval(
        &self,
        script: &Script,
        keys: &[&str],
        args: &[Value],
        limit: Duration,
    ) -> Result<Value, NodeError> {
        let with = |head: &str| {
            let mut all = Vec::with_capacity(2 + keys.len() + args.len());
            all.push(Value::from(head));
            all.push(Value::from(keys.len() as i64));
            all.extend(keys.iter().map(|k| Value::from(*k)));
            all.extend(args.iter().cloned());
            all
        };
        match self.call("EVALSHA", with(script.sha1()), limit).await {
            Err(NodeError::Reply(text)) if text.starts_with("NOSCRIPT") => {
                self.call("EVAL", with(script.source), limit).await
            }
            other => other,
        }
    }

    /// The compare-and-delete script on one node. `Ok(true)` if our key was deleted,
    /// `Ok(false)` if it was gone or held by someone else.
    pub(crate) async fn unlock(
        &self,
        key: &str,
        token: &str,
        limit: Duration,
    ) -> Result<bool, NodeError> {
        let reply = self
            .eval(&RELEASE, &[key], &[Value::from(token)], limit)
            .await?;
        Ok(matches!(reply, Value::Integer(1)))
    }

    /// The compare-and-pexpire script on one node: [`NodeVote::Acquired`] if our key got the
    /// new ttl, [`NodeVote::Held`] if it is gone or another holder's.
    pub(crate) async fn extend(
        &self,
        key: &str,
        token: &str,
        ttl_ms: u64,
        limit: Duration,
    ) -> NodeVote {
        let args = [Value::from(token), Value::from(ttl_ms.to_string())];
        match self.eval(&EXTEND, &[key], &args, limit).await {
            Ok(Value::Integer(1)) => NodeVote::Acquired,
            Ok(_) => NodeVote::Held,
            Err(e) => NodeVote::Failed(e),
        }
    }

    /// `SET NX PX` plus a read of the fencing counter (first round of a fenced acquisition).
    pub(crate) async fn try_lock_fenced(
        &self,
        key: &str,
        fence_key: &str,
        token: &str,
        ttl_ms: u64,
        limit: Duration,
    ) -> (NodeVote, u64) {
        let args = [Value::from(token), Value::from(ttl_ms.to_string())];
        match self
            .eval(&ACQUIRE_FENCED, &[key, fence_key], &args, limit)
            .await
        {
            Ok(Value::Array(reply)) => {
                let counter = reply.get(1).and_then(counter).unwrap_or(0);
                match reply.first() {
                    Some(Value::Integer(1)) => (NodeVote::Acquired, counter),
                    _ => (NodeVote::Held, counter),
                }
            }
            Ok(other) => (
                NodeVote::Failed(NodeError::Reply(format!(
                    "unexpected reply to the fenced SET: {other:?}"
                ))),
                0,
            ),
            Err(e) => (NodeVote::Failed(e), 0),
        }
    }

    /// Raises the fencing counter to `value` if lower. [`NodeVote::Acquired`] if the counter
    /// was below `value` (confirmed); otherwise [`NodeVote::Held`] with the higher counter.
    pub(crate) async fn fence(
        &self,
        fence_key: &str,
        value: u64,
        limit: Duration,
    ) -> (NodeVote, u64) {
        let args = [Value::from(value.to_string())];
        match self.eval(&FENCE, &[fence_key], &args, limit).await {
            Ok(reply) => match counter(&reply) {
                Some(before) if before < value => (NodeVote::Acquired, before),
                Some(before) => (NodeVote::Held, before),
                None => (
                    NodeVote::Failed(NodeError::Reply(format!(
                        "unexpected reply to the fence script: {reply:?}"
                    ))),
                    0,
                ),
            },
            Err(e) => (NodeVote::Failed(e), 0),
        }
    }

    /// Loads every script into the node's script cache (`SCRIPT LOAD`).
    ///
    /// A release that timed out is still delivered when a stalled node resumes, as `EVALSHA`
    /// with no chance of the `EVAL` fallback: the script must already be cached there, or a
    /// `SET` that landed late would outlive the failed attempt until its ttl. Best effort: a
    /// user without `+script|load` still gets the `EVAL` fallback on answered calls.
    pub(crate) async fn load_scripts(&self, limit: Duration) {
        for script in SCRIPTS {
            let args = vec![Value::from("LOAD"), Value::from(script.source)];
            if let Err(error) = self.call("SCRIPT", args, limit).await {
                tracing::debug!(node = %self.label, %error, "could not preload the lock scripts");
                return;
            }
        }
    }

    /// Keeps the scripts loaded: now if connected, and after every (re)connection,
    /// since a restarted node has an empty script cache.
    pub(crate) fn keep_scripts_loaded(&self, limit: Duration) {
        use fred::interfaces::EventInterface;
        let node = self.clone();
        let _listener = self.client.on_reconnect(move |_server| {
            let node = node.clone();
            async move {
                node.load_scripts(limit).await;
                Ok(())
            }
        });
    }

    /// The server's `run_id` from `INFO server`, to tell two URLs for one server apart.
    pub(crate) async fn run_id(&self, limit: Duration) -> Option<String> {
        let info = self
            .call("INFO", vec![Value::from("server")], limit)
            .await
            .ok()?;
        let text = info.as_string()?;
        text.lines()
            .find_map(|line| line.strip_prefix("run_id:"))
            .map(|id| id.trim().to_owned())
    }
}

/// A fencing counter from a script reply (an integer, or its decimal string).
fn counter(value: &Value) -> Option<u64> {
    match value {
        Value::Integer(i) => u64::try_from(*i).ok(),
        Value::String(s) => s.parse().ok(),
        Value::Bytes(b) => std::str::from_utf8(b).ok()?.parse().ok(),
        _ => None,
    }
}
