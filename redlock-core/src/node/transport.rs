//! The transport seam: the one way the lock reaches a node's commands, public so that nodes
//! held in process (redlock-test's in-memory nodes) or a simulated network can stand in for
//! a server.
//!
//! Everything the lock sends to a node, the batches of script calls and the few plain
//! commands (`INFO` at build time, a `SCRIPT LOAD`), goes through [`Transport::send`]: one
//! command and its arguments in, its reply out; a plain acquisition goes through
//! [`Transport::set_nx`]. The production implementation is a `fred` client with the per-call
//! options the lock needs, made by [`RedlockBuilder::node`](crate::RedlockBuilder::node).
//! Another implementation answers the same commands, given to
//! [`RedlockBuilder::node_transport`](crate::RedlockBuilder::node_transport):
//!
//! - `EVALSHA sha1 numkeys key… arg…` and `EVAL source numkeys key… arg…` of the dispatch
//!   script ([`dispatch_sha1`]), which carries every script of the lock. Its `ARGV` opens
//!   either with `=<id>` (one call: the script numbered `id`, on the given keys and the
//!   arguments after this one; its reply as the script answers it) or with `n`, the number
//!   of calls, then one number per call, `id + 64 × (keys + 2²⁰ × args)` for its script's
//!   id, its number of keys and its number of arguments, then every call's arguments in
//!   order; `KEYS` are every call's keys in
//!   order, and the reply is an array of `n` replies. A call that raised an error answers
//!   `["redlock:error", text]`; a call that answered nothing answers nil. `NOSCRIPT` to an
//!   `EVALSHA` makes the lock send the same batch again by source.
//! - `SET key token NX PX ttl GET`, through [`Transport::set_nx`].
//! - `INFO server replication memory cluster` at build time (`role`, `run_id`,
//!   `master_replid`, `cluster_enabled` and `maxmemory_policy` are read; an error reply skips
//!   the check of that node), and `SCRIPT LOAD source`, best effort.
//! - For [`Redlock::inspect`](crate::Redlock::inspect) and
//!   [`Redlock::list_locks`](crate::Redlock::list_locks) only: `EVAL` of the read-only
//!   inspect script (`KEYS`: the lock key and its waiter queue), `GET`, and `SCAN cursor
//!   MATCH pattern COUNT n`.
//! - At build time, unless the node-set check is off: `EVAL` of a small script that marks the
//!   number of nodes; an error reply skips that check on that node.
//!
//! The pub/sub side of waiting goes through [`Channels`]: a node's subscriptions to hand-over
//! channels and the messages published on them, which wake the waiters.
//!
//! A command handed over is sent once: an implementation never sends it again by itself
//! (a `SET NX` sent twice could take a lock nobody holds). A node that cannot be reached
//! answers [`NodeError::Disconnected`] or [`NodeError::Io`]; an error reply is
//! [`NodeError::error_reply`].

use std::future::Future;
use std::pin::Pin;
use std::sync::OnceLock;
use std::time::Duration;

use fred::clients::{Client, SubscriberClient};
use fred::interfaces::{ClientLike, EventInterface, KeysInterface, PubsubInterface};
use fred::types::config::Options;
use fred::types::{ClusterHash, CustomCommand, Expiration, SetOptions};
use tokio::sync::broadcast;

#[cfg(doc)]
use crate::outcome::ClientError;
pub use crate::outcome::NodeError;
pub use fred::types::{Key, Value};

/// The SHA1 of the dispatch script, which `EVALSHA` names: every batch of script calls is one
/// call of it.
pub fn dispatch_sha1() -> &'static str {
    super::scripts::BATCH.sha1.as_str()
}

/// A command's reply, to come.
pub type Reply = Pin<Box<dyn Future<Output = Result<Value, NodeError>> + Send>>;

/// A subscription change, or a connection, to come.
pub type Pending = Pin<Box<dyn Future<Output = Result<(), NodeError>> + Send>>;

/// Where a node's messages go: called with each message's channel and text; returns `false`
/// once nobody listens any more, which ends the delivery.
pub type Deliver = Box<dyn Fn(&str, &str) -> bool + Send + Sync>;

/// How the lock sends one command to one node.
pub trait Transport: Send + Sync + 'static {
    /// Sends `command` with `args`. The command is handed to the node on the reply's first
    /// poll, so that commands polled in order reach the node in that order (the pipeline polls
    /// each batch once as soon as it is made). Unbounded in time: every caller bounds it.
    /// Sent once: never re-sent after a reconnection (a `SET NX` sent twice could take a
    /// lock nobody holds).
    fn send(&self, command: &'static str, args: Vec<Value>) -> Reply;

    /// Sends `SET key token NX PX ttl_ms GET`: the spec's acquisition of one key (Redlock
    /// step 2) as the node's own command. Its reply is `nil` when the key was set, the value
    /// that was there when it was not, and an error for a key that is not a string. Handed
    /// to the node on the reply's first poll, sent once and unbounded in time, as
    /// [`send`](Self::send); unlike a script call it may share a write with the commands
    /// handed over just after it.
    fn set_nx(&self, key: Key, token: Value, ttl_ms: i64) -> Reply;
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

    fn set_nx(&self, key: Key, token: Value, ttl_ms: i64) -> Reply {
        let client = self.0.clone();
        Box::pin(async move {
            let expiry = Some(Expiration::PX(ttl_ms));
            client
                .with_options(call_options())
                .set::<Value, _, _>(key, token, expiry, Some(SetOptions::NX), true)
                .await
                .map_err(NodeError::from_fred)
        })
    }
}

/// How the lock hears one node's hand-over messages: the subscribe side of the seam.
pub trait Channels: Send + Sync + 'static {
    /// Subscribes to `channel` once connected; `Ok` when the node confirmed it. Unbounded in
    /// time: every caller bounds it.
    fn subscribe(&self, channel: &str) -> Pending;

    /// Unsubscribes from `channel`. Unbounded in time: every caller bounds it.
    fn unsubscribe(&self, channel: &str) -> Pending;

    /// Hands every message from now on to `deliver`, until it returns `false`.
    fn deliver_to(&self, deliver: Deliver);

    /// Resolves once connected. Unbounded in time: every caller bounds it.
    fn connected(&self) -> Pending;

    /// Closes the connection.
    fn quit(&self) -> Pending;
}

/// The production subscriber: a `fred` subscriber client with the node client's
/// configuration, connecting in the background from its creation and subscribing again to its
/// channels after a reconnection.
pub(crate) struct FredChannels {
    subscriber: SubscriberClient,
    /// Subscribes again after each reconnection ([`resubscribe`]); stopped with the handle.
    resubscribe: tokio::task::JoinHandle<()>,
}

impl FredChannels {
    /// The subscriber of the node `client` reaches. Must run inside a tokio runtime.
    pub(crate) fn start(client: &Client) -> Self {
        let subscriber = SubscriberClient::new(
            client.client_config(),
            Some(client.perf_config()),
            Some(client.connection_config().clone()),
            client.client_reconnect_policy(),
        );
        // Listening before connecting: no connection goes unseen.
        let connections = subscriber.reconnect_rx();
        let resubscribe = tokio::spawn(resubscribe(subscriber.clone(), connections));
        let _connection = subscriber.connect();
        Self {
            subscriber,
            resubscribe,
        }
    }
}

impl Drop for FredChannels {
    fn drop(&mut self) {
        self.resubscribe.abort();
    }
}

/// After each (re)connection of `subscriber` (`connections`), subscribes again to the channels it tracks, if
/// any. fred's own `manage_subscriptions` sends `SUBSCRIBE` and `PSUBSCRIBE` even with none,
/// and the node answers each with an error (`ERR wrong number of arguments`) at every start.
async fn resubscribe(
    subscriber: SubscriberClient,
    mut connections: broadcast::Receiver<fred::types::config::Server>,
) {
    loop {
        match connections.recv().await {
            Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => {}
            Err(broadcast::error::RecvError::Closed) => return,
        }
        let channels: Vec<Key> = subscriber
            .tracked_channels()
            .into_iter()
            .map(Key::from)
            .collect();
        if channels.is_empty() {
            continue;
        }
        // A subscription that fails now (a node slow to answer after its restart) would leave
        // every waiter on these channels without this node's wake-ups until the next
        // reconnection: attempted again, with a doubling delay.
        let mut delay = RESUBSCRIBE_DELAY;
        for attempt in 1..=RESUBSCRIBE_ATTEMPTS {
            match subscriber.subscribe(channels.clone()).await {
                Ok(()) => break,
                Err(error) if attempt == RESUBSCRIBE_ATTEMPTS => {
                    tracing::warn!(%error, "could not subscribe again to the waiters' channels after a reconnection: waiters fall back to their retry delay on this node");
                }
                Err(error) => {
                    tracing::debug!(%error, attempt, "could not subscribe again to the waiters' channels; attempting again");
                    tokio::time::sleep(delay).await;
                    delay = delay.saturating_mul(2);
                }
            }
        }
    }
}

/// The attempts to subscribe again after a reconnection, and the delay before the second.
const RESUBSCRIBE_ATTEMPTS: u32 = 5;
const RESUBSCRIBE_DELAY: Duration = Duration::from_millis(50);

impl Channels for FredChannels {
    fn subscribe(&self, channel: &str) -> Pending {
        let (subscriber, channel) = (self.subscriber.clone(), channel.to_owned());
        Box::pin(async move {
            subscriber
                .wait_for_connect()
                .await
                .map_err(NodeError::from_fred)?;
            subscriber
                .subscribe(channel.as_str())
                .await
                .map_err(NodeError::from_fred)
        })
    }

    fn unsubscribe(&self, channel: &str) -> Pending {
        let (subscriber, channel) = (self.subscriber.clone(), channel.to_owned());
        Box::pin(async move {
            subscriber
                .unsubscribe(channel.as_str())
                .await
                .map_err(NodeError::from_fred)
        })
    }

    fn deliver_to(&self, deliver: Deliver) {
        let mut rx = self.subscriber.message_rx();
        tokio::spawn(async move {
            loop {
                match rx.recv().await {
                    Ok(message) => {
                        let text = message.value.as_str();
                        if let Some(text) = text
                            && !deliver(&message.channel, &text)
                        {
                            return;
                        }
                    }
                    Err(broadcast::error::RecvError::Lagged(_)) => {}
                    Err(broadcast::error::RecvError::Closed) => return,
                }
            }
        });
    }

    fn connected(&self) -> Pending {
        let subscriber = self.subscriber.clone();
        Box::pin(async move {
            subscriber
                .wait_for_connect()
                .await
                .map_err(NodeError::from_fred)
        })
    }

    fn quit(&self) -> Pending {
        let subscriber = self.subscriber.clone();
        Box::pin(async move { subscriber.quit().await.map_err(NodeError::from_fred) })
    }
}
