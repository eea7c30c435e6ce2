//! The contended workload of the reliability scenarios (reliability.md §7, RL-01): clients
//! take one resource in turn, hold it for a random 0–`max_hold`, increment the register
//! inside, and record every hold in the [`History`]. With [`Load::writes`], they take it in
//! lock modes instead: writers (EX) increment the register, readers (PR) only hold.

use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

use rand::Rng;
use redlock_core::{LockError, LockOptions, Mode, Redlock};

use crate::checker::{Fenced, History, Register};

/// How long each client keeps going.
#[derive(Debug, Clone, Copy)]
pub enum Until {
    /// This many successful critical sections per client.
    Successes(usize),
    /// Until this instant (the soak).
    Deadline(Instant),
}

/// The workload's settings.
#[derive(Debug, Clone)]
pub struct Load {
    /// The resource every client contends for.
    pub resource: String,
    /// Options of every lock call.
    pub options: LockOptions,
    /// Longest hold; each hold is uniform in `[0, max_hold)`.
    pub max_hold: Duration,
    /// When to stop.
    pub until: Until,
    /// Fence the register's read and write with the lock's fencing token (needs
    /// `options.fencing(true)`).
    pub fenced: bool,
    /// Each hold stalls for this long with this probability, a stand-in for a holder's GC
    /// pause (the soak); `None` for none.
    pub stall: Option<(f64, Duration)>,
    /// Lock modes: each lock call is a write ([`Mode::Exclusive`]) with this probability,
    /// otherwise a read ([`Mode::ProtectedRead`]); `None`: every call uses `options` as is.
    pub writes: Option<f64>,
}

impl Load {
    /// RL-01's load: holds of 0–20 ms, `successes` per client, waiting up to 30 s per lock.
    pub fn contended(resource: &str, successes: usize) -> Self {
        Self {
            resource: resource.to_owned(),
            options: LockOptions::default()
                .ttl(Duration::from_secs(1))
                .retry_count(u32::MAX)
                .wait_timeout(Duration::from_secs(30)),
            max_hold: Duration::from_millis(20),
            until: Until::Successes(successes),
            fenced: false,
            stall: None,
            writes: None,
        }
    }
}

/// What a workload run saw.
#[derive(Debug, Default)]
pub struct Report {
    /// Critical sections completed (register incremented), per client.
    pub per_client: Vec<usize>,
    /// Read holds completed (a load in lock modes).
    pub reads: usize,
    /// Lock calls that failed, by error: busy.
    pub busy: usize,
    /// … too few nodes answered.
    pub unavailable: usize,
    /// … a quorum granted too late.
    pub no_validity: usize,
    /// … any other error (printed).
    pub other: Vec<String>,
    /// Critical sections whose fenced increment was refused (a newer holder got there).
    pub fenced_out: usize,
    /// Fencing violations: a token the storage had already seen from another holder, or one
    /// it refused as stale while its holder was still valid (no later holder can exist yet,
    /// so a higher token came out of order).
    pub fencing_violations: usize,
    /// Time from each successful lock call to its return.
    pub latencies: Vec<Duration>,
}

impl Report {
    /// Critical sections completed.
    pub fn successes(&self) -> usize {
        self.per_client.iter().sum()
    }

    /// Lock calls made.
    pub fn attempts(&self) -> usize {
        self.latencies.len() + self.busy + self.unavailable + self.no_validity + self.other.len()
    }

    /// The `q` quantile of the successful lock calls' latencies.
    pub fn latency(&self, q: f64) -> Duration {
        let mut sorted = self.latencies.clone();
        sorted.sort();
        let index = ((sorted.len() as f64 - 1.0) * q).round() as usize;
        sorted.get(index).copied().unwrap_or_default()
    }
}

/// Runs `load` with one task per handle in `clients`; returns once every client stopped.
pub async fn run(
    clients: &[Redlock],
    load: &Load,
    history: &Arc<History>,
    register: &Register,
) -> Report {
    let tasks: Vec<_> = clients
        .iter()
        .enumerate()
        .map(|(id, client)| {
            let (client, load) = (client.clone(), load.clone());
            let (history, register) = (history.clone(), register.clone());
            tokio::spawn(async move { one_client(id, &client, &load, &history, &register).await })
        })
        .collect();
    let mut report = Report::default();
    for task in tasks {
        let client = task.await.unwrap_or_else(|e| panic!("client task: {e}"));
        report.per_client.push(client.per_client[0]);
        report.reads += client.reads;
        report.busy += client.busy;
        report.unavailable += client.unavailable;
        report.no_validity += client.no_validity;
        report.other.extend(client.other);
        report.fenced_out += client.fenced_out;
        report.fencing_violations += client.fencing_violations;
        report.latencies.extend(client.latencies);
    }
    report
}

async fn one_client(
    id: usize,
    client: &Redlock,
    load: &Load,
    history: &History,
    register: &Register,
) -> Report {
    let mut report = Report {
        per_client: vec![0],
        ..Report::default()
    };
    loop {
        let done = match load.until {
            Until::Successes(n) => report.per_client[0] >= n,
            Until::Deadline(at) => Instant::now() >= at,
        };
        if done {
            return report;
        }
        let mode = load.writes.map(|p| {
            if rand::rng().random_bool(p) {
                Mode::Exclusive
            } else {
                Mode::ProtectedRead
            }
        });
        let called = Instant::now();
        let locked = crate::lock_as(client, &load.resource, mode, &load.options).await;
        let guard = match locked {
            Ok(guard) => guard,
            Err(error) => {
                match error {
                    LockError::Busy { .. } => report.busy += 1,
                    LockError::Unavailable { .. } => report.unavailable += 1,
                    LockError::NoValidity { .. } => report.no_validity += 1,
                    other => report.other.push(other.to_string()),
                }
                // A failed call waits a little, like a caller backing off.
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        let start = Instant::now();
        report.latencies.push(start - called);
        let (hold, stall) = {
            let mut rng = rand::rng();
            let hold =
                rng.random_range(Duration::ZERO..load.max_hold.max(Duration::from_micros(1)));
            let stall = load
                .stall
                .filter(|(p, _)| rng.random_bool(*p))
                .map(|(_, d)| d);
            (hold, stall)
        };
        if let Some(stall) = stall {
            tokio::time::sleep(stall).await;
        }
        let reading = mode == Some(Mode::ProtectedRead);
        let done = match (reading, load.fenced, guard.fencing_token()) {
            (true, _, _) => {
                tokio::time::sleep(hold).await;
                Fenced::Accepted
            }
            (false, true, Some(token)) => {
                let holder = rand::rng().random();
                register.increment_fenced(hold, token, holder).await
            }
            (false, true, None) => panic!("a fenced load needs LockOptions::fencing(true)"),
            (false, false, _) => {
                register.increment(hold).await;
                Fenced::Accepted
            }
        };
        let (valid_until, released) = (guard.valid_until(), Instant::now());
        history.record_mode(id, mode, start, valid_until, released);
        match done {
            _ if reading => report.reads += 1,
            Fenced::Accepted => report.per_client[0] += 1,
            Fenced::Stale if released < valid_until => report.fencing_violations += 1,
            Fenced::Stale => report.fenced_out += 1,
            Fenced::Duplicate => report.fencing_violations += 1,
        }
        // The outcome of the release does not matter to the oracles (an unconfirmed release
        // leaves a key that expires); the next lock call shows whether it was lost.
        let _ = guard.release().await;
    }
}
