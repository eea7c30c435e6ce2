//! RL-15, the randomized nemesis soak (reliability.md §7): 16 clients contend for one
//! resource, and 4 of them also for a second one in read/write lock modes, and 1 more takes
//! both at once (`lock_many`, checked in both resources' histories), while a seeded
//! nemesis crashes, stops, partitions and slows nodes, flushes their script caches, and
//! stalls holders, one fault at a time or composed: a node restarted empty while every client
//! loses its own minority of nodes, a different one before the crash and after the restart
//! (issue 15's fencing fault model). Three minutes in the normal test run;
//! `cargo xtask soak --minutes 30` for longer. `RL15_SEED` replays a run.

#![allow(clippy::unwrap_used, clippy::print_stderr)] // tests unwrap and report figures

use std::sync::Arc;
use std::time::{Duration, Instant};

use fred::interfaces::{ClientLike, LuaInterface};
use futures_util::future::join_all;
use rand::rngs::StdRng;
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
}

impl Nemesis {
    /// Whether every client still reaches a fencing quorum (4 of 5) through this fault: one
    /// node down, stopped, cut off or slowed past the node timeout. A fenced lock is
    /// unavailable by design through the others (redlock-core's docs, "Fencing tokens").
    fn leaves_a_fencing_quorum(&self) -> bool {
        match self {
            Self::Crash(..) | Self::FlushScripts => true,
            Self::Pause(nodes) | Self::Partition(nodes) | Self::SlowReplies(nodes, _) => {
                nodes.len() == 1
            }
            Self::Ring | Self::CrashAndCuts { .. } => false,
        }
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
    match rng.random_range(0..7) {
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
                    // The operator's connection is named as a handle's and closed at once: left
                    // open and unnamed, it would count as a foreign client for the rest of the
                    // run, and windows for foreign clients would open that the fault-free
                    // baseline never had.
                    let operator = plain_client(&url).await;
                    let name = fred::types::CustomCommand::new_static(
                        "CLIENT",
                        fred::types::ClusterHash::FirstKey,
                        false,
                    );
                    let _: Result<(), _> =
                        operator.custom(name, vec!["SETNAME", "redlock-rs"]).await;
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
    let minutes: f64 = env("RL15_MINUTES").unwrap_or(3.0);
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
    let mut cluster = Cluster { nodes, proxies };
    let store = RedisServer::start();
    let plain = Oracles::new(&store, "rl15").await;
    let rw = Oracles::new(&store, "rl15-rw").await;

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
        tokio::time::sleep(hold.min(end.saturating_duration_since(Instant::now()))).await;
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
        "  both at once (lock_many, {MANY_CLIENTS} clients): {} holds in the baseline, {} under faults ({} busy, {} unavailable, {} no validity, other {:?})",
        many_baseline.holds,
        many_faulty.holds,
        many_faulty.busy,
        many_faulty.unavailable,
        many_faulty.no_validity,
        many_faulty.other,
    );
    assert!(
        overlaps.is_empty(),
        "seed {seed}: overlapping holds {:?}",
        overlaps.first()
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
    // reserved for it: against 16 queued clients it is mostly refused as busy, and holds when
    // the queues run dry (under faults). No rate is asked of it, only answers the contract
    // allows.
    let many_calls = |r: &ManyReport| r.holds + r.busy + r.unavailable + r.no_validity;
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
