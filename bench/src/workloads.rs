//! W1–W5 and W7 (W6 is in `read_write`).

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::extract::Path;
use axum::routing::get;
use http::{Request, StatusCode};
use redlock_axum::RedlockLayer;
use redlock_core::{LockOptions, Redlock};
use tower::ServiceExt;

use crate::Plan;
use crate::contender::{Contender, Kind, TTL};
use crate::stats::{Latencies, Targets, process_cpu_secs, rss_kib, server_cpu_secs};

pub(crate) async fn run_all(plan: &Plan, urls: &[String]) -> anyhow::Result<()> {
    let mut targets = Targets::default();
    if plan.runs("W1") {
        w1(plan, urls, &mut targets).await?;
    }
    if plan.runs("W2") {
        w2(plan, urls, &mut targets).await?;
    }
    if plan.runs("W3") {
        w3(plan, urls, &mut targets).await?;
    }
    if plan.runs("W4") {
        w4(plan, urls, &mut targets).await?;
    }
    if plan.runs("W5") {
        w5(plan, urls, &mut targets).await?;
    }
    if plan.runs("W6") && plan.alone.is_none() {
        crate::read_write::w6(plan, urls, &mut targets).await?;
    }
    if plan.runs("W7") && plan.alone.is_none_or(|kind| kind == Kind::Ours) {
        w7(plan, urls, &mut targets).await?;
    }
    if plan.runs("W8") && plan.alone.is_none() {
        crate::primitives::w8(plan, urls).await?;
    }
    targets.print();
    let violations = targets.violations();
    anyhow::ensure!(
        violations.is_empty(),
        "two holders at once: {}",
        violations.join(", ")
    );
    Ok(())
}

/// W1: one client, sequential lock + unlock, N = 1, 3, 5.
async fn w1(plan: &Plan, urls: &[String], targets: &mut Targets) -> anyhow::Result<()> {
    println!(
        "\nW1  one client, sequential lock+unlock ({} cycles), µs, median of {ROUNDS} interleaved rounds",
        plan.w1_iterations
    );
    println!(
        "  {:<3} {:>22} {:>22} {:>22} {:>22} {:>14}",
        "N",
        "redlock-core p50/p99",
        "fred floor p50/p99",
        "redis-rs floor p50/p99",
        "rslock p50/p99",
        "p50 ours/floor"
    );
    let mut p50s: HashMap<(usize, Kind), f64> = HashMap::new();
    // CPU per cycle at N = 1, of this process and of the node: where the p50 goes.
    let mut cpu: Vec<(Kind, f64, f64)> = Vec::new();
    for n in [1, 3, 5] {
        // Per implementation, one sample set per round; rounds interleave the
        // implementations, so that a slow spell of the machine does not fall on one alone.
        let mut rounds: HashMap<Kind, Vec<(f64, f64, f64, f64)>> = HashMap::new();
        for _round in 0..ROUNDS {
            for &kind in plan.kinds() {
                let measured = w1_round(plan, urls, n, kind).await?;
                rounds.entry(kind).or_default().push(measured);
            }
        }
        let mut cells = Vec::new();
        for &kind in plan.kinds() {
            let runs = &rounds[&kind];
            let median_of =
                |pick: fn(&(f64, f64, f64, f64)) -> f64| median(runs.iter().map(pick).collect());
            let (p50, p99) = (median_of(|r| r.0), median_of(|r| r.1));
            if n == 1 {
                cpu.push((kind, median_of(|r| r.2), median_of(|r| r.3)));
            }
            p50s.insert((n, kind), p50);
            cells.push(format!("{p50:.0} / {p99:.0}"));
        }
        let p50 = |kind| p50s.get(&(n, kind)).copied().unwrap_or(f64::NAN);
        let ratio = p50(Kind::Ours) / p50(Kind::Floor);
        let cell = |i: usize| cells.get(i).map_or("-", String::as_str);
        println!(
            "  {:<3} {:>22} {:>22} {:>22} {:>22} {:>13.2}×",
            n,
            cell(0),
            cell(1),
            cell(2),
            cell(3),
            ratio
        );
    }
    println!("  CPU per cycle at N = 1, µs (this process / the node; the rest of p50 is waiting):");
    for (kind, process, server) in &cpu {
        println!("    {:<16} {process:>6.0} / {server:>4.0}", kind.name());
    }
    if plan.alone.is_some() {
        return Ok(());
    }
    targets.at_most(
        "W1 N=1 p50, redlock-core / fred floor",
        p50s[&(1, Kind::Ours)] / p50s[&(1, Kind::Floor)],
        1.05,
        "×",
    );
    targets.at_most(
        "W1 N=5 p50, redlock-core / fred floor",
        p50s[&(5, Kind::Ours)] / p50s[&(5, Kind::Floor)],
        0.85,
        "×",
    );
    targets.at_most(
        "W1 N=5 p50, redlock-core / rslock",
        p50s[&(5, Kind::Ours)] / p50s[&(5, Kind::Rslock)],
        1.0,
        "×",
    );
    let cpu_of = |kind| {
        cpu.iter()
            .find(|(k, _, _)| *k == kind)
            .map(|&(_, p, s)| (p, s))
    };
    if let (Some(ours), Some(floor)) = (cpu_of(Kind::Ours), cpu_of(Kind::Floor)) {
        targets.at_most(
            "W1 client CPU per cycle, redlock-core / fred floor",
            ours.0 / floor.0,
            1.15,
            "×",
        );
        targets.at_most(
            "W1 node CPU per cycle, redlock-core / fred floor",
            ours.1 / floor.1,
            1.15,
            "×",
        );
    }
    println!(
        "  (redis-rs floor / fred floor, p50: N=1 {:.2}×, N=5 {:.2}×)",
        p50s[&(1, Kind::RedisFloor)] / p50s[&(1, Kind::Floor)],
        p50s[&(5, Kind::RedisFloor)] / p50s[&(5, Kind::Floor)]
    );
    targets.at_most(
        "W1 p50, redlock-core N=5 / N=1",
        p50s[&(5, Kind::Ours)] / p50s[&(1, Kind::Ours)],
        1.3,
        "×",
    );
    Ok(())
}

/// Rounds of W1 and W2, interleaving the implementations; the median is printed.
const ROUNDS: usize = 3;

/// The median of `values` (the upper one of an even count).
fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied().unwrap_or(f64::NAN)
}

/// One W1 round of `kind` on the first `n` nodes: p50 and p99 in µs, and this process's and
/// the first node's CPU per cycle in µs.
async fn w1_round(
    plan: &Plan,
    urls: &[String],
    n: usize,
    kind: Kind,
) -> anyhow::Result<(f64, f64, f64, f64)> {
    let contender = Contender::connect(kind, &urls[..n]).await?;
    for i in 0..plan.w1_iterations / 10 {
        contender.cycle(&format!("w1:warm:{i}")).await;
    }
    let mut samples = Vec::with_capacity(plan.w1_iterations);
    let (process_before, server_before) = (process_cpu_secs(), server_cpu_secs(&urls[0]).await?);
    for i in 0..plan.w1_iterations {
        let resource = format!("w1:{n}:{i}");
        let started = Instant::now();
        let ok = contender.cycle(&resource).await;
        samples.push(started.elapsed());
        anyhow::ensure!(ok, "{}: W1 cycle {i} was not granted", kind.name());
    }
    let cycles = plan.w1_iterations as f64 / 1e6;
    let server = server_cpu_secs(&urls[0]).await? - server_before;
    let process = process_cpu_secs() - process_before;
    let latencies = Latencies::new(samples);
    Ok((
        latencies.quantile_us(0.5),
        latencies.quantile_us(0.99),
        process / cycles,
        server / cycles,
    ))
}

/// W2: 32 concurrent lockers on distinct resources, N = 5.
async fn w2(plan: &Plan, urls: &[String], targets: &mut Targets) -> anyhow::Result<()> {
    const LOCKERS: usize = 32;
    println!(
        "\nW2  {LOCKERS} concurrent lockers, distinct resources, N = 5, {:?} each, median of {ROUNDS} interleaved rounds",
        plan.run_for
    );
    let mut runs: HashMap<Kind, Vec<(f64, u64)>> = HashMap::new();
    for _round in 0..ROUNDS {
        for &kind in plan.kinds() {
            let contender = Arc::new(Contender::connect(kind, urls).await?);
            let run = closed_loop(LOCKERS, plan.run_for, move |locker, i| {
                let contender = contender.clone();
                async move { contender.cycle(&format!("w2:{locker}:{i}")).await }
            })
            .await?;
            runs.entry(kind).or_default().push(run);
        }
    }
    let mut rates = HashMap::new();
    for &kind in plan.kinds() {
        let rate = median(runs[&kind].iter().map(|r| r.0).collect());
        let failures: u64 = runs[&kind].iter().map(|r| r.1).sum();
        rates.insert(kind, rate);
        println!(
            "  {:<14} {:>10.0} cycles/s   ({} not granted in {ROUNDS} rounds)",
            kind.name(),
            rate,
            failures
        );
    }
    if plan.alone.is_some() {
        return Ok(());
    }
    targets.at_least(
        "W2 cycles/s, redlock-core / fred floor",
        rates[&Kind::Ours] / rates[&Kind::Floor],
        1.35,
        "×",
    );
    targets.at_least(
        "W2 cycles/s, redlock-core / rslock",
        rates[&Kind::Ours] / rates[&Kind::Rslock],
        1.0,
        "×",
    );
    targets.at_least(
        "W2 cycles/s, redlock-core / redis-rs floor",
        rates[&Kind::Ours] / rates[&Kind::RedisFloor],
        1.0,
        "×",
    );
    println!(
        "  (redis-rs floor / fred floor: {:.2}×; redlock-core / redis-rs floor: {:.2}×)",
        rates[&Kind::RedisFloor] / rates[&Kind::Floor],
        rates[&Kind::Ours] / rates[&Kind::RedisFloor]
    );
    Ok(())
}

/// Runs `workers` tasks, each calling `step(worker, i)` for i = 1, 2, … until `run_for` has
/// passed; returns the successful steps per second and the failed steps.
async fn closed_loop<F, Fut>(
    workers: usize,
    run_for: Duration,
    step: F,
) -> anyhow::Result<(f64, u64)>
where
    F: Fn(usize, u64) -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = bool> + Send,
{
    let (ok, failed) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let started = Instant::now();
    let deadline = started + run_for;
    let tasks: Vec<_> = (0..workers)
        .map(|worker| {
            let (step, ok, failed) = (step.clone(), ok.clone(), failed.clone());
            tokio::spawn(async move {
                let mut i = 0u64;
                while Instant::now() < deadline {
                    i += 1;
                    let counter = if step(worker, i).await { &ok } else { &failed };
                    counter.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    for task in tasks {
        task.await?;
    }
    let rate = ok.load(Ordering::Relaxed) as f64 / started.elapsed().as_secs_f64();
    Ok((rate, failed.load(Ordering::Relaxed)))
}

/// What W3 measured for one implementation.
struct Contention {
    acquisitions: u64,
    handovers: u64,
    p99_wait_ms: f64,
    max_wait_ms: f64,
    starved: usize,
    violations: u64,
    elapsed: Duration,
}

/// W3: 8 lockers (each its own handle, as 8 replicas would be) on one resource, 1 ms hold.
async fn w3(plan: &Plan, urls: &[String], targets: &mut Targets) -> anyhow::Result<()> {
    const LOCKERS: usize = 8;
    let hold = Duration::from_millis(1);
    let run_for = plan.run_for * 2;
    println!(
        "\nW3  {LOCKERS} lockers (8 handles) on one resource, 1 ms hold, N = 5, {run_for:?} each"
    );
    println!(
        "  {:<14} {:>12} {:>12} {:>10} {:>10} {:>8} {:>10}",
        "", "acquired/s", "hand-overs/s", "p99 wait", "max wait", "starved", "violations"
    );
    let mut results = HashMap::new();
    for &kind in plan.kinds() {
        let mut contenders = Vec::new();
        for _ in 0..LOCKERS {
            contenders.push(Arc::new(Contender::connect(kind, urls).await?));
        }
        let result = contend(contenders, hold, run_for, &format!("w3:{kind:?}")).await?;
        let secs = result.elapsed.as_secs_f64();
        println!(
            "  {:<14} {:>12.0} {:>12.0} {:>8.1}ms {:>8.1}ms {:>8} {:>10}",
            kind.name(),
            result.acquisitions as f64 / secs,
            result.handovers as f64 / secs,
            result.p99_wait_ms,
            result.max_wait_ms,
            result.starved,
            result.violations
        );
        results.insert(kind, result);
    }
    if plan.alone.is_some() {
        return Ok(());
    }
    let ours = &results[&Kind::Ours];
    let floor = &results[&Kind::Floor];
    targets.at_least(
        "W3 hand-overs/s, redlock-core / fred floor",
        ours.handovers as f64
            / ours.elapsed.as_secs_f64()
            / (floor.handovers.max(1) as f64 / floor.elapsed.as_secs_f64()),
        2.0,
        "×",
    );
    targets.at_most(
        "W3 p99 wait, redlock-core / fred floor",
        ours.p99_wait_ms / floor.p99_wait_ms.max(f64::MIN_POSITIVE),
        1.0,
        "×",
    );
    targets.at_most("W3 max wait, redlock-core", ours.max_wait_ms, 50.0, " ms");
    targets.at_most(
        "W3 starved lockers, redlock-core",
        ours.starved as f64,
        0.0,
        "",
    );
    targets.at_most(
        "W3 violations, redlock-core",
        ours.violations as f64,
        0.0,
        "",
    );
    Ok(())
}

/// W7: 64 lockers on one resource spread over 8 handles (8 lockers a handle), 1 ms hold,
/// against the same load with 8 lockers on 8 handles: the cost of a wake-up must not grow with
/// the number of waiters behind each handle. Ours only (the floors poll).
async fn w7(plan: &Plan, urls: &[String], targets: &mut Targets) -> anyhow::Result<()> {
    const HANDLES: usize = 8;
    let hold = Duration::from_millis(1);
    let run_for = plan.run_for * 2;
    println!(
        "\nW7  redlock-core, one resource, {HANDLES} handles, 1 ms hold, N = 5, {run_for:?} each"
    );
    println!(
        "  {:<14} {:>12} {:>12} {:>10} {:>10} {:>8} {:>10}",
        "lockers", "acquired/s", "hand-overs/s", "p99 wait", "max wait", "starved", "violations"
    );
    let mut handovers = Vec::new();
    for lockers in [HANDLES, 8 * HANDLES] {
        let mut handles = Vec::new();
        for _ in 0..HANDLES {
            handles.push(Arc::new(Contender::connect(Kind::Ours, urls).await?));
        }
        let contenders = (0..lockers)
            .map(|i| Arc::clone(&handles[i % HANDLES]))
            .collect();
        let result = contend(contenders, hold, run_for, &format!("w7:{lockers}")).await?;
        let secs = result.elapsed.as_secs_f64();
        println!(
            "  {:<14} {:>12.0} {:>12.0} {:>8.1}ms {:>8.1}ms {:>8} {:>10}",
            lockers,
            result.acquisitions as f64 / secs,
            result.handovers as f64 / secs,
            result.p99_wait_ms,
            result.max_wait_ms,
            result.starved,
            result.violations
        );
        targets.at_most(
            "W7 violations, redlock-core",
            result.violations as f64,
            0.0,
            "",
        );
        handovers.push(result.handovers as f64 / secs);
    }
    targets.at_least(
        "W7 hand-overs/s, 64 lockers / 8 lockers",
        handovers[1] / handovers[0].max(f64::MIN_POSITIVE),
        0.8,
        "×",
    );
    Ok(())
}

async fn contend(
    contenders: Vec<Arc<Contender>>,
    hold: Duration,
    run_for: Duration,
    resource: &str,
) -> anyhow::Result<Contention> {
    let inside = Arc::new(AtomicBool::new(false));
    let violations = Arc::new(AtomicU64::new(0));
    let last_holder = Arc::new(AtomicUsize::new(usize::MAX));
    let handovers = Arc::new(AtomicU64::new(0));
    // Warm-up: every locker takes the lock once (connections, subscriptions), untimed.
    for contender in &contenders {
        contender.contend(resource, hold, || {}, || {}).await;
    }
    let started = Instant::now();
    let deadline = started + run_for;
    let tasks: Vec<_> = contenders
        .into_iter()
        .enumerate()
        .map(|(id, contender)| {
            let (inside, violations, last_holder, handovers) = (
                inside.clone(),
                violations.clone(),
                last_holder.clone(),
                handovers.clone(),
            );
            let resource = resource.to_owned();
            tokio::spawn(async move {
                let mut acquired = 0u64;
                let mut waits = Vec::new();
                loop {
                    let waiting = Instant::now();
                    if waiting >= deadline {
                        break;
                    }
                    let attempt = contender.contend(
                        &resource,
                        hold,
                        || {
                            if inside.swap(true, Ordering::SeqCst) {
                                violations.fetch_add(1, Ordering::SeqCst);
                            }
                            if last_holder.swap(id, Ordering::SeqCst) != id {
                                handovers.fetch_add(1, Ordering::SeqCst);
                            }
                        },
                        || inside.store(false, Ordering::SeqCst),
                    );
                    // A wait still running at the deadline counts up to the deadline.
                    let left = deadline.saturating_duration_since(waiting) + hold * 10;
                    let done = tokio::time::timeout(left, attempt).await;
                    waits.push(waiting.elapsed().saturating_sub(hold));
                    match done {
                        Ok(true) => acquired += 1,
                        Ok(false) => {}
                        Err(_) => break,
                    }
                }
                (acquired, waits)
            })
        })
        .collect();
    let mut per_locker = Vec::new();
    let mut waits = Vec::new();
    for task in tasks {
        let (acquired, locker_waits) = task.await?;
        per_locker.push(acquired);
        waits.extend(locker_waits);
    }
    let waits = Latencies::new(waits);
    let acquisitions: u64 = per_locker.iter().sum();
    let fair_share = acquisitions as f64 / per_locker.len() as f64;
    Ok(Contention {
        acquisitions,
        handovers: handovers.load(Ordering::SeqCst),
        p99_wait_ms: waits.quantile_us(0.99) / 1e3,
        max_wait_ms: waits.quantile_us(1.0) / 1e3,
        // Starved: fewer than a quarter of its fair share.
        starved: per_locker
            .iter()
            .filter(|&&a| (a as f64) < fair_share / 4.0)
            .count(),
        violations: violations.load(Ordering::SeqCst),
        elapsed: started.elapsed(),
    })
}

/// W4: the axum Layer against the same handler calling the core by hand.
async fn w4(plan: &Plan, urls: &[String], targets: &mut Targets) -> anyhow::Result<()> {
    const CLIENTS: usize = 32;
    println!(
        "\nW4  axum route, {CLIENTS} concurrent in-process clients, N = 5, {:?} each",
        plan.run_for
    );
    let redlock = Redlock::builder()
        .nodes(urls.iter().map(String::as_str))
        .node_set_check(false)
        .lock_options(LockOptions::default().ttl(TTL))
        .build()
        .await?;
    // The options the layer uses, so that both routes do the same locking work.
    let options = redlock.options().clone().auto_extend(true).reentrant(true);
    let manual = {
        let redlock = redlock.clone();
        move |Path(id): Path<u64>| {
            let (redlock, options) = (redlock.clone(), options.clone());
            async move {
                match redlock.lock_with(&format!("w4m:{id}"), &options).await {
                    Ok(guard) => {
                        let _ = guard.release().await;
                        StatusCode::OK
                    }
                    Err(_) => StatusCode::LOCKED,
                }
            }
        }
    };
    let router = Router::new()
        .route(
            "/layer/{id}",
            get(|| async { StatusCode::OK })
                .route_layer(RedlockLayer::from_template(redlock.clone(), "w4l:{id}")?),
        )
        .route("/manual/{id}", get(manual));
    let mut rates = Vec::new();
    for (label, prefix) in [("Layer", "/layer"), ("by hand", "/manual")] {
        let router = router.clone();
        let (rate, _) = closed_loop(CLIENTS, plan.run_for, move |client, i| {
            let router = router.clone();
            async move {
                let uri = format!("{prefix}/{}", client as u64 * 1_000_000_000 + i);
                let request = Request::get(uri).body(Body::empty()).unwrap_or_default();
                match router.oneshot(request).await {
                    Ok(response) if response.status() == StatusCode::OK => {
                        axum::body::to_bytes(response.into_body(), 1024)
                            .await
                            .is_ok()
                    }
                    _ => false,
                }
            }
        })
        .await?;
        println!("  {label:<14} {rate:>10.0} req/s");
        rates.push(rate);
    }
    targets.at_least("W4 req/s, Layer / by hand", rates[0] / rates[1], 0.95, "×");
    Ok(())
}

/// W5: resident memory before and after many lock cycles (auto-extended, 32 at a time).
async fn w5(plan: &Plan, urls: &[String], targets: &mut Targets) -> anyhow::Result<()> {
    const LOCKERS: u64 = 32;
    println!(
        "\nW5  RSS before and after {} lock cycles (auto-extended), N = 5",
        plan.w5_cycles
    );
    let redlock = Redlock::builder()
        .nodes(urls.iter().map(String::as_str))
        .node_set_check(false)
        .lock_options(LockOptions::default().ttl(TTL).auto_extend(true))
        .build()
        .await?;
    let run = |cycles: u64, tag: &'static str| {
        let redlock = redlock.clone();
        async move {
            let tasks: Vec<_> = (0..LOCKERS)
                .map(|locker| {
                    let redlock = redlock.clone();
                    tokio::spawn(async move {
                        for i in 0..cycles / LOCKERS {
                            if let Ok(guard) = redlock.lock(&format!("w5:{tag}:{locker}:{i}")).await
                            {
                                let _ = guard.release().await;
                            }
                        }
                    })
                })
                .collect();
            for task in tasks {
                let _ = task.await;
            }
        }
    };
    run((plan.w5_cycles / 20).max(LOCKERS), "warm").await;
    let before = rss_kib();
    let started = Instant::now();
    run(plan.w5_cycles, "run").await;
    let after = rss_kib();
    let elapsed = started.elapsed();
    println!(
        "  RSS {before} KiB → {after} KiB ({:+.1} %), {:.0} cycles/s, {} locks still held",
        (after as f64 / before as f64 - 1.0) * 100.0,
        plan.w5_cycles as f64 / elapsed.as_secs_f64(),
        redlock.held_count()
    );
    targets.at_most(
        "W5 RSS after / before",
        after as f64 / before as f64,
        1.05,
        "×",
    );
    Ok(())
}
