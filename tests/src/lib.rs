//! Real-server test support: `redis-server` processes on free loopback ports, killed on drop
//! (modelled on redis-rs's `redis-test`), and the fault
//! toolkit of the reliability scenarios: a per-node fault [`proxy`], process control
//! (pause, kill, restart with or without AOF), a wall-clock shim ([`clock`]) and an exclusion
//! [`checker`] independent of the lock.

pub mod checker;
pub mod clock;
pub mod programs;
pub mod proxy;
pub mod workload;

pub use programs::SERVER_BIN_ENV;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

/// A free loopback port (bound then released; the caller retries if it was taken meanwhile).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or_else(|e| panic!("no free loopback port: {e}"))
}

/// A machine-wide claim on a port for one test server, held until the server handle drops.
///
/// A killed node's port must not be reused by another test's server while this test runs:
/// its clients would reconnect to the stranger and count it towards the quorum. Tests run as
/// parallel processes (nextest), so the claim is a file created with `O_EXCL`; a claim whose
/// owner process is gone is taken over.
#[derive(Debug)]
struct PortClaim {
    path: PathBuf,
}

impl PortClaim {
    fn take() -> (u16, Self) {
        let dir = std::env::temp_dir().join("redlock-test-ports");
        let _ = std::fs::create_dir_all(&dir);
        loop {
            let port = free_port();
            let path = dir.join(port.to_string());
            let created = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&path);
            match created {
                Ok(mut file) => {
                    let _ = write!(file, "{}", std::process::id());
                    return (port, Self { path });
                }
                Err(_) if Self::stale(&path) => {
                    let _ = std::fs::remove_file(&path);
                }
                Err(_) => {}
            }
        }
    }

    /// `true` if the claim's owner process no longer exists.
    fn stale(path: &std::path::Path) -> bool {
        std::fs::read_to_string(path)
            .ok()
            .and_then(|pid| pid.trim().parse::<i32>().ok())
            .is_some_and(|pid| kill(Pid::from_raw(pid), None).is_err())
    }
}

impl Drop for PortClaim {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// How a [`RedisServer`] runs.
#[derive(Debug, Clone, Default)]
pub struct ServerOptions {
    /// Persist every write before replying (`appendonly yes`, `appendfsync always`): keys
    /// and their remaining ttls survive `kill -9`.
    pub aof: bool,
    /// Run under the clock shim, so [`RedisServer::clock`] can jump its wall clock.
    pub clock: bool,
    /// Extra `redis-server` arguments.
    pub extra: Vec<String>,
}

/// One `redis-server` process on a loopback port, killed on drop.
#[derive(Debug)]
pub struct RedisServer {
    child: Option<Child>,
    port: u16,
    /// Released after the process is killed (fields drop after `Drop::drop`).
    _claim: PortClaim,
    bin: PathBuf,
    options: ServerOptions,
    /// Its own working directory (AOF files), removed on drop.
    dir: PathBuf,
    clock: Option<clock::ClockOffset>,
}

impl RedisServer {
    /// Starts a server on a free port and waits (at most 10 s) until it answers `PING`.
    pub fn start() -> Self {
        Self::start_with(&[])
    }

    /// [`start`](Self::start) with extra `redis-server` arguments (e.g. `--user ...`).
    pub fn start_with(extra: &[&str]) -> Self {
        Self::start_opts(ServerOptions {
            extra: extra.iter().map(|s| (*s).to_owned()).collect(),
            ..ServerOptions::default()
        })
    }

    /// [`start`](Self::start) with [`ServerOptions`].
    pub fn start_opts(options: ServerOptions) -> Self {
        let bin = programs::redis_server().unwrap_or_else(|e| panic!("{e}"));
        for _ in 0..10 {
            let (port, claim) = PortClaim::take();
            let dir = std::env::temp_dir()
                .join("redlock-test-data")
                .join(format!("{port}-{}", std::process::id()));
            let mut server = Self {
                child: None,
                port,
                _claim: claim,
                bin: bin.clone(),
                clock: options.clock.then(clock::ClockOffset::new),
                options: options.clone(),
                dir,
            };
            if server.spawn().is_ok() {
                return server;
            }
        }
        panic!("could not start redis-server on a free port after 10 tries");
    }

    fn spawn(&mut self) -> Result<(), String> {
        std::fs::create_dir_all(&self.dir).map_err(|e| e.to_string())?;
        let persistence: &[&str] = if self.options.aof {
            &["--appendonly", "yes", "--appendfsync", "always"]
        } else {
            &["--appendonly", "no"]
        };
        let child = Command::new(&self.bin)
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--daemonize", "no"])
            .args(persistence)
            .arg("--dir")
            .arg(&self.dir)
            .args(["--enable-debug-command", "local", "--loglevel", "warning"])
            .args(&self.options.extra)
            .envs(self.clock.iter().flat_map(clock::ClockOffset::env))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("could not start {}: {e}", self.bin.display()))?;
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Some(child) = self.child.as_mut()
                && let Ok(Some(status)) = child.try_wait()
            {
                self.child = None;
                return Err(format!("redis-server exited at start: {status}"));
            }
            if self.ping() {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        self.kill();
        Err("redis-server did not answer PING within 10 s".into())
    }

    fn ping(&self) -> bool {
        let Ok(mut stream) = TcpStream::connect_timeout(
            &([127, 0, 0, 1], self.port).into(),
            Duration::from_millis(200),
        ) else {
            return false;
        };
        let _ = stream.set_read_timeout(Some(Duration::from_millis(500)));
        // Any reply means the server is up (with auth required, PING answers -NOAUTH).
        let mut reply = [0u8; 1];
        stream.write_all(b"PING\r\n").is_ok() && stream.read_exact(&mut reply).is_ok()
    }

    /// The loopback port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `redis://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    fn pid(&self) -> Option<Pid> {
        self.child
            .as_ref()
            .and_then(|c| i32::try_from(c.id()).ok())
            .map(Pid::from_raw)
    }

    /// `kill -9`: the node and its keys are gone.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// `kill -9`, then starts the server again on the same port: empty, or with its keys
    /// when it persists with AOF.
    pub fn restart(&mut self) {
        self.kill();
        self.start_again();
    }

    /// Starts a killed server again on the same port (a delayed restart is [`kill`](Self::kill),
    /// a wait, then this).
    pub fn start_again(&mut self) {
        self.spawn()
            .unwrap_or_else(|e| panic!("restart failed: {e}"));
    }

    /// The wall-clock offset of a server started with [`ServerOptions::clock`].
    pub fn clock(&self) -> &clock::ClockOffset {
        self.clock
            .as_ref()
            .unwrap_or_else(|| panic!("server started without ServerOptions::clock"))
    }

    /// `SIGSTOP`: the node stalls (connections stay open, nothing is answered).
    pub fn pause(&self) {
        if let Some(pid) = self.pid() {
            let _ = kill(pid, Signal::SIGSTOP);
        }
    }

    /// `SIGCONT` after [`pause`](Self::pause).
    pub fn resume(&self) {
        if let Some(pid) = self.pid() {
            let _ = kill(pid, Signal::SIGCONT);
        }
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

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

    /// A fresh [`Proxy`](proxy::Proxy) in front of each server, in order: one client's own
    /// view of the network.
    pub fn proxies(&self) -> Vec<proxy::Proxy> {
        self.servers
            .iter()
            .map(|s| proxy::Proxy::start(s.port()))
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
    pub async fn fields(&self, key: &str) -> Vec<std::collections::HashMap<String, String>> {
        self.on_each("HGETALL", key).await
    }

    /// How many waiters are queued for `key` on every node (`ZCARD` of its waiter queue).
    pub async fn queued(&self, key: &str) -> Vec<i64> {
        self.on_each("ZCARD", &waiters_key(key)).await
    }

    /// How many scripts every node has run so far (`EVALSHA` and `EVAL` calls, from `INFO
    /// commandstats`): a way to await a client's attempts when they leave nothing in the data.
    pub async fn script_calls(&self) -> Vec<u64> {
        let stats: Vec<String> = self.on_each("INFO", "commandstats").await;
        stats
            .iter()
            .map(|text| {
                text.lines()
                    .filter_map(|line| {
                        let calls = line
                            .strip_prefix("cmdstat_evalsha:calls=")
                            .or_else(|| line.strip_prefix("cmdstat_eval:calls="))?;
                        calls.split(',').next()?.parse::<u64>().ok()
                    })
                    .sum()
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

/// The waiter queue of the lock key `key` (redlock-core's bookkeeping namespace).
pub fn waiters_key(key: &str) -> String {
    format!("{key}{}waiters", redlock_core::BOOKKEEPING_SEPARATOR)
}

/// The fencing counter of the lock key `key` (redlock-core's bookkeeping namespace).
pub fn fencing_key(key: &str) -> String {
    format!("{key}{}fencing", redlock_core::BOOKKEEPING_SEPARATOR)
}

/// The URLs of `proxies`, in order.
pub fn proxy_urls(proxies: &[proxy::Proxy]) -> Vec<String> {
    proxies.iter().map(proxy::Proxy::url).collect()
}

/// A plain fred client to one server, for looking at keys from the outside.
pub async fn plain_client(url: &str) -> fred::clients::Client {
    use fred::interfaces::ClientLike;
    let config = fred::types::config::Config::from_url(url).unwrap_or_else(|e| panic!("{e}"));
    let client = fred::types::Builder::from_config(config)
        .with_performance_config(|p| p.default_command_timeout = Duration::from_secs(2))
        .build()
        .unwrap_or_else(|e| panic!("{e}"));
    client
        .init()
        .await
        .unwrap_or_else(|e| panic!("connect {url}: {e}"));
    client
}

/// Another client's plain `SET key theirs NX PX 10000` on one node: `Some("OK")` if it
/// took the key.
pub async fn foreign_set_nx(url: &str, key: &str) -> Option<String> {
    use fred::interfaces::KeysInterface;
    use fred::types::{Expiration, SetOptions};
    plain_client(url)
        .await
        .set(
            key,
            "theirs",
            Some(Expiration::PX(10_000)),
            Some(SetOptions::NX),
            false,
        )
        .await
        .unwrap_or_else(|e| panic!("SET {key} on {url}: {e}"))
}

/// A handle over `nodes` with the default options.
pub async fn redlock(nodes: &RedisNodes) -> redlock_core::Redlock {
    redlock_with(nodes, redlock_core::LockOptions::default()).await
}

/// A handle over `nodes` with `options` as its defaults.
pub async fn redlock_with(
    nodes: &RedisNodes,
    options: redlock_core::LockOptions,
) -> redlock_core::Redlock {
    redlock_core::Redlock::builder()
        .nodes(nodes.urls())
        .lock_options(options)
        .build()
        .await
        .unwrap_or_else(|e| panic!("{e}"))
}

/// Another client's view: is `resource` free right now? (One attempt; panics unless the
/// answer is "acquired" or "busy".)
pub async fn is_free(probe: &redlock_core::Redlock, resource: &str) -> bool {
    let once = redlock_core::LockOptions::default().retry_count(0);
    match probe.lock_with(resource, &once).await {
        Ok(guard) => {
            guard.release().await.unwrap_or_else(|e| panic!("{e}"));
            true
        }
        Err(error) if error.is_busy() => false,
        Err(error) => panic!("{error}"),
    }
}

/// Waits (at most 5 s, polling every 5 ms) until `resource` can be taken; returns how long
/// that took.
pub async fn free_within(probe: &redlock_core::Redlock, resource: &str) -> Duration {
    let started = Instant::now();
    let wait = redlock_core::LockOptions::default()
        .retry_delay(Duration::from_millis(5))
        .retry_jitter(Duration::ZERO)
        .wait_timeout(Duration::from_secs(5));
    let guard = probe
        .lock_with(resource, &wait)
        .await
        .unwrap_or_else(|e| panic!("{resource} never became free: {e}"));
    let elapsed = started.elapsed();
    guard.release().await.unwrap_or_else(|e| panic!("{e}"));
    elapsed
}

/// Awaits `future` for at most 10 s; panics with `what` if it takes longer. Every wait in the
/// tests goes through this or another bound, so a bug fails the test instead of hanging CI.
pub async fn within<F: std::future::IntoFuture>(what: &str, future: F) -> F::Output {
    tokio::time::timeout(Duration::from_secs(10), future)
        .await
        .unwrap_or_else(|_| panic!("timed out after 10 s waiting for {what}"))
}

/// Sets its flag when dropped: put one in a future to see that the future was dropped.
#[derive(Debug)]
pub struct DropFlag(pub std::sync::Arc<std::sync::atomic::AtomicBool>);

impl Drop for DropFlag {
    fn drop(&mut self) {
        self.0.store(true, std::sync::atomic::Ordering::SeqCst);
    }
}
