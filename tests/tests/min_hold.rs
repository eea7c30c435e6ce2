//! `lock_at_least_for` (ShedLock's `lockAtLeastFor`) against real nodes: a release before the
//! minimum hold keeps the key on every node until then, whichever way the lock is released;
//! after it, the key goes at once; bad combinations are refused before anything is sent.

#![allow(clippy::unwrap_used)] // tests unwrap: a failure is the assertion

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use redlock_core::{InvalidInput, LockError, LockOptions, Mode, Redlock, redlock};
use redlock_tests::{RedisNodes, free_within, within};

/// Long enough that the first look at the nodes comes before it ends even on a loaded 2-core
/// machine (at 1 s, a fresh CI run once took its lock, extension and release past it).
const AT_LEAST: Duration = Duration::from_millis(3_000);

fn single() -> LockOptions {
    LockOptions::default()
        .retry_count(0)
        .ttl(Duration::from_secs(10))
}

/// Waits until `key` is kept on every node: it no longer holds the token (an extension or a
/// release sent late cannot match it) and expires within the minimum hold, not the 10 s ttl,
/// and not before it (`taken`: before the attempt started). A release in the background
/// (a dropped guard) lands within the wait.
async fn kept(nodes: &RedisNodes, key: &str, taken: Instant) {
    within("the key kept", async {
        loop {
            let pttls = nodes.pttls(key).await;
            let values = nodes.values(key).await;
            // Counted from before the attempt: the key's expiry is at least this far.
            let left = AT_LEAST.saturating_sub(taken.elapsed());
            let kept = pttls.iter().zip(&values).all(|(&pttl, value)| {
                value
                    .as_deref()
                    .is_some_and(|v| v.starts_with("redlock:kept:"))
                    && u64::try_from(pttl).is_ok_and(|ms| Duration::from_millis(ms) <= AT_LEAST)
            });
            if kept {
                for pttl in pttls {
                    let pttl = Duration::from_millis(u64::try_from(pttl).unwrap());
                    let early = left.saturating_sub(pttl);
                    assert!(
                        early <= Duration::from_millis(50),
                        "kept {early:?} too short"
                    );
                }
                return;
            }
            assert!(
                taken.elapsed() < AT_LEAST,
                "not kept within the minimum hold: {values:?} {pttls:?}"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_before_the_minimum_hold_keeps_the_key_until_then() {
    let nodes = RedisNodes::start(3);
    let (a, b) = (
        redlock_tests::redlock(&nodes).await,
        redlock_tests::redlock(&nodes).await,
    );
    let options = single().lock_at_least_for(AT_LEAST);

    // Explicit release, right away.
    let taken = Instant::now();
    let guard = a.lock_with("job:explicit", &options).await.unwrap();
    // Extended past the minimum hold first: the release still keeps it only until then.
    guard.extend(Duration::from_secs(10)).await.unwrap();
    let released = guard.release().await.unwrap();
    assert!(released.was_held(), "{released:?}");
    kept(&nodes, &a.key_for("job:explicit"), taken).await;
    let busy = b.lock_with("job:explicit", &single()).await.unwrap_err();
    assert!(busy.is_busy(), "{busy}");
    // Free once the minimum hold is over, not before.
    let free = free_within(&b, "job:explicit").await;
    assert!(
        taken.elapsed() >= AT_LEAST - Duration::from_millis(20),
        "free after {free:?}"
    );

    // A dropped guard and release_all keep it too.
    let taken = Instant::now();
    drop(a.lock_with("job:dropped", &options).await.unwrap());
    let kept_all = a.lock_with("job:all", &options).await.unwrap();
    a.release_all().await;
    kept(&nodes, &a.key_for("job:dropped"), taken).await;
    kept(&nodes, &a.key_for("job:all"), taken).await;
    drop(kept_all);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_after_the_minimum_hold_deletes_the_key_at_once() {
    let nodes = RedisNodes::start(3);
    let a = redlock_tests::redlock(&nodes).await;
    let short = single().lock_at_least_for(Duration::from_millis(200));
    let guard = a.lock_with("job:late", &short).await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(guard.release().await.unwrap().was_held());
    // Deleted at once where the release returned (a quorum), not kept; then gone from the
    // last node too, long before the key's ttl.
    let key = a.key_for("job:late");
    assert!(
        nodes.is_free(&key).await,
        "{:?}",
        nodes.holdings(&key).await
    );
    nodes.gone_everywhere(&key).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_takes_the_kept_key_when_it_expires() {
    let nodes = RedisNodes::start(3);
    let (a, b) = (
        redlock_tests::redlock(&nodes).await,
        redlock_tests::redlock(&nodes).await,
    );
    let taken = Instant::now();
    let guard = a
        .lock_with("job:wait", &single().lock_at_least_for(AT_LEAST))
        .await
        .unwrap();
    guard.release().await.unwrap();
    let patient = single()
        .retry_delay(Duration::from_millis(50))
        .wait_timeout(Duration::from_secs(5));
    let got = within("the waiter", b.lock_with("job:wait", &patient))
        .await
        .unwrap();
    assert!(taken.elapsed() >= AT_LEAST - Duration::from_millis(20));
    got.release().await.unwrap();
}

#[tokio::test]
async fn bad_minimum_holds_are_refused_before_anything_is_sent() {
    // Refused by `validate`: nothing reaches the nodes.
    let nodes = RedisNodes::start(3);
    let a = redlock_tests::redlock(&nodes).await;
    let long = single()
        .ttl(Duration::from_secs(1))
        .lock_at_least_for(Duration::from_secs(2));
    assert!(matches!(
        a.lock_with("job:bad", &long).await,
        Err(LockError::Invalid(InvalidInput::AtLeastAboveTtl { .. }))
    ));
    let moded = single().lock_at_least_for(AT_LEAST);
    assert!(matches!(
        a.lock_mode_with("job:bad", Mode::Exclusive, &moded).await,
        Err(LockError::Invalid(InvalidInput::AtLeastWithMode))
    ));
    assert_eq!(
        nodes.values(&a.key_for("job:bad")).await,
        vec![None, None, None]
    );
}

/// Two replicas whose schedules fire 300 ms apart: with the minimum hold, the later one skips.
#[redlock(
    resource = "nightly:{day}",
    redlock = redlock,
    ttl = "10s",
    retry_count = 0,
    lock_at_least_for = "1s",
    on_busy = "skip"
)]
async fn nightly(redlock: &Redlock, day: u32, runs: &AtomicU32) -> Result<Option<()>, LockError> {
    runs.fetch_add(1, Ordering::SeqCst);
    Ok(Some(()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fast_job_is_not_run_again_by_a_later_replica() {
    let nodes = RedisNodes::start(3);
    let (a, b) = (
        redlock_tests::redlock(&nodes).await,
        redlock_tests::redlock(&nodes).await,
    );
    let runs = Arc::new(AtomicU32::new(0));
    assert_eq!(nightly(&a, 1, &runs).await.unwrap(), Some(()));
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(nightly(&b, 1, &runs).await.unwrap(), None);
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}
