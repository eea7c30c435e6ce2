//! One Redis master: the single-instance primitives (`SET NX PX`, compare-and-delete) with a
//! hard per-call time limit.

use std::sync::LazyLock;
use std::time::Duration;

use fred::clients::Client;
use fred::interfaces::ClientLike;
use fred::types::config::Options;
use fred::types::{ClusterHash, CustomCommand, Value};

use crate::outcome::{NodeError, NodeVote};

/// Compare-and-delete: delete the key only if it still holds our token (distlock spec, "Correct
/// implementation with a single instance"). Returns 1 if deleted, 0 otherwise.
pub(crate) const RELEASE_SCRIPT: &str = r#"if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("del", KEYS[1]) else return 0 end"#;

static RELEASE_SHA1: LazyLock<String> = LazyLock::new(|| fred::util::sha1_hash(RELEASE_SCRIPT));

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

    /// Runs the compare-and-delete script: `EVALSHA`, then `EVAL` when the node answers
    /// `NOSCRIPT` (script caches are empty after every restart). `Ok(true)` if our key was
    /// deleted, `Ok(false)` if it was gone or held by someone else.
    pub(crate) async fn unlock(
        &self,
        key: &str,
        token: &str,
        limit: Duration,
    ) -> Result<bool, NodeError> {
        let tail = [Value::from(1), Value::from(key), Value::from(token)];
        let with = |head: &str| {
            let mut args = vec![Value::from(head)];
            args.extend(tail.iter().cloned());
            args
        };
        let reply = match self
            .call("EVALSHA", with(RELEASE_SHA1.as_str()), limit)
            .await
        {
            Err(NodeError::Reply(text)) if text.starts_with("NOSCRIPT") => {
                self.call("EVAL", with(RELEASE_SCRIPT), limit).await
            }
            other => other,
        }?;
        Ok(matches!(reply, Value::Integer(1)))
    }

    /// Loads the release script into the node's script cache (`SCRIPT LOAD`).
    ///
    /// A release that timed out is still delivered when a stalled node resumes, as `EVALSHA`
    /// with no chance of the `EVAL` fallback: the script must already be cached there, or a
    /// `SET` that landed late would outlive the failed attempt until its ttl. Best effort: a
    /// user without `+script|load` still gets the `EVAL` fallback on answered releases.
    pub(crate) async fn load_scripts(&self, limit: Duration) {
        let args = vec![Value::from("LOAD"), Value::from(RELEASE_SCRIPT)];
        if let Err(error) = self.call("SCRIPT", args, limit).await {
            tracing::debug!(node = %self.label, %error, "could not preload the release script");
        }
    }

    /// Keeps the release script loaded: now if connected, and after every (re)connection,
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
