//! [`RedlockBuilder`]: nodes, timeouts, key prefix and default options, with the defaults
//! and limits of the handle's options.
//!
//! - `mod.rs`: the builder and its setters.
//! - `from_config.rs`: the setting of every option from a
//!   [`RedlockConfig`](crate::RedlockConfig) or the environment.
//! - `tls.rs`: the TLS settings.
//! - `build.rs`: validation and [`build`](RedlockBuilder::build), which connects.

use std::time::Duration;

use fred::clients::Client;

use crate::error::BuildError;
use crate::kernel::redlock::Redlock;
use crate::options::LockOptions;
#[cfg(doc)]
use crate::options::MAX_TTL;
use crate::setup::node_url::{NodeTimeouts, NodeUrls};

mod build;
mod from_config;
mod tls;

/// Default grace of a fair hand-over: 20 ms (see [`RedlockBuilder::handover_grace`]).
pub const DEFAULT_HANDOVER_GRACE: Duration = Duration::from_millis(20);
/// The longest hand-over grace accepted: 10 s.
pub const MAX_HANDOVER_GRACE: Duration = Duration::from_secs(10);
/// Default per-node time limit for one command: 100 ms.
pub const DEFAULT_NODE_TIMEOUT: Duration = Duration::from_millis(100);
/// Default time allowed to connect to the nodes at build time: 2 s.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// Default window for foreign clients (see [`RedlockBuilder::foreign_window`]): 350 ms, longer
/// than node-redlock's longest default retry delay (200 ms ± 100 ms jitter) plus its attempt,
/// and than redis-py's blocking sleep (0.1 s).
pub const DEFAULT_FOREIGN_WINDOW: Duration = Duration::from_millis(350);

/// How long a resource's fencing counter is kept on a node after its last fenced lock
/// (see [`RedlockBuilder::fencing_counter_ttl`]): 10 minutes.
pub(crate) const DEFAULT_FENCING_COUNTER_TTL: Duration = Duration::from_secs(600);

/// The longest window for foreign clients: a longer one is cut to this (10 s).
pub const MAX_FOREIGN_WINDOW: Duration = Duration::from_secs(10);

/// A node given by [`RedlockBuilder::node_transport`].
struct NodeTransport {
    label: String,
    transport: std::sync::Arc<dyn crate::transport::Transport>,
    channels: std::sync::Arc<dyn crate::transport::Channels>,
}

impl std::fmt::Debug for NodeTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeTransport")
            .field("label", &self.label)
            .finish_non_exhaustive()
    }
}

impl Redlock {
    /// Starts a [`RedlockBuilder`].
    pub fn builder() -> RedlockBuilder {
        RedlockBuilder::default()
    }
}

/// Builds a [`Redlock`] (consuming builder).
///
/// Input errors are collected as they are met and reported by [`build`](Self::build) before
/// any connection is attempted.
///
/// ```no_run
/// # async fn run() -> Result<(), redlock_core::BuildError> {
/// use std::time::Duration;
/// use redlock_core::{LockOptions, Redlock};
///
/// let redlock = Redlock::builder()
///     .nodes(["redis://127.0.0.1:7001", "redis://127.0.0.1:7002", "redis://127.0.0.1:7003"])
///     .key_prefix("lock:")
///     .node_timeout(Duration::from_millis(50))
///     .lock_options(LockOptions::default().ttl(Duration::from_secs(10)))
///     .build()
///     .await?;
/// # Ok(()) }
/// ```
#[derive(Debug)]
#[must_use = "a builder does nothing until `build` is awaited"]
pub struct RedlockBuilder {
    urls: NodeUrls,
    clients: Vec<Client>,
    transports: Vec<NodeTransport>,
    deferred: Option<BuildError>,
    key_prefix: String,
    node_timeout: Duration,
    /// [`node_timeout_for`](Self::node_timeout_for): a limit per node URL.
    node_timeouts: NodeTimeouts,
    connect_timeout: Duration,
    options: LockOptions,
    require_quorum: bool,
    handover_grace: Duration,
    foreign_window: Duration,
    foreign_clients: bool,
    quarantine: Duration,
    fencing_counter_ttl: Duration,
    node_set_check: bool,
    owner: Option<String>,
    #[cfg(any(feature = "tls-rustls", feature = "tls-native"))]
    tls: crate::setup::tls::TlsSettings,
}

impl Default for RedlockBuilder {
    fn default() -> Self {
        Self {
            urls: NodeUrls::default(),
            clients: Vec::new(),
            transports: Vec::new(),
            deferred: None,
            key_prefix: String::new(),
            node_timeout: DEFAULT_NODE_TIMEOUT,
            node_timeouts: NodeTimeouts::default(),
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            options: LockOptions::default(),
            require_quorum: true,
            handover_grace: DEFAULT_HANDOVER_GRACE,
            foreign_window: DEFAULT_FOREIGN_WINDOW,
            foreign_clients: true,
            quarantine: Duration::ZERO,
            fencing_counter_ttl: DEFAULT_FENCING_COUNTER_TTL,
            node_set_check: true,
            owner: None,
            #[cfg(any(feature = "tls-rustls", feature = "tls-native"))]
            tls: crate::setup::tls::TlsSettings::default(),
        }
    }
}

impl RedlockBuilder {
    /// Adds one master by URL: `redis://[user:password@]host[:port][/db]`, `rediss://` (with
    /// a TLS feature) or `redis+unix:///path` (with `unix-sockets`); `valkey` schemes alike.
    /// Each URL must be a distinct, independent master: [`build`](Self::build) refuses
    /// Cluster and Sentinel URLs, and nodes that answer as a replica, in cluster mode, in one
    /// replication group with another, or with a `maxmemory-policy` that can evict lock keys.
    pub fn node(mut self, url: impl Into<String>) -> Self {
        self.urls.push(url.into());
        self
    }

    /// Adds several masters by URL (see [`node`](Self::node)).
    pub fn nodes<I, S>(mut self, urls: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.urls.extend(urls.into_iter().map(Into::into));
        self
    }

    /// Adds a ready `fred` client for one master. It is used as given (its own timeouts and
    /// reconnect policy); lock commands still carry their own time limit, one attempt and
    /// fail-fast. It must not be shared with code that runs blocking commands. It is checked
    /// as a URL is ([`node`](Self::node)): a client configured for Cluster or Sentinel is
    /// refused.
    pub fn client(mut self, client: Client) -> Self {
        self.clients.push(client);
        self
    }

    /// Adds one master reached through `transport` and `channels` instead of a `fred` client:
    /// a node held in process (redlock-test's in-memory nodes) or behind a simulated network.
    /// `label` names it in errors, logs and views, as `host:port` names a node given by URL;
    /// two nodes with one label are refused at [`build`](Self::build)
    /// ([`BuildError::DuplicateNode`](crate::BuildError::DuplicateNode)).
    ///
    /// It has no connection to open: [`build`](Self::build) counts it as reachable when it
    /// answers the scripts' `SCRIPT LOAD` (an error reply included; not
    /// [`NodeError::Disconnected`](crate::NodeError::Disconnected), [`NodeError::Io`](crate::NodeError::Io)
    /// or a timeout), and checks it as any other (its `INFO`, when it answers one). Its
    /// commands carry the handle's [`node_timeout`](Self::node_timeout). Nodes given this way
    /// come after those given by URL or client, in the order given. What the transport must
    /// answer is in [`transport`](crate::transport).
    pub fn node_transport(
        mut self,
        label: impl Into<String>,
        transport: std::sync::Arc<dyn crate::transport::Transport>,
        channels: std::sync::Arc<dyn crate::transport::Channels>,
    ) -> Self {
        self.transports.push(NodeTransport {
            label: label.into(),
            transport,
            channels,
        });
        self
    }

    /// Prefix added to every resource to form the Redis key (default: none, so the key is the
    /// resource itself and other Redlock clients locking the same name exclude and are
    /// excluded by ours).
    pub fn key_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.key_prefix = prefix.into();
        self
    }

    /// Time limit for one command on one node (default 100 ms). The distlock spec asks for a
    /// limit "small compared to the total lock auto-release time"; each attempt uses
    /// `min(node_timeout, ttl − drift)`.
    pub fn node_timeout(mut self, timeout: Duration) -> Self {
        self.node_timeout = timeout;
        self
    }

    /// A time limit for one command on the node at `url` instead of
    /// [`node_timeout`](Self::node_timeout): for a node further away than the others (in
    /// another region), whose round trip the handle's limit would cut every time. `url` is
    /// one of the URLs given to [`node`](Self::node) or [`nodes`](Self::nodes), exactly as
    /// given. Each node's commands are cut at its own limit; a round waits for the nodes at
    /// most the longest of the limits (and never past the lock's validity), so one distant
    /// node raises the wait only for the rounds it must answer. The guide's
    /// [deployment page](crate::guide::deployment) sets it against the round trips.
    ///
    /// [`build`](Self::build) refuses a URL that is not one of the nodes' and a zero limit
    /// ([`BuildError::Option`](crate::BuildError::Option)).
    pub fn node_timeout_for(mut self, url: impl Into<String>, timeout: Duration) -> Self {
        self.node_timeouts.0.push((url.into(), timeout));
        self
    }

    /// A label for the locks this handle takes (say `host/pid/app`), stored beside each lock on
    /// every node while it is held, so that [`Redlock::inspect`](crate::Redlock::inspect),
    /// `redlock status` and [`LeaderElection::leader`](crate::LeaderElection::leader) can say
    /// who holds a resource or leads. No label by default: nothing extra is written.
    ///
    /// A lock granted at a request's first attempt with nothing else in play (an uncontended
    /// [`lock`](crate::Redlock::lock)) writes it in the same call as its `SET NX PX` (a script
    /// call instead of the node's own command); any other grant costs one script call per node
    /// after it. Each extension writes it again beside its own call, in the same batch. The
    /// handle's ACL user needs write access to the label keys (`<key>\0redlock:owner:*`, under
    /// the key prefix). It is written only while our token holds the lock on that node, keyed
    /// by a digest of the token (never the token), lives as long as the lock's ttl, and is read
    /// only for the holder that wrote it: a label never names the next holder. Anyone who can
    /// read the nodes can read it: put nothing secret in it.
    ///
    /// [`build`](Self::build) refuses an empty label, one longer than
    /// [`MAX_OWNER_LEN`](crate::MAX_OWNER_LEN) bytes, or one with a control character
    /// ([`BuildError::Option`](crate::BuildError::Option)).
    pub fn owner(mut self, label: impl Into<String>) -> Self {
        self.owner = Some(label.into());
        self
    }

    /// Time allowed to connect to the nodes in [`build`](Self::build) (default 2 s).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// Whether [`build`](Self::build) fails when fewer than a quorum of nodes can be reached
    /// (default `true`). With `false`, unreachable nodes keep reconnecting in the background.
    pub fn require_quorum_at_start(mut self, require: bool) -> Self {
        self.require_quorum = require;
        self
    }

    /// Fair hand-over and waking waiters without polling (default on, grace 20 ms).
    ///
    /// A release that finds waiters queued on a node reserves the key there for the longest
    /// waiter during `grace` and tells it on the resource's channel; waiters sleep until named
    /// (or until their retry delay, the fallback), and a holder that releases and locks again
    /// queues behind them. The grace bounds what a waiter that died while queued costs. It
    /// must cover a message's delivery plus one round trip; `Duration::ZERO` turns both off
    /// (plain delete on release, waiting by retry delays only).
    pub fn handover_grace(mut self, grace: Duration) -> Self {
        self.handover_grace = grace;
        self
    }

    /// The window for foreign clients during hand-overs (default [`DEFAULT_FOREIGN_WINDOW`],
    /// 350 ms; `Duration::ZERO` turns windows off, as
    /// [`foreign_clients(false)`](Self::foreign_clients) does; above [`MAX_FOREIGN_WINDOW`],
    /// 10 s, it is cut to that).
    ///
    /// Hand-over keeps a resource busy as long as our waiters keep coming, so a foreign
    /// client polling the same key (node-redlock, redis-py, redlock-php, a plain `SET NX PX`)
    /// would wait as long as our load lasts. Instead, once the key has been handed from
    /// holder to holder for nine windows (T = 9 × `window`, on the nodes' clocks, counted from
    /// the last window or from when the key was last free for a whole window), the next
    /// release that finds a waiter frees the key and opens a window of `window`: every
    /// request of ours that waits refuses the free key meanwhile (pollers, foreign or ours,
    /// share it: whoever polls first), and the named waiter attempts when it has passed. A
    /// foreign client polling at most every `window` then gets the lock within T + one of
    /// our holds + `window` (3.5 s and a hold with the defaults; two holds if, during the
    /// streak, the key was free a moment with nobody queued and a handle that had not seen
    /// it contended took it with its first attempt: that holder counts only its own hold).
    /// Our own requests that poll (one attempt and no wait, or a lock of several resources)
    /// take a key a window left free too, and get in within the same bound.
    ///
    /// Cost: under a continuous load of ours, a tenth of the resource's time goes to
    /// windows, used or not; a release that finds nobody waiting opens none, and an
    /// uncontended lock pays nothing. Needs hand-over (no effect with
    /// [`handover_grace`](Self::handover_grace) zero). Set the same window on every handle of
    /// a resource: a handle with windows off takes an open window's key like a foreign
    /// client.
    pub fn foreign_window(mut self, window: Duration) -> Self {
        self.foreign_window = window;
        self
    }

    /// Whether clients other than this library's handles lock on these nodes (default
    /// `true`): node-redlock, redis-py, redlock-php, a plain `SET NX PX`, or our own handles
    /// polling with single attempts. With `true`, windows for foreign clients
    /// ([`foreign_window`](Self::foreign_window)) open during long streaks of hand-overs, so
    /// that pollers get in within the bound given there. With `false` no window ever opens:
    /// for nodes that only our handles use, whose waiters all queue. The library does not
    /// detect foreign clients (a metrics exporter or a `redis-cli` session looks like one to
    /// the server): it is declared here. Set it alike on every handle of a resource.
    pub fn foreign_clients(mut self, present: bool) -> Self {
        self.foreign_clients = present;
        self
    }

    /// Quarantine of nodes that may have lost data (default off): such a node grants no
    /// acquisition for `quarantine` (rounded up to a millisecond).
    ///
    /// This is the distlock spec's "delayed restart" ("Performance, crash recovery and
    /// fsync"), enforced by the node inside the acquire script, atomically with the `SET`: a
    /// node that lost its data has forgotten keys some holders still count on, and must not
    /// vote until every key it could have held has expired. Set it to at least the longest
    /// ttl any client locks with (auto-extension renews the key to that ttl, so the ttl is
    /// the bound, not the hold time).
    ///
    /// A loss is seen by a witness key per node (under the key prefix), holding the `run_id`
    /// of the server that wrote it: missing (`FLUSHALL`, `FLUSHDB`, a restart that did not
    /// reload it) or another server's (any restart, a `REPLICAOF` re-sync, data loaded from
    /// another server), the node writes it again and sits out the quarantine from then, on a
    /// marker key with that ttl. No uptime or clock is read: a clock step at boot, before the
    /// node answers its first acquisition, changes nothing; a step during the quarantine
    /// shortens or lengthens it as it does every key's ttl on that node (see the guide's
    /// [guarantees and their limits](crate::guide::guarantees)). A node no handle with the quarantine on has seen yet
    /// (turning the quarantine on, a new key prefix) cannot be told from one that lost its
    /// data, so it sits out one quarantine too: [`build`](Self::build) runs the check on every
    /// node, so that it starts then. The handles of one key prefix must all have the
    /// quarantine on: one with it off votes at once.
    ///
    /// Costs an `INFO server` and two `GET`s inside every acquire script (ACL: `+info`), and
    /// one key per node and key prefix; extension and release are unaffected (a node that
    /// lost data has no key to extend). Votes it refuses show as
    /// [`NodeError::Quarantined`](crate::NodeError).
    ///
    /// # Errors
    /// [`build`](Self::build) fails with [`BuildError::Option`] (`"quarantine"`) if it is
    /// shorter than the default ttl or longer than [`MAX_TTL`].
    pub fn quarantine(mut self, quarantine: Duration) -> Self {
        self.quarantine = quarantine;
        self
    }

    /// How long a node keeps a resource's fencing counter after the resource's last fenced
    /// lock (default 10 minutes; rounded up to a millisecond, at least 1 ms; a ttl above
    /// 285,000 years keeps counters forever). It bounds the memory fencing takes: each node
    /// holds one counter per resource fenced within the ttl, and two keys (the fencing floor
    /// and its window) per key prefix, or without one per resource family (the key up to its
    /// first `:`), instead of one counter per resource ever fenced.
    ///
    /// Tokens keep strictly increasing across the counter's expiry, whatever the ttl: every
    /// token a node confirms also raises the key prefix's floor, and a resource whose counter
    /// has expired is compared with the floor, which by then covers every token the counter
    /// held (the floor's window ends half a ttl before any counter written in it, both by
    /// the node's own clock; the crate docs, "Fencing tokens", give the argument). A backward
    /// step of a node's clock by more than half the ttl can repeat a token: keep the ttl
    /// above twice the largest step your nodes' clocks may take. The ttl only decides what tokens look like: within it, a
    /// resource's tokens go up by one per holder; after it, the next token jumps above every
    /// token issued under the key prefix. Every handle fencing under one key prefix must run
    /// this scheme (a handle that reads no floor could issue a token again after a counter
    /// expired); they may use different ttls.
    ///
    /// Costs nothing for unfenced locks, and for a fenced one a `GET` of the floor in the
    /// acquire script when the counter has expired, and a `GET`, a `PTTL` and two `SET`s in
    /// the fencing write-back.
    pub fn fencing_counter_ttl(mut self, ttl: Duration) -> Self {
        self.fencing_counter_ttl = ttl;
        self
    }

    /// Whether [`build`](Self::build) checks that every handle locking these keys uses as
    /// many nodes (default `true`): it refuses a list of another number of nodes than the
    /// handles of the same key prefix already use ([`BuildError::NodeSetMismatch`]: a
    /// command-line job given 3 of the applications' 5 nodes), since two such lists'
    /// majorities need not overlap; the handle then re-checks every 20 s and logs an error
    /// when it finds another number in use. Two lists of the same length over different
    /// servers are not detected. Costs one script per node at build time and one every 20 s;
    /// nothing per lock; one small key per node and key prefix
    /// (`<key prefix>\0redlock:nodes`, a minute unless refreshed). Turn it off only for a
    /// change of nodes you have ordered by hand.
    pub fn node_set_check(mut self, check: bool) -> Self {
        self.node_set_check = check;
        self
    }

    /// Default options for [`Redlock::lock`].
    pub fn lock_options(mut self, options: LockOptions) -> Self {
        self.options = options;
        self
    }

    /// Keeps `error` for [`build`](Self::build) to report, unless an earlier one is kept.
    fn defer(mut self, error: BuildError) -> Self {
        self.deferred.get_or_insert(error);
        self
    }
}

/// The environment `vars` as a lookup, for `from_env_with`.
#[cfg(test)]
fn lookup(vars: &[(&str, &str)]) -> impl FnMut(&str) -> Option<String> + use<> {
    let vars: std::collections::HashMap<String, String> = vars
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    move |name| vars.get(name).cloned()
}

/// A certificate, in PEM (not a valid one: enough for the settings' checks).
#[cfg(test)]
const CERT: &str = "-----BEGIN CERTIFICATE-----\nAA==\n-----END CERTIFICATE-----\n";
/// A key, in PEM (as [`CERT`]).
#[cfg(test)]
const KEY: &str = "-----BEGIN PRIVATE KEY-----\nAA==\n-----END PRIVATE KEY-----\n";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_printed_builder_never_shows_a_password() {
        let builder = Redlock::builder()
            .node("redis://locker:s3cret@10.0.0.1:6379")
            .nodes(["redis://:an0ther@10.0.0.2:6379"]);
        let shown = format!("{builder:?}");
        assert!(
            !shown.contains("s3cret") && !shown.contains("an0ther"),
            "{shown}"
        );
        assert!(shown.contains("10.0.0.1:6379"), "{shown}");
    }
}
