//! W8: what each of the lock's primitives costs, one client, sequential, N = 5, beside the
//! plain lock and the fred floor measured in the same run (interleaved rounds): a lock with an
//! owner label, a semaphore's permit, a lock of two resources, a lock detached and resumed,
//! and a write lock downgraded to read (beside the same write lock without the downgrade). A
//! plain lock runs none of their code; this shows what a user pays for asking for each.

use std::time::{Duration, Instant};

use redlock_core::{LockOptions, Mode, Redlock};

use crate::Plan;
use crate::contender::{Contender, Kind, TTL};
use crate::stats::Latencies;

/// Rounds per variant, interleaved.
const ROUNDS: usize = 3;

/// The variants, in print order.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Variant {
    Plain,
    Labelled,
    Permit,
    Many,
    Resumed,
    Exclusive,
    Downgraded,
}

const VARIANTS: [(&str, Variant); 7] = [
    ("plain lock", Variant::Plain),
    ("with an owner label", Variant::Labelled),
    ("a permit (K = 3)", Variant::Permit),
    ("two resources at once", Variant::Many),
    ("detach + resume", Variant::Resumed),
    ("EX (lock modes)", Variant::Exclusive),
    ("EX + downgrade to PR", Variant::Downgraded),
];

/// One cycle of `variant` on `resource`: lock, the primitive, release (`labelled` is the
/// handle with an owner label).
async fn cycle(
    variant: Variant,
    redlock: &Redlock,
    labelled: &Redlock,
    resource: &str,
) -> anyhow::Result<()> {
    match variant {
        Variant::Plain => {
            redlock.lock(resource).await?.release().await?;
        }
        Variant::Labelled => {
            labelled.lock(resource).await?.release().await?;
        }
        Variant::Permit => {
            let options = LockOptions::default().ttl(TTL);
            redlock
                .semaphore(resource, 3)
                .acquire_with(&options)
                .await?
                .release()
                .await?;
        }
        Variant::Many => {
            let other = format!("{resource}:b");
            redlock
                .lock_many(&[resource, &other])
                .await?
                .release()
                .await?;
        }
        Variant::Resumed => {
            let detached = redlock.lock(resource).await?.detach()?;
            redlock.resume(&detached).await?.release().await?;
        }
        Variant::Exclusive => {
            let guard = redlock.lock_mode(resource, Mode::Exclusive, TTL).await?;
            guard.release().await?;
        }
        Variant::Downgraded => {
            let guard = redlock.lock_mode(resource, Mode::Exclusive, TTL).await?;
            guard.downgrade(Mode::ProtectedRead).await?;
            guard.release().await?;
        }
    }
    Ok(())
}

/// W8, ours beside the fred floor.
pub(crate) async fn w8(plan: &Plan, urls: &[String]) -> anyhow::Result<()> {
    let cycles = plan.w1_iterations;
    println!(
        "\nW8  one client, sequential, N = 5, {cycles} cycles each, µs, median of {ROUNDS} rounds (cycles interleaved)"
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
        // Cycle by cycle, each variant and the floor in turn: a machine whose speed drifts
        // within a round slows them all alike.
        let mut samples: Vec<Vec<Duration>> = vec![Vec::with_capacity(cycles); VARIANTS.len() + 1];
        for i in 0..cycles {
            for (v, &(_, variant)) in VARIANTS.iter().enumerate() {
                let resource = format!("w8:{v}:{round}:{i}");
                let started = Instant::now();
                cycle(variant, &redlock, &labelled, &resource).await?;
                samples[v].push(started.elapsed());
            }
            let started = Instant::now();
            anyhow::ensure!(floor.cycle(&format!("w8:floor:{round}:{i}")).await, "floor");
            samples[VARIANTS.len()].push(started.elapsed());
        }
        for (v, samples) in samples.into_iter().enumerate() {
            let latencies = Latencies::new(samples);
            p50s[v].push(latencies.quantile_us(0.5));
            p99s[v].push(latencies.quantile_us(0.99));
        }
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
    // A downgrade needs a lock in a mode: beside the same exclusive lock without it, it is
    // one round trip more (3 of 2).
    let at = |wanted: Variant| VARIANTS.iter().position(|&(_, v)| v == wanted);
    if let (Some(ex), Some(down)) = (at(Variant::Exclusive), at(Variant::Downgraded)) {
        println!(
            "  (EX + downgrade / EX alone: {:.2}×; its round trips: 3 of 2)",
            p50[down] / p50[ex]
        );
    }
    Ok(())
}
