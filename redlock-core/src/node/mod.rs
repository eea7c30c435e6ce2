//! One Redis master: its client, the calls that send a command or a script with a hard time
//! limit, and script preloading. The typed per-node commands are in [`commands`], every Lua
//! script in [`scripts`].

mod commands;
mod replies;
pub(crate) mod scripts;

use std::sync::OnceLock;
use std::time::Duration;

use fred::clients::Client;
use fred::interfaces::ClientLike;
use fred::types::config::Options;
use fred::types::{ClusterHash, CustomCommand, Value};

use crate::outcome::NodeError;
use scripts::{SCRIPTS, Script};

pub(crate) use commands::{AcquireKind, AcquireRequest, Handover, ModeRequest, Releasing, Waiter};

/// A client for one independent master and its display label (`host:port`, no credentials).
#[derive(Clone)]
pub(crate) struct Node {
    pub(crate) client: Client,
    pub(crate) label: String,
}

/// Per-call options: one attempt (fred must not silently re-send a `SET NX` after a
/// reconnect), fail-fast when the client is not connected, and no fred timer: the time limit
/// is one timer per round over all nodes ([`Masters::round`](crate::masters::Masters::round)), not two
/// per command. Sent through `custom()` on `WithOptions`, the one path where fred honours them
/// for scripts too (fred.rs#353: `with_options(..).eval(..)` drops them).
fn call_options() -> &'static Options {
    static OPTIONS: OnceLock<Options> = OnceLock::new();
    OPTIONS.get_or_init(|| Options {
        timeout: Some(Duration::ZERO),
        max_attempts: Some(1),
        fail_fast: true,
        ..Options::default()
    })
}

/// [`Node::eval`] on `client`.
async fn eval_on(
    client: &Client,
    script: &Script,
    keys: &[&str],
    args: &[Value],
) -> Result<Value, NodeError> {
    let with = |head: &str| {
        let mut all = Vec::with_capacity(2 + keys.len() + args.len());
        all.push(Value::from(head));
        all.push(Value::from(keys.len() as i64));
        all.extend(keys.iter().map(|k| Value::from(*k)));
        all.extend(args.iter().cloned());
        all
    };
    match send(client, "EVALSHA", with(script.sha1())).await {
        Err(NodeError::Reply(error)) if error.details().starts_with("NOSCRIPT") => {
            send(client, "EVAL", with(script.source)).await
        }
        other => other,
    }
}

/// Sends one command on `client` with [`call_options`], unbounded in time by itself.
async fn send(
    client: &Client,
    command: &'static str,
    args: Vec<Value>,
) -> Result<Value, NodeError> {
    let cmd = CustomCommand::new_static(command, ClusterHash::FirstKey, false);
    client
        .with_options(call_options())
        .custom::<Value, Value>(cmd, args)
        .await
        .map_err(NodeError::from_fred)
}

impl Node {
    /// Sends one command. Unbounded in time by itself: every caller bounds it, a round with
    /// [`Masters::round`](crate::masters::Masters::round), a single call with [`Node::bounded`].
    pub(crate) async fn call(
        &self,
        command: &'static str,
        args: Vec<Value>,
    ) -> Result<Value, NodeError> {
        send(&self.client, command, args).await
    }

    /// [`call`](Self::call) bounded by `limit`.
    async fn bounded(
        &self,
        command: &'static str,
        args: Vec<Value>,
        limit: Duration,
    ) -> Result<Value, NodeError> {
        tokio::time::timeout(limit, self.call(command, args))
            .await
            .unwrap_or(Err(NodeError::Timeout(limit)))
    }

    /// Runs `script` on `keys` and `args`: `EVALSHA`, then `EVAL` when the node answers
    /// `NOSCRIPT` (script caches are empty after every restart or `SCRIPT FLUSH`).
    pub(crate) async fn eval(
        &self,
        script: &Script,
        keys: &[&str],
        args: &[Value],
    ) -> Result<Value, NodeError> {
        eval_on(&self.client, script, keys, args).await
    }

    /// [`eval`](Self::eval) for releases, run to completion in a task of its own, bounded by
    /// `limit`. A release round returns at quorum and drops the calls still running: a
    /// command already handed to the client lands anyway, but the `EVAL` that answers a
    /// `NOSCRIPT` would never be sent, and that node would keep the key until its ttl. A
    /// release may land late (it deletes only its own token), so it is always finished. An
    /// acquisition is not detached: its clean-up must reach each node after it.
    pub(crate) async fn eval_release(
        &self,
        script: &'static Script,
        keys: &[&str],
        args: &[Value],
        limit: Duration,
    ) -> Result<Value, NodeError> {
        let client = self.client.clone();
        let keys: Vec<String> = keys.iter().map(|k| (*k).to_owned()).collect();
        let args = args.to_vec();
        let release = tokio::spawn(async move {
            let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
            tokio::time::timeout(limit, eval_on(&client, script, &keys, &args))
                .await
                .unwrap_or(Err(NodeError::Timeout(limit)))
        });
        release.await.unwrap_or(Err(NodeError::Timeout(limit)))
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
            if let Err(error) = self.bounded("SCRIPT", args, limit).await {
                tracing::debug!(node = %self.label, error = error.detailed(), "could not preload the lock scripts");
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
}
