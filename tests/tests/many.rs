//! A lock of several resources (`Redlock::lock_many`) over 5 real nodes: all or none on each
//! node, nothing left behind by a refused attempt, exclusion against single-resource holders,
//! no deadlock and progress for every requester when sets overlap in a cycle, an extension
//! that needs every key, and bad input refused before anything is sent.

#![allow(clippy::unwrap_used)] // tests unwrap: a failure is the assertion

use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

use redlock_core::{InvalidInput, LockError, LockOptions, LostReason, Mode};
use redlock_tests::checker::History;
use redlock_tests::{RedisNodes, redlock, within};

/// One attempt, no waiting.
fn once() -> LockOptions {
    LockOptions::default().retry_count(0)
}

/// Nodes where `key` holds `token`.
async fn holding(nodes: &RedisNodes, key: &str, token: &str) -> usize {
    nodes
        .holdings(key)
        .await
        .iter()
        .filter(|h| h.value.token() == Some(token))
        .count()
}

/// No node holds anything at `key`.
async fn free_everywhere(nodes: &RedisNodes, key: &str) -> bool {
    nodes.values(key).await.iter().all(Option::is_none)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_set_is_taken_all_or_none_and_a_refusal_leaves_nothing_behind() {
    let nodes = RedisNodes::start(5);
    let (a, b) = (redlock(&nodes).await, redlock(&nodes).await);
    let middle = a.lock("b").await.unwrap();
    let token = middle.token().expose();
    nodes.settle("b", |h| h.value.holds(token)).await;
    let error = b
        .lock_many_with(&["a", "b", "c"], &once())
        .await
        .unwrap_err();
    assert!(matches!(error, LockError::Busy { .. }), "{error:?}");
    // Nothing of the set is left on any node: neither the keys before the busy one nor after.
    assert!(free_everywhere(&nodes, "a").await && free_everywhere(&nodes, "c").await);
    middle.release().await.unwrap();
    nodes.gone_everywhere("b").await;

    // A foreign client holds b on 3 of the 5 nodes: the other 2 grant the whole set, too few;
    // the failed attempt releases what it took there (step 5), leaving nothing behind.
    for url in &nodes.urls()[..3] {
        redlock_tests::foreign_set_nx(url, "b").await.unwrap();
    }
    let error = b
        .lock_many_with(&["a", "b", "c"], &once())
        .await
        .unwrap_err();
    let LockError::Busy { outcomes, .. } = &error else {
        panic!("{error:?}");
    };
    assert_eq!(outcomes.acquired(), 2, "{error:?}");
    assert!(free_everywhere(&nodes, "a").await && free_everywhere(&nodes, "c").await);
    let b_values = nodes.values("b").await;
    assert_eq!(b_values.iter().flatten().count(), 3, "{b_values:?}");
    nodes.delete("b").await;

    let guard = b
        .lock_many_with(&["c", "a", "b", "a"], &once())
        .await
        .unwrap();
    assert_eq!(guard.resources(), ["a", "b", "c"]);
    assert_eq!(guard.info().resources(), ["a", "b", "c"]);
    let token = guard.token().expose().to_owned();
    // The lock returns at a quorum; the other nodes' grants land just after, unless the node
    // timeout cut one (a loaded machine): a quorum holds every resource of the set.
    for key in ["a", "b", "c"] {
        let holdings = nodes.settle(key, |h| h.value.token() == Some(&token)).await;
        let held = holdings
            .iter()
            .filter(|h| h.value.token() == Some(&token))
            .count();
        assert!(held >= 3, "{key}: {holdings:?}");
    }
    // Each is the plain lock of its resource: a single holder, or a reader, is refused.
    let error = a.lock_with("c", &once()).await.unwrap_err();
    assert!(error.is_busy(), "{error:?}");
    let read = once();
    let error = a
        .lock_mode_with("a", Mode::ProtectedRead, &read)
        .await
        .unwrap_err();
    assert!(error.is_busy(), "{error:?}");
    assert!(guard.release().await.unwrap().was_held());
    for key in ["a", "b", "c"] {
        nodes.gone_everywhere(key).await;
    }
}

/// Three requesters whose sets form a cycle (x+y, y+z, z+x), and a fourth that locks y alone,
/// loop for 3 s and until each has held its set 3 times: the classic deadlock of locks taken
/// one by one. Every request gets in within its 5 s wait (a deadlock would leave one `Busy`),
/// and no two holders of one resource overlap. (Counted by holds, not by time: on a loaded
/// machine a 3 s window alone gave one requester 2 holds.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sets_that_overlap_in_a_cycle_never_deadlock_and_never_overlap() {
    let nodes = RedisNodes::start(5);
    let histories: Arc<[History; 3]> = Arc::new([History::new(), History::new(), History::new()]);
    let sets: [&[usize]; 4] = [&[0, 1], &[1, 2], &[2, 0], &[1]];
    let names = ["x", "y", "z"];
    let stop = Instant::now() + Duration::from_secs(3);
    let mut tasks = Vec::new();
    for (holder, set) in sets.into_iter().enumerate() {
        let handle = redlock(&nodes).await;
        let histories = Arc::clone(&histories);
        tasks.push(tokio::spawn(async move {
            let resources: Vec<&str> = set.iter().map(|&i| names[i]).collect();
            let options = LockOptions::default()
                .ttl(Duration::from_secs(2))
                .wait_timeout(Duration::from_secs(5))
                .retry_delay(Duration::from_millis(20))
                .retry_jitter(Duration::from_millis(40));
            let mut held = 0;
            while held < 3 || Instant::now() < stop {
                let guard = handle
                    .lock_many_with(&resources, &options)
                    .await
                    .unwrap_or_else(|e| panic!("requester {holder} kept waiting: {e}"));
                let (start, valid_until) = (Instant::now(), guard.valid_until());
                tokio::time::sleep(Duration::from_millis(10)).await;
                let released = Instant::now();
                guard.release().await.unwrap();
                for &i in set {
                    histories[i].record(holder, start, valid_until, released);
                }
                held += 1;
            }
            held
        }));
    }
    for task in tasks {
        let held = within("a requester to finish", task).await.unwrap();
        assert!(held >= 3, "{held}");
    }
    for (i, history) in histories.iter().enumerate() {
        let overlaps = history.overlaps();
        assert!(overlaps.is_empty(), "{}: {overlaps:?}", names[i]);
        assert!(history.len() > 6, "{}: {}", names[i], history.len());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_wakes_the_waiters_of_each_resource() {
    let nodes = RedisNodes::start(5);
    let (a, b, c) = (
        redlock(&nodes).await,
        redlock(&nodes).await,
        redlock(&nodes).await,
    );
    let guard = a.lock_many(&["w1", "w2"]).await.unwrap();
    // Retries 5 s apart: only a wake-up gets them in sooner. One waits for w1 as a plain
    // waiter (queued), the other for w2 as a reader (listening, not queued).
    let patient = LockOptions::default()
        .retry_count(3)
        .retry_delay(Duration::from_secs(5))
        .retry_jitter(Duration::ZERO);
    let plain = tokio::spawn({
        let patient = patient.clone();
        async move { b.lock_with("w1", &patient).await }
    });
    let reader =
        tokio::spawn(async move { c.lock_mode_with("w2", Mode::ProtectedRead, &patient).await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let released = Instant::now();
    guard.release().await.unwrap();
    let plain = within("the plain waiter", plain).await.unwrap().unwrap();
    let reader = within("the reader", reader).await.unwrap().unwrap();
    let waited = released.elapsed();
    assert!(waited < Duration::from_secs(2), "woken after {waited:?}");
    plain.release().await.unwrap();
    reader.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_extension_needs_every_key_of_the_set() {
    let nodes = RedisNodes::start(5);
    let (a, operator) = (redlock(&nodes).await, redlock(&nodes).await);
    let options = LockOptions::default()
        .ttl(Duration::from_secs(1))
        .auto_extend(true);
    let guard = a.lock_many_with(&["p", "q"], &options).await.unwrap();
    let lost = guard.lost();
    // Kept alive past its ttl by the extensions of both keys.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(guard.is_valid());
    let token = guard.token().expose().to_owned();
    assert_eq!(holding(&nodes, "q", &token).await, 5);
    // One key gone: no node holds the whole set, so the next extension is refused.
    operator.force_release("q").await.unwrap();
    within("the lost signal", lost.cancelled()).await;
    assert!(matches!(lost.reason(), Some(LostReason::Refused(_))));
    assert!(!guard.is_valid());
    guard.release().await.ok();
    assert!(nodes.is_free("p").await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_a_lock_of_several_cannot_give_is_refused_before_anything_is_sent() {
    let nodes = RedisNodes::start(3);
    let a = redlock(&nodes).await;
    let before = nodes.script_calls().await;
    let none: [&str; 0] = [];
    let error = a.lock_many(&none).await.unwrap_err();
    assert!(
        matches!(error, LockError::Invalid(InvalidInput::NoResources)),
        "{error:?}"
    );
    let many: Vec<String> = (0..=redlock_core::MAX_RESOURCES)
        .map(|i| format!("r{i}"))
        .collect();
    let error = a.lock_many(&many).await.unwrap_err();
    assert!(
        matches!(
            error,
            LockError::Invalid(InvalidInput::TooManyResources { .. })
        ),
        "{error:?}"
    );
    for (options, option) in [
        (once().fencing(true), "fencing"),
        (once().reentrant(true), "reentrant"),
        (
            once().lock_at_least_for(Duration::from_secs(1)),
            "lock_at_least_for",
        ),
    ] {
        let error = a.lock_many_with(&["m", "n"], &options).await.unwrap_err();
        assert!(
            matches!(&error, LockError::Invalid(InvalidInput::ManyWith { option: o }) if *o == option),
            "{option}: {error:?}"
        );
    }
    let error = a.lock_many_with(&["m", ""], &once()).await.unwrap_err();
    assert!(
        matches!(error, LockError::Invalid(InvalidInput::EmptyResource)),
        "{error:?}"
    );
    assert_eq!(nodes.script_calls().await, before, "something was sent");
    // A lock of several is not handed on.
    let guard = a.lock_many(&["m", "n"]).await.unwrap();
    let error = guard.detach().unwrap_err();
    assert!(
        matches!(
            error,
            LockError::Invalid(InvalidInput::ManyWith { option: "detach" })
        ),
        "{error:?}"
    );
}

/// A lock of several waits without joining a queue: while it attempts again and again at a
/// held resource, no resource's waiter queue holds an entry of its (a place there would hold
/// one resource's hand-overs while the request waits for the others), and it still gets the
/// set once the holder releases.
#[tokio::test]
async fn a_lock_of_several_waits_without_joining_a_queue() {
    let nodes = RedisNodes::start(3);
    let (a, b) = (redlock(&nodes).await, redlock(&nodes).await);
    let keys = [a.key_for("q1"), a.key_for("q2")];
    let held = a.lock("q1").await.unwrap();
    let before: u64 = nodes.script_calls().await.iter().sum();
    let patient = LockOptions::default()
        .retry_delay(Duration::from_millis(20))
        .retry_jitter(Duration::from_millis(5))
        .wait_timeout(Duration::from_secs(10));
    let waiting = tokio::spawn(async move { b.lock_many_with(&["q1", "q2"], &patient).await });
    // Several attempts of the waiter have reached the nodes (three calls each, one per node).
    within("attempts of the lock of several", async {
        while nodes.script_calls().await.iter().sum::<u64>() < before + 5 * 3 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    for key in &keys {
        assert_eq!(nodes.queued(key).await, vec![0, 0, 0], "{key}");
    }
    assert!(!waiting.is_finished());
    held.release().await.unwrap();
    let guard = within("the lock of several", waiting)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(guard.resources(), ["q1", "q2"]);
}
