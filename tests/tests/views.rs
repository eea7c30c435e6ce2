//! Every view of a lock tells the truth, and re-entry never gives less than asked: the
//! guard's and `LockInfo`'s validity after a release, after a refused extension and once
//! expired; re-entries asking for a longer ttl, fencing, auto-extension or a minimum hold;
//! two scopes of one guard polled together; shutdown with any duration. Against real
//! redis-server processes.

#![allow(clippy::unwrap_used)] // tests unwrap: a failure is the assertion

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;
use tokio::time::Instant;

use redlock_core::{InvalidInput, LockError, LockOptions, LostReason};
use redlock_tests::{RedisNodes, within};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

#[tokio::test]
async fn a_released_locks_views_say_it_is_gone() {
    let nodes = RedisNodes::start(3);
    let (a, b) = (
        redlock_tests::redlock(&nodes).await,
        redlock_tests::redlock(&nodes).await,
    );
    let options = LockOptions::default().ttl(Duration::from_secs(30));
    let guard = a.lock_with("view", &options).await.unwrap();
    let info = guard.info();
    assert!(info.is_valid() && info.remaining_validity() > Duration::from_secs(29));
    guard.release().await.unwrap();
    // The work kept its view; another handle now holds the lock.
    let other = b.lock_with("view", &options).await.unwrap();
    assert!(!info.is_valid(), "a released lock's view claims validity");
    assert_eq!(info.remaining_validity(), Duration::ZERO);
    assert!(info.valid_until() <= Instant::now());
    assert_eq!(info.lost().reason(), Some(LostReason::Released));
    assert!(
        info.lost().deadline() <= Instant::now(),
        "the lost deadline is still ahead"
    );
    other.release().await.unwrap();
}

#[tokio::test]
async fn a_refused_extension_ends_every_view_at_once() {
    let nodes = RedisNodes::start(3);
    let a = redlock_tests::redlock(&nodes).await;
    let options = LockOptions::default().ttl(Duration::from_secs(2));
    let guard = a.lock_with("refused", &options).await.unwrap();
    let info = guard.info();
    // The keys go (a flush, an operator): the extension is refused by every node.
    nodes.delete("refused").await;
    let extended = guard.extend(Duration::from_secs(2)).await;
    assert!(
        matches!(
            extended,
            Err(LockError::Lost {
                reason: LostReason::Refused(_),
                ..
            })
        ),
        "{extended:?}"
    );
    for (valid, left, until) in [
        (
            guard.is_valid(),
            guard.remaining_validity(),
            guard.valid_until(),
        ),
        (
            info.is_valid(),
            info.remaining_validity(),
            info.valid_until(),
        ),
    ] {
        assert!(!valid, "a lock whose extension was refused claims validity");
        assert_eq!(left, Duration::ZERO);
        assert!(until <= Instant::now());
    }
    assert!(guard.lost().deadline() <= Instant::now());
    drop(guard);
}

#[tokio::test]
async fn a_lock_past_its_lost_deadline_is_not_valid() {
    let nodes = RedisNodes::start(1);
    let a = redlock_tests::redlock(&nodes).await;
    let options = LockOptions::default().ttl(ms(1_000)).lost_margin(ms(800));
    let guard = a.lock_with("margin", &options).await.unwrap();
    assert!(guard.is_valid());
    tokio::time::sleep(ms(300)).await;
    // Inside the lost margin: the lost signal has fired, so no view claims the rest.
    assert!(guard.lost().is_lost());
    assert!(!guard.is_valid() && guard.info().remaining_validity().is_zero());
    drop(guard);
}

#[tokio::test]
async fn a_re_entry_asking_for_a_longer_ttl_extends_the_lock() {
    let nodes = RedisNodes::start(3);
    let (a, b) = (
        redlock_tests::redlock(&nodes).await,
        redlock_tests::redlock(&nodes).await,
    );
    let short = LockOptions::default().reentrant(true).ttl(ms(1_000));
    let long = short.clone().ttl(Duration::from_secs(30));
    let outer = a.lock_with("longer", &short).await.unwrap();
    let inner = outer.scope(a.lock_with("longer", &long)).await.unwrap();
    assert_eq!(inner.hold_count(), 2);
    assert!(inner.remaining_validity() > Duration::from_secs(29));
    // The keys were extended (on a quorum at least: the last calls land after it). A node
    // the node timeout cut makes the settling wait its 2 s, and the ttls are read after it.
    let extended = |h: &redlock_tests::Holding| h.ttl.is_some_and(|ttl| ttl > ms(25_000));
    let holdings = nodes.settle("longer", extended).await;
    let longer = holdings.iter().filter(|h| extended(h)).count();
    assert!(longer >= nodes.quorum(), "{holdings:?}");
    // Past the outer ttl the lock still excludes.
    tokio::time::sleep(ms(1_500)).await;
    let other = b
        .lock_with("longer", &LockOptions::default().retry_count(0))
        .await;
    assert!(matches!(other, Err(LockError::Busy { .. })), "{other:?}");
    drop(inner);
    outer.release().await.unwrap();
}

#[tokio::test]
async fn a_re_entry_asking_for_what_the_lock_lacks_is_refused() {
    let nodes = RedisNodes::start(3);
    let a = redlock_tests::redlock(&nodes).await;
    let plain = LockOptions::default().reentrant(true).ttl(ms(1_000));
    let outer = a.lock_with("lacks", &plain).await.unwrap();
    for (asked, option) in [
        (plain.clone().fencing(true), "fencing"),
        (plain.clone().auto_extend(true), "auto_extend"),
        (
            plain.clone().lock_at_least_for(ms(500)),
            "lock_at_least_for",
        ),
    ] {
        let inner = outer.scope(a.lock_with("lacks", &asked)).await;
        match inner {
            Err(LockError::Invalid(InvalidInput::ReentryAsksMore { option: named })) => {
                assert_eq!(named, option);
            }
            other => panic!("re-entry asking for {option} gave {other:?}"),
        }
        assert_eq!(outer.hold_count(), 1, "a refused re-entry kept a hold");
    }
    // Auto-extension capped sooner than asked: refused, naming the cap.
    let capped = plain.clone().auto_extend(true).max_hold(ms(2_000));
    for (outer_options, asked, option) in [
        (&capped, plain.clone().auto_extend(true), "max_hold"),
        (&capped, capped.clone().max_hold(ms(60_000)), "max_hold"),
        (
            &capped.clone().max_extensions(1),
            capped.clone().max_hold(ms(1_000)).max_extensions(3),
            "max_extensions",
        ),
    ] {
        let inner = reenter_with(&a, "capped", outer_options, &asked).await;
        assert!(
            matches!(&inner, Err(LockError::Invalid(InvalidInput::ReentryAsksMore { option: named })) if *named == option),
            "re-entry asking for more than {option} gave {inner:?}"
        );
    }
    // Within the caps (a second less of hold, counted from now): given.
    let within_caps = capped.clone().max_hold(ms(1_000));
    assert_eq!(
        reenter_with(&a, "capped", &capped, &within_caps)
            .await
            .unwrap(),
        2
    );
    // What the outer lock has is given.
    let fenced = plain.clone().fencing(true);
    let outer_fenced = a.lock_with("has", &fenced).await.unwrap();
    let inner = outer_fenced
        .scope(a.lock_with("has", &fenced))
        .await
        .unwrap();
    assert_eq!(inner.fencing_token(), outer_fenced.fencing_token());
    assert!(inner.fencing_token().is_some());
    drop(inner);
    outer_fenced.release().await.unwrap();
    outer.release().await.unwrap();
}

/// Takes `resource` with `outer`, re-enters it with `inner` inside its scope, releases it;
/// the re-entry's hold count, or its error.
async fn reenter_with(
    a: &redlock_core::Redlock,
    resource: &str,
    outer: &LockOptions,
    inner: &LockOptions,
) -> Result<usize, LockError> {
    let guard = a.lock_with(resource, outer).await.unwrap();
    let reentered = guard
        .scope(a.lock_with(resource, inner))
        .await
        .map(|inner| inner.hold_count());
    assert_eq!(guard.hold_count(), 1, "a re-entry kept a hold");
    guard.release().await.unwrap();
    reentered
}

#[tokio::test]
async fn two_scopes_of_one_guard_re_enter_one_at_a_time() {
    let nodes = RedisNodes::start(1);
    let a = redlock_tests::redlock(&nodes).await;
    let options = LockOptions::default()
        .reentrant(true)
        .wait_timeout(Duration::from_secs(5));
    let guard = a.lock_with("turns", &options).await.unwrap();
    let (inside, most) = (Arc::new(AtomicU32::new(0)), Arc::new(AtomicU32::new(0)));
    let body = || {
        let (a, options, inside, most) = (a.clone(), options.clone(), inside.clone(), most.clone());
        async move {
            let inner = a.lock_with("turns", &options).await.unwrap();
            let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
            most.fetch_max(now, Ordering::SeqCst);
            tokio::time::sleep(ms(50)).await;
            inside.fetch_sub(1, Ordering::SeqCst);
            drop(inner);
        }
    };
    within("both scopes", async {
        tokio::join!(guard.scope(body()), guard.scope(body()))
    })
    .await;
    assert_eq!(
        most.load(Ordering::SeqCst),
        1,
        "two re-entered bodies ran at once"
    );
    guard.release().await.unwrap();
}

#[tokio::test]
async fn shutdown_and_release_all_take_any_duration() {
    let nodes = RedisNodes::start(3);
    let a = redlock_tests::redlock(&nodes).await;
    let guard = a.lock("bye").await.unwrap();
    let info = guard.info();
    std::mem::forget(guard);
    let report = within("shutdown(Duration::MAX)", a.shutdown(Duration::MAX)).await;
    assert_eq!(report.released, ["bye"]);
    assert!(!info.is_valid());
    assert_eq!(nodes.values("bye").await, [None, None, None]);
}
