//! [`RedlockBuilder`]: nodes, timeouts, key prefix and default options.

use std::time::Duration;

use fred::clients::Client;
use fred::interfaces::ClientLike;
use fred::types::config::{Config, ReconnectPolicy, ServerConfig};
use fred::types::{Builder, Value};

use crate::error::BuildError;
use crate::node::Node;
use crate::options::{LockOptions, MAX_TTL};
use crate::outcome::NodeError;
use crate::redlock::Redlock;
use crate::server_info::{self, ServerInfo};
use crate::timing;
use crate::waiters::Waiters;

/// The environment variable read by [`RedlockBuilder::from_env`].
pub const NODES_ENV: &str = "REDLOCK_NODES";
/// Default grace of a fair hand-over: 20 ms (see [`RedlockBuilder::handover_grace`]).
pub const DEFAULT_HANDOVER_GRACE: Duration = Duration::from_millis(20);
/// The longest hand-over grace accepted: 10 s.
pub const MAX_HANDOVER_GRACE: Duration = Duration::from_secs(10);
/// Default per-node time limit for one command: 100 ms.
pub const DEFAULT_NODE_TIMEOUT: Duration = Duration::from_millis(100);
/// Default time allowed to connect to the nodes at build time: 2 s.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

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
    urls: Vec<String>,
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
}

impl Default for RedlockBuilder {
    fn default() -> Self {
        Self {
            urls: Vec::new(),
            clients: Vec::new(),
            deferred: None,
            key_prefix: String::new(),
            node_timeout: DEFAULT_NODE_TIMEOUT,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            options: LockOptions::default(),
            require_quorum: true,
            handover_grace: DEFAULT_HANDOVER_GRACE,
            foreign_window: crate::redlock::DEFAULT_FOREIGN_WINDOW,
            quarantine: Duration::ZERO,
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

    /// Adds the masters listed in `REDLOCK_NODES` (comma-separated URLs).
    pub fn from_env(self) -> Self {
        self.from_env_var(NODES_ENV)
    }

    /// Adds the masters listed in the environment variable `var` (comma-separated URLs).
    pub fn from_env_var(mut self, var: &str) -> Self {
        let value = std::env::var(var).unwrap_or_default();
        let urls: Vec<String> = value
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
            .collect();
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
    /// [`DEFAULT_FOREIGN_WINDOW`](crate::DEFAULT_FOREIGN_WINDOW), 350 ms; `Duration::ZERO`
    /// turns them off; above [`MAX_FOREIGN_WINDOW`](crate::MAX_FOREIGN_WINDOW), 10 s, it is cut
    /// to that).
    ///
    /// Hand-over keeps a resource busy as long as our waiters keep coming, so a foreign
    /// client polling the same key (node-redlock, redis-py, redlock-php, a plain `SET NX PX`)
    /// would wait as long as our load lasts. Instead, once the key has been handed from holder
    /// to holder for [`FOREIGN_WINDOW_EVERY`](crate::FOREIGN_WINDOW_EVERY) × `window` (T, on the
    /// nodes' clocks, counted from the last window or from when the key was last free for a
    /// whole window), the next release that finds a waiter frees the key and opens a window of
    /// `window`: every acquisition of ours refuses the free key meanwhile, and the named waiter
    /// attempts when it has passed. A foreign client polling at most every `window` then gets
    /// the lock within T + one of our holds + `window` (two holds if, during the streak, the
    /// key was free a moment with nobody queued and one of ours took it with its first
    /// attempt: that holder counts only its own hold). Costs: under a continuous load of ours
    /// and no foreign client, a third of the time goes to windows nobody uses; and while
    /// windows are on, a plain attempt sends `EXISTS` of the window marker behind its `SET NX`
    /// on each node (the same write, one round trip). Needs hand-over (no effect with
    /// [`handover_grace`](Self::handover_grace) zero). Set the same window on every handle
    /// of a resource: a handle with windows off takes an open window's key like a foreign
    /// client.
    pub fn foreign_window(mut self, window: Duration) -> Self {
        self.foreign_window = window;
        self
    }

    /// Quarantine of restarted nodes (default off): a node up for less than `quarantine`
    /// grants no acquisition. Redis reports uptime in whole seconds, so the quarantine lasts
    /// between `quarantine` (rounded up to a second) and one second more.
    ///
    /// This is the distlock spec's "delayed restart" ("Performance, crash recovery and
    /// fsync"), enforced by the node inside the acquire script, atomically with the `SET`: a
    /// node that crashed and came back empty has forgotten a key some holder still counts on,
    /// and must not vote until every key it could have held has expired. Set it to at least
    /// the longest ttl any client locks with (auto-extension renews the key to that ttl, so
    /// the ttl is the bound, not the hold time). Not needed for nodes that persist with
    /// `appendfsync always`. Costs an `INFO server` inside every acquire script (ACL:
    /// `+info`); extension and release are unaffected (a restarted node has no key to
    /// extend). Votes it refuses show as [`NodeError::Quarantined`](crate::NodeError).
    ///
    /// # Errors
    /// [`build`](Self::build) fails with [`BuildError::Option`] (`"quarantine"`) if it is
    /// shorter than the default ttl or longer than [`MAX_TTL`].
    pub fn quarantine(mut self, quarantine: Duration) -> Self {
        self.quarantine = quarantine;
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
    /// [`BuildError::InvalidUrl`], [`BuildError::TlsNotEnabled`],
    /// [`BuildError::UnixSocketsNotEnabled`], [`BuildError::ClusterNotSupported`],
    /// [`BuildError::SentinelNotSupported`], [`BuildError::DuplicateNode`],
    /// [`BuildError::Invalid`], [`BuildError::Option`].
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
        let mut nodes = Vec::with_capacity(self.urls.len() + self.clients.len());
        for (index, url) in self.urls.iter().enumerate() {
            let (label, config) = parse_url(index, url)?;
            if nodes.iter().any(|n: &Node| n.label == label) {
                return Err(BuildError::DuplicateNode { node: label });
            }
            let client = self.client_for(config).map_err(|e| BuildError::Client {
                node: label.clone(),
                reason: e.details().to_owned(),
            })?;
            nodes.push(Node { client, label });
        }
        for client in std::mem::take(&mut self.clients) {
            let label = server_label(nodes.len(), &client.client_config().server)?;
            nodes.push(Node { client, label });
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
        let (connected, ()) = tokio::join!(self.connect_all(&nodes), subscribers);
        connected?;
        Ok(Redlock::from_parts(crate::redlock::Parts {
            nodes,
            defaults: self.options,
            key_prefix: self.key_prefix,
            node_timeout: self.node_timeout,
            handover_grace: self.handover_grace,
            foreign_window: self.foreign_window,
            quarantine: self.quarantine,
            waiters,
        }))
    }

    /// A client configured for locking rather than caching: a default command timeout (also
    /// applied to `EVAL`), one attempt per command, reconnection forever with backoff, and
    /// no failure on the first connect so that a node down at start-up joins later.
    fn client_for(&self, mut config: Config) -> Result<Client, fred::error::Error> {
        config.fail_fast = false;
        let mut builder = Builder::from_config(config);
        builder
            .with_connection_config(|c| {
                c.connection_timeout = self.connect_timeout;
                c.internal_command_timeout = self.connect_timeout;
                c.max_command_attempts = 1;
                c.tcp.nodelay = Some(true);
            })
            .with_performance_config(|p| p.default_command_timeout = self.node_timeout)
            .set_policy(ReconnectPolicy::new_exponential(0, 50, 2_000, 2));
        builder.build()
    }

    async fn connect_all(&self, nodes: &[Node]) -> Result<(), BuildError> {
        let timeout = self.connect_timeout;
        let results = futures_util::future::join_all(nodes.iter().map(|node| async move {
            // Subscribed before connecting, so no (re)connection is missed.
            node.keep_scripts_loaded(timeout);
            if !node.client.is_connected() {
                match tokio::time::timeout(timeout, node.client.init()).await {
                    Ok(Ok(_task)) => {}
                    Ok(Err(e)) => return Err(format!("{}: {}", node.label, e.details())),
                    Err(_) => {
                        return Err(format!("{}: no connection within {timeout:?}", node.label));
                    }
                }
            }
            node.load_scripts(timeout).await;
            Ok(())
        }))
        .await;
        let failures: Vec<String> = results.into_iter().filter_map(Result::err).collect();
        let quorum = timing::quorum(nodes.len());
        let reachable = nodes.len() - failures.len();
        if self.require_quorum && reachable < quorum {
            disconnect(nodes).await;
            return Err(BuildError::TooFewReachable {
                reachable,
                nodes: nodes.len(),
                quorum,
                timeout,
                failures,
            });
        }
        for failure in &failures {
            tracing::warn!(%failure, "node unreachable at start-up; reconnecting in the background");
        }
        let checked = self.check_nodes(nodes).await;
        if checked.is_err() {
            disconnect(nodes).await;
        }
        checked
    }

    /// Refuses nodes that are not distinct, independent masters (see
    /// [`server_info::check`]), from one `INFO` per node read within the connect timeout.
    /// Two URLs for one server (e.g. `localhost` and `127.0.0.1`) would count twice towards
    /// the quorum, as would a master and its replica; a replica or a cluster node cannot take
    /// the lock's writes; an evicting policy can drop a held lock's key.
    async fn check_nodes(&self, nodes: &[Node]) -> Result<(), BuildError> {
        let infos = futures_util::future::join_all(
            nodes
                .iter()
                .map(|node| server_info(node, self.connect_timeout)),
        )
        .await;
        let answered: Vec<(&str, ServerInfo)> = nodes
            .iter()
            .zip(infos)
            .filter_map(|(node, info)| Some((node.label.as_str(), info?)))
            .collect();
        server_info::check(&answered)
    }
}

/// One node's `INFO` (the sections the checks read), within `limit`: one command on Redis 7
/// and Valkey, and the default `INFO` after an error (older servers take one section only).
/// `None` if the node did not answer: unreachable (already reported), or `INFO` refused.
async fn server_info(node: &Node, limit: Duration) -> Option<ServerInfo> {
    let sections = server_info::SECTIONS.map(Value::from).to_vec();
    let reply = tokio::time::timeout(limit, async {
        match node.call("INFO", sections).await {
            Err(NodeError::Reply(_)) => node.call("INFO", Vec::new()).await,
            other => other,
        }
    })
    .await
    .unwrap_or(Err(NodeError::Timeout(limit)));
    match reply.map(|value| value.into_string()) {
        Ok(Some(text)) => Some(ServerInfo::parse(&text)),
        result => {
            if node.client.is_connected() {
                let error = match result {
                    Err(error) => error.to_string(),
                    Ok(_) => "not a text reply".to_owned(),
                };
                tracing::warn!(
                    node = %node.label,
                    %error,
                    "could not read INFO: this node is not checked for being a distinct, independent master (the lock's ACL user needs +info)"
                );
            }
            None
        }
    }
}

/// Closes the nodes' connections, each within 100 ms, when `build` fails after connecting.
async fn disconnect(nodes: &[Node]) {
    futures_util::future::join_all(nodes.iter().map(|node| async move {
        let _ = tokio::time::timeout(Duration::from_millis(100), node.client.quit()).await;
    }))
    .await;
}

/// The label of a node given as a `fred` client (`index` among all nodes), refusing Cluster
/// and Sentinel configurations as their URLs are.
fn server_label(index: usize, server: &ServerConfig) -> Result<String, BuildError> {
    let hosts = |hosts: &[fred::types::config::Server]| {
        hosts
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(",")
    };
    match server {
        ServerConfig::Centralized { server } => Ok(server.to_string()),
        ServerConfig::Clustered { hosts: servers, .. } => Err(BuildError::ClusterNotSupported {
            node: hosts(servers),
        }),
        ServerConfig::Sentinel {
            hosts: sentinels,
            service_name,
            ..
        } => Err(BuildError::SentinelNotSupported {
            index,
            node: format!("service {service_name} via {}", hosts(sentinels)),
        }),
        #[cfg(feature = "unix-sockets")]
        ServerConfig::Unix { path } => Ok(path.display().to_string()),
    }
}

/// Checks a node URL and turns it into a fred `Config`, without ever echoing credentials.
fn parse_url(index: usize, raw: &str) -> Result<(String, Config), BuildError> {
    let invalid = |reason: String| BuildError::InvalidUrl {
        index,
        node: redacted(raw),
        reason,
    };
    let Some((scheme, _)) = raw.split_once("://") else {
        // `host:6379` would parse as a URL of scheme `host`; `127.0.0.1:6379` not at all.
        return Err(invalid(scheme_hint(raw)));
    };
    if matches!(
        scheme.to_ascii_lowercase().as_str(),
        "redis-sentinel" | "rediss-sentinel" | "valkey-sentinel" | "valkeys-sentinel"
    ) {
        return Err(BuildError::SentinelNotSupported {
            index,
            node: redacted(raw),
        });
    }
    let url = url::Url::parse(raw).map_err(|e| invalid(e.to_string()))?;
    let label = match url.host_str() {
        Some(host) if !host.is_empty() => {
            format!(
                "{}:{}",
                host.to_ascii_lowercase(),
                url.port().unwrap_or(6379)
            )
        }
        _ => url.path().to_owned(),
    };
    match url.scheme() {
        "redis" | "valkey" if url.host_str().is_none_or(str::is_empty) => {
            return Err(invalid(format!("{}:// needs a host", url.scheme())));
        }
        "redis" | "valkey" => {}
        "rediss" | "valkeys" => {
            if !cfg!(any(feature = "tls-rustls", feature = "tls-native")) {
                return Err(BuildError::TlsNotEnabled { node: label });
            }
        }
        "redis+unix" | "valkey+unix" | "unix" => {
            if !cfg!(feature = "unix-sockets") {
                return Err(BuildError::UnixSocketsNotEnabled { node: label });
            }
        }
        "redis-cluster" | "valkey-cluster" => {
            return Err(BuildError::ClusterNotSupported { node: label });
        }
        other => {
            return Err(invalid(format!(
                "unknown scheme `{other}`; use redis://, rediss:// or redis+unix:// (valkey:// alike), one URL per independent master"
            )));
        }
    }
    let config = Config::from_url(raw).map_err(|e| invalid(e.details().to_owned()))?;
    Ok((label, config))
}

/// `raw` with whatever may be a credential replaced by `***`, for error messages: everything
/// before the last `@` (a password may hold `/`, `?` or `#` unencoded), or a `user:password`
/// without `@` (an entry of `REDLOCK_NODES` cut at a `,` inside a password).
fn redacted(raw: &str) -> String {
    let (scheme, rest) = raw.split_at(raw.find("://").map_or(0, |i| i + 3));
    if let Some(at) = rest.rfind('@') {
        return format!("{scheme}***{}", &rest[at..]);
    }
    let authority = &rest[..rest.find(['/', '?', '#']).unwrap_or(rest.len())];
    match authority.rsplit_once(':') {
        Some((_, port))
            if !authority.starts_with('[') && !port.bytes().all(|b| b.is_ascii_digit()) =>
        {
            format!("{scheme}***")
        }
        _ => raw.to_owned(),
    }
}

/// What to write instead of an entry without `://`.
fn scheme_hint(raw: &str) -> String {
    let shown = redacted(raw);
    if raw.starts_with('/') {
        format!("it has no scheme (write redis+unix://{shown})")
    } else if raw.contains(":/") {
        "its scheme must be followed by `://`".to_owned()
    } else {
        format!("it has no scheme (write redis://{shown})")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reason(result: Result<(String, Config), BuildError>) -> String {
        result.map(|_| ()).unwrap_err().to_string()
    }

    #[test]
    fn urls_are_checked_without_echoing_credentials() {
        let bad = reason(parse_url(0, "redis://user:s3cret@:6379"));
        assert!(!bad.contains("s3cret"), "{bad}");
        assert!(matches!(
            parse_url(1, "not a url"),
            Err(BuildError::InvalidUrl { index: 1, .. })
        ));
        assert!(matches!(
            parse_url(0, "http://127.0.0.1:6379"),
            Err(BuildError::InvalidUrl { .. })
        ));
        assert!(matches!(
            parse_url(0, "redis-cluster://127.0.0.1:7000"),
            Err(BuildError::ClusterNotSupported { .. })
        ));
        let (label, _) = parse_url(0, "redis://user:pw@LocalHost").unwrap();
        assert_eq!(label, "localhost:6379");
    }

    #[test]
    fn a_malformed_url_is_named_with_an_example_and_no_credentials() {
        for (raw, shown, hint) in [
            (
                "127.0.0.1:6379",
                "`127.0.0.1:6379`",
                "write redis://127.0.0.1:6379",
            ),
            (
                "localhost:6379",
                "`localhost:6379`",
                "write redis://localhost:6379",
            ),
            (
                "u:s3cret@db:6379",
                "`***@db:6379`",
                "write redis://***@db:6379",
            ),
            (
                "http://u:s3cret@db:1/",
                "`http://***@db:1/`",
                "unknown scheme `http`",
            ),
            (
                "redis://u:s3cret@[::1",
                "`redis://***@[::1`",
                "invalid IPv6 address",
            ),
            // Unencoded `/`, `#`, `?` in a password, and one cut at a `,` by REDLOCK_NODES.
            (
                "redis://u:s3/cret@db:6379",
                "`redis://***@db:6379`",
                "invalid port",
            ),
            ("redis://u:s3#cret@db:6379", "`redis://***@db:6379`", "#2"),
            ("redis://u:s3?cret@db:6379", "`redis://***@db:6379`", "#2"),
            (
                "u:s3/cret@db:6379",
                "`***@db:6379`",
                "write redis://***@db:6379",
            ),
            ("redis://u:s3cret", "`redis://***`", "#2"),
            (
                "/tmp/redis.sock",
                "`/tmp/redis.sock`",
                "write redis+unix:///tmp/redis.sock",
            ),
            ("redis:/db:6379", "`redis:/db:6379`", "followed by `://`"),
        ] {
            let message = reason(parse_url(2, raw));
            for expected in [shown, hint, "#2", "e.g. redis://127.0.0.1:6379"] {
                assert!(message.contains(expected), "{expected:?} not in: {message}");
            }
            assert!(!message.contains("cret"), "{message}");
        }
        assert_eq!(redacted("redis://[::1]:6379/0"), "redis://[::1]:6379/0");
        assert_eq!(redacted("redis://db:6379"), "redis://db:6379");
    }

    #[test]
    fn every_sentinel_scheme_is_refused_without_credentials() {
        for scheme in [
            "redis-sentinel",
            "rediss-sentinel",
            "valkey-sentinel",
            "valkeys-sentinel",
            "Redis-Sentinel",
        ] {
            let error = parse_url(3, &format!("{scheme}://u:s3cret@127.0.0.1:26379/mymaster"))
                .map(|_| ())
                .unwrap_err();
            let shown = format!("{scheme}://***@127.0.0.1:26379/mymaster");
            assert!(
                matches!(&error, BuildError::SentinelNotSupported { index: 3, node } if *node == shown),
                "{error:?}"
            );
            let message = error.to_string();
            for expected in ["#3", "failover", "quarantine", "redis://", "independent"] {
                assert!(message.contains(expected), "{expected:?} not in: {message}");
            }
            assert!(!message.contains("s3cret"), "{message}");
        }
        // Refused by scheme, whatever follows.
        assert!(matches!(
            parse_url(0, "redis-sentinel://u:pw@[::1"),
            Err(BuildError::SentinelNotSupported { .. })
        ));
        let unknown = reason(parse_url(0, "sentinel://127.0.0.1:26379"));
        assert!(!unknown.contains("sentinel://,"), "{unknown}");
    }

    #[test]
    fn clients_for_sentinel_or_cluster_are_refused() {
        let sentinel = ServerConfig::new_sentinel(vec![("10.0.0.1", 26379)], "mymaster");
        let error = server_label(4, &sentinel).unwrap_err();
        assert!(
            matches!(&error, BuildError::SentinelNotSupported { index: 4, node }
                if node == "service mymaster via 10.0.0.1:26379"),
            "{error:?}"
        );
        let cluster = ServerConfig::new_clustered(vec![("10.0.0.1", 7000), ("10.0.0.2", 7000)]);
        assert!(matches!(
            server_label(0, &cluster),
            Err(BuildError::ClusterNotSupported { node }) if node == "10.0.0.1:7000,10.0.0.2:7000"
        ));
        let master = ServerConfig::new_centralized("10.0.0.1", 6379);
        assert_eq!(server_label(0, &master).unwrap(), "10.0.0.1:6379");
    }

    #[test]
    fn tls_without_a_tls_feature_is_refused() {
        if cfg!(any(feature = "tls-rustls", feature = "tls-native")) {
            return;
        }
        let error = reason(parse_url(0, "rediss://user:pw@example.com:6380"));
        assert!(error.contains("tls-rustls"), "{error}");
        assert!(!error.contains("pw@"), "{error}");
    }

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
}
