//! A fault-injecting TCP proxy in front of one node: latency, blackholes (a cut node, or a
//! command applied whose reply never arrives) and connection resets, injected in-process, with
//! no privileges and no kernel support (no `tc netem`).
//!
//! Point the lock at the proxies' URLs instead of the servers' ([`TestNodes::proxies`](crate::TestNodes::proxies),
//! [`proxy_urls`](crate::proxy_urls)) and set faults while the test runs.
//!
//! Each [`Proxy`] listens on its own loopback port and forwards to one server. Faults apply
//! per direction ([`Direction::Request`]: client → server, [`Direction::Reply`]: server →
//! client) and take effect at once, on open connections too. Proxies run on a runtime of
//! their own (two threads shared by every proxy of the process), so a test runtime that is
//! busy or paused does not slow them down.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

/// Which way bytes flow through the proxy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// Client → server: commands.
    Request,
    /// Server → client: replies.
    Reply,
}

/// What happens to the bytes flowing one way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Forwarded at once.
    Pass,
    /// Forwarded after this delay (order kept).
    Delay(Duration),
    /// Read and dropped: on [`Direction::Reply`], a command is applied but its reply never
    /// arrives (the ambiguous write); on both, a clean partition. A TCP stream cannot lose
    /// bytes and go on, so leaving a blackhole resets the connections that lost some, as the
    /// peer's own timeout would have (otherwise a client would pair later replies with the
    /// commands whose replies were lost).
    Blackhole,
}

#[derive(Debug)]
struct State {
    faults: Mutex<[Fault; 2]>,
    /// Bumped by [`Proxy::reset`]: every open connection is closed with a TCP reset.
    /// [`STOPPED`] when the proxy is dropped: the listener closes too.
    generation: watch::Sender<u64>,
    /// Per direction: bytes read from the source (whatever happened to them next), bytes
    /// written to the destination, bytes dropped by a blackhole. Received but neither
    /// delivered nor dropped: held by a delay (or being written).
    received: [AtomicU64; 2],
    delivered: [AtomicU64; 2],
    dropped: [AtomicU64; 2],
    /// Connections accepted.
    accepted: AtomicU64,
}

impl State {
    fn fault(&self, direction: Direction) -> Fault {
        self.faults.lock().unwrap_or_else(PoisonError::into_inner)[direction as usize]
    }
}

/// The generation that tells a proxy's tasks to stop.
const STOPPED: u64 = u64::MAX;

/// The runtime every proxy of this process runs on.
fn runtime() -> &'static tokio::runtime::Runtime {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("fault-proxy")
            .enable_all()
            .build()
            .unwrap_or_else(|e| panic!("proxy runtime: {e}"))
    })
}

/// A proxy in front of `127.0.0.1:<target>`, stopped on drop (its connections are reset).
#[derive(Debug)]
pub struct Proxy {
    port: u16,
    state: Arc<State>,
}

impl Proxy {
    /// Starts a proxy to the loopback port `target` on a free port.
    ///
    /// # Panics
    /// If no loopback port can be bound, or the proxies' runtime cannot be built.
    pub fn start(target: u16) -> Self {
        let listener = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.set_nonblocking(true).map(|()| l))
            .unwrap_or_else(|e| panic!("proxy bind: {e}"));
        let port = listener
            .local_addr()
            .unwrap_or_else(|e| panic!("proxy address: {e}"))
            .port();
        let state = Arc::new(State {
            faults: Mutex::new([Fault::Pass; 2]),
            generation: watch::Sender::new(0),
            received: Default::default(),
            delivered: Default::default(),
            dropped: Default::default(),
            accepted: AtomicU64::new(0),
        });
        let runtime = runtime();
        let _entered = runtime.enter();
        let listener =
            TcpListener::from_std(listener).unwrap_or_else(|e| panic!("proxy listener: {e}"));
        runtime.spawn(accept_loop(listener, target, state.clone()));
        Self { port, state }
    }

    /// The proxy's loopback port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `redis://127.0.0.1:<proxy port>`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Sets the fault on one direction (see [`Fault::Blackhole`] on leaving one).
    pub fn set(&self, direction: Direction, fault: Fault) {
        let previous = std::mem::replace(
            &mut self
                .state
                .faults
                .lock()
                .unwrap_or_else(PoisonError::into_inner)[direction as usize],
            fault,
        );
        if previous == Fault::Blackhole && fault != Fault::Blackhole {
            self.reset();
        }
    }

    /// Blackholes both directions: a clean partition, the node cut off (connections stay
    /// open, nothing passes).
    pub fn partition(&self) {
        self.set(Direction::Request, Fault::Blackhole);
        self.set(Direction::Reply, Fault::Blackhole);
    }

    /// Both directions back to [`Fault::Pass`] (connections that lost bytes are reset).
    pub fn heal(&self) {
        self.set(Direction::Request, Fault::Pass);
        self.set(Direction::Reply, Fault::Pass);
    }

    /// Closes every open connection with a TCP reset (new connections are accepted).
    pub fn reset(&self) {
        self.state
            .generation
            .send_modify(|g| *g = (*g + 1) % STOPPED);
    }

    /// Delays both directions by `delay` each way (order kept).
    pub fn delay(&self, delay: Duration) {
        self.set(Direction::Request, Fault::Delay(delay));
        self.set(Direction::Reply, Fault::Delay(delay));
    }

    /// Bytes received from clients so far.
    pub fn request_bytes(&self) -> u64 {
        self.received(Direction::Request)
    }

    /// Bytes read from the source of `direction` so far (client for
    /// [`Direction::Request`], server for [`Direction::Reply`]), whatever happened to them
    /// next.
    pub fn received(&self, direction: Direction) -> u64 {
        self.state.received[direction as usize].load(Ordering::SeqCst)
    }

    /// Bytes written to the destination of `direction` so far.
    pub fn delivered(&self, direction: Direction) -> u64 {
        self.state.delivered[direction as usize].load(Ordering::SeqCst)
    }

    /// Bytes received in `direction` and not yet delivered nor dropped: held by a
    /// [`Fault::Delay`] (or left unwritten by a connection that closed). A request still
    /// held has not reached the server.
    pub fn held(&self, direction: Direction) -> u64 {
        let i = direction as usize;
        // The settled counts first: they are bumped after `received`, so the difference is
        // never negative.
        let settled = self.state.delivered[i].load(Ordering::SeqCst)
            + self.state.dropped[i].load(Ordering::SeqCst);
        self.state.received[i]
            .load(Ordering::SeqCst)
            .saturating_sub(settled)
    }

    /// Connections accepted so far.
    pub fn accepted(&self) -> u64 {
        self.state.accepted.load(Ordering::SeqCst)
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.state.generation.send_replace(STOPPED);
    }
}

async fn accept_loop(listener: TcpListener, target: u16, state: Arc<State>) {
    let mut generation = state.generation.subscribe();
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((client, _)) = accepted else { return };
                state.accepted.fetch_add(1, Ordering::SeqCst);
                tokio::spawn(connection(client, target, state.clone()));
            }
            changed = generation.changed() => {
                if changed.is_err() || *generation.borrow() == STOPPED {
                    return;
                }
            }
        }
    }
}

/// One proxied connection: two pumps until either side closes or the proxy resets it.
/// Both sockets linger 0, so whenever the proxy closes one, the peer gets a TCP reset.
async fn connection(client: TcpStream, target: u16, state: Arc<State>) {
    let _ = socket2::SockRef::from(&client).set_linger(Some(Duration::ZERO));
    let Ok(server) = TcpStream::connect(("127.0.0.1", target)).await else {
        return;
    };
    let _ = socket2::SockRef::from(&server).set_linger(Some(Duration::ZERO));
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let mut generation = state.generation.subscribe();
    let (client_read, client_write) = client.into_split();
    let (server_read, server_write) = server.into_split();
    let up = pump(client_read, server_write, Direction::Request, state.clone());
    let down = pump(server_read, client_write, Direction::Reply, state.clone());
    // Either pump ending (a side closed or failed) ends the connection: the other side is
    // closed too, as a real network would show a dead peer.
    tokio::select! {
        _ = up => {}
        _ = down => {}
        _ = generation.changed() => {}
    }
}

/// Copies one direction, applying its fault to every chunk as it is read. Returns when the
/// source closes (after shutting the destination down) or either side fails.
async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    direction: Direction,
    state: Arc<State>,
) -> Option<()> {
    let (queue, mut delayed) = mpsc::unbounded_channel::<(Instant, Vec<u8>)>();
    let i = direction as usize;
    let counters = state.clone();
    let writer = async move {
        while let Some((at, bytes)) = delayed.recv().await {
            tokio::time::sleep_until(at).await;
            to.write_all(&bytes).await.ok()?;
            counters.delivered[i].fetch_add(bytes.len() as u64, Ordering::SeqCst);
        }
        to.shutdown().await.ok()
    };
    let reader = async move {
        let mut buf = vec![0u8; 16 * 1024];
        let mut last = Instant::now();
        loop {
            let n = from.read(&mut buf).await.ok()?;
            if n == 0 {
                return Some(());
            }
            state.received[i].fetch_add(n as u64, Ordering::SeqCst);
            let at = match state.fault(direction) {
                Fault::Blackhole => {
                    state.dropped[i].fetch_add(n as u64, Ordering::SeqCst);
                    continue;
                }
                Fault::Pass => Instant::now(),
                Fault::Delay(delay) => Instant::now() + delay,
            };
            // Never reorder: a chunk leaves no earlier than the one before it.
            last = last.max(at);
            queue.send((last, buf[..n].to_vec())).ok()?;
        }
    };
    let (read, write) = tokio::join!(reader, writer);
    read.and(write)
}
