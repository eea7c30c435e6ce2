//! The transport seam: the one way the lock reaches a node's commands.
//!
//! Everything the kernel sends to a node, the batches of script calls
//! ([`pipeline`](super::pipeline)) and the few plain commands (`INFO` at build time, a
//! `SCRIPT LOAD`), goes through [`Transport::send`]: one command and its arguments in, its reply
//! out. The production implementation is [`Fred`], a `fred` client with the per-call options
//! the lock needs. Another implementation (nodes held in process, or a simulated network)
//! answers the same commands: the dispatch script's `EVALSHA`/`EVAL` with the batch layout of
//! [`scripts::BATCH`](super::scripts::BATCH), and `NOSCRIPT` when it wants the source.
//!
//! The pub/sub side of waiting (the subscribers of [`waiters`](crate::kernel::waiters)) still talks to
//! `fred` directly.

use std::future::Future;
use std::pin::Pin;
use std::sync::OnceLock;
use std::time::Duration;

use fred::clients::Client;
use fred::interfaces::ClientLike;
use fred::types::config::Options;
use fred::types::{ClusterHash, CustomCommand, Value};

use crate::outcome::NodeError;

/// A command's reply, to come.
pub(crate) type Reply = Pin<Box<dyn Future<Output = Result<Value, NodeError>> + Send>>;

/// How the lock sends one command to one node.
pub(crate) trait Transport: Send + Sync + 'static {
    /// Sends `command` with `args`. The command is handed to the node on the reply's first
    /// poll, so that commands polled in order reach the node in that order (the pipeline polls
    /// each batch once as soon as it is made). Unbounded in time: every caller bounds it.
    /// Sent once: never re-sent after a reconnection (a `SET NX` sent twice could take a
    /// lock nobody holds).
    fn send(&self, command: &'static str, args: Vec<Value>) -> Reply;
}

/// The production transport: a `fred` client.
pub(crate) struct Fred(pub(crate) Client);

/// Per-call options: one attempt (fred must not silently re-send a `SET NX` after a
/// reconnect), fail-fast when the client is not connected, and no fred timer: the time limit
/// is one timer per round over all nodes ([`Masters::round`](crate::kernel::masters::Masters::round)),
/// not two per command. Sent through `custom()` on `WithOptions`, the one path where fred
/// honours them for scripts too (fred.rs#353: `with_options(..).eval(..)` drops them).
fn call_options() -> &'static Options {
    static OPTIONS: OnceLock<Options> = OnceLock::new();
    OPTIONS.get_or_init(|| Options {
        timeout: Some(Duration::ZERO),
        max_attempts: Some(1),
        fail_fast: true,
        ..Options::default()
    })
}

impl Transport for Fred {
    fn send(&self, command: &'static str, args: Vec<Value>) -> Reply {
        let client = self.0.clone();
        Box::pin(async move {
            let cmd = CustomCommand::new_static(command, ClusterHash::FirstKey, false);
            client
                .with_options(call_options())
                .custom::<Value, Value>(cmd, args)
                .await
                .map_err(NodeError::from_fred)
        })
    }
}
