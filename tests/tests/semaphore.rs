//! A counting semaphore (`Redlock::semaphore`) against real redis-server processes (5, or
//! 3): at most K holders at once across separate handles, and all K used; the bound kept
//! under a partition and a node restarted empty with the quarantine on; a crashed holder's
//! permit freed at its ttl; a release waking a waiter at once; bad input refused before
//! anything is sent; a full semaphore whose holders missed nodes answered as busy, not as a
//! split; a split round's slots released; the waiters' entries gone with them. Where a
//! release or a clean-up is checked, the ttl is 30 s and the keys must be gone within 1 s.

#![allow(clippy::unwrap_used)] // tests unwrap: a failure is the assertion

use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

use rand::Rng;
use redlock_core::{InvalidInput, LockError, LockOptions, Redlock};
use redlock_tests::checker::History;
use redlock_tests::proxy::Proxy;
use redlock_tests::{RedisNodes, plain_client, proxy_urls, redlock, within};

const K: u32 = 3;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// A permit of `K` with a short ttl, waiting up to 5 s.
fn permit() -> LockOptions {
    LockOptions::default()
        .ttl(ms(2_000))
        .retry_delay(ms(50))
        .retry_jitter(ms(50))
        .wait_timeout(Duration::from_secs(5))
}

/// Slot `slot`'s key of the semaphore on the lock key `key`.
fn slot_key(key: &str, slot: u32) -> String {
    format!("{key}\0redlock:permit:{slot}")
}

/// Waits at most 1 s until `key` is absent on every node. The tests that use it hold their
/// permits with a 30 s ttl: only a release or a clean-up, never the expiry, makes it pass.
async fn gone_soon(nodes: &RedisNodes, key: &str) {
    values_soon(nodes, key, &vec![None; nodes.servers.len()]).await;
}

/// Waits at most 1 s until `key`'s value on every node is `expected`.
async fn values_soon(nodes: &RedisNodes, key: &str, expected: &[Option<String>]) {
    let deadline = Instant::now() + ms(1_000);
    loop {
        let values = nodes.values(key).await;
        if values == expected {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{key:?} is {values:?}, not {expected:?}, after 1 s"
        );
        tokio::time::sleep(ms(10)).await;
    }
}

/// `command key [args]` on node `i` only, from a plain client.
async fn on_node<T: fred::types::FromValue>(
    nodes: &RedisNodes,
    i: usize,
    command: &'static str,
    args: Vec<String>,
) -> T {
    use fred::interfaces::ClientLike;
    use fred::types::{ClusterHash, CustomCommand};
    let cmd = CustomCommand::new_static(command, ClusterHash::FirstKey, false);
    plain_client(&nodes.servers[i].url())
        .await
        .custom(cmd, args)
        .await
        .unwrap()
}

/// `ZCARD key` on every node.
async fn zcards(nodes: &RedisNodes, key: &str) -> Vec<i64> {
    let mut out = Vec::new();
    for i in 0..nodes.servers.len() {
        out.push(on_node(nodes, i, "ZCARD", vec![key.to_owned()]).await);
    }
    out
}

/// What the lockers of a workload saw.
#[derive(Debug, Default)]
struct Seen {
    granted: usize,
    errors: Vec<String>,
}

/// Each handle loops acquire → hold (5–30 ms) → release on `resource` for `run_for`, every
/// hold recorded in `history` (from the grant to the release, or the validity if sooner).
async fn workload(
    handles: &[Redlock],
    resource: &str,
    options: &LockOptions,
    run_for: Duration,
    history: &Arc<History>,
) -> Seen {
    let until = Instant::now() + run_for;
    let lockers = handles.iter().enumerate().map(|(i, redlock)| {
        let (redlock, options, history) = (redlock.clone(), options.clone(), Arc::clone(history));
        let resource = resource.to_owned();
        tokio::spawn(async move {
            let mut seen = Seen::default();
            while Instant::now() < until {
                match redlock.semaphore(&resource, K).acquire_with(&options).await {
                    Ok(guard) => {
                        let start = Instant::now();
                        let info = guard.info();
                        assert_eq!(info.permits(), Some(K));
                        assert!(info.slot().unwrap() < K);
                        assert_eq!(info.resource(), resource);
                        let hold = rand::rng().random_range(5..=30);
                        tokio::time::sleep(ms(hold)).await;
                        let end = Instant::now();
                        history.record(i, start, guard.valid_until(), end);
                        let _ = guard.release().await;
                        seen.granted += 1;
                    }
                    Err(error) => {
                        seen.errors.push(error.to_string());
                        tokio::time::sleep(ms(20)).await;
                    }
                }
            }
            seen
        })
    });
    let mut all = Seen::default();
    let bound = run_for + Duration::from_secs(20);
    let results = tokio::time::timeout(bound, futures_util::future::join_all(lockers))
        .await
        .expect("the lockers to finish");
    for seen in results {
        let seen = seen.unwrap();
        all.granted += seen.granted;
        all.errors.extend(seen.errors);
    }
    all
}

/// Checks the history: never more than `K` holds at once.
fn at_most_k(history: &History) -> usize {
    let (peak, at_peak) = history.max_overlap();
    assert!(
        peak <= K as usize,
        "{peak} holders at once with {K} permits: {at_peak:#?}"
    );
    peak
}

#[tokio::test]
async fn at_most_k_holders_across_handles_and_all_k_used() {
    let nodes = RedisNodes::start(5);
    let mut handles = Vec::new();
    for _ in 0..8 {
        handles.push(redlock(&nodes).await);
    }
    let history = Arc::new(History::new());
    // A long ttl: the slots left behind below are gone by their releases, not their expiry.
    let options = permit().ttl(ms(30_000));
    let seen = workload(&handles, "export:t1", &options, ms(3_000), &history).await;
    let peak = at_most_k(&history);
    println!(
        "{} holds, peak {peak}, {} errors",
        seen.granted,
        seen.errors.len()
    );
    assert_eq!(peak, K as usize, "the permits were not all used at once");
    assert!(seen.granted >= 30, "{seen:?}");
    // The slots are the permits: nothing is left behind after the last release.
    let key = handles[0].key_for("export:t1");
    for slot in 0..K {
        gone_soon(&nodes, &slot_key(&key, slot)).await;
    }
    // The resource's own lock key is never written.
    assert!(nodes.values(&key).await.iter().all(Option::is_none));
}

/// A handle over its own proxies, with a default `ttl` and `quarantine` (zero: off).
async fn proxied(nodes: &RedisNodes, ttl: Duration, quarantine: Duration) -> (Redlock, Vec<Proxy>) {
    let proxies = nodes.proxies();
    let redlock = Redlock::builder()
        .nodes(proxy_urls(&proxies))
        .node_timeout(ms(100))
        .quarantine(quarantine)
        .lock_options(LockOptions::default().ttl(ttl))
        .build()
        .await
        .unwrap();
    (redlock, proxies)
}

/// Waits until every node is past its quarantine (a fresh server sits one out first): a
/// permit lands on every node.
async fn past_quarantine(redlock: &Redlock, nodes: &RedisNodes, options: &LockOptions) {
    let deadline = Instant::now() + Duration::from_secs(15);
    let key = redlock.key_for("probe");
    loop {
        if let Ok(guard) = redlock.semaphore("probe", K).acquire_with(options).await {
            tokio::time::sleep(ms(20)).await;
            let slot = guard.info().slot().unwrap();
            let slot_key = format!("{key}\0redlock:permit:{slot}");
            let everywhere = nodes.values(&slot_key).await.iter().all(Option::is_some);
            guard.release().await.unwrap();
            if everywhere {
                return;
            }
        }
        assert!(Instant::now() < deadline, "a node stayed in quarantine");
        tokio::time::sleep(ms(100)).await;
    }
}

#[tokio::test]
async fn a_partition_and_a_node_restarted_empty_keep_at_most_k() {
    let mut nodes = RedisNodes::start(5);
    let ttl = ms(1_000);
    let options = permit().ttl(ttl);
    let mut handles = Vec::new();
    let mut proxies = Vec::new();
    for _ in 0..8 {
        let (handle, own) = proxied(&nodes, ttl, ttl).await;
        handles.push(handle);
        proxies.push(own);
    }
    past_quarantine(&handles[0], &nodes, &options).await;
    let history = Arc::new(History::new());
    let running = {
        let (handles, options, history) = (handles.clone(), options.clone(), Arc::clone(&history));
        tokio::spawn(
            async move { workload(&handles, "export:t2", &options, ms(5_000), &history).await },
        )
    };
    // Half the handles lose nodes 3 and 4 for a while.
    tokio::time::sleep(ms(1_000)).await;
    for own in &proxies[..4] {
        own[3].partition();
        own[4].partition();
    }
    // A granting node restarted empty: it forgot every slot it held, and sits out the
    // quarantine rather than granting them again.
    tokio::time::sleep(ms(1_000)).await;
    nodes.servers[0].restart();
    tokio::time::sleep(ms(500)).await;
    // The restarted node saw its loss at the next attempt, and sits the quarantine out.
    let marker = nodes.values("\0redlock:quarantine").await;
    assert!(
        marker[0].is_some(),
        "no quarantine on the restarted node: {marker:?}"
    );
    tokio::time::sleep(ms(1_000)).await;
    for own in &proxies[..4] {
        own[3].heal();
        own[4].heal();
    }
    let seen = within("the workload", running).await.unwrap();
    let peak = at_most_k(&history);
    let mut kinds: Vec<&str> = seen
        .errors
        .iter()
        .map(|e| e.split(':').next().unwrap_or(e))
        .collect();
    kinds.sort_unstable();
    kinds.dedup();
    println!("{} holds, peak {peak}, errors: {kinds:?}", seen.granted);
    assert!(seen.granted >= 10, "{seen:?}");
}

/// Two holders fill a semaphore of 2 through nodes {0, 1, 2} (3 and 4 cut off from them);
/// node 0 restarts empty, forgetting both slots; a third client that reaches only nodes
/// {0, 3, 4} then asks for a permit while both holders are valid. Returns whether it got one.
async fn third_after_a_restart(quarantine: Duration) -> bool {
    let mut nodes = RedisNodes::start(5);
    let ttl = ms(3_000);
    let options = LockOptions::default().ttl(ttl);
    let (a, pa) = proxied(&nodes, ttl, quarantine).await;
    let (b, pb) = proxied(&nodes, ttl, quarantine).await;
    let (c, pc) = proxied(&nodes, ttl, quarantine).await;
    if !quarantine.is_zero() {
        past_quarantine(&c, &nodes, &options).await;
    }
    for own in [&pa, &pb] {
        own[3].partition();
        own[4].partition();
    }
    let first = a.semaphore("job", 2).acquire_with(&options).await.unwrap();
    let second = b.semaphore("job", 2).acquire_with(&options).await.unwrap();
    nodes.servers[0].restart();
    pc[1].partition();
    pc[2].partition();
    let third = c
        .semaphore("job", 2)
        .acquire_with(&options.clone().retry_delay(ms(50)).wait_timeout(ms(1_000)))
        .await;
    // Both holders are still valid.
    assert!(first.is_valid() && second.is_valid());
    match third {
        Ok(guard) => {
            assert!(guard.is_valid());
            true
        }
        Err(error) => {
            assert!(error.is_unavailable(), "{error}");
            assert!(error.to_string().contains("quarantine"), "{error}");
            false
        }
    }
}

#[tokio::test]
async fn a_node_restarted_empty_sits_out_so_no_third_holder_gets_in() {
    assert!(!third_after_a_restart(ms(3_000)).await);
}

/// The negative control: without the quarantine, the restarted node grants a slot it forgot,
/// and a third holder of a semaphore of 2 gets in while both others are valid.
#[tokio::test]
async fn without_the_quarantine_a_node_restarted_empty_lets_a_third_holder_in() {
    assert!(third_after_a_restart(Duration::ZERO).await);
}

#[tokio::test]
async fn a_permit_is_a_lease_extended_auto_extended_and_released_like_a_lock() {
    let nodes = RedisNodes::start(5);
    let redlock = redlock(&nodes).await;
    let options = LockOptions::default().ttl(ms(500)).auto_extend(true);
    let guard = redlock
        .semaphore("job", 2)
        .acquire_with(&options)
        .await
        .unwrap();
    assert_eq!(guard.permits(), Some(2));
    let slot = guard.info().slot().unwrap();
    let slot_key = format!("{}\0redlock:permit:{slot}", redlock.key_for("job"));
    // Held three ttls by auto-extension, on the slot's key.
    tokio::time::sleep(ms(1_500)).await;
    assert!(guard.is_valid() && !guard.info().lost().is_lost());
    let token = guard.token().expose().to_owned();
    let held = nodes.values(&slot_key).await;
    assert!(
        held.iter().filter(|v| v.as_deref() == Some(&token)).count() >= 3,
        "{held:?}"
    );
    // An explicit extension extends the slot.
    guard.extend(ms(5_000)).await.unwrap();
    assert!(
        nodes
            .pttls(&slot_key)
            .await
            .iter()
            .filter(|&&t| t > 1_000)
            .count()
            >= 3
    );
    // Released: the lost signal fires, the views end, the slot is free everywhere.
    let info = guard.info();
    assert!(guard.release().await.unwrap().was_held());
    assert!(info.lost().is_lost() && !info.is_valid());
    // Extended to 5 s: gone within 1 s only by the release.
    gone_soon(&nodes, &slot_key).await;
    // A dropped guard releases its slot; a shutdown releases every permit held (a 30 s
    // ttl: gone within 1 s only by their releases).
    let long = LockOptions::default().ttl(ms(30_000));
    let dropped = redlock
        .semaphore("job", 2)
        .acquire_with(&long)
        .await
        .unwrap();
    let slot = dropped.info().slot().unwrap();
    drop(dropped);
    let key = redlock.key_for("job");
    gone_soon(&nodes, &self::slot_key(&key, slot)).await;
    let _one = redlock
        .semaphore("job", 2)
        .acquire_with(&long)
        .await
        .unwrap();
    let _two = redlock
        .semaphore("job", 2)
        .acquire_with(&long)
        .await
        .unwrap();
    let report = redlock.shutdown(Duration::from_secs(5)).await;
    assert_eq!(report.released, ["job", "job"], "{report:?}");
    for slot in 0..2 {
        gone_soon(&nodes, &self::slot_key(&key, slot)).await;
    }
}

#[tokio::test]
async fn a_crashed_holders_permit_is_freed_at_its_ttl() {
    let nodes = RedisNodes::start(5);
    let (a, b, c) = (
        redlock(&nodes).await,
        redlock(&nodes).await,
        redlock(&nodes).await,
    );
    let options = LockOptions::default().ttl(ms(1_000));
    // Before the attempt: every node's key expires at least the ttl after this.
    let asked = Instant::now();
    let crashed = a.semaphore("job", 2).acquire_with(&options).await.unwrap();
    let crashed_slot = crashed.info().slot().unwrap();
    // The holder crashes: its guard is never released, and its handle goes.
    std::mem::forget(crashed);
    drop(a);
    let kept = b.semaphore("job", 2).acquire_with(&options).await.unwrap();
    assert_ne!(kept.info().slot().unwrap(), crashed_slot);
    // Both permits held: a third is busy at once.
    let busy = c
        .semaphore("job", 2)
        .acquire_with(&options.clone().retry_count(0))
        .await
        .unwrap_err();
    assert!(busy.is_busy(), "{busy}");
    // Waiting, it gets the crashed holder's slot once its ttl has passed: no release wakes
    // it, its retry delay does (200 ms, no jitter).
    let waiting = options
        .clone()
        .retry_delay(ms(200))
        .retry_jitter(Duration::ZERO)
        .wait_timeout(Duration::from_secs(5));
    let guard = within(
        "the crashed permit",
        c.semaphore("job", 2).acquire_with(&waiting),
    )
    .await
    .unwrap();
    let after = asked.elapsed();
    assert_eq!(guard.info().slot(), Some(crashed_slot));
    // Not before the crashed permit's ttl (Redis counts whole ms), and soon after it.
    assert!(
        after >= ms(998),
        "granted {after:?} after the crashed attempt"
    );
    assert!(
        after < ms(1_000 + 200 + 800),
        "granted {after:?} after the crashed attempt: not within the retry delay of its expiry"
    );
    guard.release().await.unwrap();
    kept.release().await.unwrap();
}

/// The first attempt stores the semaphore's number of permits: an attempt with another
/// number is refused at once, takes and queues nothing, and says what to do; the stored
/// number lasts as long as the permits taken with it, after which another number is taken.
#[tokio::test]
async fn a_semaphore_refuses_another_number_of_permits_while_in_use() {
    let nodes = RedisNodes::start(5);
    let (a, b) = (redlock(&nodes).await, redlock(&nodes).await);
    let options = permit().ttl(ms(1_000));
    let held = a.semaphore("pool", 2).acquire_with(&options).await.unwrap();
    let key = a.key_for("pool");
    for other in [1, 3] {
        let started = Instant::now();
        let error = b
            .semaphore("pool", other)
            .acquire_with(&options)
            .await
            .unwrap_err();
        assert!(
            matches!(
                error,
                LockError::PermitsMismatch { permits, stored: 2, .. } if permits == other
            ),
            "{error}"
        );
        assert!(!error.is_retryable());
        assert!(
            error.to_string().contains("same number of permits"),
            "{error}"
        );
        // At once, not after the 5 s wait the options allow.
        assert!(started.elapsed() < ms(500), "{:?}", started.elapsed());
    }
    // Nothing taken or queued by the refused attempts: the one slot held, no waiter.
    for slot in 0..3 {
        let expected = if slot == held.info().slot().unwrap() {
            1
        } else {
            0
        };
        let mut present = Vec::new();
        for i in 0..5 {
            let exists: i64 = on_node(&nodes, i, "EXISTS", vec![slot_key(&key, slot)]).await;
            present.push(exists);
        }
        assert_eq!(present, vec![expected; 5], "slot {slot}");
    }
    assert_eq!(
        zcards(&nodes, &format!("{key}\0redlock:permit-waiters")).await,
        [0; 5]
    );
    // The same number is served as usual.
    let second = b.semaphore("pool", 2).acquire_with(&options).await.unwrap();
    held.release().await.unwrap();
    second.release().await.unwrap();
    // Once the permits taken with 2 are released and the stored number has run out (at
    // most the ttl), 3 is taken.
    let deadline = Instant::now() + ms(3_000);
    let three = loop {
        match b.semaphore("pool", 3).acquire_with(&options).await {
            Ok(guard) => break guard,
            Err(LockError::PermitsMismatch { .. }) if Instant::now() < deadline => {
                tokio::time::sleep(ms(50)).await;
            }
            Err(error) => panic!("{error}"),
        }
    };
    three.release().await.unwrap();
}

/// A permit extended past its first ttl, and one detached and resumed with a longer ttl,
/// keep the stored number of permits alive as long as their slot: a handle with another
/// number is still refused, rather than admitted beside them once the first ttl has run out.
#[tokio::test]
async fn an_extended_or_resumed_permit_keeps_its_number_of_permits_stored() {
    let nodes = RedisNodes::start(3);
    let (a, b) = (redlock(&nodes).await, redlock(&nodes).await);
    let short = permit().ttl(ms(1_000));
    let capacity = format!("{}\0redlock:permit-capacity", a.key_for("pool"));
    let key = a.key_for("pool");
    // Every node's capacity lives at least as long as the slot (the rest of the nodes'
    // commands land after the quorum: waited for, within a bound).
    let outlives = |slot: u32| {
        let (nodes, capacity, key) = (&nodes, capacity.clone(), key.clone());
        async move {
            within("the capacity to outlive the slot", async {
                loop {
                    let (kept, held) = (
                        nodes.pttls(&capacity).await,
                        nodes.pttls(&slot_key(&key, slot)).await,
                    );
                    if kept.iter().zip(&held).all(|(k, h)| *h > 0 && k >= h) {
                        return held;
                    }
                    tokio::time::sleep(ms(20)).await;
                }
            })
            .await
        }
    };
    let granted = Instant::now();
    let held = a.semaphore("pool", 2).acquire_with(&short).await.unwrap();
    let slot = held.info().slot().unwrap();
    held.extend(ms(30_000)).await.unwrap();
    let left = outlives(slot).await;
    assert!(left.iter().all(|&pttl| pttl > 2_000), "{left:?}");
    // The detached permit, resumed with a longer ttl than it had.
    let detached = held.detach().unwrap();
    let resumed = a
        .resume_with(&detached, &short.clone().ttl(ms(60_000)))
        .await
        .unwrap();
    let left = outlives(slot).await;
    assert!(left.iter().all(|&pttl| pttl > 31_000), "{left:?}");
    // Past the first ttl, which alone would have let the stored number expire by now.
    tokio::time::sleep_until(granted + ms(1_200)).await;
    let error = b
        .semaphore("pool", 3)
        .acquire_with(&short)
        .await
        .unwrap_err();
    assert!(
        matches!(error, LockError::PermitsMismatch { stored: 2, .. }),
        "{error}"
    );
    resumed.release().await.unwrap();
}

/// A node where another handle stored another number of permits (its attempt there came
/// first) refuses the permit; the permit's extensions leave that number to expire rather than
/// keep it alive, and the permit is held by the other nodes all along.
#[tokio::test]
async fn a_permits_extension_leaves_another_number_of_permits_to_expire() {
    let nodes = RedisNodes::start(3);
    let a = redlock(&nodes).await;
    let capacity = format!("{}\0redlock:permit-capacity", a.key_for("pool"));
    let stored: String = on_node(
        &nodes,
        0,
        "SET",
        vec![capacity.clone(), "3".into(), "PX".into(), "2000".into()],
    )
    .await;
    assert_eq!(stored, "OK");
    let held = a
        .semaphore("pool", 2)
        .acquire_with(&permit().ttl(ms(1_000)))
        .await
        .unwrap();
    let slot = slot_key(&a.key_for("pool"), held.info().slot().unwrap());
    held.extend(ms(30_000)).await.unwrap();
    // The nodes that granted it keep their number as long as the slot...
    within("the granting nodes' capacity to follow the slot", async {
        loop {
            let (kept, slots) = (nodes.pttls(&capacity).await, nodes.pttls(&slot).await);
            if (1..3).all(|i| slots[i] > 2_000 && kept[i] >= slots[i]) {
                break;
            }
            tokio::time::sleep(ms(20)).await;
        }
    })
    .await;
    // ...and the one that refused keeps the other number only as long as it was stored.
    let other: i64 = on_node(&nodes, 0, "PTTL", vec![capacity.clone()]).await;
    assert!(other <= 2_000, "{other}");
    let value: Option<String> = on_node(&nodes, 0, "GET", vec![capacity]).await;
    assert!(
        value.is_none() || value.as_deref() == Some("3"),
        "{value:?}"
    );
    held.release().await.unwrap();
}

#[tokio::test]
async fn a_release_wakes_a_waiter_not_its_retry_delay() {
    let nodes = RedisNodes::start(5);
    let (a, b, c) = (
        redlock(&nodes).await,
        redlock(&nodes).await,
        redlock(&nodes).await,
    );
    let options = LockOptions::default().ttl(ms(30_000));
    let first = a.semaphore("job", 2).acquire_with(&options).await.unwrap();
    let second = b.semaphore("job", 2).acquire_with(&options).await.unwrap();
    // A waiter whose retry delay alone would make it wait 10 s.
    let waiting = options
        .clone()
        .retry_delay(ms(10_000))
        .retry_jitter(Duration::ZERO)
        .wait_timeout(Duration::from_secs(30));
    let key = c.key_for("job");
    let waiter = tokio::spawn(async move { c.semaphore("job", 2).acquire_with(&waiting).await });
    // Until it has queued on every node.
    let queue = format!("{key}\0redlock:permit-waiters");
    within("the waiter to queue", async {
        while nodes.keys(&queue).await.iter().any(Vec::is_empty) {
            tokio::time::sleep(ms(5)).await;
        }
    })
    .await;
    let slot = second.info().slot();
    let released = Instant::now();
    second.release().await.unwrap();
    let guard = within("the waiter", waiter).await.unwrap().unwrap();
    let woken_after = released.elapsed();
    assert!(
        woken_after < ms(1_000),
        "woken {woken_after:?} after the release"
    );
    // It was handed the released slot.
    assert_eq!(guard.info().slot(), slot);
    guard.release().await.unwrap();
    first.release().await.unwrap();
}

#[tokio::test]
async fn a_newcomer_does_not_pass_an_earlier_waiter_but_a_crashed_one_stops_counting() {
    let nodes = RedisNodes::start(5);
    let redlock = redlock(&nodes).await;
    let options = LockOptions::default().ttl(ms(30_000));
    let held = redlock
        .semaphore("job", 2)
        .acquire_with(&options)
        .await
        .unwrap();
    // A waiter that started long ago, queued on every node and still attempting: the one
    // free slot is its.
    let key = redlock.key_for("job");
    let (queue, alive) = (
        format!("{key}\0redlock:permit-waiters"),
        format!("{key}\0redlock:permit-alive"),
    );
    let earlier = "~00000000000000aa".to_owned();
    nodes.zadd(&queue, &["1".to_owned(), earlier.clone()]).await;
    nodes
        .zadd(&alive, &["99999999999999".to_owned(), earlier.clone()])
        .await;
    let once = options.clone().retry_count(0);
    let refused = redlock
        .semaphore("job", 2)
        .acquire_with(&once)
        .await
        .unwrap_err();
    assert!(refused.is_busy(), "{refused}");
    // It stopped attempting: its entry stops counting, and the newcomer gets the slot.
    nodes.zadd(&alive, &["1".to_owned(), earlier.clone()]).await;
    let granted = redlock
        .semaphore("job", 2)
        .acquire_with(&once)
        .await
        .unwrap();
    assert_ne!(granted.info().slot(), held.info().slot());
    // Its stale entry was dropped from the queue on the way.
    assert!(nodes.keys(&queue).await.iter().all(Vec::is_empty));
    granted.release().await.unwrap();
    held.release().await.unwrap();
}

#[tokio::test]
async fn bad_permits_are_refused_before_anything_is_sent() {
    let nodes = RedisNodes::start(5);
    let redlock = redlock(&nodes).await;
    let before = nodes.script_calls().await;
    let invalid = |result: Result<redlock_core::LockGuard, LockError>| match result {
        Err(LockError::Invalid(input)) => input,
        other => panic!("not refused as invalid: {other:?}"),
    };
    let plain = LockOptions::default();
    assert_eq!(
        invalid(redlock.semaphore("r", 0).acquire_with(&plain).await),
        InvalidInput::ZeroPermits
    );
    let many = redlock.semaphore("r", redlock_core::MAX_PERMITS + 1);
    assert!(matches!(
        invalid(many.acquire_with(&plain).await),
        InvalidInput::PermitsAboveCap { .. }
    ));
    for (options, option) in [
        (LockOptions::default().fencing(true), "fencing"),
        (LockOptions::default().reentrant(true), "reentrant"),
    ] {
        assert_eq!(
            invalid(redlock.semaphore("r", 3).acquire_with(&options).await),
            InvalidInput::PermitsWith { option }
        );
    }
    assert_eq!(nodes.script_calls().await, before, "something was sent");
}

/// Node `i`'s slot `slot` of `key` written from a plain client with a 30 s ttl: a holder's
/// (or a holder's extension's) key on that node alone.
async fn plant(nodes: &RedisNodes, i: usize, key: &str, value: &str) {
    let args = vec![
        key.to_owned(),
        value.to_owned(),
        "PX".into(),
        "30000".into(),
    ];
    let _: String = on_node(nodes, i, "SET", args).await;
}

/// Node `i`'s `key` deleted from a plain client.
async fn delete_on(nodes: &RedisNodes, i: usize, key: &str) {
    let _: i64 = on_node(nodes, i, "DEL", vec![key.to_owned()]).await;
}

#[tokio::test]
async fn a_full_semaphore_whose_holders_missed_nodes_is_busy_not_a_split() {
    let nodes = RedisNodes::start(3);
    let redlock = redlock(&nodes).await;
    let options = LockOptions::default().ttl(ms(30_000));
    let first = redlock
        .semaphore("job", 2)
        .acquire_with(&options)
        .await
        .unwrap();
    let second = redlock
        .semaphore("job", 2)
        .acquire_with(&options)
        .await
        .unwrap();
    assert_eq!(
        (first.info().slot(), second.info().slot()),
        (Some(0), Some(1))
    );
    // Slot 0 held on nodes {0, 1}, slot 1 on {1, 2} (extensions that missed a node): both
    // holders valid, the semaphore full.
    let key = redlock.key_for("job");
    delete_on(&nodes, 2, &slot_key(&key, 0)).await;
    delete_on(&nodes, 0, &slot_key(&key, 1)).await;
    // Each attempt: node 0 grants slot 1, node 1 refuses, node 2 grants slot 0. Neither slot
    // was free on two nodes: busy, not a split polled every few ms.
    let before = nodes.script_calls().await;
    let error = redlock
        .semaphore("job", 2)
        .acquire_with(&options.clone().retry_count(3))
        .await
        .unwrap_err();
    let calls: Vec<u64> = nodes
        .script_calls()
        .await
        .iter()
        .zip(&before)
        .map(|(after, before)| after - before)
        .collect();
    println!("script calls per node: {calls:?}");
    assert!(error.is_busy(), "{error}");
    // Five attempts (the first, three retries, the one after joining the queue), their
    // clean-ups and the leave, and a script's first load: a split's ten attempts would be more.
    assert!(
        calls.iter().all(|&n| n <= 14),
        "script calls per node: {calls:?}"
    );
    // What the attempts took was released; the holders keep theirs.
    let token = |guard: &redlock_core::LockGuard| Some(guard.token().expose().to_owned());
    values_soon(
        &nodes,
        &slot_key(&key, 0),
        &[token(&first), token(&first), None],
    )
    .await;
    values_soon(
        &nodes,
        &slot_key(&key, 1),
        &[None, token(&second), token(&second)],
    )
    .await;
    first.release().await.unwrap();
    second.release().await.unwrap();
}

#[tokio::test]
async fn a_split_round_releases_what_it_took_and_the_next_asks_for_the_free_slot_first() {
    let nodes = RedisNodes::start(5);
    let redlock = redlock(&nodes).await;
    let key = redlock.key_for("job");
    // Slots held by others: slot 0 on nodes {0, 1, 4}, slot 1 on {2, 3, 4}. In ascending
    // order an attempt takes slot 1 on nodes 0 and 1, slot 0 on 2 and 3, slot 2 on 4: no slot
    // on three (a split), though slot 2 is free on all five. The attempt after the split asks
    // for slot 2 first, and gets it.
    for i in [0, 1, 4] {
        plant(&nodes, i, &slot_key(&key, 0), "zero").await;
    }
    for i in [2, 3, 4] {
        plant(&nodes, i, &slot_key(&key, 1), "one").await;
    }
    let options = LockOptions::default().ttl(ms(30_000)).retry_count(0);
    let guard = within(
        "the attempts",
        redlock.semaphore("job", 3).acquire_with(&options),
    )
    .await
    .unwrap();
    assert_eq!(guard.info().slot(), Some(2));
    // Nothing of the split round is left: the planted keys only (a 30 s ttl, so not by
    // expiry), and slot 2 the permit's.
    let zero = Some("zero".to_owned());
    let one = Some("one".to_owned());
    let expected = [zero.clone(), zero.clone(), None, None, zero];
    values_soon(&nodes, &slot_key(&key, 0), &expected).await;
    let expected = [None, None, one.clone(), one.clone(), one];
    values_soon(&nodes, &slot_key(&key, 1), &expected).await;
    guard.release().await.unwrap();
    gone_soon(&nodes, &slot_key(&key, 2)).await;
}

#[tokio::test]
async fn waiters_that_leave_leave_no_alive_entries() {
    let nodes = RedisNodes::start(3);
    let redlock = redlock(&nodes).await;
    let options = LockOptions::default().ttl(ms(30_000));
    let held = redlock
        .semaphore("job", 1)
        .acquire_with(&options)
        .await
        .unwrap();
    let key = redlock.key_for("job");
    let (queue, alive) = (
        format!("{key}\0redlock:permit-waiters"),
        format!("{key}\0redlock:permit-alive"),
    );
    // Four waiters give up at their wait timeout, two more are dropped while they wait.
    let waiting = options.clone().retry_delay(ms(50)).retry_jitter(ms(10));
    let timing_out = (0..4).map(|_| {
        let (redlock, waiting) = (redlock.clone(), waiting.clone().wait_timeout(ms(400)));
        async move { redlock.semaphore("job", 1).acquire_with(&waiting).await }
    });
    let dropped = (0..2).map(|_| {
        let (redlock, waiting) = (redlock.clone(), waiting.clone().wait_timeout(ms(10_000)));
        async move {
            tokio::time::timeout(ms(400), redlock.semaphore("job", 1).acquire_with(&waiting)).await
        }
    });
    let (timed_out, dropped) = within("the waiters", async {
        futures_util::future::join(
            futures_util::future::join_all(timing_out),
            futures_util::future::join_all(dropped),
        )
        .await
    })
    .await;
    assert!(
        timed_out
            .iter()
            .all(|r| r.as_ref().is_err_and(LockError::is_busy))
    );
    assert!(
        dropped.iter().all(Result::is_err),
        "a dropped waiter was granted"
    );
    // They left the queue, and their entries in the alive set with it.
    let deadline = Instant::now() + ms(1_000);
    loop {
        let (queued, counted) = (zcards(&nodes, &queue).await, zcards(&nodes, &alive).await);
        if queued.iter().all(|&n| n == 0) && counted.iter().all(|&n| n == 0) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "queued {queued:?}, alive entries {counted:?}"
        );
        tokio::time::sleep(ms(10)).await;
    }
    held.release().await.unwrap();
}

#[tokio::test]
async fn an_alive_entry_no_longer_queued_is_dropped_by_the_next_attempt() {
    let nodes = RedisNodes::start(3);
    let redlock = redlock(&nodes).await;
    let key = redlock.key_for("job");
    let alive = format!("{key}\0redlock:permit-alive");
    // A waiter a release's hand-over popped from the queue, that never came back: its entry
    // still counts for a long while, but it is queued nowhere.
    let gone = "~00000000000000bb".to_owned();
    nodes
        .zadd(&alive, &["99999999999999".to_owned(), gone])
        .await;
    let options = LockOptions::default().ttl(ms(30_000));
    let guard = redlock
        .semaphore("job", 2)
        .acquire_with(&options)
        .await
        .unwrap();
    assert_eq!(zcards(&nodes, &alive).await, [0, 0, 0]);
    guard.release().await.unwrap();
}

/// A waiter queued on three of five nodes only (it was granted on the others, say), ahead of
/// a newcomer: those three keep the free slot for it and refuse the newcomer by rank, the
/// other two grant it. The newcomer is busy (the free permit is the waiter's on a quorum), so
/// it queues behind it rather than splitting.
#[tokio::test]
async fn a_newcomer_refused_by_rank_on_a_quorum_is_busy_not_a_split() {
    let nodes = RedisNodes::start(5);
    let redlock = redlock(&nodes).await;
    let options = LockOptions::default().ttl(ms(30_000));
    let held = redlock
        .semaphore("job", 2)
        .acquire_with(&options)
        .await
        .unwrap();
    let key = redlock.key_for("job");
    let (queue, alive) = (
        format!("{key}\0redlock:permit-waiters"),
        format!("{key}\0redlock:permit-alive"),
    );
    let earlier = "~00000000000000aa".to_owned();
    for i in 0..3 {
        let queued = vec![queue.clone(), "1".into(), earlier.clone()];
        let _: i64 = on_node(&nodes, i, "ZADD", queued).await;
        let counts = vec![alive.clone(), "99999999999999".into(), earlier.clone()];
        let _: i64 = on_node(&nodes, i, "ZADD", counts).await;
    }
    let once = options.clone().retry_count(0);
    let refused = redlock
        .semaphore("job", 2)
        .acquire_with(&once)
        .await
        .unwrap_err();
    assert!(refused.is_busy(), "{refused}");
    held.release().await.unwrap();
}

/// The stored number of permits is read back, and a force-release removes the permits of
/// holders that crashed with a long ttl, waking a waiter at once.
#[tokio::test]
async fn force_release_removes_every_permit_and_wakes_the_waiters() {
    let nodes = RedisNodes::start(5);
    let (a, b) = (redlock(&nodes).await, redlock(&nodes).await);
    assert_eq!(a.semaphore_permits("pool").await.unwrap(), None);
    let long = LockOptions::default().ttl(Duration::from_secs(30));
    for _ in 0..2 {
        std::mem::forget(a.semaphore("pool", 2).acquire_with(&long).await.unwrap());
    }
    assert_eq!(b.semaphore_permits("pool").await.unwrap(), Some(2));
    // A waiter whose retry delay is far too long to explain what the test sees, then the
    // operator breaks both permits.
    let waiting = long
        .clone()
        .retry_delay(Duration::from_secs(10))
        .retry_jitter(Duration::ZERO)
        .wait_timeout(Duration::from_secs(20));
    let waiter = {
        let b = b.clone();
        tokio::spawn(async move { b.semaphore("pool", 2).acquire_with(&waiting).await })
    };
    within("the waiter to queue", async {
        let queue = format!("{}\0redlock:permit-waiters", b.key_for("pool"));
        while zcards(&nodes, &queue).await.iter().sum::<i64>() < 5 {
            tokio::time::sleep(ms(5)).await;
        }
    })
    .await;
    let broken = Instant::now();
    let report = b.force_release("pool").await.unwrap();
    assert_eq!(report.permits_removed, 2, "{report:?}");
    assert!(!report.removed_any(), "no lock was held: {report:?}");
    let guard = within("the woken waiter", waiter).await.unwrap().unwrap();
    assert!(
        broken.elapsed() < ms(2_000),
        "the waiter was not woken: {:?}",
        broken.elapsed()
    );
    guard.release().await.unwrap();
}

/// A permit is detached and resumed like a lock: the resumed guard holds the same slot of the
/// same semaphore, the bound of K holds across the hand-over, the same detached permit cannot
/// be resumed twice, and one detached and released by its token frees its slot.
#[tokio::test]
async fn a_permit_is_detached_resumed_and_released_by_token() {
    let nodes = RedisNodes::start(5);
    let (a, b) = (redlock(&nodes).await, redlock(&nodes).await);
    let options = permit().ttl(ms(5_000));
    let first = a.semaphore("pool", 2).acquire_with(&options).await.unwrap();
    let slot = first.info().slot().unwrap();
    let detached = first.detach().unwrap();
    assert_eq!((detached.permits(), detached.slot()), (Some(2), Some(slot)));
    // Serialized for a job queue and read back, it is the same permit.
    let text = serde_json::to_string(&detached).unwrap();
    let read: redlock_core::DetachedLock = serde_json::from_str(&text).unwrap();
    assert_eq!(
        (read.key(), read.token(), read.permits(), read.slot()),
        (detached.key(), detached.token(), Some(2), Some(slot))
    );
    let resumed = b.resume(&read).await.unwrap();
    assert_eq!(resumed.info().slot(), Some(slot));
    assert_eq!(resumed.info().permits(), Some(2));
    // Still one of the 2: one more fits, a third does not.
    let second = a.semaphore("pool", 2).acquire_with(&options).await.unwrap();
    let third = a
        .semaphore("pool", 2)
        .acquire_with(&options.clone().retry_count(0).wait_timeout(ms(0)))
        .await;
    assert!(third.is_err_and(|e| e.is_busy()));
    // The detached token was swapped away: a second resumption is refused.
    let again = a.resume(&detached).await.unwrap_err();
    assert!(matches!(again, LockError::Lost { .. }), "{again}");
    // Detached again and released by its token: the slot is free at once.
    let key = a.key_for("pool");
    let other = second.detach().unwrap();
    let other_slot = other.slot().unwrap();
    a.release_detached(other).await.unwrap();
    gone_soon(&nodes, &slot_key(&key, other_slot)).await;
    resumed.release().await.unwrap();
    gone_soon(&nodes, &slot_key(&key, slot)).await;
    // A permit's slot out of its semaphore is refused before anything is sent.
    let mut wire: serde_json::Value = serde_json::from_str(&text).unwrap();
    wire["slot"] = serde_json::json!(2);
    assert!(serde_json::from_value::<redlock_core::DetachedLock>(wire.clone()).is_err());
    wire.as_object_mut().unwrap().remove("permits");
    wire["slot"] = serde_json::json!(0);
    assert!(serde_json::from_value::<redlock_core::DetachedLock>(wire).is_err());
}
