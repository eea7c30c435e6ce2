//! Liveness of the README's crontab recipe, `redlock run --wait 0s --lock-at-least-for 3s`
//! (skip if busy, a short job kept locked past the attempts after a split vote): three
//! replicas fire it at the same tick, and the command must run on exactly one of them, every
//! tick; the others exit 75 (busy). Each replica is nearer some nodes than the others, so they
//! split the vote; a split vote is not busy (nobody holds the resource), so they attempt again
//! after random delays until one has it (exit 69 only if the split never resolves).
//!
//! Against 5 real redis-server processes, each replica seeing them through its own fault
//! proxies (its skew), behind a gate of this file's own: the `redlock` processes connect at
//! their own pace, and the gate holds each one's first request naming the resource (its lock
//! attempt) until every replica's is there, then lets them all go at once. Without it, the
//! jitter of starting processes would decide who comes first, not the skew.

#![allow(clippy::unwrap_used)] // tests unwrap: a failure is the assertion

mod support;

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use redlock_test::TestNodes;
use redlock_test::{Direction, Fault, Proxy};
use support::{Finished, Scratch, finish, lines, redlock, run_args, start};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// Exit codes, as documented in `redlock --help` and the README.
const BUSY: i32 = 75;
/// The exit code of `redlock run` when too few nodes answered (or a split vote never resolved).
const UNAVAILABLE: i32 = 69;

/// Replicas firing the job at each tick.
const REPLICAS: usize = 3;

/// How much farther each replica is from the nodes outside its group (as in the core's
/// `tests/tests/split.rs`): without the attempts after a split vote, most ticks run nowhere.
const FAR: Duration = Duration::from_millis(5);

/// The longest the gate holds the first lock attempt it saw, waiting for the others: well
/// within the default node timeout (100 ms), so that a late replica costs a tick its
/// simultaneity, never an attempt its answers.
const GATE_HOLD: Duration = Duration::from_millis(40);

/// The job: a short one, done long before the attempts after a split vote can end (random
/// delays of at most 20 ms, doubling, 6 times: 1.26 s, plus the attempts).
const JOB: &str = "sleep 0.05";

/// The minimum hold, as the README's crontab recipe sets it: longer than those attempts can
/// last, so that a replica still attempting finds the lock held after the job is done and
/// skips, instead of taking it and running the job a second time in the tick; and longer
/// than the replicas' stagger in [`replicas_firing_after_the_job_is_done_skip_it`], which
/// without it runs the job on every replica.
const AT_LEAST: &str = "3s";

/// Lets every request through except, while closed, one naming the resource of the tick
/// (`needle`): that one waits until the gate opens, and with it everything after it on its
/// connection.
#[derive(Debug)]
struct Gate {
    open: watch::Sender<bool>,
    /// Requests held so far (while closed).
    held: watch::Sender<usize>,
    needle: Mutex<Vec<u8>>,
}

impl Gate {
    fn new() -> Arc<Self> {
        Arc::new(Self {
            open: watch::Sender::new(true),
            held: watch::Sender::new(0),
            needle: Mutex::new(Vec::new()),
        })
    }

    /// Closes the gate to requests naming `resource`.
    fn close(&self, resource: &str) {
        *self.needle.lock().unwrap_or_else(PoisonError::into_inner) = resource.as_bytes().into();
        self.held.send_replace(0);
        self.open.send_replace(false);
    }

    /// Opens the gate once `expected` requests are held, or [`GATE_HOLD`] after the first
    /// one was; returns how many were held then.
    async fn open_when_held(&self, expected: usize) -> usize {
        let mut held = self.held.subscribe();
        // Bounded: processes that all failed before their attempt never send one.
        let first = tokio::time::timeout(Duration::from_secs(5), held.wait_for(|n| *n > 0));
        let _ = first.await;
        let all = tokio::time::timeout(GATE_HOLD, held.wait_for(|n| *n >= expected));
        let _ = all.await;
        let count = *held.borrow();
        self.open.send_replace(true);
        count
    }

    /// Whether `chunk` must wait for the gate to open.
    fn holds(&self, chunk: &[u8]) -> bool {
        if *self.open.borrow() {
            return false;
        }
        let needle = self.needle.lock().unwrap_or_else(PoisonError::into_inner);
        !needle.is_empty() && chunk.windows(needle.len()).any(|w| w == needle.as_slice())
    }

    /// Starts forwarding a loopback port of its own to `target` through the gate; returns
    /// `redis://127.0.0.1:<that port>`.
    fn forward(self: &Arc<Self>, target: u16) -> String {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        let listener = TcpListener::from_std(listener).unwrap();
        let gate = Arc::clone(self);
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                tokio::spawn(Arc::clone(&gate).connection(client, target));
            }
        });
        format!("redis://127.0.0.1:{port}")
    }

    /// One forwarded connection, until either side closes.
    async fn connection(self: Arc<Self>, client: TcpStream, target: u16) {
        let Ok(server) = TcpStream::connect(("127.0.0.1", target)).await else {
            return;
        };
        let _ = client.set_nodelay(true);
        let _ = server.set_nodelay(true);
        let (mut client_read, mut client_write) = client.into_split();
        let (mut server_read, mut server_write) = server.into_split();
        let up = async {
            let mut buf = vec![0u8; 16 * 1024];
            loop {
                let n = client_read.read(&mut buf).await?;
                if n == 0 {
                    return server_write.shutdown().await;
                }
                if self.holds(&buf[..n]) {
                    let mut open = self.open.subscribe();
                    self.held.send_modify(|held| *held += 1);
                    let _ = open.wait_for(|open| *open).await;
                }
                server_write.write_all(&buf[..n]).await?;
            }
        };
        let down = tokio::io::copy(&mut server_read, &mut client_write);
        tokio::select! {
            _ = up => {}
            _ = down => {}
        }
    }
}

/// One replica: its own proxies (its view of the network, skewed), behind the gate.
struct Replica {
    /// Kept for the replica's life (a proxy stops when dropped).
    _proxies: Vec<Proxy>,
    /// The gate's URLs in front of its proxies, comma-separated, for `--nodes`.
    nodes: String,
}

/// The replicas over `nodes`, the server `down` (if any) killed: each replica lists its own
/// URL for it, refused as a stopped server refuses (behind a proxy and the gate, a connection
/// would be accepted and then reset, which makes the CLI's start-up last longer, and vary).
fn replicas(nodes: &mut TestNodes, gate: &Arc<Gate>, down: Option<usize>) -> Vec<Replica> {
    if let Some(down) = down {
        nodes.servers[down].kill();
    }
    (0..REPLICAS)
        .map(|r| {
            let proxies = nodes.proxies();
            let urls: Vec<String> = proxies
                .iter()
                .enumerate()
                .map(|(i, proxy)| {
                    if Some(i) == down {
                        nodes.servers[i].url()
                    } else {
                        gate.forward(proxy.port())
                    }
                })
                .collect();
            // Replica `r` is `FAR` farther from every node outside its group (node `i` is in
            // group `i % REPLICAS`).
            for (i, proxy) in proxies.iter().enumerate() {
                if i % REPLICAS != r {
                    proxy.set(Direction::Request, Fault::Delay(FAR));
                }
            }
            Replica {
                _proxies: proxies,
                nodes: urls.join(","),
            }
        })
        .collect()
}

/// What one tick gave.
#[derive(Debug)]
struct Tick {
    /// Each replica's `redlock`, in order.
    runs: Vec<Finished>,
    /// The lines the job wrote for this tick (each names its replica).
    journal: Vec<String>,
    /// Lock attempts the gate held before opening (all of them: the replicas fired at once).
    held: usize,
}

impl Tick {
    /// Replicas whose `redlock` met a split vote and attempted again.
    fn splits(&self) -> usize {
        self.runs
            .iter()
            .filter(|run| run.stderr.contains("split vote; attempting again"))
            .count()
    }
}

/// Every replica runs `redlock run --wait 0s` on `resource`, replica `r` `r * stagger` after
/// the first (at once for none); `live` nodes answer.
async fn tick(
    replicas: &[Replica],
    gate: &Gate,
    journal: &str,
    resource: &str,
    live: usize,
    stagger: Duration,
) -> Tick {
    gate.close(resource);
    let script = format!("echo \"{resource} $REPLICA\" >> {journal}; {JOB}");
    // Started while the gate waits for their attempts (it holds the first for [`GATE_HOLD`]).
    let launch = async {
        let mut started = Vec::new();
        for (r, replica) in replicas.iter().enumerate() {
            if r > 0 && !stagger.is_zero() {
                tokio::time::sleep(stagger).await;
            }
            let args = run_args(
                resource,
                &[
                    "--nodes",
                    &replica.nodes,
                    "--wait",
                    "0s",
                    "--ttl",
                    "5s",
                    "--lock-at-least-for",
                    AT_LEAST,
                    "--grace",
                    "1s",
                ],
                &script,
            );
            let mut command = redlock(None, &args);
            command
                .env("REPLICA", r.to_string())
                // The core's debug lines on stderr: whether the vote split, how it ended.
                .env(
                    "RUST_LOG",
                    "warn,fred=error,redlock_core::kernel::acquire=debug",
                );
            started.push(start(command));
        }
        started
    };
    let (held, started) = tokio::join!(gate.open_when_held(replicas.len() * live), launch);
    let mut runs = Vec::new();
    for run in started {
        runs.push(finish(run).await);
    }
    let prefix = format!("{resource} ");
    let journal = lines(journal)
        .into_iter()
        .filter(|line| line.starts_with(&prefix))
        .collect();
    Tick {
        runs,
        journal,
        held,
    }
}

/// Runs `ticks` ticks on resources `name:T`, the replicas firing `stagger` apart: each must
/// run the job on exactly one replica, which exited 0, the others exiting 75 (busy, or 69 when
/// none of their calls was answered in time). Returns
/// how many ticks split the vote.
async fn every_tick_runs_once(
    replicas: &[Replica],
    gate: &Gate,
    scratch: &Scratch,
    name: &str,
    ticks: usize,
    live: usize,
    stagger: Duration,
) -> usize {
    let journal = scratch.file("journal");
    let mut split = 0;
    for t in 0..ticks {
        let resource = format!("{name}:{t}");
        let tick = tick(replicas, gate, &journal, &resource, live, stagger).await;
        let codes: Vec<Option<i32>> = tick.runs.iter().map(|run| run.code).collect();
        let ran: Vec<usize> = (0..codes.len()).filter(|&r| codes[r] == Some(0)).collect();
        // The others are busy; one whose nodes answered none of its calls in time (a replica
        // starved of CPU on a loaded machine) is unavailable (69), which is not a split that
        // ran nowhere: the tick still ran on exactly one replica.
        let busy = tick
            .runs
            .iter()
            .filter(|run| {
                run.code == Some(BUSY)
                    || (run.code == Some(UNAVAILABLE) && run.stderr.contains("no reply within"))
            })
            .count();
        assert!(
            ran.len() == 1
                && busy == replicas.len() - 1
                && tick.journal == [format!("{resource} {}", ran[0])]
                && tick.runs.iter().all(|run| !run.stderr.contains("panicked")),
            "{resource}: exit codes {codes:?} (one 0, the others {BUSY}), the job's lines \
             {:?} (one, by the replica that exited 0), {} of {} attempts fired at once, \
             {} replica(s) met a split vote; {:#?}",
            tick.journal,
            tick.held,
            replicas.len() * live,
            tick.splits(),
            tick.runs
        );
        if tick.splits() > 0 {
            split += 1;
        }
        println!(
            "{resource}: ran on replica {}; {} of {} attempts fired at once; {} replica(s) \
             met a split vote",
            ran[0],
            tick.held,
            replicas.len() * live,
            tick.splits()
        );
    }
    split
}

/// The skew splits the vote: the job still runs once per tick, on one replica.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_skip_job_fired_by_three_replicas_runs_once_per_tick() {
    let mut nodes = TestNodes::start(5);
    let gate = Gate::new();
    let replicas = replicas(&mut nodes, &gate, None);
    let scratch = Scratch::new("split-skewed");
    let split =
        every_tick_runs_once(&replicas, &gate, &scratch, "skewed", 8, 5, Duration::ZERO).await;
    // Otherwise the test could not fail: no tick needed the attempts after a split vote.
    assert!(split > 0, "no tick of 8 split the vote");
}

/// One node of five down: four nodes for a quorum of three, which two replicas can split two
/// and two.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_skip_job_runs_once_per_tick_with_a_node_down() {
    let mut nodes = TestNodes::start(5);
    let gate = Gate::new();
    let replicas = replicas(&mut nodes, &gate, Some(4));
    let scratch = Scratch::new("split-down");
    let split =
        every_tick_runs_once(&replicas, &gate, &scratch, "down", 6, 4, Duration::ZERO).await;
    assert!(split > 0, "no tick of 6 split the vote");
}

/// Replicas whose cron fires 500 ms apart (cron daemons start jobs a moment apart, clocks
/// differ): the first one's job is done, and its lock released, before the others attempt;
/// the minimum hold keeps the key, and they skip (75) instead of running the job again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_firing_after_the_job_is_done_skip_it() {
    let mut nodes = TestNodes::start(5);
    let gate = Gate::new();
    let replicas = replicas(&mut nodes, &gate, None);
    let scratch = Scratch::new("split-late");
    let stagger = Duration::from_millis(500);
    every_tick_runs_once(&replicas, &gate, &scratch, "late", 3, 5, stagger).await;
}
