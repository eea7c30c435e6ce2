//! A report scheduled with `tokio-cron-scheduler` on every replica of a service, and run by
//! one replica per tick: the job is `#[redlock(resource = "report", on_busy = "skip")]`, so a
//! replica that finds the lock held skips the report (`Ok(None)`) instead of running it a
//! second time or failing.
//!
//! [`run`] starts two replicas in this process, each with its own `Redlock` handle and its own
//! `JobScheduler` (as two processes would have), lets the schedule fire on both, and returns
//! what each replica did at each tick.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::Context;
use redlock_core::{LockError, Redlock, redlock};
use tokio::sync::mpsc;
use tokio_cron_scheduler::{Job, JobScheduler};

/// Every 2 seconds (tokio-cron-scheduler's cron expressions start with a seconds field).
pub const SCHEDULE: &str = "*/2 * * * * *";
/// The schedule's period: a tick's number is the Unix time in seconds divided by it.
const PERIOD: Duration = Duration::from_secs(2);
/// How long the report takes: shorter than the skew between the replicas' firings of one tick
/// (each scheduler looks at its jobs every 500 ms). The lock's `lock_at_least_for = "1s"`
/// keeps it held past that skew, so the replica that fires later still finds it held, and
/// ends before the next tick.
pub const REPORT_TIME: Duration = Duration::from_millis(50);
/// How much later each replica's scheduler starts than the one before.
const START_SKEW: Duration = Duration::from_millis(250);
/// The replicas [`run`] starts.
pub const REPLICAS: [&str; 2] = ["replica-a", "replica-b"];

/// What one replica did at one tick.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Run {
    /// Which replica.
    pub replica: &'static str,
    /// The tick: the Unix time the schedule fired at, in periods.
    pub tick: u64,
    /// The report it wrote, or `None` when it skipped the tick (the lock was held).
    pub report: Option<String>,
}

/// Every tick's runs, and the most reports seen running at once.
#[derive(Debug, Default)]
pub struct Runs {
    /// The runs of each tick, by tick.
    pub ticks: BTreeMap<u64, Vec<Run>>,
    /// The most report bodies that ran at once across the replicas (counted by the bodies
    /// themselves, independently of the lock): 1 when the lock works.
    pub most_inside: u32,
}

impl Runs {
    /// `true` when every tick's report ran on exactly one replica, never two at once.
    pub fn ran_once_per_tick(&self) -> bool {
        self.most_inside <= 1
            && self
                .ticks
                .values()
                .all(|runs| runs.iter().filter(|run| run.report.is_some()).count() == 1)
    }

    /// How many ticks some replica skipped.
    pub fn skipped(&self) -> usize {
        self.ticks
            .values()
            .flatten()
            .filter(|r| r.report.is_none())
            .count()
    }

    /// Ticks at which every replica fired.
    fn complete(&self) -> usize {
        self.ticks
            .values()
            .filter(|runs| runs.len() == REPLICAS.len())
            .count()
    }
}

/// The report bodies running now, across the replicas.
#[derive(Debug, Default)]
struct Inside {
    now: AtomicU32,
    most: AtomicU32,
}

/// The scheduled job. On a busy lock the body does not run and the call returns `Ok(None)`;
/// unavailable nodes are still an error. The lock is kept 1 s after it was taken however fast
/// the report is (ShedLock's `lockAtLeastFor`).
#[redlock(
    resource = "report",
    redlock = redlock,
    ttl = "30s",
    retry_count = 0,
    lock_at_least_for = "1s",
    on_busy = "skip"
)]
async fn report(
    redlock: &Redlock,
    replica: &str,
    tick: u64,
    inside: &Inside,
) -> Result<Option<String>, LockError> {
    let now = inside.now.fetch_add(1, Ordering::SeqCst) + 1;
    inside.most.fetch_max(now, Ordering::SeqCst);
    tokio::time::sleep(REPORT_TIME).await; // the report's work
    inside.now.fetch_sub(1, Ordering::SeqCst);
    Ok(Some(format!(
        "report of {}, written by {replica}",
        clock(tick)
    )))
}

/// A tick's time of day, UTC.
fn clock(tick: u64) -> String {
    let s = tick * PERIOD.as_secs();
    format!("{:02}:{:02}:{:02} UTC", s / 3600 % 24, s / 60 % 60, s % 60)
}

/// One replica: its own lock handle and scheduler, the report scheduled on it.
async fn replica(
    name: &'static str,
    nodes: &[String],
    inside: &Arc<Inside>,
    runs: &mpsc::UnboundedSender<Run>,
) -> anyhow::Result<JobScheduler> {
    let redlock = Redlock::builder()
        .nodes(nodes.iter().cloned())
        .build()
        .await
        .with_context(|| format!("{name}: connecting to the lock nodes"))?;
    let (inside, runs) = (Arc::clone(inside), runs.clone());
    let job = Job::new_async(SCHEDULE, move |_job, _scheduler| {
        let (redlock, inside, runs) = (redlock.clone(), Arc::clone(&inside), runs.clone());
        Box::pin(async move {
            let tick = unix_time().as_secs() / PERIOD.as_secs();
            match report(&redlock, name, tick, &inside).await {
                Ok(report) => {
                    let _ = runs.send(Run {
                        replica: name,
                        tick,
                        report,
                    });
                }
                Err(error) => eprintln!("{name}: tick {tick}: the report failed: {error}"),
            }
        })
    })?;
    let scheduler = JobScheduler::new().await?;
    scheduler.add(job).await?;
    Ok(scheduler)
}

fn unix_time() -> Duration {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
}

/// Starts the replicas on the lock nodes `nodes` (Redis URLs), prints each replica's run as
/// it happens, and returns once `ticks` ticks fired on every replica.
///
/// # Errors
/// A handle that cannot be built (nodes unreachable), a scheduler error, or a tick at which a
/// replica reported nothing for three periods (its report failed).
pub async fn run(nodes: &[String], ticks: usize) -> anyhow::Result<Runs> {
    let inside = Arc::new(Inside::default());
    let (sender, mut received) = mpsc::unbounded_channel();
    let mut schedulers = Vec::new();
    for name in REPLICAS {
        schedulers.push(replica(name, nodes, &inside, &sender).await?);
    }
    // Replicas start at different moments: each scheduler's 500 ms checks are offset from
    // the other's, so one tick fires on them up to 500 ms apart, longer than the report.
    for scheduler in &schedulers {
        scheduler.start().await?;
        tokio::time::sleep(START_SKEW).await;
    }
    let mut runs = Runs::default();
    while runs.complete() < ticks {
        let run = tokio::time::timeout(PERIOD * 3, received.recv())
            .await
            .context("no replica reported a tick for three periods")?
            .context("the replicas stopped")?;
        match &run.report {
            Some(report) => println!("{}: {} ran the job: {report}", clock(run.tick), run.replica),
            None => println!(
                "{}: {} skipped the job: the lock was held",
                clock(run.tick),
                run.replica
            ),
        }
        runs.ticks.entry(run.tick).or_default().push(run);
    }
    for mut scheduler in schedulers {
        scheduler.shutdown().await?;
    }
    runs.most_inside = inside.most.load(Ordering::SeqCst);
    Ok(runs)
}
