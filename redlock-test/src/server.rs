//! One server process (`redis-server` or `valkey-server`) on a claimed loopback port, killed
//! on drop: start options, process control (kill, restart, pause) and the port utilities.

use std::ffi::OsString;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use crate::error::StartError;
use crate::programs::{self, ServerKind};
#[cfg(feature = "tls")]
use crate::tls::Certificates;

/// A free loopback port: bound, then released (another process may take it before the caller
/// binds it; [`TestServer`] claims its ports against the other test processes).
///
/// # Panics
/// If no loopback port can be bound.
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

/// How a [`TestServer`] runs: which binary, persistence, extra arguments, environment and
/// (feature `tls`) TLS. Built with chained calls from [`ServerOptions::default`].
///
/// Every server runs on `127.0.0.1` with no RDB snapshots (`--save ""`), in a working
/// directory of its own (removed on drop), with `DEBUG` enabled for local clients and its log
/// at `warning` level.
#[derive(Debug, Clone, Default)]
pub struct ServerOptions {
    kind: ServerKind,
    binary: Option<PathBuf>,
    aof: bool,
    args: Vec<String>,
    env: Vec<(OsString, OsString)>,
    #[cfg(feature = "tls")]
    tls: Option<(std::sync::Arc<Certificates>, bool)>,
}

impl ServerOptions {
    /// Which server program to run ([`ServerKind::Redis`] by default); its binary is found
    /// when the server starts ([`ServerKind::binary`]).
    #[must_use]
    pub fn kind(mut self, kind: ServerKind) -> Self {
        self.kind = kind;
        self
    }

    /// Runs this binary, whatever [`kind`](Self::kind) says.
    #[must_use]
    pub fn binary(mut self, path: impl Into<PathBuf>) -> Self {
        self.binary = Some(path.into());
        self
    }

    /// Persists every write before replying (`appendonly yes`, `appendfsync always`): keys
    /// and their remaining ttls survive [`TestServer::restart`] (a `kill -9`). Off by default
    /// (`appendonly no`): a restarted server is empty.
    #[must_use]
    pub fn aof(mut self, aof: bool) -> Self {
        self.aof = aof;
        self
    }

    /// One more server argument, after the harness's own (a later one wins), e.g.
    /// `--maxmemory-policy` then `allkeys-lru` as two calls.
    #[must_use]
    pub fn arg(mut self, arg: impl Into<String>) -> Self {
        self.args.push(arg.into());
        self
    }

    /// More server arguments ([`arg`](Self::arg) for each).
    #[must_use]
    pub fn args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.args.extend(args.into_iter().map(Into::into));
        self
    }

    /// An environment variable of the server process (e.g. `LD_PRELOAD`), kept across
    /// restarts.
    #[must_use]
    pub fn env(mut self, key: impl Into<OsString>, value: impl Into<OsString>) -> Self {
        self.env.push((key.into(), value.into()));
        self
    }

    /// More environment variables ([`env`](Self::env) for each).
    #[must_use]
    pub fn envs<I, K, V>(mut self, vars: I) -> Self
    where
        I: IntoIterator<Item = (K, V)>,
        K: Into<OsString>,
        V: Into<OsString>,
    {
        self.env
            .extend(vars.into_iter().map(|(k, v)| (k.into(), v.into())));
        self
    }

    /// Also serves TLS, on a port of its own ([`TestServer::tls_url`]), with `certificates`;
    /// when `require_client_certificate`, clients must present one the CA signed. The
    /// server's binary must have been built with TLS.
    #[cfg(feature = "tls")]
    #[must_use]
    pub fn tls(
        mut self,
        certificates: std::sync::Arc<Certificates>,
        require_client_certificate: bool,
    ) -> Self {
        self.tls = Some((certificates, require_client_certificate));
        self
    }

    fn serves_tls(&self) -> bool {
        #[cfg(feature = "tls")]
        return self.tls.is_some();
        #[cfg(not(feature = "tls"))]
        false
    }
}

/// One server process (Redis or Valkey) on a loopback port, killed on drop (`kill -9`, then
/// its working directory is removed).
///
/// Its port is claimed against the other processes that use this crate (a file in the temp
/// directory, held until drop), so that a killed server's port is not given to another test's
/// server while this one may start it again.
#[derive(Debug)]
pub struct TestServer {
    child: Option<Child>,
    port: u16,
    /// Released after the process is killed (fields drop after `Drop::drop`).
    _claim: PortClaim,
    /// The TLS port and its claim, when serving TLS.
    tls: Option<(u16, PortClaim)>,
    bin: PathBuf,
    version: programs::BinaryVersion,
    options: ServerOptions,
    /// Its own working directory (AOF files, log), removed on drop.
    dir: PathBuf,
}

impl TestServer {
    /// Starts a server with the default options on a free port and waits (at most 10 s)
    /// until it answers `PING`.
    ///
    /// # Panics
    /// When the server cannot be started ([`try_start`](Self::try_start) says why).
    pub fn start() -> Self {
        Self::start_opts(ServerOptions::default())
    }

    /// [`start`](Self::start) with extra server arguments (e.g. `--maxmemory-policy`,
    /// `allkeys-lru`).
    ///
    /// # Panics
    /// When the server cannot be started ([`try_start`](Self::try_start) says why).
    pub fn start_with(extra: &[&str]) -> Self {
        Self::start_opts(ServerOptions::default().args(extra.iter().copied()))
    }

    /// [`start`](Self::start) with [`ServerOptions`].
    ///
    /// # Panics
    /// When the server cannot be started ([`try_start`](Self::try_start) says why).
    pub fn start_opts(options: ServerOptions) -> Self {
        Self::try_start(options).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Starts a server with `options` on a free port and waits (at most 10 s) until it
    /// answers `PING`; a server that exits while starting is tried again on other ports, 10
    /// times in all.
    ///
    /// # Errors
    /// [`StartError::NotFound`] when there is no binary, [`StartError::Spawn`] when it cannot
    /// be run, [`StartError::Exited`] or [`StartError::NoAnswer`] when the last try failed.
    pub fn try_start(options: ServerOptions) -> Result<Self, StartError> {
        let bin = match &options.binary {
            Some(bin) => bin.clone(),
            None => options.kind.binary()?,
        };
        let version = programs::version_of(&bin);
        let mut last = None;
        for _ in 0..10 {
            let (port, claim) = PortClaim::take();
            let tls = options.serves_tls().then(PortClaim::take);
            let dir = std::env::temp_dir()
                .join("redlock-test-data")
                .join(format!("{port}-{}", std::process::id()));
            let mut server = Self {
                child: None,
                port,
                _claim: claim,
                tls,
                bin: bin.clone(),
                version: version.clone(),
                options: options.clone(),
                dir,
            };
            match server.spawn() {
                Ok(()) => return Ok(server),
                Err(error @ StartError::Spawn { .. }) => return Err(error),
                Err(error) => last = Some(error),
            }
        }
        Err(last.unwrap_or(StartError::NoAnswer { bin }))
    }

    fn spawn(&mut self) -> Result<(), StartError> {
        let spawn_error = |bin: &Path| {
            let bin = bin.to_path_buf();
            move |source| StartError::Spawn { bin, source }
        };
        std::fs::create_dir_all(&self.dir).map_err(spawn_error(&self.bin))?;
        let log_path = self.dir.join("server.log");
        let log = std::fs::File::create(&log_path).map_err(spawn_error(&self.bin))?;
        let log_err = log.try_clone().map_err(spawn_error(&self.bin))?;
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
            .args(&self.options.args)
            .args(self.tls_args())
            .envs(self.options.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log_err)
            .spawn()
            .map_err(spawn_error(&self.bin))?;
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Some(child) = self.child.as_mut()
                && let Ok(Some(status)) = child.try_wait()
            {
                self.child = None;
                let text = std::fs::read_to_string(&log_path).unwrap_or_default();
                let tail: Vec<&str> = text.lines().rev().take(3).collect();
                return Err(StartError::Exited {
                    bin: self.bin.clone(),
                    status,
                    stderr: tail.into_iter().rev().collect::<Vec<_>>().join(" | "),
                });
            }
            if self.ping() {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        self.kill();
        Err(StartError::NoAnswer {
            bin: self.bin.clone(),
        })
    }

    fn tls_args(&self) -> Vec<String> {
        #[cfg(feature = "tls")]
        if let (Some((certificates, require)), Some((port, _))) = (&self.options.tls, &self.tls) {
            return certificates.server_args(*port, *require);
        }
        Vec::new()
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

    /// `rediss://127.0.0.1:<tls port>`, for a server started with `ServerOptions::tls` (feature `tls`).
    ///
    /// # Panics
    /// If the server was started without TLS.
    pub fn tls_url(&self) -> String {
        let (port, _) = self
            .tls
            .as_ref()
            .unwrap_or_else(|| panic!("server started without ServerOptions::tls"));
        format!("rediss://127.0.0.1:{port}")
    }

    /// The binary it runs.
    pub fn binary(&self) -> &Path {
        &self.bin
    }

    /// What the binary says it is (`--version`): Redis or Valkey, whatever kind was asked
    /// for (`REDIS_SERVER_BIN` may name a `valkey-server`).
    pub fn kind(&self) -> ServerKind {
        self.version.kind
    }

    /// The binary's version (`--version`'s `v=` field, e.g. `8.1.8`; `unknown` if it could
    /// not be read).
    pub fn version(&self) -> &str {
        &self.version.version
    }

    /// `true` while the process runs (not [`kill`](Self::kill)ed, not exited).
    pub fn is_running(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|child| matches!(child.try_wait(), Ok(None)))
    }

    /// `true` unless killed and not started again (a paused or crashed process counts).
    pub(crate) fn is_started(&self) -> bool {
        self.child.is_some()
    }

    fn pid(&self) -> Option<Pid> {
        self.child
            .as_ref()
            .and_then(|c| i32::try_from(c.id()).ok())
            .map(Pid::from_raw)
    }

    /// `kill -9`: the node and its keys are gone (with [`ServerOptions::aof`], its keys come
    /// back on [`start_again`](Self::start_again)). Its port stays claimed.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// `kill -9`, then starts the server again on the same port: empty, or with its keys
    /// when it persists with AOF.
    ///
    /// # Panics
    /// If it does not start again.
    pub fn restart(&mut self) {
        self.kill();
        self.start_again();
    }

    /// Starts a killed server again on the same port (a delayed restart is
    /// [`kill`](Self::kill), a wait, then this).
    ///
    /// # Panics
    /// If it does not start again.
    pub fn start_again(&mut self) {
        self.spawn()
            .unwrap_or_else(|e| panic!("restart failed: {e}"));
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

impl Drop for TestServer {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
