//! A set of independent servers ([`RedisNodes`]), what tests read and write on all of them
//! from the outside, and a handle of the lock over them.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use redlock_core::{LockOptions, Redlock};

use crate::clients::{plain_client, waiters_key};
use crate::proxy::Proxy;
use crate::server::{RedisServer, ServerOptions};

/// N independent servers.
#[derive(Debug)]
pub struct RedisNodes {
    /// The servers, in order.
    pub servers: Vec<RedisServer>,
}

impl RedisNodes {
    /// Starts `n` servers.
    pub fn start(n: usize) -> Self {
        Self {
            servers: (0..n).map(|_| RedisServer::start()).collect(),
        }
    }

    /// Starts `n` servers, server `i` with `options(i)`.
    pub fn start_opts(n: usize, options: impl Fn(usize) -> ServerOptions) -> Self {
        Self {
            servers: (0..n)
                .map(|i| RedisServer::start_opts(options(i)))
                .collect(),
        }
    }

    /// Their URLs, in order.
    pub fn urls(&self) -> Vec<String> {
        self.servers.iter().map(RedisServer::url).collect()
    }

    /// Their TLS URLs, in order (servers started with [`ServerOptions::tls`]).
    pub fn tls_urls(&self) -> Vec<String> {
        self.servers.iter().map(RedisServer::tls_url).collect()
    }

    /// A fresh [`Proxy`] in front of each server, in order: one client's own
    /// view of the network.
    pub fn proxies(&self) -> Vec<Proxy> {
        self.servers
            .iter()
            .map(|s| Proxy::start(s.port()))
            .collect()
    }

    /// The value of `key` on every node, in order (`None` where it is absent).
    pub async fn values(&self, key: &str) -> Vec<Option<String>> {
        self.on_each("GET", key).await
    }

    /// The remaining ttl of `key` on every node, in milliseconds (`PTTL`: -2 if absent).
    pub async fn pttls(&self, key: &str) -> Vec<i64> {
        self.on_each("PTTL", key).await
    }

    /// The keys matching `pattern` on every node, in order (`KEYS`; sorted).
    pub async fn keys(&self, pattern: &str) -> Vec<Vec<String>> {
        let mut all: Vec<Vec<String>> = self.on_each("KEYS", pattern).await;
        all.iter_mut().for_each(|keys| keys.sort());
        all
    }

    /// Waits (at most 2 s) until `key` is absent on every node: a release returns at quorum,
    /// and the other nodes' deletes land just after.
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

    /// The hash at `key` on every node, in order (empty where absent): a resource held in
    /// lock modes, one field per holder's token and per waiter's `~` marker.
    pub async fn fields(&self, key: &str) -> Vec<HashMap<String, String>> {
        self.on_each("HGETALL", key).await
    }

    /// How many waiters are queued for `key` on every node (`ZCARD` of its waiter queue).
    pub async fn queued(&self, key: &str) -> Vec<i64> {
        self.on_each("ZCARD", &waiters_key(key)).await
    }

    /// How many `EVALSHA` and `EVAL` commands every node has run so far (`INFO
    /// commandstats`): a way to await a client's attempts when they leave nothing in the
    /// data. One command may carry several calls of one handle issued at once (the node
    /// pipeline's batches); [`command_calls`](Self::command_calls) counts what they ran.
    pub async fn script_calls(&self) -> Vec<u64> {
        let (sha, source) = (
            self.command_calls("evalsha").await,
            self.command_calls("eval").await,
        );
        sha.iter().zip(source).map(|(a, b)| a + b).collect()
    }

    /// How many times every node has run `command` (lower case) so far, from clients and from
    /// scripts (`INFO commandstats`).
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
    pub async fn delete(&self, key: &str) {
        let _deleted: Vec<i64> = self.on_each("DEL", key).await;
    }

    /// Adds `score member ...` pairs to the sorted set at `key` on every node (e.g. waiter
    /// entries that nobody will remove).
    pub async fn zadd(&self, key: &str, score_members: &[String]) {
        let mut args = vec![key.to_owned()];
        args.extend(score_members.iter().cloned());
        let _added: Vec<i64> = self.on_each_with("ZADD", args).await;
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

/// A handle over `nodes` with the default options.
pub async fn redlock(nodes: &RedisNodes) -> Redlock {
    redlock_with(nodes, LockOptions::default()).await
}

/// A handle over `nodes` with `options` as its defaults.
pub async fn redlock_with(nodes: &RedisNodes, options: LockOptions) -> Redlock {
    Redlock::builder()
        .nodes(nodes.urls())
        .lock_options(options)
        .build()
        .await
        .unwrap_or_else(|e| panic!("{e}"))
}
