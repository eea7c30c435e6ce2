//! RL-15, the randomized nemesis soak (reliability.md §7): 16 clients contend for one
//! resource, and 4 of them also for a second one in read/write lock modes, and 1 more takes
//! both at once (`lock_many`, checked in both resources' histories), while a seeded
//! nemesis crashes, stops, partitions and slows nodes, flushes their script caches, and
//! stalls holders, one fault at a time or composed: a node restarted empty while every client
//! loses its own minority of nodes, a different one before the crash and after the restart
//! (issue 15's fencing fault model). Between the faults, now and then an episode of handing a
//! lock on or breaking it, through handles of its own ([`HandOn`]): a lock of `rl15` detached
//! and delivered twice around a restart of a node from a snapshot that still holds it (the
//! quarantine keeps the second resumer out), a resumption dropped midway (the lock goes back
//! to the detached token, which resumes it again), and a force-release whose delete reaches
//! some nodes late (the next holder keeps its keys). Three minutes in the normal test run;
//! `cargo xtask soak --minutes 30` for longer. `RL15_SEED` replays a run.

#![allow(clippy::unwrap_used, clippy::print_stderr)] // tests unwrap and report figures

use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

use fred::clients::Client;
use fred::interfaces::{ClientLike, LuaInterface};
use fred::types::{ClusterHash, CustomCommand, Value};
use futures_util::future::join_all;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use redlock_core::{LockError, LockOptions, Redlock};
use redlock_tests::checker::{History, Register};
use redlock_tests::proxy::{Direction, Fault, Proxy};
use redlock_tests::workload::{self, Load, Report, Until};
use redlock_tests::{RedisNodes, RedisServer, plain_client, proxy_urls};

const TTL: Duration = Duration::from_secs(1);
const CLIENTS: usize = 16;
/// The clients that also take the read/write resource (1 lock call in 4 a write).
const RW_CLIENTS: usize = 4;
const RW_WRITES: f64 = 0.25;
/// Clients of their own (after the [`CLIENTS`]) that take both resources at once with
/// `lock_many`: a plain hold of each, in both histories.
const MANY_CLIENTS: usize = 1;
const RESOURCES: [&str; 2] = ["rl15", "rl15-rw"];
const NODES: usize = 5;
const QUORUM: usize = NODES / 2 + 1;
/// The hand-on episodes' holders in the histories: [`HAND`] (the holder that detaches, and the
/// broken holder of a force-release), `HAND + 1` (the first resumer, the next holder), `HAND +
/// 2` (the second resumer, the contender).
const HAND: usize = CLIENTS + MANY_CLIENTS;
/// The resource of the late force-release episodes: theirs alone, so that the holder a force
/// breaks is the episode's own (a stand-in for a dead one), never a workload client.
const FORCED: &str = "rl15-forced";

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// One fault episode. Restarted nodes are quarantined and clocks do not jump: the model under
/// which Redlock promises safety. Single faults touch at most two nodes; the composed one
/// restarts one node empty and cuts each client off a minority of its own.
#[derive(Debug, Clone)]
enum Nemesis {
    /// `kill -9`, restarted empty after a while.
    Crash(usize, Duration),
    /// `SIGSTOP` on up to two nodes.
    Pause(Vec<usize>),
    /// Every client loses up to two nodes.
    Partition(Vec<usize>),
    /// Client `i` reaches only nodes `i, i + 1, i + 2` (mod 5): a different majority each.
    Ring,
    /// Replies from up to two nodes are delayed by up to half a ttl.
    SlowReplies(Vec<usize>, Duration),
    /// `SCRIPT FLUSH` on every node.
    FlushScripts,
    /// Each client loses its own random minority (1 or 2 nodes, maybe the crashed one) for
    /// `before`; then the node is killed, restarted empty `after` later, and each client
    /// gets a new minority for the rest of the episode, through the restarted node's
    /// quarantine and past it. The cuts come from `cuts_seed`.
    CrashAndCuts {
        node: usize,
        before: Duration,
        after: Duration,
        cuts_seed: u64,
    },
    /// A hand-on episode ([`HandOn::resume_around_restart`]): a lock of `rl15` detached and
    /// resumed by a first resumer cut off two nodes; a node it swapped, whose snapshot was
    /// taken while it held the detached token, is restarted from it; a second delivery of the
    /// same lock then must not resume it beside the first. The choices come from `seed`.
    ResumeAroundRestart { seed: u64 },
    /// A hand-on episode ([`HandOn::dropped_resume`]): a lock of `rl15` (fenced or not)
    /// detached, its resumption dropped `after` it started, then resumed again.
    DroppedResume { after: Duration, fenced: bool },
    /// A hand-on episode ([`HandOn::late_force`]): a force-release of [`FORCED`] whose
    /// requests reach nodes `late` `delay` late, and the next holder.
    LateForce { late: Vec<usize>, delay: Duration },
}

impl Nemesis {
    /// Whether every client still reaches a fencing quorum (4 of 5) through this fault: one
    /// node down, stopped, cut off or slowed past the node timeout. A fenced lock is
    /// unavailable by design through the others (redlock-core's docs, "Fencing tokens").
    fn leaves_a_fencing_quorum(&self) -> bool {
        match self {
            Self::Crash(..) | Self::FlushScripts => true,
            // No client's network is touched; the restart is a crash's.
            Self::ResumeAroundRestart { .. }
            | Self::DroppedResume { .. }
            | Self::LateForce { .. } => true,
            Self::Pause(nodes) | Self::Partition(nodes) | Self::SlowReplies(nodes, _) => {
                nodes.len() == 1
            }
            Self::Ring | Self::CrashAndCuts { .. } => false,
        }
    }

    /// A hand-on episode: over when it returns, nothing to hold or heal.
    fn is_hand_on(&self) -> bool {
        matches!(
            self,
            Self::ResumeAroundRestart { .. } | Self::DroppedResume { .. } | Self::LateForce { .. }
        )
    }
}

/// Time after a heal before the clients count as healed: connections cut by a partition are
/// reset and reconnect with a back-off.
const SETTLE: Duration = Duration::from_secs(1);

fn two_nodes(rng: &mut StdRng) -> Vec<usize> {
    let first = rng.random_range(0..NODES);
    let mut nodes = vec![first];
    if rng.random_bool(0.5) {
        nodes.push((first + rng.random_range(1..NODES)) % NODES);
    }
    nodes
}

fn pick(rng: &mut StdRng) -> Nemesis {
    match rng.random_range(0..10) {
        7 => Nemesis::ResumeAroundRestart { seed: rng.random() },
        8 => Nemesis::DroppedResume {
            after: Duration::from_micros(rng.random_range(0..=8_000)),
            fenced: rng.random_bool(0.5),
        },
        9 => {
            let count = rng.random_range(1..=3);
            let mut late = rand::seq::index::sample(rng, NODES, count).into_vec();
            late.sort_unstable();
            Nemesis::LateForce {
                late,
                delay: ms(rng.random_range(50..=500)),
            }
        }
        6 => Nemesis::CrashAndCuts {
            node: rng.random_range(0..NODES),
            before: ms(rng.random_range(200..2_000)),
            after: ms(rng.random_range(0..2_000)),
            cuts_seed: rng.random(),
        },
        0 => Nemesis::Crash(rng.random_range(0..NODES), ms(rng.random_range(0..2_000))),
        1 => Nemesis::Pause(two_nodes(rng)),
        2 => Nemesis::Partition(two_nodes(rng)),
        3 => Nemesis::Ring,
        4 => Nemesis::SlowReplies(two_nodes(rng), ms(rng.random_range(1..500))),
        _ => Nemesis::FlushScripts,
    }
}

/// The nodes, and each client's own proxies in front of them.
struct Cluster {
    nodes: RedisNodes,
    /// `proxies[client][node]`.
    proxies: Vec<Vec<Proxy>>,
    /// The hand-on episodes' handles and oracles.
    hand: HandOn,
}

impl Cluster {
    async fn apply(&mut self, fault: &Nemesis) {
        match fault {
            Nemesis::Crash(node, after) => {
                self.nodes.servers[*node].kill();
                tokio::time::sleep(*after).await;
                self.nodes.servers[*node].start_again();
            }
            Nemesis::Pause(nodes) => nodes.iter().for_each(|&n| self.nodes.servers[n].pause()),
            Nemesis::Partition(nodes) => {
                for client in &self.proxies {
                    nodes.iter().for_each(|&n| client[n].partition());
                }
            }
            Nemesis::Ring => {
                for (i, client) in self.proxies.iter().enumerate() {
                    for (n, proxy) in client.iter().enumerate() {
                        if (n + NODES - i % NODES) % NODES >= 3 {
                            proxy.partition();
                        }
                    }
                }
            }
            Nemesis::SlowReplies(nodes, delay) => {
                for client in &self.proxies {
                    nodes
                        .iter()
                        .for_each(|&n| client[n].set(Direction::Reply, Fault::Delay(*delay)));
                }
            }
            Nemesis::FlushScripts => {
                for url in self.nodes.urls() {
                    let operator = plain_client(&url).await;
                    let _ = operator.script_flush(false).await;
                    let _ = operator.quit().await;
                }
            }
            Nemesis::CrashAndCuts {
                node,
                before,
                after,
                cuts_seed,
            } => {
                let mut rng = StdRng::seed_from_u64(*cuts_seed);
                self.cut_each(&mut rng);
                tokio::time::sleep(*before).await;
                self.nodes.servers[*node].kill();
                tokio::time::sleep(*after).await;
                self.nodes.servers[*node].start_again();
                self.heal();
                self.cut_each(&mut rng);
            }
            Nemesis::ResumeAroundRestart { seed } => {
                self.hand
                    .resume_around_restart(&mut self.nodes, *seed)
                    .await;
            }
            Nemesis::DroppedResume { after, fenced } => {
                self.hand.dropped_resume(&self.nodes, *after, *fenced).await;
            }
            Nemesis::LateForce { late, delay } => {
                self.hand.late_force(&self.nodes, late, *delay).await;
            }
        }
    }

    /// Cuts every client off its own random minority of nodes.
    fn cut_each(&self, rng: &mut StdRng) {
        for client in &self.proxies {
            two_nodes(rng)
                .into_iter()
                .for_each(|n| client[n].partition());
        }
    }

    fn heal(&self) {
        for server in &self.nodes.servers {
            server.resume();
        }
        for proxy in self.proxies.iter().flatten() {
            proxy.heal();
        }
    }
}

/// What a plain lock key holds on one node: the value (`""` when absent or not a string) and
/// its `PTTL` (-2 absent).
const READ: &str = r#"local v = redis.pcall("get", KEYS[1])
if type(v) ~= "string" then v = "" end
return {v, redis.call("pttl", KEYS[1])}"#;

/// Deletes `KEYS[1]` if it holds `ARGV[1]`.
const DELETE_IF: &str = r#"if redis.call("get", KEYS[1]) == ARGV[1] then
  return redis.call("del", KEYS[1])
end
return 0"#;

/// Plain connections to every node for one hand-on episode's reads, closed when it ends.
struct Reader {
    clients: Vec<Client>,
}

impl Reader {
    async fn open(nodes: &RedisNodes) -> Self {
        let mut clients = Vec::new();
        for url in nodes.urls() {
            clients.push(plain_client(&url).await);
        }
        Self { clients }
    }

    /// `script` over `key` with `args` on `node`.
    async fn eval(&self, node: usize, script: &str, key: &str, args: &[&str]) -> Value {
        let cmd = CustomCommand::new_static("EVAL", ClusterHash::FirstKey, false);
        let mut all = vec![Value::from(script), Value::from(1), Value::from(key)];
        all.extend(args.iter().map(|a| Value::from(*a)));
        self.clients[node]
            .custom::<Value, Value>(cmd, all)
            .await
            .unwrap_or_else(|e| panic!("reading node {node}: {e}"))
    }

    /// Before the first node was asked, and what each node holds at `key`: (value, `PTTL`).
    async fn read(&self, key: &str) -> (Instant, Vec<(String, i64)>) {
        let t0 = Instant::now();
        let replies = join_all((0..self.clients.len()).map(|n| self.eval(n, READ, key, &[]))).await;
        let held = replies
            .into_iter()
            .map(|reply| {
                let mut items = reply.into_array().into_iter();
                let value = items.next().and_then(|v| v.as_string()).unwrap_or_default();
                let pttl = items.next().and_then(|v| v.as_i64()).unwrap_or(-2);
                (value, pttl)
            })
            .collect();
        (t0, held)
    }

    /// A command of its own on `node`.
    async fn command(&self, node: usize, command: &'static str, args: Vec<&str>) -> Value {
        let cmd = CustomCommand::new_static(command, ClusterHash::FirstKey, false);
        self.clients[node]
            .custom::<Value, Value>(cmd, args.into_iter().map(Value::from).collect())
            .await
            .unwrap_or_else(|e| panic!("{command} on node {node}: {e}"))
    }

    async fn close(self) {
        for client in self.clients {
            let _ = client.quit().await;
        }
    }
}

/// The nodes among `held` whose value is `token`.
fn holding(held: &[(String, i64)], token: &str) -> Vec<usize> {
    (0..held.len()).filter(|&n| held[n].0 == token).collect()
}

/// How long a quorum of `nodes` keeps `token` (ms; 0 if fewer hold it).
fn quorum_left(held: &[(String, i64)], token: &str) -> u64 {
    let mut lives: Vec<u64> = holding(held, token)
        .iter()
        .map(|&n| u64::try_from(held[n].1).unwrap_or(0))
        .collect();
    lives.sort_unstable_by(|a, b| b.cmp(a));
    lives.get(QUORUM - 1).copied().unwrap_or(0)
}

/// What the hand-on episodes saw.
#[derive(Debug, Default)]
struct HandOnReport {
    /// Restart episodes that reached the second delivery; of them, the second resumer
    /// refused, or holding (which the history of `rl15` then judges).
    restarts: usize,
    second_refused: usize,
    second_held: usize,
    /// Dropped resumptions; returned before the drop; given back; resumed again after; refused
    /// as lost since (the keys ran out).
    drops: usize,
    drops_returned: usize,
    drops_given_back: usize,
    drops_resumed: usize,
    drops_expired: usize,
    /// Late force-releases; of them, with the next holder taken while the late delete was in
    /// flight; late nodes whose next holder's key lived through the late delete; contenders
    /// refused after it.
    forces: usize,
    forces_next_held: usize,
    forces_kept: usize,
    forces_contender_refused: usize,
    /// Episodes that could not play out (the lock not had in time, a resumption refused),
    /// with why.
    skipped: Vec<String>,
}

/// The hand-on episodes' handles, each over proxies of its own (the workload's faults never
/// touch them), with the clients' node timeout and quarantine; the operator's over its own
/// proxies too, its node timeout past every delay [`HandOn::late_force`] gives them.
struct HandOn {
    /// The holder that detaches (and the holder a force breaks), the first resumer (and the
    /// next holder), the second resumer (and the contender).
    handles: Vec<Redlock>,
    proxies: Vec<Vec<Proxy>>,
    operator: Redlock,
    /// The operator's alone: their reply counts are its force-release's.
    operator_proxies: Vec<Proxy>,
    /// `rl15`'s history, the workload's: the episodes' holds of `rl15` are judged with theirs.
    plain: Arc<History>,
    /// [`FORCED`]'s: the next holders and the contenders, never the holder a force breaks.
    forced: History,
    seed: u64,
    report: HandOnReport,
}

/// A hand-on handle over `proxies`.
async fn hand_handle(proxies: &[Proxy]) -> Redlock {
    Redlock::builder()
        .nodes(proxy_urls(proxies))
        .node_timeout(ms(50))
        .quarantine(TTL)
        .lock_options(LockOptions::default().ttl(TTL))
        .build()
        .await
        .unwrap()
}

/// How long the episodes wait for a stage of theirs before they call it a failure.
const STAGE_WITHIN: Duration = Duration::from_secs(5);

impl HandOn {
    async fn new(nodes: &RedisNodes, plain: Arc<History>, seed: u64) -> Self {
        let proxies: Vec<Vec<Proxy>> = (0..3).map(|_| nodes.proxies()).collect();
        let handles = join_all(proxies.iter().map(|p| hand_handle(p))).await;
        let operator_proxies = nodes.proxies();
        let operator = Redlock::builder()
            .nodes(proxy_urls(&operator_proxies))
            .node_timeout(Duration::from_secs(2))
            .build()
            .await
            .unwrap();
        Self {
            handles,
            proxies,
            operator,
            operator_proxies,
            plain,
            forced: History::new(),
            seed,
            report: HandOnReport::default(),
        }
    }

    fn fail(&self, message: &str) -> ! {
        panic!("seed {}: {message}", self.seed)
    }

    /// `rl15` through the holder, waiting in the queue as the clients do; `None` (noted) if
    /// it was not had.
    async fn take(&mut self, what: &str, fenced: bool) -> Option<redlock_core::LockGuard> {
        let options = LockOptions::default()
            .ttl(TTL)
            .fencing(fenced)
            .retry_count(u32::MAX)
            .wait_timeout(Duration::from_secs(3));
        match self.handles[0].lock_with("rl15", &options).await {
            Ok(guard) => Some(guard),
            Err(error) => {
                self.report.skipped.push(format!("{what}: {error}"));
                None
            }
        }
    }

    /// Detaches `guard`, recording its hold of `rl15` up to the detach.
    fn detach(
        &mut self,
        what: &str,
        guard: redlock_core::LockGuard,
        start: Instant,
    ) -> Option<redlock_core::DetachedLock> {
        let valid_until = guard.valid_until();
        let detached = guard.detach();
        self.plain.record(HAND, start, valid_until, Instant::now());
        match detached {
            Ok(detached) => Some(detached),
            Err(error) => {
                self.report.skipped.push(format!("{what}: detach: {error}"));
                None
            }
        }
    }

    /// Holds `guard` (a resumer's hold of `rl15` from `start`) a moment, releases it and
    /// records the hold as `holder`'s.
    async fn finish(&self, holder: usize, guard: redlock_core::LockGuard, start: Instant) {
        tokio::time::sleep(ms(rand::rng().random_range(0..20))).await;
        let valid_until = guard.valid_until();
        let _ = guard.release().await;
        self.plain
            .record(holder, start, valid_until, Instant::now());
    }

    /// A lock of `rl15`, detached, delivered twice around a node restart (the distlock spec's
    /// delayed restarts; handing_on.rs's scenario, on the soak's contended resource). The
    /// first resumer is cut off two nodes (those the lock is not on first), so its swap
    /// lands on the other three only; one of them, snapshot while it held the detached token,
    /// is killed and started again from that snapshot: the detached token holds three nodes
    /// again. The second delivery, through a handle connected after the restart, must not
    /// get a quorum while the first resumer holds it: the restarted node, in quarantine,
    /// refuses it, and `rl15`'s history (O1) sees no two holds at once. The snapshot is
    /// deleted once loaded (later crashes restart the node empty, as the fault model says).
    async fn resume_around_restart(&mut self, nodes: &mut RedisNodes, seed: u64) {
        let what = "resume around a restart";
        let mut rng = StdRng::seed_from_u64(seed);
        let Some(guard) = self.take(what, false).await else {
            return;
        };
        let key = guard.key().to_owned();
        let start = Instant::now();
        let Some(detached) = self.detach(what, guard, start) else {
            return;
        };
        let token = detached.token().expose().to_owned();
        let reader = Reader::open(nodes).await;
        let (_, held) = reader.read(&key).await;
        let on = holding(&held, &token);
        if on.len() < QUORUM {
            reader.close().await;
            self.report
                .skipped
                .push(format!("{what}: the lock held only nodes {on:?}"));
            let _ = self.handles[0].release_detached(detached).await;
            return;
        }
        let restarted = on[rng.random_range(0..on.len())];
        // The first resumer's cut: the nodes the lock is not on, then others it is on.
        let mut cut: Vec<usize> = (0..NODES).filter(|n| !on.contains(n)).collect();
        let mut others: Vec<usize> = on.iter().copied().filter(|&n| n != restarted).collect();
        others.shuffle(&mut rng);
        cut.extend(others.into_iter().take(2 - cut.len()));
        // The restarted node's snapshot, while it holds the detached token.
        let _ = reader.command(restarted, "SAVE", Vec::new()).await;
        let dir = reader
            .command(restarted, "CONFIG", vec!["GET", "dir"])
            .await
            .into_array()
            .get(1)
            .and_then(Value::as_string)
            .unwrap_or_else(|| self.fail("CONFIG GET dir: no answer"));
        reader.close().await;
        for &n in &cut {
            self.proxies[1][n].partition();
        }
        let first = self.handles[1].resume(&detached).await;
        let first_at = Instant::now();
        for &n in &cut {
            self.proxies[1][n].heal();
        }
        let first = match first {
            Ok(guard) => guard,
            Err(error) => {
                let _ = std::fs::remove_file(std::path::Path::new(&dir).join("dump.rdb"));
                self.report.skipped.push(format!(
                    "{what}: the first resumption (cut off {cut:?}): {error}"
                ));
                let _ = self.handles[0].release_detached(detached).await;
                return;
            }
        };
        // The node back from its older snapshot, the detached token with it.
        nodes.servers[restarted].kill();
        nodes.servers[restarted].start_again();
        std::fs::remove_file(std::path::Path::new(&dir).join("dump.rdb"))
            .unwrap_or_else(|e| self.fail(&format!("removing node {restarted}'s snapshot: {e}")));
        // The second delivery, through a handle connected after the restart.
        let second_handle = hand_handle(&self.proxies[2]).await;
        let asked = Instant::now();
        let second = second_handle.resume(&detached).await;
        self.report.restarts += 1;
        match second {
            Ok(guard) => {
                self.report.second_held += 1;
                self.finish(HAND + 2, guard, asked).await;
            }
            Err(
                LockError::Lost { .. }
                | LockError::Unavailable { .. }
                | LockError::NoValidity { .. },
            ) => self.report.second_refused += 1,
            Err(error) => self.fail(&format!("{what}: the second resumption: {error}")),
        }
        drop(second_handle);
        self.finish(HAND + 1, first, first_at).await;
    }

    /// A lock of `rl15` (fenced or not), detached, its resumption spawned and aborted `after`
    /// it started (in its swap, its extension round, since the resumed ttl is longer than
    /// the keys have left, or its fencing round). Unless it returned first, the lock goes back
    /// to the detached token: each node it was on holds it again, no longer than it had it.
    /// The lock then resumes again: held, or refused as lost only once its keys ran out.
    /// Every hold of `rl15` goes into its history.
    async fn dropped_resume(&mut self, nodes: &RedisNodes, after: Duration, fenced: bool) {
        let what = "dropped resume";
        let Some(guard) = self.take(what, fenced).await else {
            return;
        };
        let key = guard.key().to_owned();
        let start = Instant::now();
        let Some(detached) = self.detach(what, guard, start) else {
            return;
        };
        let token = detached.token().expose().to_owned();
        let reader = Reader::open(nodes).await;
        let (t0, before) = reader.read(&key).await;
        let on = holding(&before, &token);
        let kept_until = t0 + ms(quorum_left(&before, &token));
        let longest = on.iter().map(|&n| before[n].1).max().unwrap_or(0);
        let spawned = Instant::now();
        let resuming = {
            let (redlock, detached) = (self.handles[1].clone(), detached.clone());
            tokio::spawn(async move { redlock.resume(&detached).await })
        };
        while spawned.elapsed() < after {
            tokio::task::yield_now().await;
        }
        resuming.abort();
        self.report.drops += 1;
        let first = match resuming.await {
            Err(error) if error.is_cancelled() => None,
            Err(error) => self.fail(&format!("{what}: the resumption panicked: {error}")),
            Ok(result) => {
                self.report.drops_returned += 1;
                Some(result)
            }
        };
        let first = match first {
            Some(Ok(guard)) => Some(guard),
            Some(Err(error @ LockError::Lost { .. }))
                if kept_until.saturating_duration_since(spawned) > ms(300) =>
            {
                self.fail(&format!(
                    "{what}: resuming a lock whose keys live on a quorum for {:?} more was \
                     refused: {error}",
                    kept_until.saturating_duration_since(spawned)
                ))
            }
            Some(Err(
                LockError::Lost { .. }
                | LockError::Unavailable { .. }
                | LockError::NoValidity { .. },
            )) => None,
            Some(Err(error)) => self.fail(&format!("{what}: the resumption: {error}")),
            None => {
                // The give-back: the detached token back on every node it was on (until its
                // key would expire there), no longer than it had it anywhere.
                let deadline = (spawned + Duration::from_secs(2)).min(kept_until - ms(100));
                loop {
                    let (t, now) = reader.read(&key).await;
                    let gone_by = i64::try_from(t.duration_since(t0).as_millis()).unwrap_or(0);
                    let back = on
                        .iter()
                        .all(|&n| now[n].0 == token || before[n].1 <= gone_by + 50);
                    if back {
                        if let Some(n) = (0..NODES)
                            .find(|&n| now[n].0 == token && now[n].1 > longest - gone_by + 5)
                        {
                            self.fail(&format!(
                                "{what}: the lock was given back to node {n} for {} ms, longer \
                                 than the {longest} ms it had {gone_by} ms before",
                                now[n].1
                            ));
                        }
                        self.report.drops_given_back += 1;
                        break;
                    }
                    if Instant::now() > deadline {
                        if kept_until.saturating_duration_since(spawned) > ms(500) {
                            self.fail(&format!(
                                "{what}: dropped after {after:?}, the resumption did not give \
                                 the lock back in {:?}: the detached token was on nodes {on:?}, \
                                 now {now:?}",
                                spawned.elapsed()
                            ));
                        }
                        self.report
                            .skipped
                            .push(format!("{what}: its keys ran out before the give-back"));
                        break;
                    }
                    tokio::time::sleep(ms(2)).await;
                }
                None
            }
        };
        reader.close().await;
        // Resumed again: held, or refused once it ran out (or once the first holds it).
        let asked = Instant::now();
        let again = self.handles[2].resume(&detached).await;
        let left = kept_until.saturating_duration_since(asked);
        match again {
            Ok(guard) if first.is_some() => {
                self.finish(HAND + 2, guard, asked).await;
                self.fail(&format!(
                    "{what}: resumed twice, by the resumption that returned before its drop and \
                     again"
                ));
            }
            Ok(guard) => {
                self.report.drops_resumed += 1;
                self.finish(HAND + 2, guard, asked).await;
            }
            Err(LockError::Lost { .. }) if first.is_some() => {}
            Err(error @ LockError::Lost { .. }) if left > ms(300) => self.fail(&format!(
                "{what}: dropped after {after:?}, the lock could not be resumed again though its \
                 keys live on a quorum for {left:?} more: {error}"
            )),
            Err(LockError::Lost { .. }) => self.report.drops_expired += 1,
            Err(LockError::Unavailable { .. } | LockError::NoValidity { .. }) => {}
            Err(error) => self.fail(&format!("{what}: resuming again: {error}")),
        }
        match first {
            Some(guard) => self.finish(HAND + 1, guard, spawned).await,
            None => {
                let _ = self.handles[0].release_detached(detached).await;
            }
        }
    }

    /// A force-release of [`FORCED`] whose requests reach nodes `late` `delay` late (the
    /// operator's own proxies), the holder's key there gone first as its expiry would have
    /// done: once every node answered its read and the prompt nodes no longer hold the
    /// holder, the next holder takes [`FORCED`] while the late delete is on its way. It keeps
    /// its key, through the late delete, on every node where it had it; a contender after it
    /// is refused (both holds go into [`FORCED`]'s history, O1); the broken holder's
    /// extension is refused.
    async fn late_force(&mut self, nodes: &RedisNodes, late: &[usize], delay: Duration) {
        let what = "late force";
        let key = self.handles[0].key_for(FORCED);
        let take = LockOptions::default()
            .ttl(TTL)
            .retry_delay(ms(20))
            .wait_timeout(ms(1500));
        let once = LockOptions::default().ttl(TTL).retry_count(0);
        let broken = match self.handles[0].lock_with(FORCED, &take).await {
            Ok(guard) => guard,
            Err(error) => {
                self.report.skipped.push(format!("{what}: {error}"));
                return;
            }
        };
        let token = broken.token().expose().to_owned();
        let reader = Reader::open(nodes).await;
        let (_, before) = reader.read(&key).await;
        let on = holding(&before, &token);
        let prompt: Vec<usize> = (0..NODES).filter(|n| !late.contains(n)).collect();
        if !prompt.iter().any(|n| on.contains(n)) {
            reader.close().await;
            self.report
                .skipped
                .push(format!("{what}: held only on the late nodes {on:?}"));
            return;
        }
        for &n in late {
            let _ = reader.eval(n, DELETE_IF, &key, &[&token]).await;
        }
        let replies: Vec<u64> = self
            .operator_proxies
            .iter()
            .map(|p| p.received(Direction::Reply))
            .collect();
        for &n in late {
            self.operator_proxies[n].set(Direction::Request, Fault::Delay(delay));
        }
        let forcing = {
            let operator = self.operator.clone();
            tokio::spawn(async move { operator.force_release(FORCED).await })
        };
        let started = Instant::now();
        // Every node answered the read (nothing else goes through these proxies), the late
        // ones no sooner than their delay; then the prompt nodes' deletes land.
        while !forcing.is_finished()
            && (started.elapsed() < delay
                || self
                    .operator_proxies
                    .iter()
                    .zip(&replies)
                    .any(|(p, before)| p.received(Direction::Reply) <= *before))
        {
            if started.elapsed() > STAGE_WITHIN {
                self.fail(&format!("{what}: the read took over {STAGE_WITHIN:?}"));
            }
            tokio::time::sleep(ms(1)).await;
        }
        while !forcing.is_finished() {
            let (_, now) = reader.read(&key).await;
            if prompt.iter().all(|&n| now[n].0 != token) {
                break;
            }
            if started.elapsed() > STAGE_WITHIN {
                self.fail(&format!(
                    "{what}: the prompt deletes took over {STAGE_WITHIN:?}"
                ));
            }
            tokio::time::sleep(ms(1)).await;
        }
        let in_flight = !forcing.is_finished();
        let next = self.handles[1].lock_with(FORCED, &once).await;
        let next_at = Instant::now();
        let (mid_t0, mid) = reader.read(&key).await;
        let report = tokio::time::timeout(STAGE_WITHIN, forcing)
            .await
            .unwrap_or_else(|_| self.fail(&format!("{what}: no answer in {STAGE_WITHIN:?}")))
            .unwrap();
        let (after_t0, after) = reader.read(&key).await;
        let after_by = Instant::now();
        for &n in late {
            self.operator_proxies[n].set(Direction::Request, Fault::Pass);
        }
        reader.close().await;
        self.report.forces += 1;
        match &report {
            Ok(report) if report.confirmed() && report.removed_any() => {}
            other => self.fail(&format!(
                "{what}: the force-release of a holder on nodes {on:?}: {other:?}"
            )),
        }
        if let Ok(next) = next {
            if in_flight {
                self.report.forces_next_held += 1;
            }
            // Its key lives on where it was, through the late delete.
            let next_token = next.token().expose().to_owned();
            let between = i64::try_from(after_by.duration_since(mid_t0).as_millis()).unwrap_or(0);
            for n in 0..NODES {
                if mid[n].0 == next_token && mid[n].1 > between + 5 {
                    if after[n].0 != next_token {
                        self.fail(&format!(
                            "{what}: the next holder lost its key on node {n} (nodes {late:?} \
                             {delay:?} late): {} ms left at the first read, then {:?} ({:?} \
                             after it)",
                            mid[n].1,
                            after[n],
                            after_t0.duration_since(mid_t0)
                        ));
                    }
                    if late.contains(&n) {
                        self.report.forces_kept += 1;
                    }
                }
            }
            let contender = self.handles[2].lock_with(FORCED, &once).await;
            let contender_at = Instant::now();
            match contender {
                Ok(guard) => {
                    let valid_until = guard.valid_until();
                    let _ = guard.release().await;
                    self.forced
                        .record(HAND + 2, contender_at, valid_until, Instant::now());
                }
                Err(_) => self.report.forces_contender_refused += 1,
            }
            let valid_until = next.valid_until();
            let _ = next.release().await;
            self.forced
                .record(HAND + 1, next_at, valid_until, Instant::now());
        }
        // The broken holder learns it at its next extension.
        match broken.extend(TTL).await {
            Ok(_) => self.fail(&format!(
                "{what}: the holder the force-release removed was extended"
            )),
            Err(LockError::Lost { .. } | LockError::Unavailable { .. }) => {}
            Err(error) => self.fail(&format!("{what}: extending the broken holder: {error}")),
        }
    }
}

fn env<T: std::str::FromStr>(name: &str) -> Option<T> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

/// One resource's oracles: the holds it saw and its fenced register.
#[derive(Clone)]
struct Oracles {
    history: Arc<History>,
    register: Register,
}

impl Oracles {
    async fn new(store: &RedisServer, resource: &str) -> Self {
        Self {
            history: Arc::new(History::new()),
            register: Register::new(store, resource).await,
        }
    }
}

/// What the clients of several resources saw.
#[derive(Debug, Default)]
struct ManyReport {
    /// Holds of both resources at once.
    holds: usize,
    busy: usize,
    unavailable: usize,
    no_validity: usize,
    /// Split votes that ran out of attempts: a lock of several can find its keys held by
    /// different holders on different nodes (a key handed over at different moments on each
    /// node, a paused node still holding a contender's key). Which answers are a split is
    /// `Split::of_keys`' own unit tests' to check.
    split: usize,
    other: Vec<String>,
}

/// The clients of several resources until `until`: each takes [`RESOURCES`] at once
/// (`lock_many_with`: plain, no fencing), holds them for 0–`max_hold` (stalled as the others
/// are), and records the hold in both resources' histories as a plain hold, which excludes
/// every other hold of either resource (O1 per resource). They write no register: a lock of
/// several takes no fencing token.
async fn many_load(
    clients: &[Redlock],
    (plain, rw): (&Oracles, &Oracles),
    options: &LockOptions,
    (until, max_hold): (Instant, Duration),
    stall: Option<(f64, Duration)>,
) -> ManyReport {
    let tasks: Vec<_> = clients
        .iter()
        .enumerate()
        .map(|(i, client)| {
            let (client, options) = (client.clone(), options.clone());
            let histories = [plain.history.clone(), rw.history.clone()];
            tokio::spawn(async move {
                let holder = CLIENTS + i;
                let mut report = ManyReport::default();
                while Instant::now() < until {
                    let guard = match client.lock_many_with(&RESOURCES, &options).await {
                        Ok(guard) => guard,
                        Err(error) => {
                            match error {
                                LockError::Busy { .. } => report.busy += 1,
                                LockError::Unavailable { .. } => report.unavailable += 1,
                                LockError::NoValidity { .. } => report.no_validity += 1,
                                LockError::SplitVote { .. } => report.split += 1,
                                other => report.other.push(other.to_string()),
                            }
                            tokio::time::sleep(ms(10)).await;
                            continue;
                        }
                    };
                    assert_eq!(guard.resources(), RESOURCES, "a lock of several");
                    let start = Instant::now();
                    let (hold, stall) = {
                        let mut rng = rand::rng();
                        let hold = rng.random_range(Duration::ZERO..max_hold);
                        let stall = stall.filter(|(p, _)| rng.random_bool(*p)).map(|(_, d)| d);
                        (hold, stall)
                    };
                    tokio::time::sleep(hold + stall.unwrap_or_default()).await;
                    let (valid_until, released) = (guard.valid_until(), Instant::now());
                    for history in &histories {
                        history.record(holder, start, valid_until, released);
                    }
                    report.holds += 1;
                    let _ = guard.release().await;
                }
                report
            })
        })
        .collect();
    let mut total = ManyReport::default();
    for task in tasks {
        let one = task.await.unwrap_or_else(|e| panic!("client task: {e}"));
        total.holds += one.holds;
        total.busy += one.busy;
        total.unavailable += one.unavailable;
        total.no_validity += one.no_validity;
        total.split += one.split;
        total.other.extend(one.other);
    }
    total
}

/// The three loads at once for `for_`: the exclusive lock on `rl15` from every one of the
/// first [`CLIENTS`], read/write modes on `rl15-rw` from the first [`RW_CLIENTS`], and both at
/// once from the [`MANY_CLIENTS`] after them.
async fn contend(
    clients: &[Redlock],
    plain: &Oracles,
    rw: &Oracles,
    for_: Duration,
    stall: Option<(f64, Duration)>,
) -> (Report, Report, ManyReport) {
    let until = Until::Deadline(Instant::now() + for_);
    let load = |resource: &str, writes| Load {
        resource: resource.into(),
        options: LockOptions::default()
            .ttl(TTL)
            .fencing(true)
            .retry_count(u32::MAX)
            .wait_timeout(Duration::from_secs(3)),
        max_hold: ms(20),
        until,
        fenced: true,
        stall,
        writes,
    };
    let (plain_load, rw_load) = (load("rl15", None), load("rl15-rw", Some(RW_WRITES)));
    let many_options = LockOptions::default()
        .ttl(TTL)
        .retry_count(u32::MAX)
        .wait_timeout(Duration::from_secs(3));
    let Until::Deadline(deadline) = until else {
        unreachable!("the soak runs to a deadline")
    };
    tokio::join!(
        workload::run(
            &clients[..CLIENTS],
            &plain_load,
            &plain.history,
            &plain.register
        ),
        workload::run(&clients[..RW_CLIENTS], &rw_load, &rw.history, &rw.register),
        many_load(
            &clients[CLIENTS..],
            (plain, rw),
            &many_options,
            (deadline, plain_load.max_hold),
            stall,
        ),
    )
}

/// RL-15. Pass: 0 overlapping holds (O1), and on the read/write resource no hold beside an
/// incompatible one while readers did share (the holds of both at once in both histories);
/// the clients of several resources got only the answers the contract allows; each fenced register equals the writes that
/// completed (O2, O3) and saw no token twice; throughput under the faults that leave every
/// client a fencing quorum (4 of 5) ≥ 50 % of the fault-free baseline measured first in the
/// same run (through the others a fenced lock is unavailable by design); the run stops by
/// itself; the seed is printed.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn rl15_nemesis_soak() {
    let minutes: f64 = env("RL15_MINUTES").unwrap_or(2.0);
    let seed: u64 = env("RL15_SEED").unwrap_or_else(|| rand::rng().random());
    eprintln!(
        "RL-15: seed {seed} (RL15_SEED={seed} replays the schedule), {minutes} min of faults"
    );
    let mut rng = StdRng::seed_from_u64(seed);

    let nodes = RedisNodes::start(NODES);
    let proxies: Vec<Vec<Proxy>> = (0..CLIENTS + MANY_CLIENTS)
        .map(|_| nodes.proxies())
        .collect();
    let clients: Vec<Redlock> = join_all(proxies.iter().map(|p| {
        Redlock::builder()
            .nodes(proxy_urls(p))
            .node_timeout(ms(50))
            .quarantine(TTL)
            .lock_options(LockOptions::default().ttl(TTL))
            .build()
    }))
    .await
    .into_iter()
    .map(Result::unwrap)
    .collect();
    let store = RedisServer::start();
    let plain = Oracles::new(&store, "rl15").await;
    let rw = Oracles::new(&store, "rl15-rw").await;
    let hand = HandOn::new(&nodes, plain.history.clone(), seed).await;
    let mut cluster = Cluster {
        nodes,
        proxies,
        hand,
    };

    // The fresh nodes are themselves in quarantine at first.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let baseline_for = Duration::from_secs(15);
    let (baseline, rw_baseline, many_baseline) =
        contend(&clients, &plain, &rw, baseline_for, None).await;
    let baseline_rate = baseline.successes() as f64 / baseline_for.as_secs_f64();

    let faulty_for = Duration::from_secs_f64(minutes * 60.0);
    let load = {
        let (clients, plain, rw) = (clients.clone(), plain.clone(), rw.clone());
        let stall = Some((0.002, TTL * 2));
        tokio::spawn(async move { contend(&clients, &plain, &rw, faulty_for, stall).await })
    };
    let faulty_start = Instant::now();
    let end = faulty_start + faulty_for;
    let mut episodes = Vec::new();
    // When fenced locks were unavailable by design: faults leaving fewer than 4 of 5 nodes.
    let mut no_fencing_quorum: Vec<(Instant, Instant)> = Vec::new();
    while Instant::now() + Duration::from_secs(2) < end {
        let fault = pick(&mut rng);
        // After a composed episode's restart the new cuts last `hold` (≥ 2 s): past the
        // restarted node's quarantine.
        let hold = ms(rng.random_range(2_000..8_000));
        let gap = ms(rng.random_range(500..2_000));
        let began = Instant::now();
        cluster.apply(&fault).await;
        if !fault.is_hand_on() {
            tokio::time::sleep(hold.min(end.saturating_duration_since(Instant::now()))).await;
        }
        cluster.heal();
        if !fault.leaves_a_fencing_quorum() {
            no_fencing_quorum.push((began, (Instant::now() + SETTLE).min(end)));
        }
        episodes.push(fault);
        tokio::time::sleep(gap.min(end.saturating_duration_since(Instant::now()))).await;
    }
    cluster.heal();
    let (faulty, rw_faulty, many_faulty) = load.await.unwrap();
    let faulty_rate = faulty.successes() as f64 / faulty_for.as_secs_f64();
    // Throughput while every client reached a fencing quorum: holds that started then.
    let unavailable: Duration = no_fencing_quorum.iter().map(|(a, b)| *b - *a).sum();
    let available_for = faulty_for.saturating_sub(unavailable);
    let available_holds = plain
        .history
        .holds()
        .iter()
        .filter(|h| h.start >= faulty_start)
        .filter(|h| {
            !no_fencing_quorum
                .iter()
                .any(|(a, b)| (*a..*b).contains(&h.start))
        })
        .count();
    let available_rate = available_holds as f64 / available_for.as_secs_f64().max(1.0);
    let baseline_holds = plain
        .history
        .holds()
        .iter()
        .filter(|h| h.start < faulty_start)
        .count();
    let baseline_hold_rate = baseline_holds as f64 / baseline_for.as_secs_f64();

    let overlaps = plain.history.overlaps();
    let value = plain.register.read().await;
    let completed = baseline.successes() + faulty.successes();
    let (conflicts, shared) = rw.history.mode_overlaps();
    let rw_value = rw.register.read().await;
    let rw_writes = rw_baseline.successes() + rw_faulty.successes();
    let rw_reads = rw_baseline.reads + rw_faulty.reads;
    eprintln!(
        "RL-15: {} episodes {:?}\n  baseline {:.1} holds/s; under faults {:.1} holds/s ({:.0} %); with a fencing quorum reachable ({:.0} s of {:.0} s) {:.1} holds/s ({:.0} %), {} fenced out, {} fencing violations, {} busy, {} unavailable, {} no validity, other {:?}\n  {} holds, {} overlaps, register {value} vs {completed} completed",
        episodes.len(),
        episodes,
        baseline_rate,
        faulty_rate,
        100.0 * faulty_rate / baseline_rate,
        available_for.as_secs_f64(),
        faulty_for.as_secs_f64(),
        available_rate,
        100.0 * available_rate / baseline_hold_rate,
        faulty.fenced_out,
        faulty.fencing_violations,
        faulty.busy,
        faulty.unavailable,
        faulty.no_validity,
        faulty.other,
        plain.history.len(),
        overlaps.len(),
    );
    eprintln!(
        "  read/write: {rw_reads} reads, {rw_writes} writes ({} fenced out, {} fencing violations, {} busy, {} unavailable, {} no validity, other {:?}), {shared} reader pairs shared, {} conflicts, register {rw_value}",
        rw_faulty.fenced_out,
        rw_faulty.fencing_violations,
        rw_faulty.busy,
        rw_faulty.unavailable,
        rw_faulty.no_validity,
        rw_faulty.other,
        conflicts.len(),
    );
    eprintln!(
        "  both at once (lock_many, {MANY_CLIENTS} clients): {} holds in the baseline, {} under faults ({} busy, {} unavailable, {} no validity, {} split, other {:?})",
        many_baseline.holds,
        many_faulty.holds,
        many_faulty.busy,
        many_faulty.unavailable,
        many_faulty.no_validity,
        many_faulty.split,
        many_faulty.other,
    );
    let hand = &cluster.hand;
    let forced_overlaps = hand.forced.overlaps();
    eprintln!(
        "  hand-on episodes: {:?}; {FORCED}: {} holds, {} overlaps",
        hand.report,
        hand.forced.len(),
        forced_overlaps.len(),
    );
    assert!(
        overlaps.is_empty(),
        "seed {seed}: overlapping holds {:?}",
        overlaps.first()
    );
    // Two resumers of one lock never held it at once (the history above holds both); the
    // next holder after a late force-release kept it from the contender after it.
    assert!(
        forced_overlaps.is_empty(),
        "seed {seed}: overlapping holds of {FORCED} {:?}",
        forced_overlaps.first()
    );
    assert_eq!(value, completed as i64, "seed {seed}: lost updates");
    let violations = [&baseline, &faulty, &rw_baseline, &rw_faulty].map(|r| r.fencing_violations);
    assert_eq!(
        violations, [0; 4],
        "seed {seed}: fencing tokens repeated or out of order (baseline, faults, rw baseline, rw faults)"
    );
    assert!(
        conflicts.is_empty(),
        "seed {seed}: holds beside incompatible ones {:?}",
        conflicts.first()
    );
    assert_eq!(rw_value, rw_writes as i64, "seed {seed}: lost writes");
    // A lock of several joins no waiter queue, and a key handed over to a queued waiter is
    // reserved for it: against 16 queued clients it is mostly refused as busy (or, with keys
    // handed over at different moments on different nodes, split), and holds when the queues
    // run dry (under faults). No rate is asked of it, only answers the contract
    // allows.
    let many_calls = |r: &ManyReport| r.holds + r.busy + r.unavailable + r.no_validity + r.split;
    assert!(
        many_calls(&many_baseline) > 0
            && many_calls(&many_faulty) > 0
            && many_baseline.other.is_empty()
            && many_faulty.other.is_empty(),
        "seed {seed}: the clients of several resources made no calls, or failed: {:?} {:?}",
        many_baseline.other,
        many_faulty.other
    );
    assert!(
        rw_reads > 0 && rw_writes > 0 && shared > 0,
        "seed {seed}: the read/write load made no progress"
    );
    // The lock keeps working: at half the fault-free rate or better whenever a fenced lock
    // can be had at all, and at some rate through the faults that leave fewer nodes.
    assert!(
        available_rate >= 0.5 * baseline_hold_rate,
        "seed {seed}: {available_rate:.1} holds/s under faults that leave a fencing quorum, baseline {baseline_hold_rate:.1}"
    );
    assert!(
        faulty.successes() > 0,
        "seed {seed}: no hold at all under faults"
    );
}
