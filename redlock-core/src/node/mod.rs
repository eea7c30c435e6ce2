//! One Redis master: its client, the calls that send a command or a script with a hard time
//! limit, and script preloading. The scripts' machinery and the dispatch script are in
//! [`scripts`], the replies every grant shares are decoded in [`replies`], and the script calls
//! are batched by [`pipeline`]. The typed per-node commands are `impl Node` blocks beside the
//! scripts they send: the kernel's in [`kernel::commands`](crate::kernel::commands), a slice's
//! in its folder (`semaphore/node.rs`, `detach/node.rs`, `admin/node.rs`).

mod pipeline;
pub(crate) mod replies;
pub(crate) mod scripts;
pub mod transport;

use std::sync::Arc;
use std::time::Duration;

use fred::clients::Client;
use fred::types::Value;

use crate::outcome::NodeError;
pub(crate) use pipeline::Arg;
use pipeline::Pipeline;
use scripts::{BATCH, Script};
use transport::{Fred, Transport};

/// A client for one independent master, its script pipeline, and its display label
/// (`host:port`, no credentials). Every command goes through its [`Transport`]; the `fred`
/// client itself, when the node is reached through one, is kept for connecting,
/// reconnection events and quitting.
#[derive(Clone)]
pub(crate) struct Node {
    /// The `fred` client, unless the node is reached through a transport of the user's
    /// ([`RedlockBuilder::node_transport`](crate::RedlockBuilder::node_transport)), which is
    /// connected from its creation.
    pub(crate) client: Option<Client>,
    /// Shared: a metric's label is not a copy of it.
    pub(crate) label: Arc<str>,
    /// This node's own limit for one call in a round, when it is below the round's
    /// ([`RedlockBuilder::node_timeout_for`](crate::RedlockBuilder::node_timeout_for));
    /// [`Duration::MAX`] (no limit of its own) by default.
    pub(crate) timeout: Duration,
    transport: Arc<dyn Transport>,
    pipeline: Pipeline,
}

impl Node {
    /// The node `client` talks to, labelled `label`; starts its script pipeline on the current
    /// tokio runtime.
    pub(crate) fn new(client: Client, label: String) -> Self {
        let transport: Arc<dyn Transport> = Arc::new(Fred(client.clone()));
        Self::with(Some(client), transport, label)
    }

    /// The node `transport` reaches, labelled `label`, without a `fred` client of its own;
    /// starts its script pipeline on the current tokio runtime.
    pub(crate) fn through(transport: Arc<dyn Transport>, label: String) -> Self {
        Self::with(None, transport, label)
    }

    fn with(client: Option<Client>, transport: Arc<dyn Transport>, label: String) -> Self {
        Self {
            pipeline: Pipeline::start(transport.clone()),
            transport,
            client,
            label: Arc::from(label),
            timeout: Duration::MAX,
        }
    }

    /// Whether the node is connected now: always, for a node reached through a transport of
    /// the user's.
    pub(crate) fn is_connected(&self) -> bool {
        use fred::interfaces::ClientLike;
        self.client.as_ref().is_none_or(ClientLike::is_connected)
    }

    /// Sends one command. Unbounded in time by itself: every caller bounds it, a round with
    /// [`Masters::round`](crate::kernel::masters::Masters::round), a single call with [`Node::bounded`].
    pub(crate) async fn call(
        &self,
        command: &'static str,
        args: Vec<Value>,
    ) -> Result<Value, NodeError> {
        self.transport.send(command, args).await
    }

    /// Runs `script` on `keys` and `args` in the node's next batch ([`pipeline`]): sent as
    /// `EVALSHA` of the dispatch script, then `EVAL` when the node answers `NOSCRIPT` (script
    /// caches are empty after every restart or `SCRIPT FLUSH`). Unbounded in time by itself:
    /// every caller bounds it. Queued on the first poll, it is sent with the next batch even
    /// if this future is dropped first ([`pipeline`]).
    pub(crate) async fn eval(
        &self,
        script: &'static Script,
        keys: &[&str],
        args: &[Arg<'_>],
    ) -> Result<Value, NodeError> {
        self.pipeline.call(script, keys, args, false).await
    }

    /// Sends `SET key token NX PX ttl_ms GET`, in order with the script calls ([`pipeline`]),
    /// made now, before the future is polled; unbounded in time by itself: every caller bounds
    /// it. The reply: `nil` when the key was set, the value there when it was not.
    pub(crate) fn set_nx(
        &self,
        key: &str,
        token: &str,
        ttl_ms: i64,
    ) -> impl Future<Output = Result<Value, NodeError>> + Send + use<> {
        self.pipeline.set_nx(key, token, ttl_ms)
    }

    /// [`eval`](Self::eval) for releases, sent to completion even if dropped. A release
    /// round returns at quorum and drops the calls still running: the `EVAL` that answers a
    /// `NOSCRIPT` must still be sent, or that node would keep the key until its ttl. A release
    /// may land late (it deletes only its own token), so it is always finished. An acquisition
    /// is not: its clean-up must reach each node after it. Unbounded in time by itself: the
    /// caller's round bounds it (one timer for the round, not one per node).
    pub(crate) fn eval_release(
        &self,
        script: &'static Script,
        keys: &[&str],
        args: &[Arg<'_>],
    ) -> impl Future<Output = Result<Value, NodeError>> + Send + use<> {
        // Made now, not on the first poll: a round decided at quorum drops the calls it has
        // not polled yet, and a release must reach every node.
        self.pipeline.issue(script, keys, args, true)
    }

    /// [`eval_release`](Self::eval_release) bounded by `limit` on its own, for a call awaited
    /// outside a round: past `limit`, [`NodeError::Timeout`] (the call still runs to
    /// completion).
    pub(crate) fn eval_release_within(
        &self,
        script: &'static Script,
        keys: &[&str],
        args: &[Arg<'_>],
        limit: Duration,
    ) -> impl Future<Output = Result<Value, NodeError>> + Send + use<> {
        let answer = self.eval_release(script, keys, args);
        async move {
            tokio::time::timeout(limit, answer)
                .await
                .unwrap_or(Err(NodeError::Timeout(limit)))
        }
    }

    /// Completes once every call sent to the node before it has been answered (or failed): a
    /// [`NOOP`](scripts::NOOP) through the pipeline, after them. Unbounded by itself.
    pub(crate) async fn flush(&self) {
        let _answered = self.pipeline.call(&scripts::NOOP, &[], &[], true).await;
    }

    /// Loads the dispatch script, which holds every script, into the node's script cache
    /// (`SCRIPT LOAD`).
    ///
    /// A release that timed out is still delivered when a stalled node resumes; its `EVAL`
    /// fallback follows only while the handle lives: the script should already be cached
    /// there, or a `SET` that landed late would outlive the failed attempt until its ttl. Best
    /// effort: a user without `+script|load` still gets the `EVAL` fallback on answered calls.
    pub(crate) async fn load_scripts(&self, limit: Duration) -> Result<(), NodeError> {
        load_scripts(self.transport.as_ref(), &self.label, limit).await
    }

    /// Keeps the scripts loaded: now if connected, and after every (re)connection, since a
    /// restarted node has an empty script cache. The listener holds the client and the label
    /// only: the pipeline task ends with the handle.
    pub(crate) fn keep_scripts_loaded(&self, limit: Duration) {
        use fred::interfaces::EventInterface;
        let Some(client) = &self.client else { return };
        let (transport, label) = (self.transport.clone(), self.label.clone());
        let _listener = client.on_reconnect(move |_server| {
            let (transport, label) = (transport.clone(), label.clone());
            async move {
                let _logged = load_scripts(transport.as_ref(), &label, limit).await;
                Ok(())
            }
        });
    }
}

/// A ttl, a grace or any other count of milliseconds or seconds as a command argument.
pub(crate) fn int_arg(value: u64) -> Arg<'static> {
    Arg::Int(i64::try_from(value).unwrap_or(i64::MAX))
}

/// [`Node::load_scripts`] through `transport`, labelled `label` in the log; the node's
/// answer, an error logged at DEBUG.
async fn load_scripts(
    transport: &dyn Transport,
    label: &str,
    limit: Duration,
) -> Result<(), NodeError> {
    let args = vec![Value::from("LOAD"), Value::from(BATCH.source.as_str())];
    let load = transport.send("SCRIPT", args);
    let loaded = tokio::time::timeout(limit, load)
        .await
        .unwrap_or(Err(NodeError::Timeout(limit)));
    if let Err(error) = &loaded {
        tracing::debug!(node = %label, error = error.detailed(), "could not preload the lock scripts");
    }
    loaded.map(drop)
}
