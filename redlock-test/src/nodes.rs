//! A set of independent servers ([`TestNodes`]), what tests read and write on all of them
//! from the outside (who holds a resource, with its token and remaining ttl on each node),
//! and a handle of the lock over them.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use redlock_core::{LockOptions, Redlock};

use crate::clients::{plain_client, waiters_key};
use crate::error::StartError;
use crate::proxy::Proxy;
use crate::server::{ServerOptions, TestServer};

/// N independent servers: the nodes of a Redlock. Each is killed when this drops.
#[derive(Debug)]
pub struct TestNodes {
    /// The servers, in order (kill, pause or restart one through its [`TestServer`]).
    pub servers: Vec<TestServer>,
}

impl TestNodes {
    /// Starts `n` servers with the default options.
    ///
    /// # Panics
    /// When a server cannot be started ([`TestServer::try_start`] says why).
    pub fn start(n: usize) -> Self {
        Self::start_opts(n, |_| ServerOptions::default())
    }

    /// Starts `n` servers, server `i` with `options(i)` (e.g. a mixed set of Redis and
    /// Valkey nodes, through [`ServerOptions::kind`]).
    ///
    /// # Panics
    /// When a server cannot be started ([`TestServer::try_start`] says why).
    pub fn start_opts(n: usize, options: impl Fn(usize) -> ServerOptions) -> Self {
        Self::try_start_opts(n, options).unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`start_opts`](Self::start_opts) that returns the first server's error instead of
    /// panicking (the servers already started are killed).
    ///
    /// # Errors
    /// The [`StartError`] of the first server that could not be started.
    pub fn try_start_opts(
        n: usize,
        options: impl Fn(usize) -> ServerOptions,
    ) -> Result<Self, StartError> {
        let servers = (0..n)
            .map(|i| TestServer::try_start(options(i)))
            .collect::<Result<_, _>>()?;
        Ok(Self { servers })
    }

    /// How many nodes must agree for a lock: `N / 2 + 1`.
    pub fn quorum(&self) -> usize {
        self.servers.len() / 2 + 1
    }

    /// Their URLs, in order.
    pub fn urls(&self) -> Vec<String> {
        self.servers.iter().map(TestServer::url).collect()
    }

    /// Their TLS URLs, in order (servers started with `ServerOptions::tls`).
    ///
    /// # Panics
    /// If a server was started without TLS.
    pub fn tls_urls(&self) -> Vec<String> {
        self.servers.iter().map(TestServer::tls_url).collect()
    }

    /// A fresh [`Proxy`] in front of each server, in order: one client's own
    /// view of the network.
    pub fn proxies(&self) -> Vec<Proxy> {
        self.servers
            .iter()
            .map(|s| Proxy::start(s.port()))
            .collect()
    }

    /// What every node holds at the lock key `key`, in order: the holder's token (a plain
    /// lock), the hash of holders (a lock in modes) or another value, and the remaining ttl.
    /// The lock key is the handle's key prefix followed by the resource (the resource itself
    /// when the handle has no prefix). Read from plain clients: it takes no lock.
    ///
    /// A node that was [`kill`](TestServer::kill)ed is [`HeldValue::Down`].
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads.
    ///
    /// # Panics
    /// If a running node cannot be reached within 2 s (e.g. a paused one) or refuses the
    /// reads (e.g. an ACL that forbids them).
    pub async fn holdings(&self, key: &str) -> Vec<Holding> {
        let mut out = Vec::with_capacity(self.servers.len());
        for server in &self.servers {
            if !server.is_started() {
                out.push(Holding {
                    node: server.url(),
                    value: HeldValue::Down,
                    ttl: None,
                });
                continue;
            }
            let kind: String = self.on_one(server, "TYPE", key).await;
            let pttl: i64 = self.on_one(server, "PTTL", key).await;
            let value = match kind.as_str() {
                "none" => HeldValue::Free,
                "string" => match self.on_one::<Option<String>>(server, "GET", key).await {
                    Some(token) => HeldValue::Token(token),
                    None => HeldValue::Free,
                },
                "hash" => HeldValue::Holders(self.on_one(server, "HGETALL", key).await),
                other => HeldValue::Other(other.to_owned()),
            };
            out.push(Holding {
                node: server.url(),
                ttl: u64::try_from(pttl).ok().map(Duration::from_millis),
                value,
            });
        }
        out
    }

    /// The token held at the lock key `key` on a quorum of nodes, if one is: the holder, as
    /// another client sees it (compare with `guard.token().expose()`). `None` while the
    /// resource is free, held in modes, or held on fewer nodes than a quorum.
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads.
    ///
    /// # Panics
    /// As [`holdings`](Self::holdings).
    pub async fn holder(&self, key: &str) -> Option<String> {
        let holdings = self.holdings(key).await;
        let tokens: Vec<&str> = holdings.iter().filter_map(|h| h.value.token()).collect();
        tokens
            .iter()
            .find(|token| tokens.iter().filter(|t| t == token).count() >= self.quorum())
            .map(|token| (*token).to_owned())
    }

    /// `true` when nothing is at the lock key `key` on a quorum of nodes (a node that is
    /// down counts as not free): a plain
    /// acquisition could succeed now. Read-only, unlike the free function [`is_free`]
    /// (`crate::is_free`), which takes and releases the lock to know.
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads.
    ///
    /// # Panics
    /// As [`holdings`](Self::holdings).
    ///
    /// [`is_free`]: crate::is_free
    pub async fn is_free(&self, key: &str) -> bool {
        let free = self
            .holdings(key)
            .await
            .iter()
            .filter(|h| h.value == HeldValue::Free)
            .count();
        free >= self.quorum()
    }

    /// Waits (at most `limit`, polling every 5 ms) until [`is_free`](Self::is_free) says
    /// `key` is free; returns how long that took, or `None` if it was still held at the end.
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads and waits.
    ///
    /// # Panics
    /// As [`holdings`](Self::holdings).
    pub async fn wait_free(&self, key: &str, limit: Duration) -> Option<Duration> {
        let started = Instant::now();
        loop {
            if self.is_free(key).await {
                return Some(started.elapsed());
            }
            if started.elapsed() >= limit {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// The value of `key` on every node, in order (`None` where it is absent).
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads.
    pub async fn values(&self, key: &str) -> Vec<Option<String>> {
        self.on_each("GET", key).await
    }

    /// The remaining ttl of `key` on every node, in milliseconds (`PTTL`: -2 if absent).
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads.
    pub async fn pttls(&self, key: &str) -> Vec<i64> {
        self.on_each("PTTL", key).await
    }

    /// The keys matching `pattern` on every node, in order (`KEYS`; sorted).
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads.
    pub async fn keys(&self, pattern: &str) -> Vec<Vec<String>> {
        let mut all: Vec<Vec<String>> = self.on_each("KEYS", pattern).await;
        all.iter_mut().for_each(|keys| keys.sort());
        all
    }

    /// Waits (at most 2 s) until `key` is absent on every node: a release returns at quorum,
    /// and the other nodes' deletes land just after.
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads and waits.
    pub async fn gone_everywhere(&self, key: &str) {
        let deadline = Instant::now() + Duration::from_secs(2);
        loop {
            let exists: Vec<i64> = self.on_each("EXISTS", key).await;
            if exists.iter().all(|&n| n == 0) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{key} still on some nodes: {exists:?}"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// Waits (at most 2 s, polling every 5 ms) until what every node has at the lock key
    /// `key` passes `settled`, and returns what the nodes hold then, settled or not. An
    /// acquisition, an extension and a release each return at a quorum, and the other nodes'
    /// calls land just after: read what each node holds through this (or
    /// [`held_everywhere`](Self::held_everywhere), [`gone_everywhere`](Self::gone_everywhere)),
    /// not right after the call returned.
    ///
    /// Some calls never land: a call the node timeout cut before it was sent (a node slow to
    /// answer, or a loaded machine), or one to a node that was paused, cut or restarted.
    /// The lock then holds on the nodes that granted it, a quorum. So assert on the result
    /// what the test needs: a quorum, or every node when nothing can have been cut.
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads and waits.
    ///
    /// # Panics
    /// As [`holdings`](Self::holdings).
    pub async fn settle(&self, key: &str, settled: impl Fn(&Holding) -> bool) -> Vec<Holding> {
        let deadline = Instant::now() + Duration::from_secs(2);
        loop {
            let holdings = self.holdings(key).await;
            if holdings.iter().all(&settled) || Instant::now() >= deadline {
                return holdings;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// Waits (at most 2 s) until every node holds `token` at the lock key `key`
    /// ([`HeldValue::holds`]), and returns the holdings: the acquisition returned at a quorum,
    /// and the other nodes' grants land just after.
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads and waits.
    ///
    /// # Panics
    /// When some node does not hold it after 2 s (the message shows every node's holding):
    /// see [`settle`](Self::settle) for the grants that never land. And as
    /// [`holdings`](Self::holdings).
    pub async fn held_everywhere(&self, key: &str, token: &str) -> Vec<Holding> {
        let holdings = self.settle(key, |holding| holding.value.holds(token)).await;
        assert!(
            holdings.iter().all(|holding| holding.value.holds(token)),
            "{key} not held by the token on every node within 2 s: {holdings:?}"
        );
        holdings
    }

    /// The hash at `key` on every node, in order (empty where absent): a resource held in
    /// lock modes, one field per holder's token and per waiter's `~` marker.
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads.
    pub async fn fields(&self, key: &str) -> Vec<HashMap<String, String>> {
        self.on_each("HGETALL", key).await
    }

    /// How many waiters are queued for `key` on every node (`ZCARD` of its waiter queue).
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads.
    pub async fn queued(&self, key: &str) -> Vec<i64> {
        self.on_each("ZCARD", &waiters_key(key)).await
    }

    /// How many `EVALSHA` and `EVAL` commands every node has run so far (`INFO
    /// commandstats`): a way to await a client's script calls (a lock in a mode, a waiter's
    /// attempt, a release) when they leave nothing in the data. A plain first attempt on one
    /// resource is the node's own `SET` and is not counted here (count `set` with
    /// [`command_calls`](Self::command_calls)). One command may carry several calls of one
    /// handle issued at once (the node pipeline's batches).
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads.
    pub async fn script_calls(&self) -> Vec<u64> {
        let (sha, source) = (
            self.command_calls("evalsha").await,
            self.command_calls("eval").await,
        );
        sha.iter().zip(source).map(|(a, b)| a + b).collect()
    }

    /// How many times every node has run `command` (lower case) so far, from clients and from
    /// scripts (`INFO commandstats`).
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads.
    pub async fn command_calls(&self, command: &str) -> Vec<u64> {
        let prefix = format!("cmdstat_{command}:calls=");
        let stats: Vec<String> = self.on_each("INFO", "commandstats").await;
        stats
            .iter()
            .map(|text| {
                text.lines()
                    .find_map(|line| line.strip_prefix(prefix.as_str()))
                    .and_then(|calls| calls.split(',').next()?.parse::<u64>().ok())
                    .unwrap_or(0)
            })
            .collect()
    }

    /// Deletes `key` on every node, from the outside.
    ///
    /// # Cancel safety
    /// Dropped midway, the key may be deleted on some nodes and not others; calling it again
    /// finishes the job.
    pub async fn delete(&self, key: &str) {
        let _deleted: Vec<i64> = self.on_each("DEL", key).await;
    }

    /// Adds `score member ...` pairs to the sorted set at `key` on every node (e.g. waiter
    /// entries that nobody will remove).
    ///
    /// # Cancel safety
    /// Dropped midway, the entries may be on some nodes and not others; `ZADD` again is idempotent.
    pub async fn zadd(&self, key: &str, score_members: &[String]) {
        let mut args = vec![key.to_owned()];
        args.extend(score_members.iter().cloned());
        let _added: Vec<i64> = self.on_each_with("ZADD", args).await;
    }

    /// `command key` on one node from a plain client.
    async fn on_one<T: fred::types::FromValue>(
        &self,
        server: &TestServer,
        command: &'static str,
        key: &str,
    ) -> T {
        use fred::interfaces::ClientLike;
        use fred::types::{ClusterHash, CustomCommand};
        let url = server.url();
        let cmd = CustomCommand::new_static(command, ClusterHash::FirstKey, false);
        plain_client(&url)
            .await
            .custom(cmd, vec![key.to_owned()])
            .await
            .unwrap_or_else(|e| panic!("{command} {key} on {url}: {e}"))
    }

    /// `command key` on every node from a plain client, in order.
    async fn on_each<T: fred::types::FromValue>(&self, command: &'static str, key: &str) -> Vec<T> {
        self.on_each_with(command, vec![key.to_owned()]).await
    }

    /// `command args...` on every node from a plain client, in order.
    async fn on_each_with<T: fred::types::FromValue>(
        &self,
        command: &'static str,
        args: Vec<String>,
    ) -> Vec<T> {
        use fred::interfaces::ClientLike;
        use fred::types::{ClusterHash, CustomCommand};
        let mut out = Vec::new();
        for url in self.urls() {
            let cmd = CustomCommand::new_static(command, ClusterHash::FirstKey, false);
            out.push(
                plain_client(&url)
                    .await
                    .custom(cmd, args.clone())
                    .await
                    .unwrap_or_else(|e| panic!("{command} {args:?} on {url}: {e}")),
            );
        }
        out
    }
}

/// The URLs of `proxies`, in order.
pub fn proxy_urls(proxies: &[Proxy]) -> Vec<String> {
    proxies.iter().map(Proxy::url).collect()
}

/// A [`Redlock`] over `nodes` (their URLs, in order) with the default options.
///
/// # Cancel safety
/// As [`RedlockBuilder::build`](redlock_core::RedlockBuilder::build).
///
/// # Panics
/// If the handle cannot be built (e.g. a node refuses it: see `RedlockBuilder::build`).
pub async fn redlock(nodes: &TestNodes) -> Redlock {
    redlock_with(nodes, LockOptions::default()).await
}

/// A [`Redlock`] over `nodes` with `options` as its defaults, once it has connected to every
/// node that accepts connections (at most 5 s after a quorum did).
///
/// # Cancel safety
/// As [`RedlockBuilder::build`](redlock_core::RedlockBuilder::build).
///
/// # Panics
/// As [`redlock`].
pub async fn redlock_with(nodes: &TestNodes, options: LockOptions) -> Redlock {
    let redlock = Redlock::builder()
        .nodes(nodes.urls())
        .lock_options(options)
        .build()
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    all_connected(nodes, &redlock).await;
    redlock
}

/// How long [`redlock_with`] waits for the nodes a quorum did not need to connect.
const CONNECTED_WITHIN: Duration = Duration::from_secs(5);

/// Waits (at most [`CONNECTED_WITHIN`]) until `redlock` reads every node of `nodes` that
/// accepts connections. `build()` returns once a quorum has connected and keeps connecting
/// the others in the background; a test over healthy nodes expects each of them from its
/// first call (a waiter's first attempt queues on every node, say), however loaded the
/// machine. A node that was killed refuses connections and is not waited for.
async fn all_connected(nodes: &TestNodes, redlock: &Redlock) {
    let up = nodes
        .servers
        .iter()
        .filter(|server| {
            let address = std::net::SocketAddr::from(([127, 0, 0, 1], server.port()));
            std::net::TcpStream::connect_timeout(&address, Duration::from_millis(200)).is_ok()
        })
        .count();
    let deadline = Instant::now() + CONNECTED_WITHIN;
    while Instant::now() < deadline {
        let answered = redlock
            .inspect("redlock-test:connected")
            .await
            .map_or(0, |status| status.answered());
        if answered >= up {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// What one node holds at a lock key ([`TestNodes::holdings`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Holding {
    /// The node's URL.
    pub node: String,
    /// What is at the key.
    pub value: HeldValue,
    /// The key's remaining ttl (`PTTL`), to the millisecond; `None` when there is no key or
    /// it never expires.
    pub ttl: Option<Duration>,
}

/// What is at a lock key on one node.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum HeldValue {
    /// No key: free on this node.
    Free,
    /// A string: the token of the holder of a plain lock (or another client's value).
    Token(String),
    /// A hash: a resource held in lock modes, one field per holder's token (and per waiter's
    /// marker), as the node stores it.
    Holders(HashMap<String, String>),
    /// A key of another type (its `TYPE`): someone else's data.
    Other(String),
    /// The node was killed ([`TestServer::kill`]) and not started again.
    Down,
}

impl HeldValue {
    /// `true` when this is `token`'s: the string of a plain lock, or a field of a hash of
    /// lock modes.
    pub fn holds(&self, token: &str) -> bool {
        match self {
            Self::Token(held) => held == token,
            Self::Holders(fields) => fields.contains_key(token),
            _ => false,
        }
    }

    /// The token, for [`HeldValue::Token`].
    pub fn token(&self) -> Option<&str> {
        match self {
            Self::Token(token) => Some(token),
            _ => None,
        }
    }
}
