//! W6: read-mostly contention on one resource, with read/write lock modes against the plain
//! exclusive lock on the same load (the baseline, measured in the same run).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use redlock_core::{LockOptions, Mode, Redlock};

use crate::Plan;
use crate::contender::TTL;
use crate::stats::{Latencies, Targets};

/// Lockers, each with its own handle (as replicas would be).
const LOCKERS: usize = 8;
/// One acquisition in this many is a write.
const WRITE_EVERY: u64 = 8;

/// What one run measured.
struct Measured {
    reads: u64,
    writes: u64,
    read_waits: Latencies,
    write_waits: Latencies,
    violations: u64,
    elapsed: Duration,
}

impl Measured {
    fn holds_per_s(&self) -> f64 {
        (self.reads + self.writes) as f64 / self.elapsed.as_secs_f64()
    }
}

/// Who is inside the critical section, to count violations: a writer beside anyone, or a
/// reader beside a writer.
#[derive(Default)]
struct Inside {
    readers: AtomicUsize,
    writer: AtomicBool,
    violations: AtomicU64,
}

impl Inside {
    fn enter(&self, write: bool) {
        let clash = if write {
            self.writer.swap(true, Ordering::SeqCst) || self.readers.load(Ordering::SeqCst) > 0
        } else {
            self.readers.fetch_add(1, Ordering::SeqCst);
            self.writer.load(Ordering::SeqCst)
        };
        if clash {
            self.violations.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn leave(&self, write: bool) {
        if write {
            self.writer.store(false, Ordering::SeqCst);
        } else {
            self.readers.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

/// W6: 8 lockers on one resource, 1 ms hold, one acquisition in 8 a write; reads take
/// [`Mode::ProtectedRead`] and writes [`Mode::Exclusive`], against every acquisition taking
/// the plain exclusive lock.
pub(crate) async fn w6(plan: &Plan, urls: &[String], targets: &mut Targets) -> anyhow::Result<()> {
    let hold = Duration::from_millis(1);
    let run_for = plan.run_for * 2;
    println!(
        "\nW6  {LOCKERS} lockers on one resource, 1 ms hold, 1 in {WRITE_EVERY} a write, N = 5, {run_for:?} each"
    );
    println!(
        "  {:<22} {:>9} {:>9} {:>14} {:>15} {:>11}",
        "", "holds/s", "writes/s", "read p99 wait", "write max wait", "violations"
    );
    let mut rates = Vec::new();
    for (label, modes) in [("exclusive lock", false), ("read/write modes", true)] {
        let mut handles = Vec::new();
        for _ in 0..LOCKERS {
            let redlock = Redlock::builder()
                .nodes(urls.iter().map(String::as_str))
                .node_set_check(false)
                .lock_options(LockOptions::default().ttl(TTL))
                .build()
                .await?;
            handles.push(redlock);
        }
        let resource = format!("w6:{label}");
        let m = run(handles, modes, hold, run_for, &resource).await?;
        println!(
            "  {:<22} {:>9.0} {:>9.0} {:>12.1}ms {:>13.1}ms {:>11}",
            label,
            m.holds_per_s(),
            m.writes as f64 / m.elapsed.as_secs_f64(),
            m.read_waits.quantile_us(0.99) / 1e3,
            m.write_waits.quantile_us(1.0) / 1e3,
            m.violations
        );
        targets.at_most(
            if modes {
                "W6 violations, read/write modes"
            } else {
                "W6 violations, exclusive lock"
            },
            m.violations as f64,
            0.0,
            "",
        );
        rates.push(m.holds_per_s());
    }
    targets.at_least(
        "W6 holds/s, read/write modes / exclusive lock",
        rates[1] / rates[0].max(f64::MIN_POSITIVE),
        2.0,
        "×",
    );
    Ok(())
}

async fn run(
    handles: Vec<Redlock>,
    modes: bool,
    hold: Duration,
    run_for: Duration,
    resource: &str,
) -> anyhow::Result<Measured> {
    let inside = Arc::new(Inside::default());
    let started = Instant::now();
    let deadline = started + run_for;
    let tasks: Vec<_> = handles
        .into_iter()
        .enumerate()
        .map(|(id, redlock)| {
            let (inside, resource) = (Arc::clone(&inside), resource.to_owned());
            tokio::spawn(async move {
                let wait = redlock.options().clone().wait_timeout(run_for);

                let (mut read_waits, mut write_waits) = (Vec::new(), Vec::new());
                for i in (id as u64).. {
                    let asked = Instant::now();
                    if asked >= deadline {
                        break;
                    }
                    let is_write = i % WRITE_EVERY == 0;
                    let locked = match (modes, is_write) {
                        (false, _) => redlock.lock_with(&resource, &wait).await,
                        (true, true) => {
                            redlock
                                .lock_mode_with(&resource, Mode::Exclusive, &wait)
                                .await
                        }
                        (true, false) => {
                            redlock
                                .lock_mode_with(&resource, Mode::ProtectedRead, &wait)
                                .await
                        }
                    };
                    let Ok(guard) = locked else {
                        continue;
                    };
                    let waited = asked.elapsed();
                    inside.enter(is_write);
                    tokio::time::sleep(hold).await;
                    inside.leave(is_write);
                    let _released = guard.release().await;
                    if is_write {
                        write_waits.push(waited);
                    } else {
                        read_waits.push(waited);
                    }
                }
                (read_waits, write_waits)
            })
        })
        .collect();
    let (mut read_waits, mut write_waits) = (Vec::new(), Vec::new());
    for task in tasks {
        let (reads, writes) = task.await?;
        read_waits.extend(reads);
        write_waits.extend(writes);
    }
    Ok(Measured {
        reads: read_waits.len() as u64,
        writes: write_waits.len() as u64,
        read_waits: Latencies::new(read_waits),
        write_waits: Latencies::new(write_waits),
        violations: inside.violations.load(Ordering::SeqCst),
        elapsed: started.elapsed(),
    })
}
