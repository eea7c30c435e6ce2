//! One `redis-server` process on a claimed loopback port, killed on drop (redis-rs's
//! `redis-test/src/server.rs`): start options, process control (kill, restart, pause) and
//! the port utilities.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use crate::tls::Certificates;
use crate::{clock, programs};

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
    /// Also serve TLS, on a port of its own ([`RedisServer::tls_url`]), with these
    /// certificates; `true`: clients must present a certificate the CA signed.
    pub tls: Option<(std::sync::Arc<Certificates>, bool)>,
}

/// One `redis-server` process on a loopback port, killed on drop.
#[derive(Debug)]
pub struct RedisServer {
    child: Option<Child>,
    port: u16,
    /// Released after the process is killed (fields drop after `Drop::drop`).
    _claim: PortClaim,
    /// The TLS port and its claim, when serving TLS.
    tls: Option<(u16, PortClaim)>,
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
            let tls = options.tls.as_ref().map(|_| PortClaim::take());
            let dir = std::env::temp_dir()
                .join("redlock-test-data")
                .join(format!("{port}-{}", std::process::id()));
            let mut server = Self {
                child: None,
                port,
                _claim: claim,
                tls,
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
            .args(self.tls_args())
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

    fn tls_args(&self) -> Vec<String> {
        match (&self.options.tls, &self.tls) {
            (Some((certificates, require)), Some((port, _))) => {
                certificates.server_args(*port, *require)
            }
            _ => Vec::new(),
        }
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

    /// `rediss://127.0.0.1:<tls port>`, for a server started with [`ServerOptions::tls`].
    pub fn tls_url(&self) -> String {
        let (port, _) = self
            .tls
            .as_ref()
            .unwrap_or_else(|| panic!("server started without ServerOptions::tls"));
        format!("rediss://127.0.0.1:{port}")
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
