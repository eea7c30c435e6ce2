//! [`RedlockBuilder`]: nodes, timeouts, key prefix and default options.

use std::sync::Arc;
use std::time::Duration;

use fred::clients::Client;
use fred::interfaces::ClientLike;

use crate::config::{PemSource, RedlockConfig, SetIf, node_urls};
use crate::connect::{Connect, NodeUrls, server_label};
use crate::error::BuildError;
use crate::masters::Masters;
use crate::node::Node;
use crate::nodeset::NodeSet;
use crate::options::{LockOptions, MAX_TTL};
use crate::outcome::ClientError;
use crate::redlock::{Parts, Redlock};
use crate::waiters::Waiters;

/// The environment variable of the node URLs, read by [`RedlockBuilder::from_env`] with the
/// other options' (see [`RedlockConfig`]).
pub const NODES_ENV: &str = "REDLOCK_NODES";
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

/// A window for foreign clients opens once the key has been handed over for this many windows'
/// lengths without one (T = 2 W): under a continuous load of ours with no foreign client, at
/// most a third of the time goes to windows nobody uses.
pub const FOREIGN_WINDOW_EVERY: u32 = 2;

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
    deferred: Option<BuildError>,
    key_prefix: String,
    node_timeout: Duration,
    connect_timeout: Duration,
    options: LockOptions,
    require_quorum: bool,
    handover_grace: Duration,
    foreign_window: Duration,
    quarantine: Duration,
    fencing_counter_ttl: Duration,
    node_set_check: bool,
    #[cfg(any(feature = "tls-rustls", feature = "tls-native"))]
    tls: crate::tls::TlsSettings,
}

impl Default for RedlockBuilder {
    fn default() -> Self {
        Self {
            urls: NodeUrls::default(),
            clients: Vec::new(),
            deferred: None,
            key_prefix: String::new(),
            node_timeout: DEFAULT_NODE_TIMEOUT,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            options: LockOptions::default(),
            require_quorum: true,
            handover_grace: DEFAULT_HANDOVER_GRACE,
            foreign_window: DEFAULT_FOREIGN_WINDOW,
            quarantine: Duration::ZERO,
            fencing_counter_ttl: DEFAULT_FENCING_COUNTER_TTL,
            node_set_check: true,
            #[cfg(any(feature = "tls-rustls", feature = "tls-native"))]
            tls: crate::tls::TlsSettings::default(),
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

    /// Sets every option given in the environment: `REDLOCK_NODES` (comma-separated URLs)
    /// and one `REDLOCK_<OPTION>` variable per other option of the builder and of its default
    /// [`LockOptions`] (`REDLOCK_TTL`, `REDLOCK_RETRY_COUNT`...: the table is on
    /// [`RedlockConfig`]). An unset or empty variable keeps the builder's value; the others
    /// replace it, as [`config`](Self::config) does (`REDLOCK_NODES` replaces the URLs given
    /// before). Call it last for the environment to override the rest.
    ///
    /// # Errors
    /// [`build`](Self::build) fails with [`BuildError::Env`], naming the variable and the form
    /// expected (never its value), for the first malformed variable; with
    /// [`BuildError::MissingEnv`] if `REDLOCK_NODES` is unset or empty and no node was given
    /// before; and as [`config`](Self::config) does for values out of range.
    pub fn from_env(self) -> Self {
        self.read_env(RedlockConfig::from_env())
    }

    /// [`from_env`](Self::from_env), with `lookup` giving each variable's value instead of
    /// the process environment.
    ///
    /// ```
    /// use std::collections::HashMap;
    /// use redlock_core::Redlock;
    ///
    /// let vars = HashMap::from([
    ///     ("REDLOCK_NODES", "redis://10.0.0.1:6379,redis://10.0.0.2:6379,redis://10.0.0.3:6379"),
    ///     ("REDLOCK_TTL", "10s"),
    ///     ("REDLOCK_WAIT_TIMEOUT", "forever"),
    /// ]);
    /// let builder = Redlock::builder().from_env_with(|name| vars.get(name).map(|v| v.to_string()));
    /// ```
    pub fn from_env_with(self, lookup: impl FnMut(&str) -> Option<String>) -> Self {
        self.read_env(RedlockConfig::from_env_with(lookup))
    }

    fn read_env(self, config: Result<RedlockConfig, BuildError>) -> Self {
        match config {
            Err(error) => self.defer(error),
            Ok(config) => {
                let no_nodes =
                    config.nodes.is_none() && self.urls.is_empty() && self.clients.is_empty();
                let builder = self.config(config);
                if no_nodes {
                    builder.defer(BuildError::MissingEnv {
                        var: NODES_ENV.to_owned(),
                    })
                } else {
                    builder
                }
            }
        }
    }

    /// Sets every option `config` gives (those `None` keep their value): its
    /// [`nodes`](RedlockConfig::nodes) replace the URLs given before, its
    /// [`lock`](RedlockConfig::lock) options replace those of the default
    /// [`LockOptions`], and TLS certificates given as paths are read now.
    ///
    /// # Errors
    /// [`build`](Self::build) fails as it does for the same values given to the setters
    /// ([`BuildError::Invalid`], [`BuildError::Option`], [`BuildError::Tls`]...), and with
    /// [`BuildError::ReadFile`] for a certificate or key file that cannot be read.
    pub fn config(self, config: RedlockConfig) -> Self {
        let RedlockConfig {
            nodes,
            key_prefix,
            node_timeout,
            connect_timeout,
            require_quorum_at_start,
            handover_grace,
            foreign_window,
            quarantine,
            fencing_counter_ttl,
            node_set_check,
            tls_ca,
            tls_client_cert,
            tls_client_key,
            lock,
        } = config;
        let mut builder = self
            .set_if(nodes, |builder, urls| Self {
                urls: NodeUrls(urls),
                ..builder
            })
            .set_if(key_prefix, Self::key_prefix)
            .set_if(node_timeout, Self::node_timeout)
            .set_if(connect_timeout, Self::connect_timeout)
            .set_if(require_quorum_at_start, Self::require_quorum_at_start)
            .set_if(handover_grace, Self::handover_grace)
            .set_if(foreign_window, Self::foreign_window)
            .set_if(quarantine, Self::quarantine)
            .set_if(fencing_counter_ttl, Self::fencing_counter_ttl)
            .set_if(node_set_check, Self::node_set_check);
        builder.options = lock.apply(builder.options);
        builder.tls_config(tls_ca, tls_client_cert, tls_client_key)
    }

    /// The TLS options of a [`RedlockConfig`].
    #[cfg(any(feature = "tls-rustls", feature = "tls-native"))]
    fn tls_config(
        self,
        ca: Option<PemSource>,
        cert: Option<PemSource>,
        key: Option<PemSource>,
    ) -> Self {
        let builder = match ca.map(|ca| ca.read("tls_ca")).transpose() {
            Ok(ca) => self.set_if(ca, Self::tls_ca_pem),
            Err(error) => return self.defer(error),
        };
        match (cert, key) {
            (None, None) => builder,
            (Some(cert), Some(key)) => {
                match (cert.read("tls_client_cert"), key.read("tls_client_key")) {
                    (Ok(cert), Ok(key)) => builder.tls_client_pem(cert, key),
                    (Err(error), _) | (_, Err(error)) => builder.defer(error),
                }
            }
            (Some(_), None) | (None, Some(_)) => builder.defer(BuildError::Tls {
                reason: "tls_client_cert and tls_client_key go together: give both, or neither"
                    .into(),
            }),
        }
    }

    /// The TLS options of a [`RedlockConfig`], without a TLS feature: an error if set.
    #[cfg(not(any(feature = "tls-rustls", feature = "tls-native")))]
    fn tls_config(
        self,
        ca: Option<PemSource>,
        cert: Option<PemSource>,
        key: Option<PemSource>,
    ) -> Self {
        let given = [
            ("tls_ca", ca.is_some()),
            ("tls_client_cert", cert.is_some()),
            ("tls_client_key", key.is_some()),
        ];
        match given.into_iter().find(|(_, set)| *set) {
            Some((name, _)) => self.defer(BuildError::Option {
                name,
                reason: "needs the tls-rustls or tls-native feature of redlock-core".into(),
            }),
            None => self,
        }
    }

    /// Keeps `error` for [`build`](Self::build) to report, unless an earlier one is kept.
    fn defer(mut self, error: BuildError) -> Self {
        self.deferred.get_or_insert(error);
        self
    }

    /// Adds the masters listed in the environment variable `var` (comma-separated URLs), and
    /// only those: [`from_env`](Self::from_env) reads every option.
    ///
    /// # Errors
    /// [`build`](Self::build) fails with [`BuildError::MissingEnv`] if `var` is unset or
    /// holds no URL.
    pub fn from_env_var(mut self, var: &str) -> Self {
        let urls = node_urls(&std::env::var(var).unwrap_or_default());
        if urls.is_empty() {
            self.deferred.get_or_insert(BuildError::MissingEnv {
                var: var.to_owned(),
            });
        }
        self.nodes(urls)
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

    /// Windows for foreign clients during hand-overs (default
    /// [`DEFAULT_FOREIGN_WINDOW`], 350 ms; `Duration::ZERO`
    /// turns them off; above [`MAX_FOREIGN_WINDOW`], 10 s, it is cut
    /// to that).
    ///
    /// Hand-over keeps a resource busy as long as our waiters keep coming, so a foreign
    /// client polling the same key (node-redlock, redis-py, redlock-php, a plain `SET NX PX`)
    /// would wait as long as our load lasts. Instead, once the key has been handed from holder
    /// to holder for [`FOREIGN_WINDOW_EVERY`] × `window` (T, on the
    /// nodes' clocks, counted from the last window or from when the key was last free for a
    /// whole window), the next release that finds a waiter frees the key and opens a window of
    /// `window`: every acquisition of ours refuses the free key meanwhile, and the named waiter
    /// attempts when it has passed. A foreign client polling at most every `window` then gets
    /// the lock within T + one of our holds + `window` (two holds if, during the streak, the
    /// key was free a moment with nobody queued and one of ours took it with its first
    /// attempt: that holder counts only its own hold). Costs: under a continuous load of ours
    /// and no foreign client, a third of the time goes to windows nobody uses; and while
    /// windows are on, a plain attempt's script also checks the window marker (inside the
    /// same call). Needs hand-over (no effect with
    /// [`handover_grace`](Self::handover_grace) zero). Set the same window on every handle
    /// of a resource: a handle with windows off takes an open window's key like a foreign
    /// client.
    pub fn foreign_window(mut self, window: Duration) -> Self {
        self.foreign_window = window;
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
    /// shortens or lengthens it as it does every key's ttl on that node (see the README's
    /// "Guarantees and their limits"). A node no handle with the quarantine on has seen yet
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

    /// Trusts the CA certificates in `pem` (one or more `-----BEGIN CERTIFICATE-----`
    /// blocks), and only those, for every `rediss://` node: a managed Redis or a server of
    /// your own whose certificate a private CA signed. Without it, `rediss://` trusts the
    /// system's CA certificates. `redis://` nodes and clients given with
    /// [`client`](Self::client) are unaffected. Needs the `tls-rustls` or `tls-native`
    /// feature (native-tls when both are compiled in, as fred's own default).
    ///
    /// The server's certificate must name the host of the URL (a DNS name, or an IP address
    /// for a URL such as `rediss://10.0.0.5:6380`).
    ///
    /// # Errors
    /// [`build`](Self::build) fails with [`BuildError::Tls`], before connecting, if `pem`
    /// holds no certificate or a malformed one.
    #[cfg(any(feature = "tls-rustls", feature = "tls-native"))]
    pub fn tls_ca_pem(mut self, pem: impl AsRef<[u8]>) -> Self {
        self.tls.ca_pem = Some(pem.as_ref().to_vec());
        self
    }

    /// Presents a client certificate to every `rediss://` node (mutual TLS, for servers
    /// started with `tls-auth-clients yes`): `chain_pem` holds the certificate, then any
    /// intermediates (`-----BEGIN CERTIFICATE-----` blocks), and `key_pem` its PKCS#8 key
    /// (`-----BEGIN PRIVATE KEY-----`; convert an RSA or EC key with `openssl pkcs8 -topk8
    /// -nocrypt`). Combines with [`tls_ca_pem`](Self::tls_ca_pem); the key is kept in memory
    /// only, and never printed. Needs the `tls-rustls` or `tls-native` feature.
    ///
    /// # Errors
    /// [`build`](Self::build) fails with [`BuildError::Tls`], before connecting, if the chain
    /// holds no certificate, or the key cannot be read or does not fit the certificate.
    #[cfg(any(feature = "tls-rustls", feature = "tls-native"))]
    pub fn tls_client_pem(
        mut self,
        chain_pem: impl AsRef<[u8]>,
        key_pem: impl AsRef<[u8]>,
    ) -> Self {
        self.tls.client_pem = Some((chain_pem.as_ref().to_vec(), key_pem.as_ref().to_vec()));
        self
    }

    /// Uses `connector` for every `rediss://` node: a rustls `ClientConfig` or a native-tls
    /// connector built by hand (`.into()` converts either), for what
    /// [`tls_ca_pem`](Self::tls_ca_pem) and [`tls_client_pem`](Self::tls_client_pem) do not
    /// cover. Needs the `tls-rustls` or `tls-native` feature.
    ///
    /// # Errors
    /// [`build`](Self::build) fails with [`BuildError::Tls`] if the PEM settings are given
    /// too: this replaces them.
    #[cfg(any(feature = "tls-rustls", feature = "tls-native"))]
    pub fn tls_connector(mut self, connector: fred::types::config::TlsConnector) -> Self {
        self.tls.connector = Some(connector);
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

    /// Validates everything, then connects to all nodes at once, with the connections that
    /// wake waiters (one subscriber per node, unless hand-over is off), each within the connect
    /// timeout, and reads each reachable node's `INFO` (one command, within the connect
    /// timeout) to check that the nodes are distinct, independent masters. A node unreachable
    /// at build time (allowed while a quorum is reachable) is not checked, then or when it
    /// connects later; nor is one whose user may not run `INFO` (logged as a warning).
    ///
    /// # Errors
    /// Before connecting: [`BuildError::NoNodes`], [`BuildError::MissingEnv`],
    /// [`BuildError::Env`], [`BuildError::ReadFile`],
    /// [`BuildError::InvalidUrl`], [`BuildError::TlsNotEnabled`],
    /// [`BuildError::UnixSocketsNotEnabled`], [`BuildError::ClusterNotSupported`],
    /// [`BuildError::SentinelNotSupported`], [`BuildError::DuplicateNode`],
    /// [`BuildError::Invalid`], [`BuildError::Option`], [`BuildError::Tls`].
    /// After connecting (the connections are closed again): [`BuildError::TooFewReachable`]
    /// if fewer than a quorum connected within the connect timeout;
    /// [`BuildError::ClusterEnabled`], [`BuildError::Replica`] or
    /// [`BuildError::EvictionPolicy`] for a node that is not an independent master;
    /// [`BuildError::DuplicateNode`] if two URLs reach the same server (same `run_id`);
    /// [`BuildError::SameReplicationGroup`] if two nodes share a replication id.
    pub async fn build(mut self) -> Result<Redlock, BuildError> {
        if let Some(error) = self.deferred {
            return Err(error);
        }
        self.options.validate()?;
        if self.key_prefix.contains('\0') {
            return Err(BuildError::Option {
                name: "key_prefix",
                reason: "holds a NUL byte, which the lock's bookkeeping keys reserve".into(),
            });
        }
        if let Some(at_least) = self.options.get_lock_at_least_for() {
            return Err(BuildError::Option {
                name: "lock_at_least_for",
                reason: format!(
                    "a default minimum hold ({at_least:?}) would keep every lock of the handle (every layer route, every read or write lock, refused with it) at least that long; give it per acquisition (LockOptions::lock_at_least_for, #[redlock(lock_at_least_for = ..)])"
                ),
            });
        }
        if let Some(mode) = self.options.get_mode() {
            return Err(BuildError::Option {
                name: "mode",
                reason: format!(
                    "a default mode ({mode}) would apply to every lock(), #[redlock] function and layer route of the handle, making the shared modes shared everywhere; give the mode per acquisition (lock_mode, read_lock, write_lock, LockOptions::mode, #[redlock(mode = ..)])"
                ),
            });
        }
        for (name, value) in [
            ("node_timeout", self.node_timeout),
            ("connect_timeout", self.connect_timeout),
        ] {
            if value.is_zero() {
                return Err(BuildError::Option {
                    name,
                    reason: "must be more than zero".into(),
                });
            }
        }
        if self.handover_grace > MAX_HANDOVER_GRACE {
            return Err(BuildError::Option {
                name: "handover_grace",
                reason: format!(
                    "{:?} is above {MAX_HANDOVER_GRACE:?}: a reservation that long only delays the next holder",
                    self.handover_grace
                ),
            });
        }
        if !self.quarantine.is_zero()
            && (self.quarantine < self.options.get_ttl() || self.quarantine > MAX_TTL)
        {
            return Err(BuildError::Option {
                name: "quarantine",
                reason: format!(
                    "{:?} must be between the default ttl ({:?}) and {MAX_TTL:?}: a shorter quarantine lets a restarted node vote while a key it lost may still be held",
                    self.quarantine,
                    self.options.get_ttl()
                ),
            });
        }
        let connect = Connect {
            connect_timeout: self.connect_timeout,
            node_timeout: self.node_timeout,
            require_quorum: self.require_quorum,
        };
        #[cfg(any(feature = "tls-rustls", feature = "tls-native"))]
        let tls = self
            .tls
            .connector()
            .map_err(|reason| BuildError::Tls { reason })?;
        let mut nodes = Vec::with_capacity(self.urls.len() + self.clients.len());
        for (index, url) in self.urls.iter().enumerate() {
            #[cfg(not(any(feature = "tls-rustls", feature = "tls-native")))]
            let (label, config) = crate::connect::parse_url(index, url)?;
            #[cfg(any(feature = "tls-rustls", feature = "tls-native"))]
            let (label, config) = crate::tls::parse_url_with(index, url, tls.as_ref())?;
            if nodes.iter().any(|n: &Node| n.label == label) {
                return Err(BuildError::DuplicateNode { node: label });
            }
            let client = connect.client_for(config).map_err(|e| BuildError::Client {
                node: label.clone(),
                source: ClientError::new(e),
            })?;
            nodes.push(Node::new(client, label));
        }
        #[cfg(any(feature = "tls-rustls", feature = "tls-native"))]
        if tls.is_some()
            && !nodes
                .iter()
                .any(|n: &Node| n.client.client_config().uses_tls())
        {
            tracing::warn!(
                "TLS settings given, but no node URL uses rediss://: they have no effect"
            );
        }
        for client in std::mem::take(&mut self.clients) {
            let label = server_label(nodes.len(), &client.client_config().server)?;
            nodes.push(Node::new(client, label));
        }
        if nodes.is_empty() {
            return Err(BuildError::NoNodes);
        }
        // The waiters' subscriber connections open beside the nodes' own, so that a built
        // handle is ready to wake its first waiter (and sends nothing more on its own).
        let waiters = (!self.handover_grace.is_zero()).then(|| {
            let clients: Vec<_> = nodes.iter().map(|n| n.client.clone()).collect();
            Waiters::start(&clients, self.node_timeout)
        });
        let subscribers = async {
            if let Some(waiters) = &waiters {
                waiters.connected(self.connect_timeout).await;
            }
        };
        let (connected, ()) = tokio::join!(connect.connect_all(&nodes), subscribers);
        connected?;
        let masters = Masters::new(
            nodes,
            self.node_timeout,
            self.quarantine,
            self.fencing_counter_ttl,
            &self.key_prefix,
        );
        let node_set = self.node_set_check.then(|| NodeSet::new(&self.key_prefix));
        if let Some(node_set) = &node_set {
            node_set.check(&masters, self.connect_timeout).await?;
        }
        masters.start_quarantine().await;
        let redlock = Redlock::from_parts(Parts {
            masters,
            defaults: self.options,
            key_prefix: self.key_prefix,
            handover_grace: self.handover_grace,
            foreign_window: match waiters {
                Some(_) => self.foreign_window.min(MAX_FOREIGN_WINDOW),
                None => Duration::ZERO,
            },
            waiters,
        });
        if let Some(node_set) = node_set {
            node_set.refresh(Arc::downgrade(redlock.masters()), self.node_timeout);
        }
        Ok(redlock)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::InvalidInput;

    #[tokio::test]
    async fn input_errors_come_before_any_connection() {
        let started = std::time::Instant::now();
        type Expect = fn(&BuildError) -> bool;
        let cases: Vec<(RedlockBuilder, Expect)> = vec![
            (RedlockBuilder::default(), |e| {
                matches!(e, BuildError::NoNodes)
            }),
            (
                RedlockBuilder::default()
                    .nodes(["redis://10.255.255.1:1", "redis://10.255.255.1:1"]),
                |e| matches!(e, BuildError::DuplicateNode { .. }),
            ),
            (
                RedlockBuilder::default().from_env_var("REDLOCK_TEST_SURELY_UNSET"),
                |e| matches!(e, BuildError::MissingEnv { .. }),
            ),
            (
                RedlockBuilder::default()
                    .node("redis://10.255.255.1:1")
                    .lock_options(LockOptions::default().ttl(Duration::ZERO)),
                |e| matches!(e, BuildError::Invalid(_)),
            ),
            (
                RedlockBuilder::default()
                    .node("redis://10.255.255.1:1")
                    .key_prefix("lock\0"),
                |e| {
                    matches!(
                        e,
                        BuildError::Option {
                            name: "key_prefix",
                            ..
                        }
                    )
                },
            ),
            (
                RedlockBuilder::default()
                    .node("redis://10.255.255.1:1")
                    .lock_options(LockOptions::default().lock_at_least_for(Duration::from_secs(1))),
                |e| {
                    matches!(
                        e,
                        BuildError::Option {
                            name: "lock_at_least_for",
                            ..
                        }
                    )
                },
            ),
            (
                // A default mode would make every lock of the handle shared.
                RedlockBuilder::default()
                    .node("redis://10.255.255.1:1")
                    .lock_options(LockOptions::default().mode(crate::Mode::ProtectedRead)),
                |e| matches!(e, BuildError::Option { name: "mode", .. }),
            ),
            (
                RedlockBuilder::default()
                    .node("redis://10.255.255.1:1")
                    .node_timeout(Duration::ZERO),
                |e| {
                    matches!(
                        e,
                        BuildError::Option {
                            name: "node_timeout",
                            ..
                        }
                    )
                },
            ),
        ];
        for (builder, expected) in cases {
            let error = builder.build().await.unwrap_err();
            assert!(expected(&error), "unexpected error: {error}");
        }
        // 10.255.255.1 is unroutable: had any case tried to connect, it would have waited.
        assert!(started.elapsed() < Duration::from_millis(500));
    }

    fn lookup(vars: &[(&str, &str)]) -> impl FnMut(&str) -> Option<String> {
        let vars: std::collections::HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        move |name| vars.get(name).cloned()
    }

    const CERT: &str = "-----BEGIN CERTIFICATE-----\nAA==\n-----END CERTIFICATE-----\n";
    const KEY: &str = "-----BEGIN PRIVATE KEY-----\nAA==\n-----END PRIVATE KEY-----\n";

    /// For every option, a value other than its default, as its environment text.
    const SAMPLES: [(&str, &str); 28] = [
        ("nodes", "redis://127.0.0.1:2"),
        ("key_prefix", "lock:"),
        ("node_timeout", "1s"),
        ("connect_timeout", "1s"),
        ("require_quorum_at_start", "false"),
        ("handover_grace", "1s"),
        ("foreign_window", "1s"),
        ("quarantine", "1h"),
        ("fencing_counter_ttl", "1h"),
        ("node_set_check", "false"),
        ("tls_ca", CERT),
        ("tls_client_cert", CERT),
        ("tls_client_key", KEY),
        ("ttl", "1s"),
        ("retry_count", "5"),
        ("retry_delay", "1s"),
        ("retry_jitter", "1s"),
        ("wait_timeout", "forever"),
        ("drift_factor", "0.1"),
        ("auto_extend", "true"),
        ("extend_fraction", "0.5"),
        ("max_hold", "1h"),
        ("max_extensions", "5"),
        ("lock_at_least_for", "1s"),
        ("lost_margin", "1s"),
        ("fencing", "true"),
        ("reentrant", "true"),
        ("mode", "read"),
    ];

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

    #[test]
    fn every_config_option_reaches_the_builder() {
        // An option read from the environment (or a file) but not applied by `config` fails
        // this: the builder would not change.
        let base = || RedlockBuilder::default().node("redis://127.0.0.1:1");
        let unchanged = format!("{:?}", base());
        let vars = RedlockConfig::env_vars();
        assert_eq!(vars.len(), SAMPLES.len());
        for var in vars {
            let (_, sample) = SAMPLES
                .iter()
                .find(|(option, _)| *option == var.option)
                .unwrap_or_else(|| panic!("no sample for {}", var.option));
            let mut given = vec![(var.name.as_str(), *sample)];
            // The client certificate and its key go together.
            match var.option {
                "tls_client_cert" => given.push(("REDLOCK_TLS_CLIENT_KEY", KEY)),
                "tls_client_key" => given.push(("REDLOCK_TLS_CLIENT_CERT", CERT)),
                _ => {}
            }
            let builder = base().from_env_with(lookup(&given));
            let tls = var.option.starts_with("tls_");
            if cfg!(any(feature = "tls-rustls", feature = "tls-native")) || !tls {
                assert!(
                    builder.deferred.is_none(),
                    "{}: {:?}",
                    var.name,
                    builder.deferred
                );
                assert_ne!(
                    format!("{builder:?}"),
                    unchanged,
                    "{} had no effect",
                    var.name
                );
            } else {
                assert!(
                    matches!(builder.deferred, Some(BuildError::Option { name, .. }) if name.starts_with("tls_")),
                    "{}: {:?}",
                    var.name,
                    builder.deferred
                );
            }
        }
    }

    #[test]
    fn the_environment_layers_over_what_was_given_before() {
        let builder = RedlockBuilder::default()
            .nodes(["redis://127.0.0.1:1", "redis://127.0.0.1:2"])
            .key_prefix("code:")
            .lock_options(
                LockOptions::default()
                    .ttl(Duration::from_secs(5))
                    .fencing(true),
            )
            .from_env_with(lookup(&[
                ("REDLOCK_NODES", "redis://127.0.0.1:3"),
                ("REDLOCK_RETRY_COUNT", "4"),
                ("REDLOCK_KEY_PREFIX", ""), // empty: unset
            ]));
        assert!(builder.deferred.is_none());
        assert_eq!(*builder.urls, ["redis://127.0.0.1:3"]);
        assert_eq!(builder.key_prefix, "code:");
        assert_eq!(builder.options.get_ttl(), Duration::from_secs(5));
        assert!(builder.options.get_fencing());
        assert_eq!(builder.options.get_retry_count(), 4);
        // REDLOCK_NODES may be left out when the nodes were given before, not otherwise.
        let given = RedlockBuilder::default()
            .node("redis://127.0.0.1:1")
            .from_env_with(lookup(&[]));
        assert!(given.deferred.is_none());
        let missing = RedlockBuilder::default().from_env_with(lookup(&[("REDLOCK_TTL", "1s")]));
        assert!(matches!(
            missing.deferred,
            Some(BuildError::MissingEnv { var }) if var == NODES_ENV
        ));
    }

    #[tokio::test]
    async fn out_of_range_config_values_fail_build_as_the_setters_do() {
        let started = std::time::Instant::now();
        type Expect = fn(&BuildError) -> bool;
        let cases: [(&str, &str, Expect); 9] = [
            ("REDLOCK_TTL", "0s", |e| {
                matches!(e, BuildError::Invalid(InvalidInput::ZeroTtl))
            }),
            ("REDLOCK_TTL", "2d", |e| {
                matches!(e, BuildError::Invalid(InvalidInput::TtlAboveCap { .. }))
            }),
            ("REDLOCK_DRIFT_FACTOR", "0.5", |e| {
                matches!(e, BuildError::Invalid(InvalidInput::DriftFactor(_)))
            }),
            ("REDLOCK_LOST_MARGIN", "1h", |e| {
                matches!(e, BuildError::Invalid(InvalidInput::LostMargin { .. }))
            }),
            ("REDLOCK_MAX_HOLD", "0s", |e| {
                matches!(e, BuildError::Invalid(InvalidInput::ZeroMaxHold))
            }),
            ("REDLOCK_NODE_TIMEOUT", "0s", |e| {
                matches!(
                    e,
                    BuildError::Option {
                        name: "node_timeout",
                        ..
                    }
                )
            }),
            ("REDLOCK_CONNECT_TIMEOUT", "0ms", |e| {
                matches!(
                    e,
                    BuildError::Option {
                        name: "connect_timeout",
                        ..
                    }
                )
            }),
            ("REDLOCK_HANDOVER_GRACE", "11s", |e| {
                matches!(
                    e,
                    BuildError::Option {
                        name: "handover_grace",
                        ..
                    }
                )
            }),
            ("REDLOCK_QUARANTINE", "1s", |e| {
                matches!(
                    e,
                    BuildError::Option {
                        name: "quarantine",
                        ..
                    }
                )
            }),
        ];
        for (var, value, expected) in cases {
            let error = RedlockBuilder::default()
                .from_env_with(lookup(&[
                    (NODES_ENV, "redis://10.255.255.1:1"),
                    (var, value),
                ]))
                .build()
                .await
                .unwrap_err();
            assert!(expected(&error), "{var}={value}: unexpected error: {error}");
        }
        let extend = RedlockBuilder::default()
            .from_env_with(lookup(&[
                (NODES_ENV, "redis://10.255.255.1:1"),
                ("REDLOCK_AUTO_EXTEND", "true"),
                ("REDLOCK_EXTEND_FRACTION", "1.5"),
            ]))
            .build()
            .await
            .unwrap_err();
        assert!(
            matches!(
                extend,
                BuildError::Invalid(InvalidInput::ExtendFraction { .. })
            ),
            "{extend}"
        );
        assert!(started.elapsed() < Duration::from_millis(500));
    }

    #[cfg(any(feature = "tls-rustls", feature = "tls-native"))]
    #[test]
    fn tls_files_are_read_and_a_lone_client_cert_is_refused() {
        let missing = RedlockBuilder::default()
            .node("rediss://127.0.0.1:1")
            .from_env_with(lookup(&[("REDLOCK_TLS_CA", "/nonexistent/ca.pem")]));
        assert!(matches!(
            missing.deferred,
            Some(BuildError::ReadFile { option: "tls_ca", ref source, .. })
                if source.kind() == std::io::ErrorKind::NotFound
        ));
        let lone = RedlockBuilder::default()
            .node("rediss://127.0.0.1:1")
            .from_env_with(lookup(&[("REDLOCK_TLS_CLIENT_CERT", CERT)]));
        assert!(matches!(lone.deferred, Some(BuildError::Tls { .. })));
        let file = std::env::temp_dir().join(format!("redlock-ca-{}.pem", std::process::id()));
        std::fs::write(&file, CERT).unwrap();
        let read = RedlockBuilder::default()
            .node("rediss://127.0.0.1:1")
            .from_env_with(lookup(&[("REDLOCK_TLS_CA", file.to_str().unwrap())]));
        std::fs::remove_file(&file).unwrap();
        assert!(read.deferred.is_none());
        assert_eq!(read.tls.ca_pem.as_deref(), Some(CERT.as_bytes()));
    }
}
