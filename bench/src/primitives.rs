//! W8: what each of the lock's primitives costs, one client, sequential, N = 5, beside the
//! plain lock and the fred floor measured in the same run (interleaved rounds): a lock with an
//! owner label, a semaphore's permit, a lock of two resources, a lock detached and resumed,
//! and a write lock downgraded to read. A plain lock runs none of their code; this shows what
//! a user pays for asking for each.

use std::time::{Duration, Instant};

use redlock_core::{LockOptions, Mode, Redlock};

use crate::Plan;
use crate::contender::{Contender, Kind, TTL};
use crate::stats::Latencies;

/// Rounds per variant, interleaved.
const ROUNDS: usize = 3;

/// One variant: its name and one cycle of it on `resource` (lock, the primitive, release).
type Cycle = for<'a> fn(
    &'a Redlock,
    &'a Redlock,
    &'a str,
) -> std::pin::Pin<Box<dyn Future<Output = anyhow::Result<()>> + 'a>>;

fn plain<'a>(
    redlock: &'a Redlock,
    _: &'a Redlock,
    resource: &'a str,
) -> std::pin::Pin<Box<dyn Future<Output = anyhow::Result<()>> + 'a>> {
    Box::pin(async move {
        redlock.lock(resource).await?.release().await?;
        Ok(())
    })
}

fn labelled<'a>(
    _: &'a Redlock,
    labelled: &'a Redlock,
    resource: &'a str,
) -> std::pin::Pin<Box<dyn Future<Output = anyhow::Result<()>> + 'a>> {
    Box::pin(async move {
        labelled.lock(resource).await?.release().await?;
        Ok(())
    })
}

fn permit<'a>(
    redlock: &'a Redlock,
    _: &'a Redlock,
    resource: &'a str,
) -> std::pin::Pin<Box<dyn Future<Output = anyhow::Result<()>> + 'a>> {
    Box::pin(async move {
        let options = LockOptions::default().ttl(TTL).permits(3);
        redlock
            .lock_with(resource, &options)
            .await?
            .release()
            .await?;
        Ok(())
    })
}

fn many<'a>(
    redlock: &'a Redlock,
    _: &'a Redlock,
    resource: &'a str,
) -> std::pin::Pin<Box<dyn Future<Output = anyhow::Result<()>> + 'a>> {
    Box::pin(async move {
        let other = format!("{resource}:b");
        redlock
            .lock_many(&[resource, &other])
            .await?
            .release()
            .await?;
        Ok(())
    })
}

fn resumed<'a>(
    redlock: &'a Redlock,
    _: &'a Redlock,
    resource: &'a str,
) -> std::pin::Pin<Box<dyn Future<Output = anyhow::Result<()>> + 'a>> {
    Box::pin(async move {
        let detached = redlock.lock(resource).await?.detach()?;
        redlock.resume(&detached).await?.release().await?;
        Ok(())
    })
}

fn downgraded<'a>(
    redlock: &'a Redlock,
    _: &'a Redlock,
    resource: &'a str,
) -> std::pin::Pin<Box<dyn Future<Output = anyhow::Result<()>> + 'a>> {
    Box::pin(async move {
        let guard = redlock.lock_mode(resource, Mode::Exclusive, TTL).await?;
        guard.downgrade(Mode::ProtectedRead).await?;
        guard.release().await?;
        Ok(())
    })
}

/// The variants, in print order.
const VARIANTS: [(&str, Cycle); 6] = [
    ("plain lock", plain),
    ("with an owner label", labelled),
    ("a permit (K = 3)", permit),
    ("two resources at once", many),
    ("detach + resume", resumed),
    ("EX + downgrade to PR", downgraded),
];

/// W8, ours beside the fred floor.
pub(crate) async fn w8(plan: &Plan, urls: &[String]) -> anyhow::Result<()> {
    let cycles = plan.w1_iterations;
    println!(
        "\nW8  one client, sequential, N = 5, {cycles} cycles each, µs, median of {ROUNDS} interleaved rounds"
    );
    println!(
        "  {:<24} {:>16} {:>14} {:>14}",
        "variant", "p50 / p99", "× plain lock", "× fred floor"
    );
    let redlock = match Contender::connect(Kind::Ours, urls).await? {
        Contender::Ours(redlock) => redlock,
        _ => anyhow::bail!("not ours"),
    };
    let labelled = Redlock::builder()
        .nodes(urls.iter().map(String::as_str))
        .node_set_check(false)
        .owner("bench/w8")
        .lock_options(LockOptions::default().ttl(TTL))
        .build()
        .await?;
    let floor = Contender::connect(Kind::Floor, urls).await?;
    let mut p50s = vec![Vec::new(); VARIANTS.len() + 1];
    let mut p99s = vec![Vec::new(); VARIANTS.len() + 1];
    for round in 0..ROUNDS {
        for (v, (_, cycle)) in VARIANTS.iter().enumerate() {
            let mut samples = Vec::with_capacity(cycles);
            for i in 0..cycles {
                let resource = format!("w8:{v}:{round}:{i}");
                let started = Instant::now();
                cycle(&redlock, &labelled, &resource).await?;
                samples.push(started.elapsed());
            }
            let latencies = Latencies::new(samples);
            p50s[v].push(latencies.quantile_us(0.5));
            p99s[v].push(latencies.quantile_us(0.99));
        }
        let mut samples: Vec<Duration> = Vec::with_capacity(cycles);
        for i in 0..cycles {
            let started = Instant::now();
            anyhow::ensure!(floor.cycle(&format!("w8:floor:{round}:{i}")).await, "floor");
            samples.push(started.elapsed());
        }
        let latencies = Latencies::new(samples);
        p50s[VARIANTS.len()].push(latencies.quantile_us(0.5));
        p99s[VARIANTS.len()].push(latencies.quantile_us(0.99));
    }
    let median = |mut values: Vec<f64>| {
        values.sort_by(f64::total_cmp);
        values[values.len() / 2]
    };
    let p50: Vec<f64> = p50s.into_iter().map(median).collect();
    let p99: Vec<f64> = p99s.into_iter().map(median).collect();
    let (plain_p50, floor_p50) = (p50[0], p50[VARIANTS.len()]);
    for (v, (name, _)) in VARIANTS.iter().enumerate() {
        println!(
            "  {:<24} {:>16} {:>13.2}× {:>13.2}×",
            name,
            format!("{:.0} / {:.0}", p50[v], p99[v]),
            p50[v] / plain_p50,
            p50[v] / floor_p50
        );
    }
    println!(
        "  {:<24} {:>16}",
        "fred floor",
        format!("{floor_p50:.0} / {:.0}", p99[VARIANTS.len()])
    );
    Ok(())
}
