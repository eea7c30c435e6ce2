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
//! The pub/sub side of waiting goes through [`Channels`]: a node's subscriptions to hand-over
//! channels and the messages published on them, for the
//! [`waiters`](crate::kernel::waiters). Its production implementation is [`FredChannels`], a
//! `fred` subscriber client that re-subscribes after a reconnection.

use std::future::Future;
use std::pin::Pin;
use std::sync::OnceLock;
use std::time::Duration;

use fred::clients::{Client, SubscriberClient};
use fred::interfaces::{ClientLike, EventInterface, KeysInterface, PubsubInterface};
use fred::types::config::Options;
use fred::types::{ClusterHash, CustomCommand, Expiration, Key, SetOptions, Value};
use tokio::sync::broadcast;

use crate::outcome::NodeError;

/// A command's reply, to come.
pub(crate) type Reply = Pin<Box<dyn Future<Output = Result<Value, NodeError>> + Send>>;

/// A subscription change, or a connection, to come.
pub(crate) type Pending = Pin<Box<dyn Future<Output = Result<(), NodeError>> + Send>>;

/// Where a node's messages go: called with each message's channel and text; returns `false`
/// once nobody listens any more, which ends the delivery.
pub(crate) type Deliver = Box<dyn Fn(&str, &str) -> bool + Send + Sync>;

/// How the lock sends one command to one node.
pub(crate) trait Transport: Send + Sync + 'static {
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
pub(crate) trait Channels: Send + Sync + 'static {
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
