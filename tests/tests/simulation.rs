//! The lock's own code under simulation: clients of redlock-core, with their waiters and
//! auto-extension, on one current-thread runtime with tokio's clock paused, over five
//! in-memory nodes (redlock-test's `MemoryNodes`, the model's mirror of the scripts behind
//! the transport seam), while a seeded schedule of faults runs beside them: replies made
//! late (past the node timeout or not), nodes stopped and started, nodes restarted empty
//! (the quarantine on, as the guide asks where nodes run without persistence).
//!
//! Every hold is recorded by its client, from the moment its lock call returned to its
//! release or the end of its validity, whichever came first, and the interval checker (O1)
//! finds any two that overlap. Each seed is 60 s of simulated time in about half a second of
//! real time; `SIM_SEEDS` sets how many seeds run (default [`SEEDS`]). A failure names its
//! seed, which fixes the faults and the clients' holds; the run is not replayed exactly (the
//! lock's own jitter and tokio's `select!` draw from unseeded randomness).
//!
//! A negative control runs the same schedule without the quarantine: a node restarted empty
//! must then vote a second holder in within the seeds, or the simulation could not see one.
//!
//! Not simulated: clock jumps beyond the drift allowance (outside Redlock's assumptions), a
//! network that reorders messages on one connection (never, over TCP), and foreign clients.

#![allow(clippy::unwrap_used)] // tests unwrap: a failure is the assertion

use std::sync::Arc;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use redlock_core::{LockOptions, Redlock};
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
}

/// One seed: clients and faults for [`RUN`] of simulated time; `quarantine` as the handles'.
fn simulate(seed: u64, quarantine: Duration) -> Run {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .unwrap();
    runtime.block_on(async move {
        let nodes = MemoryNodes::new(NODES);
        let options = LockOptions::default()
            .ttl(TTL)
            .retry_delay(ms(50))
            .wait_timeout(ms(3_000))
            .auto_extend(true);
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
                let history = Arc::clone(&history);
                let mut rng = StdRng::seed_from_u64(seed * 1_000 + client as u64);
                tokio::spawn(async move {
                    while Instant::now() < until {
                        match lock.lock("sim").await {
                            Ok(guard) => {
                                let start = Instant::now();
                                // Some holds outlive their ttl: auto-extension keeps them.
                                let hold = ms(rng.random_range(0..1_500));
                                tokio::time::sleep(hold).await;
                                let released = Instant::now();
                                history.record(client, start, guard.valid_until(), released);
                                let _ = guard.release().await;
                            }
                            Err(_) => tokio::time::sleep(ms(rng.random_range(1..100))).await,
                        }
                        tokio::time::sleep(ms(rng.random_range(0..50))).await;
                    }
                })
            })
            .collect();
        let faults = {
            let nodes = nodes.clone();
            let mut rng = StdRng::seed_from_u64(seed);
            tokio::spawn(async move {
                while Instant::now() < until {
                    tokio::time::sleep(ms(rng.random_range(20..300))).await;
                    let node = rng.random_range(0..NODES);
                    match rng.random_range(0..20) {
                        0..=5 => nodes.delay(node, ms(rng.random_range(0..250))),
                        6 | 7 => nodes.delay(node, Duration::ZERO),
                        8..=11 => nodes.stop(node),
                        12..=16 => nodes.start(node),
                        _ => nodes.restart(node),
                    }
                }
                for node in 0..NODES {
                    nodes.delay(node, Duration::ZERO);
                    nodes.start(node);
                }
            })
        };
        for client in clients {
            client.await.unwrap();
        }
        faults.await.unwrap();
        let overlaps = history.overlaps();
        Run {
            holds: history.len(),
            overlaps: overlaps.len(),
            first_overlap: overlaps
                .first()
                .map(|o| format!("{o:?}"))
                .unwrap_or_default(),
        }
    })
}

fn seeds() -> u64 {
    std::env::var("SIM_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(SEEDS)
}

/// No two holds overlap, whatever the seed; and the clients do get the lock.
#[test]
fn no_two_holders_under_seeded_faults() {
    let mut holds = 0;
    for seed in 0..seeds() {
        let run = simulate(seed, TTL);
        assert_eq!(
            run.overlaps, 0,
            "seed {seed}: two holders at once: {}",
            run.first_overlap
        );
        assert!(run.holds > 0, "seed {seed}: no client ever held the lock");
        holds += run.holds;
    }
    eprintln!("{holds} holds over {} seeds, none overlapping", seeds());
}

/// The simulation can find two holders: without the quarantine, a node restarted empty
/// votes a second holder in beside the first in some seed.
#[test]
fn without_the_quarantine_some_seed_finds_two_holders() {
    let found = (0..seeds()).find(|&seed| simulate(seed, Duration::ZERO).overlaps > 0);
    assert!(
        found.is_some(),
        "no seed of {} found two holders without the quarantine",
        seeds()
    );
}
