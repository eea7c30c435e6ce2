//! In-memory nodes: a [`Redlock`] whose nodes run in the test's own process, with no server
//! binary and no ports, on tokio's clock.
//!
//! Each node is the model checker's mirror of a server (`redlock_model::node`): a keyspace
//! with expiries, and the lock's Lua scripts written again in Rust, statement for statement.
//! The workspace's differential test runs random sequences of calls on the mirror and on a
//! real server and compares the replies, keys, ttls and published messages (values read from
//! the clock within a tolerance), and a second test compares what surrounds the scripts
//! (`SET NX PX GET`, batches of several calls, an unknown script). The handle itself is redlock-core's own code, reached through
//! its [transport seam](redlock_core::transport): the same acquisition, retries, waiters,
//! extension and release as against servers.
//!
//! # Paused time
//!
//! The nodes' clocks are tokio's, as is the lock's own (its validity is a
//! `tokio::time::Instant`). Under a paused clock (`#[tokio::test(start_paused = true)]`,
//! tokio's `test-util` feature) a 30 s ttl passes in a test in microseconds: a key expires
//! when the clock is advanced past it, an auto-extended lock stays held across an
//! `advance` of an hour, and a retry delay costs nothing.
//!
//! ```
//! use std::time::Duration;
//! use redlock_core::LockOptions;
//! use redlock_test::MemoryNodes;
//!
//! # fn main() {
//! # tokio::runtime::Builder::new_current_thread().enable_all().start_paused(true).build().unwrap().block_on(async {
//! let nodes = MemoryNodes::new(3);
//! let lock = nodes.redlock().await;
//! let options = LockOptions::default().ttl(Duration::from_secs(30));
//!
//! let guard = lock.lock_with("order:42", &options).await.unwrap();
//! assert_eq!(nodes.holder("order:42").as_deref(), Some(guard.token().expose()));
//!
//! // Half a minute later, the key has expired on every node and the guard knows it.
//! tokio::time::advance(Duration::from_secs(31)).await;
//! assert!(nodes.is_free("order:42"));
//! assert!(!guard.is_valid());
//! # });
//! # }
//! ```
//!
//! # Faults
//!
//! [`stop`](MemoryNodes::stop) takes a node down (its commands fail as on a dropped
//! connection) and [`start`](MemoryNodes::start) brings it back with its keys;
//! [`restart`](MemoryNodes::restart) brings it back empty, with a new run id and an empty
//! script cache, as a server restarted without persistence; [`flush`](MemoryNodes::flush)
//! empties it in place (`FLUSHALL`); [`delay`](MemoryNodes::delay) makes its replies late;
//! [`clock_ahead`](MemoryNodes::clock_ahead) moves its clock forward;
//! [`delay_requests`](MemoryNodes::delay_requests) makes its commands land late,
//! [`lose_requests`](MemoryNodes::lose_requests) and
//! [`lose_replies`](MemoryNodes::lose_replies) lose some on the way. Each handle's link to a
//! node is one connection: commands reach the node, and replies come back, in the order they
//! were sent.
//!
//! # What it does not reproduce
//!
//! - Anything between the client and a server: connections, reconnection, TLS, ACL users,
//!   `maxmemory`, replication, a network that cuts one direction, a node that neither runs
//!   nor answers (use [`TestNodes`] and a [`Proxy`](crate::Proxy); a stopped node fails at
//!   once, where a paused server makes the lock wait for its node timeout).
//! - A restarted node keeps its listeners' subscriptions (a server drops them, and the
//!   client subscribes again after reconnecting), and its messages are delivered at once.
//! - Keys expire when the clock reaches their expiry, where a server keeps a key through
//!   that millisecond: advancing the clock by exactly a ttl frees the key here, not there.
//! - Three features whose scripts the mirror does not hold: a downgrade and a resumption by
//!   token fail (the nodes answer an error), and a force-release reports that no node
//!   answered. [`Redlock::inspect`], [`Redlock::list_locks`], the leader's name and owner
//!   labels work.
//! - Clients of other languages: nothing but this process reaches the nodes.
//! - Late or lost pub/sub messages: a release's message reaches its listeners at once (only
//!   commands and replies are made late or lost), so a waiter's fallback timer never has to
//!   stand in for a lost hand-over.
//! - A connection reset: a command made late still lands after its node restarted.
//!
//! Do not pause tokio's clock in a test over real servers ([`TestNodes`]): their keys expire
//! on real time while the lock's validity would stand still.
//!
//! [`TestNodes`]: crate::TestNodes
//! [`Redlock::inspect`]: redlock_core::Redlock::inspect
//! [`Redlock::list_locks`]: redlock_core::Redlock::list_locks

mod link;
mod node;

use std::sync::Arc;
use std::time::Duration;

use redlock_core::{LockOptions, Redlock, RedlockBuilder};

use link::{Link, Subscriptions};
use node::Shared;

/// A set of in-memory nodes, shared by the handles built over them (see the
/// [module](self) docs). Cloning it gives another view of the same nodes. The nodes live as
/// long as a handle or a view of them does.
#[derive(Debug, Clone)]
pub struct MemoryNodes {
    nodes: Vec<Shared>,
}

impl MemoryNodes {
    /// `n` empty nodes, up, their clocks at the Unix time now (in ms, as `TIME` reads; with
    /// the `simulation` feature, on a thread seeded by `redlock_core::simulation::seed`, the
    /// seed's wall clock). Zero nodes make
    /// [`builder`](Self::builder)'s `build()` fail with `BuildError::NoNodes`.
    pub fn new(n: usize) -> Self {
        Self {
            nodes: (0..n).map(Shared::new).collect(),
        }
    }

    /// How many nodes there are.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// The number of nodes a lock needs: a majority.
    pub fn quorum(&self) -> usize {
        self.nodes.len() / 2 + 1
    }

    /// A builder with every node added (labelled `memory:1`, `memory:2`, …), for options of
    /// the handle's own; `build()` takes no time on a paused clock.
    pub fn builder(&self) -> RedlockBuilder {
        self.nodes
            .iter()
            .enumerate()
            .fold(Redlock::builder(), |builder, (index, node)| {
                builder.node_transport(
                    format!("memory:{}", index + 1),
                    Arc::new(Link::new(node.clone())),
                    Arc::new(Subscriptions::new(node.clone())),
                )
            })
    }

    /// A [`Redlock`] over the nodes with the default options.
    ///
    /// # Cancel safety
    /// As `RedlockBuilder::build`.
    ///
    /// # Panics
    /// If the handle cannot be built: no nodes, or fewer than a quorum up.
    pub async fn redlock(&self) -> Redlock {
        self.redlock_with(LockOptions::default()).await
    }

    /// A [`Redlock`] over the nodes with `options` as its defaults.
    ///
    /// # Cancel safety
    /// As `RedlockBuilder::build`.
    ///
    /// # Panics
    /// As [`redlock`](Self::redlock), and for options `build()` refuses.
    pub async fn redlock_with(&self, options: LockOptions) -> Redlock {
        self.builder()
            .lock_options(options)
            .build()
            .await
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// Node `index`'s side of the transport seam: what a handle sends it through, to send it
    /// commands directly as the lock does (see
    /// [`redlock_core::transport`] for what it answers).
    ///
    /// # Panics
    /// If there is no node `index`.
    pub fn transport(&self, index: usize) -> Arc<dyn redlock_core::transport::Transport> {
        Arc::new(Link::new(self.node(index).clone()))
    }

    /// Takes node `index` (from 0) down: every command to it fails as on a dropped
    /// connection, until [`start`](Self::start) or [`restart`](Self::restart). Its keys keep
    /// expiring meanwhile.
    ///
    /// # Panics
    /// If there is no node `index`.
    pub fn stop(&self, index: usize) {
        self.node(index).state().up = false;
    }

    /// Brings node `index` back up with the keys it had (those past their expiry are gone).
    ///
    /// # Panics
    /// If there is no node `index`.
    pub fn start(&self, index: usize) {
        self.node(index).state().up = true;
    }

    /// Restarts node `index` without persistence: up, with no keys, an empty script cache
    /// (the next `EVALSHA` answers `NOSCRIPT`) and a new run id, which the quarantine sees.
    ///
    /// # Panics
    /// If there is no node `index`.
    pub fn restart(&self, index: usize) {
        let mut state = self.node(index).state();
        state.restart(index);
        state.up = true;
    }

    /// Empties node `index` in place (`FLUSHALL`): its run id stays.
    ///
    /// # Panics
    /// If there is no node `index`.
    pub fn flush(&self, index: usize) {
        self.node(index).state().flush();
    }

    /// Makes node `index`'s replies arrive `delay` late (zero: on time). Its commands still
    /// take effect when sent: a reply later than the node timeout counts as no vote, with
    /// the key taken.
    ///
    /// # Panics
    /// If there is no node `index`.
    pub fn delay(&self, index: usize, delay: Duration) {
        self.node(index).state().delay = delay;
    }

    /// Makes the commands sent to node `index` from now on reach it `delay` late (zero: at
    /// once), in the order they were sent: a command can land after its caller stopped
    /// waiting for it (a `SET NX` of a round already decided, a release after the next
    /// grant), as over a slow network or to a paused process.
    ///
    /// # Panics
    /// If there is no node `index`.
    pub fn delay_requests(&self, index: usize, delay: Duration) {
        self.node(index).state().request_delay = delay;
    }

    /// Loses the next `count` commands sent to node `index` on the way: they never reach it,
    /// and their callers wait until their own timeouts (the lock's node timeout).
    ///
    /// # Panics
    /// If there is no node `index`.
    pub fn lose_requests(&self, index: usize, count: u64) {
        self.node(index).state().lose_requests = count;
    }

    /// Loses node `index`'s next `count` replies on the way back: their commands took
    /// effect, and their callers wait until their own timeouts.
    ///
    /// # Panics
    /// If there is no node `index`.
    pub fn lose_replies(&self, index: usize, count: u64) {
        self.node(index).state().lose_replies = count;
    }

    /// Moves node `index`'s clock `ahead` forward from now on (a clock that jumped):
    /// its keys expire that much sooner. Cumulative.
    ///
    /// # Panics
    /// If there is no node `index`.
    pub fn clock_ahead(&self, index: usize, ahead: Duration) {
        let ahead = u64::try_from(ahead.as_millis()).unwrap_or(u64::MAX);
        let mut state = self.node(index).state();
        state.ahead_ms = state.ahead_ms.saturating_add(ahead);
    }

    /// The string at `key` on each node, in node order: `None` where there is none (no key,
    /// or another type).
    pub fn values(&self, key: &str) -> Vec<Option<String>> {
        self.nodes
            .iter()
            .map(|node| match node.state().model.store.get(key) {
                Some(redlock_model::node::Entry {
                    value: redlock_model::node::Value::Str(text),
                    ..
                }) => Some(text.clone()),
                _ => None,
            })
            .collect()
    }

    /// The ttl left at `key` on each node, in node order, as `PTTL` answers: ms, `-1` for a
    /// key without an expiry, `-2` for no key.
    pub fn pttls(&self, key: &str) -> Vec<i64> {
        self.nodes
            .iter()
            .map(|node| {
                let state = node.state();
                let now = state.model.store.now();
                match state.model.store.get(key) {
                    None => -2,
                    Some(entry) => entry.expires_at.map_or(-1, |at| {
                        i64::try_from(at.saturating_sub(now)).unwrap_or(i64::MAX)
                    }),
                }
            })
            .collect()
    }

    /// The keys on each node, in node order, each node's sorted: the lock keys and the
    /// lock's bookkeeping beside them.
    pub fn keys(&self) -> Vec<Vec<String>> {
        self.nodes
            .iter()
            .map(|node| {
                node.state()
                    .model
                    .store
                    .entries()
                    .map(|(k, _)| k.clone())
                    .collect()
            })
            .collect()
    }

    /// How many waiters are queued for the lock key `key` on each node, in node order (the
    /// members of its waiter queue, as `ZCARD` counts them).
    pub fn queued(&self, key: &str) -> Vec<usize> {
        let queue = crate::waiters_key(key);
        self.nodes
            .iter()
            .map(|node| match node.state().model.store.get(&queue) {
                Some(redlock_model::node::Entry {
                    value: redlock_model::node::Value::ZSet(members),
                    ..
                }) => members.len(),
                _ => 0,
            })
            .collect()
    }

    /// The token at the lock key `key` on a quorum of nodes, if one is: the holder, as
    /// another client sees it (compare with `guard.token().expose()`).
    pub fn holder(&self, key: &str) -> Option<String> {
        let values = self.values(key);
        let tokens: Vec<&String> = values.iter().flatten().collect();
        tokens
            .iter()
            .find(|token| tokens.iter().filter(|t| t == token).count() >= self.quorum())
            .map(|token| (*token).clone())
    }

    /// `true` when nothing is at `key` on a quorum of nodes (a node that is down counts as
    /// not free): a plain acquisition could succeed now.
    pub fn is_free(&self, key: &str) -> bool {
        let free = self
            .nodes
            .iter()
            .filter(|node| {
                let state = node.state();
                state.up && state.model.store.get(key).is_none()
            })
            .count();
        free >= self.quorum()
    }

    fn node(&self, index: usize) -> &Shared {
        self.nodes.get(index).unwrap_or_else(|| {
            panic!(
                "there is no in-memory node {index}: the set has {} (numbered from 0)",
                self.nodes.len()
            )
        })
    }
}
