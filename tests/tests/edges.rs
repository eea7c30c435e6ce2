//! The public API at its edges, where an earlier version let two holders in, panicked, or lost
//! a release: a dropped waiter, waits and caps of `Duration::MAX`, a second runtime, a runtime
//! shutting down under a guard. Against real redis-server processes.

#![allow(clippy::unwrap_used)] // tests unwrap: a failure is the assertion

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use redlock_core::{LockError, LockOptions, Mode, Redlock, redlock};
use redlock_tests::{RedisNodes, free_within, is_free, lock_as, waiters_key, within};

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
    let (a, b) = (
        redlock_tests::redlock(&nodes).await,
        redlock_tests::redlock(&nodes).await,
    );
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
    let (a, b) = (
        redlock_tests::redlock(&nodes).await,
        redlock_tests::redlock(&nodes).await,
    );
    let holder = a.lock("full").await.unwrap();
    // 1024 entries left by waiters that died without leaving.
    let members: Vec<String> = (0..1024)
        .flat_map(|i| [i.to_string(), format!("~dead{i}")])
        .collect();
    nodes.zadd(&waiters_key("full"), &members).await;
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
    let (a, b) = (
        redlock_tests::redlock(&nodes).await,
        redlock_tests::redlock(&nodes).await,
    );
    for mode in [None, Some(Mode::Exclusive)] {
        let holder = lock_as(&a, "max", mode, &LockOptions::default())
            .await
            .unwrap();
        // Wait forever, and retry delays too long for the clock: woken by the release.
        let forever = LockOptions::default().wait_timeout(Duration::MAX);
        let far = LockOptions::default()
            .wait_timeout(Duration::from_secs(30))
            .retry_delay(Duration::MAX)
            .retry_jitter(ms(10));
        let waiters = [forever, far].map(|options| {
            let b = b.clone();
            tokio::spawn(async move { lock_as(&b, "max", mode, &options).await.map(drop) })
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
        .ttl(ms(600))
        .auto_extend(true)
        .max_hold(Duration::MAX);
    let guard = a.lock_with("max-hold", &options).await.unwrap();
    tokio::time::sleep(ms(1_800)).await;
    assert!(guard.is_valid() && !guard.lost().is_lost(), "not extended");
    guard.release().await.unwrap();
}

#[test]
fn locks_are_extended_after_the_runtime_of_the_first_auto_extended_lock_ended() {
    let main = tokio::runtime::Runtime::new().unwrap();
    let nodes = RedisNodes::start(3);
    let a = main.block_on(redlock_tests::redlock(&nodes));
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
    let (a, probe) = main.block_on(async {
        (
            redlock_tests::redlock(&nodes).await,
            redlock_tests::redlock(&nodes).await,
        )
    });
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

/// Runs a 200 ms critical section, recording the most sections inside at once.
async fn section(inside: &AtomicU32, most: &AtomicU32) {
    let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
    most.fetch_max(now, Ordering::SeqCst);
    tokio::time::sleep(ms(200)).await;
    inside.fetch_sub(1, Ordering::SeqCst);
}

#[tokio::test]
async fn a_scoped_future_spawned_elsewhere_carries_only_its_own_lock() {
    let nodes = RedisNodes::start(3);
    let a = redlock_tests::redlock(&nodes).await;
    let reentrant = LockOptions::default().reentrant(true).retry_count(0);
    let (inside, most) = (Arc::new(AtomicU32::new(0)), Arc::new(AtomicU32::new(0)));
    let outer = a.lock_with("a", &reentrant).await.unwrap();
    let refused = outer
        .scope(async {
            let b = a.lock_with("b", &reentrant).await.unwrap();
            // Built inside `a`'s scope, run by another task: only `b`'s scope goes with it.
            let spawned = tokio::spawn(b.scope({
                let (a, reentrant) = (a.clone(), reentrant.clone());
                let (inside, most) = (inside.clone(), most.clone());
                async move {
                    let taken = a.lock_with("a", &reentrant).await;
                    if taken.is_ok() {
                        section(&inside, &most).await;
                    }
                    taken.map(drop)
                }
            }));
            section(&inside, &most).await;
            spawned.await.unwrap()
        })
        .await;
    assert!(refused.unwrap_err().is_busy());
    assert_eq!(most.load(Ordering::SeqCst), 1, "two holders of `a` at once");
    outer.release().await.unwrap();
}

#[redlock(resource = "acct", redlock = redlock, retry_count = 3, retry_delay = "100ms")]
async fn debit(redlock: &Redlock, inside: &AtomicU32, most: &AtomicU32) -> Result<(), LockError> {
    let _ = redlock;
    section(inside, most).await;
    Ok(())
}

#[redlock(resource = "acct", redlock = redlock)]
async fn batch(redlock: &Redlock, inside: &AtomicU32, most: &AtomicU32) -> Result<(), LockError> {
    let (x, y) = tokio::join!(debit(redlock, inside, most), debit(redlock, inside, most));
    x.and(y)
}

#[tokio::test]
async fn sibling_re_entries_inside_a_locked_body_take_turns() {
    let nodes = RedisNodes::start(3);
    let a = redlock_tests::redlock(&nodes).await;
    let (inside, most) = (AtomicU32::new(0), AtomicU32::new(0));
    within("the batch", batch(&a, &inside, &most))
        .await
        .unwrap();
    assert_eq!(
        most.load(Ordering::SeqCst),
        1,
        "two `debit` bodies ran at once"
    );
}

#[tokio::test]
async fn a_released_scope_lets_the_resource_be_locked_afresh() {
    let nodes = RedisNodes::start(3);
    let a = redlock_tests::redlock(&nodes).await;
    let reentrant = LockOptions::default().reentrant(true).retry_count(0);
    let guard = a.lock_with("rel", &reentrant).await.unwrap();
    let later = guard.scope({
        let (a, reentrant) = (a.clone(), reentrant.clone());
        async move { a.lock_with("rel", &reentrant).await }
    });
    guard.release().await.unwrap();
    let fresh = later.await.unwrap();
    assert_eq!(fresh.hold_count(), 1, "re-entered a released lock");
    fresh.release().await.unwrap();
}

#[tokio::test]
async fn a_kept_release_of_a_lost_lock_is_not_reported_as_held() {
    let nodes = RedisNodes::start(3);
    let (a, b) = (
        redlock_tests::redlock(&nodes).await,
        redlock_tests::redlock(&nodes).await,
    );
    let reentrant = LockOptions::default().reentrant(true).ttl(ms(300));
    let outer = a.lock_with("kept", &reentrant).await.unwrap();
    let inner = outer.scope(a.lock_with("kept", &reentrant)).await.unwrap();
    tokio::time::sleep(ms(600)).await;
    let other = b.lock("kept").await.unwrap();
    let released = inner.release().await;
    assert!(
        matches!(released, Err(LockError::Lost { .. })),
        "{released:?}"
    );
    assert!(!outer.release().await.unwrap().was_held());
    other.release().await.unwrap();
}

#[tokio::test]
async fn a_node_timeout_of_duration_max_does_not_panic_a_mode_lock() {
    let nodes = RedisNodes::start(1);
    let a = Redlock::builder()
        .nodes(nodes.urls())
        .node_timeout(Duration::MAX)
        .build()
        .await
        .unwrap();
    let guard = a.lock_mode("m", Mode::Exclusive, ms(1_000)).await.unwrap();
    guard.release().await.unwrap();
}

#[tokio::test]
async fn waits_dropped_while_subscribing_leave_no_channel_behind() {
    use fred::interfaces::PubsubInterface;
    let mut nodes = RedisNodes::start(3);
    let holder = redlock_tests::redlock(&nodes).await;
    let waiter = Redlock::builder()
        .nodes(nodes.urls())
        .node_timeout(ms(1_000))
        .build()
        .await
        .unwrap();
    // A node down: a failed attempt's clean-up waits the node timeout for its release there,
    // then the join waits as long for its subscription there.
    nodes.servers[2].kill();
    let wait = LockOptions::default().wait_timeout(Duration::from_secs(10));
    let mut guards = Vec::new();
    for i in 0..4 {
        let resource = format!("leak:{i}");
        guards.push(holder.lock(&resource).await.unwrap());
        // Dropped (a request timeout) while its join awaits the subscriptions.
        let dropped = tokio::time::timeout(ms(1_500), waiter.lock_with(&resource, &wait)).await;
        assert!(dropped.is_err(), "{i}: the wait ended on its own");
    }
    // Past the linger, the live nodes hold no channel of ours.
    tokio::time::sleep(Duration::from_millis(3_000)).await;
    for url in &nodes.urls()[..2] {
        let channels: Vec<String> = redlock_tests::plain_client(url)
            .await
            .pubsub_channels("*")
            .await
            .unwrap();
        assert!(channels.is_empty(), "{url} still subscribed: {channels:?}");
    }
    drop(guards);
}

#[tokio::test]
async fn a_hand_over_grace_under_a_millisecond_still_hands_over() {
    let nodes = RedisNodes::start(3);
    let builder = || {
        Redlock::builder()
            .nodes(nodes.urls())
            .handover_grace(Duration::from_micros(300))
    };
    let (a, b) = (
        builder().build().await.unwrap(),
        builder().build().await.unwrap(),
    );
    let long = LockOptions::default().ttl(Duration::from_secs(20));
    let holder = a.lock_with("grace", &long).await.unwrap();
    let waiting = tokio::spawn({
        let (b, long) = (b.clone(), long.clone());
        async move {
            let wait = long.wait_timeout(Duration::from_secs(10));
            b.lock_with("grace", &wait).await
        }
    });
    // Queued on a quorum: a node that missed the holder's grant (its connection still
    // opening, or the grant cut by the node timeout) grants the waiter instead of queueing it.
    within("the waiter queued on a quorum", async {
        while nodes
            .queued("grace")
            .await
            .iter()
            .filter(|&&q| q == 1)
            .count()
            < 2
        {
            tokio::time::sleep(ms(2)).await;
        }
    })
    .await;
    let released = holder.release().await.unwrap();
    assert!(released.was_held(), "{released:?}");
    // Handed over well before the 20 s key would have expired.
    let next = within("the waiter", waiting).await.unwrap().unwrap();
    next.release().await.unwrap();
}
