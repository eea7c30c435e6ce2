//! The lock's own code under simulation: clients of redlock-core, with their waiters and
//! auto-extension, on one current-thread runtime with tokio's clock paused, over five
//! in-memory nodes (redlock-test's `MemoryNodes`, the model's mirror of the scripts behind
//! the transport seam), while a seeded schedule of faults runs beside them: commands and
//! replies made late (past the node timeout or not: a command can land after its round was
//! decided), commands and replies lost, nodes stopped and started, nodes restarted empty
//! (the quarantine on, as the guide asks where nodes run without persistence). Each
//! handle's link to a node keeps its commands and replies in order, as a connection does.
//!
//! Every hold is recorded by its client, from the moment its lock call returned to its
//! release or the end of its validity, whichever came first, and the interval checker (O1)
//! finds any two that overlap. Each seed is 60 s of simulated time in about half a second of
//! real time; `SIM_SEEDS` sets how many seeds run (default [`SEEDS`]), `SIM_SEED` runs one.
//!
//! A run replays exactly from its seed: the thread is seeded
//! (`redlock_core::simulation::seed`), so the lock's tokens, waiter markers, jitter and wall
//! clock come from the seed, and the lock's `select!`s poll in a fixed order. Each run keeps
//! a transcript (every client's grants, with their tokens and validities, refusals and
//! releases, to the nanosecond of the simulated clock), and a test runs seeds twice and
//! compares them. A failure names its seed and the command that replays it.
//!
//! A negative control runs the same schedule without the quarantine: a node restarted empty
//! must then vote a second holder in within the seeds, or the simulation could not see one.
//!
//! Not simulated: clock jumps beyond the drift allowance (outside Redlock's assumptions), a
//! network that reorders messages on one connection (never, over TCP), and foreign clients.

#![allow(clippy::unwrap_used)] // tests unwrap: a failure is the assertion

use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use redlock_core::{LockInfo, LockOptions, Redlock};
use redlock_test::MemoryNodes;
use redlock_tests::checker::History;
use tokio::time::Instant;

/// Seeds run by default (each about half a second of a debug build).
const SEEDS: u64 = 20;
/// Simulated time per seed.
const RUN: Duration = Duration::from_secs(60);
const TTL: Duration = Duration::from_millis(1_000);
const NODES: usize = 5;
const CLIENTS: usize = 4;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// What one seed's run saw.
#[derive(Debug)]
struct Run {
    holds: usize,
    overlaps: usize,
    first_overlap: String,
    /// Every client's grants, refusals and releases, in the order they happened, each at its
    /// time on the simulated clock.
    transcript: Vec<String>,
    /// What the oracles on the public views found, each at the event that found it.
    violations: Vec<String>,
}

/// How the handles of a run lock.
#[derive(Debug, Clone, Copy)]
struct Setup {
    /// The handles' quarantine.
    quarantine: Duration,
    /// Each lock with a fencing token.
    fencing: bool,
    /// Only latency: commands and replies late (within the node timeout, so that they
    /// count), nothing stopped, lost or restarted; the lock's timing is then what decides.
    latency_only: bool,
    /// The nodes that may be restarted empty (the first this many): fencing tokens increase
    /// while fewer than `2F − N` nodes (3 of 5) lose their data between two holders.
    restartable: usize,
}

impl Setup {
    const SAFE: Self = Self {
        quarantine: TTL,
        fencing: false,
        latency_only: false,
        restartable: NODES,
    };
}

/// What the clients of a run share: the transcript, and the oracles that read the public
/// views at every event.
struct Observed {
    began: Instant,
    transcript: Vec<String>,
    /// Each client's view of the lock it holds (`LockInfo`), from its grant until its release
    /// returned, and its token.
    views: Vec<Option<LockInfo>>,
    tokens: Vec<Option<String>>,
    /// The highest fencing token granted so far.
    highest_token: Option<u64>,
    violations: Vec<String>,
    /// The nodes, read by the view-against-nodes oracle where no node loses its data.
    nodes: MemoryNodes,
    /// Whether that oracle runs: no node is stopped, restarted or loses a command.
    against_nodes: bool,
}

impl Observed {
    /// Notes `event` of `client` and checks the views: at no event do two clients' views
    /// claim the lock valid.
    fn note(&mut self, client: usize, event: String) {
        let at = Instant::now().duration_since(self.began).as_nanos();
        let line = format!("{at} c{client} {event}");
        let valid: Vec<usize> = (0..self.views.len())
            .filter(|&c| self.views[c].as_ref().is_some_and(LockInfo::is_valid))
            .collect();
        if valid.len() > 1 {
            self.violations.push(format!(
                "at {line}: clients {valid:?} each view the lock as valid"
            ));
        }
        if self.against_nodes {
            self.check_against_nodes(&line, &valid);
        }
        self.transcript.push(line);
    }

    /// Where no node loses its data: a client whose view is valid has its token on a quorum
    /// of nodes, each key's ttl covering the validity its view has left (a validity counted
    /// too late shows here at its grant, whoever else attempts).
    fn check_against_nodes(&mut self, line: &str, valid: &[usize]) {
        let (values, pttls) = (self.nodes.values("sim"), self.nodes.pttls("sim"));
        for &client in valid {
            let Some(info) = &self.views[client] else {
                continue;
            };
            let Some(token) = &self.tokens[client] else {
                continue;
            };
            let left = info.remaining_validity().as_millis();
            let covering = (0..values.len())
                .filter(|&n| {
                    values[n].as_deref() == Some(token.as_str())
                        && u128::try_from(pttls[n]).is_ok_and(|ttl| ttl >= left)
                })
                .count();
            if covering < self.nodes.quorum() {
                self.violations.push(format!(
                    "at {line}: client {client} views {left} ms of validity left, but only \
                     {covering} nodes hold its token that long ({values:?}, {pttls:?})"
                ));
            }
        }
    }

    /// A fault the schedule made on `node`.
    fn fault(&mut self, node: usize, fault: &str) {
        let at = Instant::now().duration_since(self.began).as_nanos();
        self.transcript.push(format!("{at} node {node} {fault}"));
    }

    /// A grant to `client`: its view, and its fencing token, which must be above every token
    /// granted before it (tokens increase in the real-time order of the grants).
    fn granted(&mut self, client: usize, info: LockInfo, token: &str) {
        let fencing = info.fencing_token();
        let until = info.valid_until().duration_since(self.began).as_nanos();
        if let Some(fencing) = fencing {
            if self.highest_token.is_some_and(|highest| fencing <= highest) {
                self.violations.push(format!(
                    "client {client} granted fencing token {fencing} after {:?}",
                    self.highest_token
                ));
            }
            self.highest_token = self.highest_token.max(Some(fencing));
        }
        self.views[client] = Some(info);
        self.tokens[client] = Some(token.to_owned());
        self.note(
            client,
            format!("holds {token} until {until} fencing {fencing:?}"),
        );
    }
}

/// What a failure at `seed` of `test` says: the seed, and how to run it alone.
fn replay(seed: u64, test: &str) -> String {
    format!(
        "seed {seed} (replay: SIM_SEED={seed} cargo nextest run -p redlock-tests --test simulation --run-ignored all -E 'test({test})')"
    )
}

/// One seed: clients and faults for [`RUN`] of simulated time, the handles set up as `setup`.
fn simulate(seed: u64, setup: Setup) -> Run {
    // Printed first: a run that panics or hangs still names its seed.
    eprintln!("simulating seed {seed}, {setup:?}");
    let Setup {
        quarantine,
        fencing,
        latency_only,
        restartable,
    } = setup;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .unwrap();
    runtime.block_on(async move {
        // One generator per stream (the lock's draws, each client's, the faults'), each drawn
        // from the seed's own: no two streams repeat each other.
        let mut streams = StdRng::seed_from_u64(seed);
        let _seed = redlock_core::simulation::seed(streams.random());
        let client_seeds: Vec<u64> = (0..CLIENTS).map(|_| streams.random()).collect();
        let fault_seed: u64 = streams.random();
        let nodes = MemoryNodes::new(NODES);
        let observed = Arc::new(Mutex::new(Observed {
            began: Instant::now(),
            transcript: Vec::new(),
            views: vec![None; CLIENTS],
            tokens: vec![None; CLIENTS],
            highest_token: None,
            violations: Vec::new(),
            nodes: nodes.clone(),
            against_nodes: latency_only,
        }));
        let options = LockOptions::default()
            .ttl(TTL)
            .retry_delay(ms(50))
            .wait_timeout(ms(3_000))
            .fencing(fencing);
        let handle = || {
            nodes
                .builder()
                .quarantine(quarantine)
                .lock_options(options.clone())
                .build()
        };
        // Two handles, two clients on each: their waiters share a handle's subscriptions.
        let handles: Vec<Redlock> = vec![handle().await.unwrap(), handle().await.unwrap()];
        // The quarantine first sees each node: it trusts none for a ttl.
        tokio::time::sleep(quarantine + ms(10)).await;
        let history = Arc::new(History::new());
        let until = Instant::now() + RUN;
        let clients: Vec<_> = (0..CLIENTS)
            .map(|client| {
                let lock = handles[client % handles.len()].clone();
                let options = options.clone();
                let history = Arc::clone(&history);
                let observed = Arc::clone(&observed);
                let mut rng = StdRng::seed_from_u64(client_seeds[client]);
                tokio::spawn(async move {
                    while Instant::now() < until {
                        // Even clients keep their lock alive (auto-extension), odd ones
                        // extend it once by hand; each stops its work when the lock is lost,
                        // as `with_lock` does, a millisecond before the validity's end (not
                        // the default tenth of the ttl, which would hide a validity counted a
                        // node timeout too late).
                        let options = options
                            .clone()
                            .auto_extend(client % 2 == 0)
                            .lost_margin(ms(1));
                        match lock.lock_with("sim", &options).await {
                            Ok(guard) => {
                                let start = Instant::now();
                                observed.lock().unwrap().granted(
                                    client,
                                    guard.info(),
                                    guard.token().expose(),
                                );
                                // Some holds outlive their ttl: auto-extension keeps them.
                                let hold = ms(rng.random_range(0..1_500));
                                if client % 2 == 1 {
                                    // One extension by hand, somewhere in the first half of
                                    // the ttl; the hold then runs on its validity.
                                    let after = ms(rng.random_range(0..500));
                                    let _lost = guard.until_lost(tokio::time::sleep(after)).await;
                                    let _refused = guard.extend(TTL).await;
                                }
                                let _lost = guard.until_lost(tokio::time::sleep(hold)).await;
                                let released = Instant::now();
                                history.record(client, start, guard.valid_until(), released);
                                let released = guard.release().await;
                                let mut observed = observed.lock().unwrap();
                                observed.views[client] = None;
                                observed.tokens[client] = None;
                                observed.note(client, format!("released: {:?}", released.is_ok()));
                            }
                            Err(error) => {
                                observed
                                    .lock()
                                    .unwrap()
                                    .note(client, format!("refused: {error}"));
                                tokio::time::sleep(ms(rng.random_range(1..100))).await;
                            }
                        }
                        tokio::time::sleep(ms(rng.random_range(0..50))).await;
                    }
                })
            })
            .collect();
        let faults = {
            let nodes = nodes.clone();
            let observed = Arc::clone(&observed);
            let mut rng = StdRng::seed_from_u64(fault_seed);
            tokio::spawn(async move {
                while Instant::now() < until {
                    tokio::time::sleep(ms(rng.random_range(20..300))).await;
                    let node = rng.random_range(0..NODES);
                    let fault = if latency_only {
                        let late = rng.random_range(0..90);
                        if rng.random_bool(0.5) {
                            nodes.delay(node, ms(late));
                            format!("replies {late} ms late")
                        } else {
                            nodes.delay_requests(node, ms(late));
                            format!("commands {late} ms late")
                        }
                    } else {
                        faulty(&nodes, node, &mut rng, restartable)
                    };
                    observed.lock().unwrap().fault(node, &fault);
                }
                for node in 0..NODES {
                    nodes.delay(node, Duration::ZERO);
                    nodes.delay_requests(node, Duration::ZERO);
                    nodes.lose_requests(node, 0);
                    nodes.lose_replies(node, 0);
                    nodes.start(node);
                }
            })
        };
        for client in clients {
            client.await.unwrap();
        }
        faults.await.unwrap();
        let overlaps = history.overlaps();
        let mut observed = observed.lock().unwrap();
        Run {
            holds: history.len(),
            overlaps: overlaps.len(),
            first_overlap: overlaps
                .first()
                .map(|o| format!("{o:?}"))
                .unwrap_or_default(),
            transcript: std::mem::take(&mut observed.transcript),
            violations: std::mem::take(&mut observed.violations),
        }
    })
}

/// One fault of the full schedule on `node`, and what it was.
fn faulty(nodes: &MemoryNodes, node: usize, rng: &mut StdRng, restartable: usize) -> String {
    match rng.random_range(0..22) {
        0..=3 => {
            let late = rng.random_range(0..250);
            nodes.delay(node, ms(late));
            format!("replies {late} ms late")
        }
        4 => {
            nodes.delay(node, Duration::ZERO);
            "replies on time".to_owned()
        }
        5..=7 => {
            let late = rng.random_range(0..250);
            nodes.delay_requests(node, ms(late));
            format!("commands {late} ms late")
        }
        8 => {
            nodes.delay_requests(node, Duration::ZERO);
            "commands on time".to_owned()
        }
        9 => {
            let lost = rng.random_range(1..4);
            nodes.lose_requests(node, lost);
            format!("loses {lost} commands")
        }
        10 => {
            let lost = rng.random_range(1..4);
            nodes.lose_replies(node, lost);
            format!("loses {lost} replies")
        }
        11..=13 => {
            nodes.stop(node);
            "stopped".to_owned()
        }
        14..=17 => {
            nodes.start(node);
            "started".to_owned()
        }
        _ if node < restartable => {
            nodes.restart(node);
            "restarted empty".to_owned()
        }
        _ => {
            nodes.stop(node);
            "stopped".to_owned()
        }
    }
}

/// The seeds to run: `SIM_SEED` alone, or `SIM_SEEDS` of them (default [`SEEDS`]) from
/// `SIM_SEED_BASE` (default 0; the soak draws one).
fn seeds() -> std::ops::Range<u64> {
    let var = |name: &str| std::env::var(name).ok().and_then(|s| s.parse::<u64>().ok());
    match var("SIM_SEED") {
        Some(seed) => seed..seed.saturating_add(1),
        None => {
            let base = var("SIM_SEED_BASE").unwrap_or(0);
            base..base.saturating_add(var("SIM_SEEDS").unwrap_or(SEEDS))
        }
    }
}

/// No two holds overlap, whatever the seed; and the clients do get the lock.
#[test]
fn no_two_holders_under_seeded_faults() {
    let mut holds = 0;
    for seed in seeds() {
        let run = simulate(seed, Setup::SAFE);
        assert_eq!(
            run.violations,
            Vec::<String>::new(),
            "{}",
            replay(seed, "no_two_holders_under_seeded_faults")
        );
        assert_eq!(
            run.overlaps,
            0,
            "{}: two holders at once: {}",
            replay(seed, "no_two_holders_under_seeded_faults"),
            run.first_overlap
        );
        assert!(
            run.holds > 0,
            "{}: no client ever held the lock",
            replay(seed, "no_two_holders_under_seeded_faults")
        );
        holds += run.holds;
    }
    eprintln!(
        "{holds} holds over {} seeds, none overlapping",
        seeds().count()
    );
}

/// A seed replays exactly: two runs of it make the same transcript, grant for grant and token
/// for token, to the nanosecond; and another seed makes another one (the transcript does
/// depend on the seed).
#[test]
fn a_seed_replays_exactly() {
    let fenced = Setup {
        fencing: true,
        restartable: 2,
        ..Setup::SAFE
    };
    let latency = Setup {
        latency_only: true,
        ..Setup::SAFE
    };
    for setup in [Setup::SAFE, fenced, latency] {
        let mut seen = Vec::new();
        for seed in seeds().take(3) {
            let failure = format!("{}, {setup:?}", replay(seed, "a_seed_replays_exactly"));
            let first = simulate(seed, setup).transcript;
            let again = simulate(seed, setup).transcript;
            assert!(first.len() > 10, "{failure}: a short transcript: {first:?}");
            if let Some(at) =
                (0..first.len().max(again.len())).find(|&i| first.get(i) != again.get(i))
            {
                panic!(
                    "{failure}: the run did not replay: event {at} was {:?}, then {:?}",
                    first.get(at),
                    again.get(at)
                );
            }
            assert!(
                !seen.contains(&first),
                "{failure}: the same transcript as another seed"
            );
            seen.push(first);
        }
    }
}

/// The simulation can find two holders: without the quarantine, a node restarted empty
/// votes a second holder in beside the first in some seed.
#[test]
fn without_the_quarantine_some_seed_finds_two_holders() {
    let unsafe_setup = Setup {
        quarantine: Duration::ZERO,
        ..Setup::SAFE
    };
    // Both oracles see it: the intervals overlap, and two views claim the lock at once.
    let found = seeds().find(|&seed| {
        let run = simulate(seed, unsafe_setup);
        run.overlaps > 0
            && run
                .violations
                .iter()
                .any(|v| v.contains("each view the lock"))
    });
    assert!(
        found.is_some(),
        "no seed of {:?} found two holders without the quarantine",
        seeds()
    );
}

/// With fencing tokens: no two holders, no two valid views, and every token granted is above
/// every token granted before it, whatever the seed, while at most 2 of the 5 nodes are ever
/// restarted empty (fewer than `2F − N`, the scheme's fault model).
#[test]
fn fencing_tokens_increase_under_seeded_faults() {
    let setup = Setup {
        fencing: true,
        restartable: 2,
        ..Setup::SAFE
    };
    let mut holds = 0;
    for seed in seeds() {
        let run = simulate(seed, setup);
        assert_eq!(
            run.violations,
            Vec::<String>::new(),
            "{}",
            replay(seed, "fencing_tokens_increase_under_seeded_faults")
        );
        assert_eq!(
            run.overlaps,
            0,
            "{}: {}",
            replay(seed, "fencing_tokens_increase_under_seeded_faults"),
            run.first_overlap
        );
        holds += run.holds;
    }
    assert!(holds > 0, "no fenced lock was ever granted");
}

/// The fencing oracle can fail: with every node restarted empty now and then (3 or more of
/// 5 losing their data between two holders, outside the scheme's fault model), some seed
/// grants a token that is not above an earlier one.
#[test]
fn fencing_beyond_its_fault_model_some_seed_finds_a_token_that_did_not_increase() {
    let setup = Setup {
        fencing: true,
        ..Setup::SAFE
    };
    let found = seeds().find(|&seed| {
        simulate(seed, setup)
            .violations
            .iter()
            .any(|v| v.contains("fencing token"))
    });
    assert!(
        found.is_some(),
        "no seed of {:?} found a fencing token that did not increase",
        seeds()
    );
}

/// Known-bad variants of the lock's own code (not of a model), each applied to its source by
/// `cargo xtask flaws`, which runs this test and expects it to fail at some seed: a
/// latency-only schedule, where holds run to a millisecond before the validity's end, so
/// that a validity counted too late shows as two holders.
#[test]
#[ignore = "run by `cargo xtask flaws` against known-bad variants of redlock-core"]
fn a_flawed_lock_is_caught() {
    let setup = Setup {
        latency_only: true,
        ..Setup::SAFE
    };
    for seed in seeds() {
        for setup in [setup, Setup::SAFE] {
            let run = simulate(seed, setup);
            let failure = format!("{}, {setup:?}", replay(seed, "a_flawed_lock_is_caught"));
            assert_eq!(run.violations, Vec::<String>::new(), "{failure}");
            assert_eq!(run.overlaps, 0, "{failure}: {}", run.first_overlap);
        }
    }
}
