//! The public API at its edges, where an earlier version let two holders in, panicked, or lost
//! a release: a dropped waiter, waits and caps of `Duration::MAX`, a second runtime, a runtime
//! shutting down under a guard. Against real redis-server processes.

#![allow(clippy::unwrap_used)] // tests unwrap: a failure is the assertion

use std::time::Duration;

use redlock_core::{LockOptions, Mode};
use redlock_tests::{RedisNodes, free_within, is_free, redlock, within};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// Waits until `key`'s waiter queue holds `n` entries on every node.
async fn until_queued(nodes: &RedisNodes, key: &str, n: i64) {
    within("the queue to reach its size on every node", async {
        while nodes.queued(key).await.iter().any(|&q| q != n) {
            tokio::time::sleep(ms(2)).await;
        }
    })
    .await;
}

#[tokio::test]
async fn a_waiter_whose_future_is_dropped_leaves_the_queue() {
    let nodes = RedisNodes::start(3);
    let (a, b) = (redlock(&nodes).await, redlock(&nodes).await);
    let holder = a.lock("q").await.unwrap();
    let waiting = tokio::spawn({
        let b = b.clone();
        async move {
            let wait = LockOptions::default().wait_timeout(Duration::from_secs(30));
            b.lock_with("q", &wait).await.map(drop)
        }
    });
    until_queued(&nodes, "q", 1).await;
    // The caller gives up on the future (a timeout, a cancelled request).
    waiting.abort();
    assert!(waiting.await.unwrap_err().is_cancelled());
    // Its place goes within the node timeout, not when the queue's ttl runs out.
    within("the dropped waiter to leave", until_queued(&nodes, "q", 0)).await;
    // So the release frees the key at once instead of reserving it for a dead waiter.
    holder.release().await.unwrap();
    assert!(is_free(&b, "q").await);
}

#[tokio::test]
async fn a_waiter_queue_never_grows_past_its_cap() {
    let nodes = RedisNodes::start(1);
    let (a, b) = (redlock(&nodes).await, redlock(&nodes).await);
    let holder = a.lock("full").await.unwrap();
    // 1024 entries left by waiters that died without leaving.
    let members: Vec<String> = (0..1024)
        .flat_map(|i| [i.to_string(), format!("~dead{i}")])
        .collect();
    nodes.zadd("full:waiters", &members).await;
    let waiter = tokio::spawn({
        let b = b.clone();
        async move {
            let wait = LockOptions::default().wait_timeout(Duration::from_secs(10));
            b.lock_with("full", &wait).await.map(drop)
        }
    });
    // While it waits (having attempted a few times), the queue stays at its cap.
    tokio::time::sleep(ms(600)).await;
    assert!(!waiter.is_finished());
    assert_eq!(
        nodes.queued("full").await,
        [1024],
        "the queue grew past its cap"
    );
    // Left out of the queue, it still gets the lock when the holder goes.
    holder.release().await.unwrap();
    within("the waiter left out of the queue", waiter)
        .await
        .unwrap()
        .unwrap();
}

#[tokio::test]
async fn waits_and_caps_of_duration_max_mean_no_limit_and_never_panic() {
    let nodes = RedisNodes::start(3);
    let (a, b) = (redlock(&nodes).await, redlock(&nodes).await);
    for mode in [None, Some(Mode::Exclusive)] {
        let with_mode = |options: LockOptions| match mode {
            Some(mode) => options.mode(mode),
            None => options,
        };
        let holder = a
            .lock_with("max", &with_mode(LockOptions::default()))
            .await
            .unwrap();
        // Wait forever, and retry delays too long for the clock: woken by the release.
        let forever = with_mode(LockOptions::default().wait_timeout(Duration::MAX));
        let far = with_mode(
            LockOptions::default()
                .wait_timeout(Duration::from_secs(30))
                .retry_delay(Duration::MAX)
                .retry_jitter(ms(10)),
        );
        let waiters = [forever, far].map(|options| {
            let b = b.clone();
            tokio::spawn(async move { b.lock_with("max", &options).await.map(drop) })
        });
        tokio::time::sleep(ms(300)).await;
        assert!(waiters.iter().all(|w| !w.is_finished()), "a waiter gave up");
        holder.release().await.unwrap();
        for waiter in waiters {
            within("a waiter of Duration::MAX", waiter)
                .await
                .unwrap()
                .unwrap();
        }
    }
    // No cap on the hold: auto-extended past three ttls.
    let options = LockOptions::default()
        .ttl(ms(300))
        .auto_extend(true)
        .max_hold(Duration::MAX);
    let guard = a.lock_with("max-hold", &options).await.unwrap();
    tokio::time::sleep(ms(900)).await;
    assert!(guard.is_valid() && !guard.lost().is_lost(), "not extended");
    guard.release().await.unwrap();
}

#[test]
fn locks_are_extended_after_the_runtime_of_the_first_auto_extended_lock_ended() {
    let main = tokio::runtime::Runtime::new().unwrap();
    let nodes = RedisNodes::start(3);
    let a = main.block_on(redlock(&nodes));
    let options = LockOptions::default().ttl(ms(300)).auto_extend(true);
    // A short-lived runtime takes the handle's first auto-extended lock, then ends.
    let short = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    short.block_on(async {
        let guard = a.lock_with("first", &options).await.unwrap();
        guard.release().await.unwrap();
    });
    drop(short);
    let held = main.block_on(async {
        let guard = a.lock_with("second", &options).await.unwrap();
        tokio::time::sleep(ms(1_000)).await;
        let held = guard.is_valid() && !guard.lost().is_lost();
        guard.release().await.unwrap();
        held
    });
    assert!(held, "the lock was not extended past its ttl");
}

#[test]
fn a_guard_dropped_by_a_runtime_shutting_down_is_still_released() {
    let main = tokio::runtime::Runtime::new().unwrap();
    let nodes = RedisNodes::start(3);
    let (a, probe) = main.block_on(async { (redlock(&nodes).await, redlock(&nodes).await) });
    let short = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let (held_tx, held_rx) = tokio::sync::oneshot::channel();
    short.spawn({
        let a = a.clone();
        async move {
            let options = LockOptions::default().ttl(Duration::from_secs(30));
            let _guard = a.lock_with("dropped", &options).await.unwrap();
            let _ = held_tx.send(());
            std::future::pending::<()>().await;
        }
    });
    short.block_on(held_rx).unwrap();
    // The runtime shuts down: its task, and the guard in it, are dropped there.
    drop(short);
    let freed = main.block_on(free_within(&probe, "dropped"));
    assert!(freed < ms(1_000), "released after {freed:?}, not at once");
}
