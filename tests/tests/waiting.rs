//! Deciding at quorum, waking waiters without polling, and fair hand-over, against real
//! redis-server processes.

#![allow(clippy::unwrap_used)] // tests unwrap: a failure is the assertion

use std::time::{Duration, Instant};

use fred::interfaces::ClientLike;
use fred::types::{ClusterHash, CustomCommand};
use redlock_core::{BuildError, LockError, LockOptions, Redlock};
use redlock_tests::{RedisNodes, plain_client, redlock, waiters_key, within};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// Options of a waiter whose retry delay alone would make it wait `delay`.
fn waiter(delay: Duration) -> LockOptions {
    LockOptions::default()
        .retry_delay(delay)
        .retry_jitter(Duration::ZERO)
        .wait_timeout(Duration::from_secs(30))
}

/// Waits until `key` has `n` waiters queued on a quorum of the nodes.
///
/// A quorum is what hand-over needs: a release reserves the key for the queue's head on
/// each node where it queued. Waiting for every node would fail a correct lock on a loaded
/// machine, where one node's queued attempt can miss the node timeout and the waiter then
/// keeps its place on the others rather than attempting again.
async fn until_queued(nodes: &RedisNodes, key: &str, n: i64) {
    let quorum = nodes.servers.len() / 2 + 1;
    within("the waiter to queue on a quorum of the nodes", async {
        while nodes.queued(key).await.iter().filter(|&&q| q >= n).count() < quorum {
            tokio::time::sleep(ms(2)).await;
        }
    })
    .await;
}

#[tokio::test]
async fn a_waiter_is_woken_by_the_release_not_by_its_retry_delay() {
    let nodes = RedisNodes::start(5);
    let (a, b) = (redlock(&nodes).await, redlock(&nodes).await);
    let held = a.lock("res").await.unwrap();
    // Polling with a 10 s delay would take 10 s after the release.
    let waiting = tokio::spawn(async move { b.lock_with("res", &waiter(ms(10_000))).await });
    until_queued(&nodes, "res", 1).await;
    let released = Instant::now();
    held.release().await.unwrap();
    let guard = within("the waiter", waiting).await.unwrap().unwrap();
    let woken_after = released.elapsed();
    assert!(
        woken_after < ms(1_000),
        "woken {woken_after:?} after the release"
    );
    // Held on a quorum (a node whose release had not landed when the waiter asked refused
    // it), and out of the queue on every node (the leave after a partial grant runs behind).
    let token = guard.token().expose().to_owned();
    assert_eq!(nodes.holder("res").await, Some(token));
    within("the waiter to leave the queue on every node", async {
        while nodes.queued("res").await != vec![0; 5] {
            tokio::time::sleep(ms(2)).await;
        }
    })
    .await;
    // No node answered an error to the handles' connections: the subscriber connections,
    // which connect at build, send no `SUBSCRIBE` or `PSUBSCRIBE` without a channel (the
    // waiter subscribed only once it was connected).
    for server in &nodes.servers {
        let info = CustomCommand::new_static("INFO", ClusterHash::FirstKey, false);
        let errors: String = plain_client(&server.url())
            .await
            .custom(info, vec!["errorstats"])
            .await
            .unwrap();
        assert!(!errors.contains("errorstat_ERR"), "{errors}");
    }
}

/// The channels with a subscriber on each node, asked through `clients` (one per node).
async fn subscribed(clients: &[fred::clients::Client]) -> Vec<Vec<String>> {
    let mut all = Vec::new();
    for client in clients {
        let channels = CustomCommand::new_static("PUBSUB", ClusterHash::FirstKey, false);
        all.push(client.custom(channels, vec!["CHANNELS"]).await.unwrap());
    }
    all
}

#[tokio::test]
async fn a_waiter_subscribes_again_when_its_connections_come_back() {
    let nodes = RedisNodes::start(3);
    let (a, b) = (redlock(&nodes).await, redlock(&nodes).await);
    let held = a.lock("res").await.unwrap();
    let waiting = tokio::spawn(async move { b.lock_with("res", &waiter(ms(10_000))).await });
    until_queued(&nodes, "res", 1).await;
    let mut clients = Vec::new();
    for server in &nodes.servers {
        clients.push(plain_client(&server.url()).await);
    }
    let subscribed_everywhere = || async {
        while subscribed(&clients).await.iter().any(Vec::is_empty) {
            tokio::time::sleep(ms(2)).await;
        }
    };
    within(
        "the waiter to subscribe on every node",
        subscribed_everywhere(),
    )
    .await;
    // The waiter's subscriber connection is cut on every node (the only connection there in
    // the pubsub state: the holder's subscriber has no channel); the client reconnects it.
    for client in &clients {
        let kill = CustomCommand::new_static("CLIENT", ClusterHash::FirstKey, false);
        let killed: i64 = client
            .custom(kill, vec!["KILL", "TYPE", "pubsub"])
            .await
            .unwrap();
        assert_eq!(killed, 1);
    }
    within(
        "the waiter to subscribe again on every node",
        subscribed_everywhere(),
    )
    .await;
    // Woken by the release, not by its 10 s retry delay.
    let released = Instant::now();
    held.release().await.unwrap();
    let guard = within("the waiter", waiting).await.unwrap().unwrap();
    assert!(released.elapsed() < ms(1_000), "{:?}", released.elapsed());
    guard.release().await.unwrap();
}

#[tokio::test]
async fn a_releasing_holder_does_not_re_grab_the_lock_ahead_of_a_waiter() {
    let nodes = RedisNodes::start(5);
    let (a, b) = (redlock(&nodes).await, redlock(&nodes).await);
    let held = a.lock("res").await.unwrap();
    let waiting = tokio::spawn(async move { b.lock_with("res", &waiter(ms(10_000))).await });
    until_queued(&nodes, "res", 1).await;
    held.release().await.unwrap();
    // At once, as a polling holder would: the key is reserved for the waiter.
    let once = LockOptions::default().retry_count(0);
    match a.lock_with("res", &once).await {
        Err(LockError::Busy { .. }) => {}
        other => panic!("the releasing holder re-grabbed the lock: {other:?}"),
    }
    let guard = within("the waiter", waiting).await.unwrap().unwrap();
    assert!(guard.is_valid());
}

#[tokio::test]
async fn waiters_are_served_in_the_order_they_started_waiting() {
    let nodes = RedisNodes::start(5);
    let holder = redlock(&nodes).await;
    let held = holder.lock("res").await.unwrap();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    for i in 0..4i64 {
        let (handle, tx) = (redlock(&nodes).await, tx.clone());
        tokio::spawn(async move {
            let guard = handle.lock_with("res", &waiter(ms(10_000))).await.unwrap();
            tx.send(i).unwrap();
            tokio::time::sleep(ms(20)).await;
            guard.release().await.unwrap();
        });
        until_queued(&nodes, "res", i + 1).await;
    }
    held.release().await.unwrap();
    let mut order = Vec::new();
    for _ in 0..4 {
        order.push(within("the next waiter", rx.recv()).await.unwrap());
    }
    assert_eq!(order, vec![0, 1, 2, 3]);
}

#[tokio::test]
async fn a_waiter_that_died_in_the_queue_costs_only_the_grace() {
    let nodes = RedisNodes::start(5);
    let (a, b) = (redlock(&nodes).await, redlock(&nodes).await);
    let held = a.lock("res").await.unwrap();
    // A waiter that queued first (score 0) and then died.
    for url in nodes.urls() {
        let client = plain_client(&url).await;
        let zadd = CustomCommand::new_static("ZADD", ClusterHash::FirstKey, false);
        let _: i64 = client
            .custom(zadd, vec![waiters_key("res"), "0".into(), "~dead".into()])
            .await
            .unwrap();
        client.quit().await.unwrap();
    }
    let waiting = tokio::spawn(async move { b.lock_with("res", &waiter(ms(10_000))).await });
    until_queued(&nodes, "res", 2).await;
    let released = Instant::now();
    held.release().await.unwrap();
    let guard = within("the live waiter", waiting).await.unwrap().unwrap();
    let after = released.elapsed();
    // The key was reserved for the dead waiter for the grace (20 ms), not for the 10 s
    // retry delay.
    assert!(
        after >= ms(15),
        "the reservation was not honoured: {after:?}"
    );
    assert!(after < ms(1_000), "the live waiter waited {after:?}");
    assert!(guard.is_valid());
}

#[tokio::test]
async fn acquisition_and_release_decide_at_quorum_despite_a_stalled_minority() {
    let nodes = RedisNodes::start(5);
    let a = Redlock::builder()
        .nodes(nodes.urls())
        .node_timeout(ms(3_000))
        .build()
        .await
        .unwrap();
    nodes.servers[3].pause();
    nodes.servers[4].pause();
    let started = Instant::now();
    let guard = a.lock("res").await.unwrap();
    let locked = started.elapsed();
    let started = Instant::now();
    let released = guard.release().await.unwrap();
    let unlocked = started.elapsed();
    nodes.servers[3].resume();
    nodes.servers[4].resume();
    // Waiting for the stalled nodes would take the 3 s node timeout.
    assert!(locked < ms(1_000), "acquisition took {locked:?}");
    assert!(unlocked < ms(1_000), "release took {unlocked:?}");
    assert!(released.was_held());
    // The stalled nodes get their delete once they resume.
    nodes.gone_everywhere("res").await;
}

#[tokio::test]
async fn an_absurd_handover_grace_is_refused_before_connecting() {
    let started = Instant::now();
    let error = Redlock::builder()
        .node("redis://10.255.255.1:1")
        .handover_grace(Duration::from_secs(60))
        .build()
        .await
        .unwrap_err();
    assert!(
        matches!(
            error,
            BuildError::Option {
                name: "handover_grace",
                ..
            }
        ),
        "{error}"
    );
    assert!(started.elapsed() < ms(500));
}

#[tokio::test]
async fn with_no_grace_a_waiter_polls_and_the_queue_is_never_used() {
    let nodes = RedisNodes::start(3);
    let build = || {
        Redlock::builder()
            .nodes(nodes.urls())
            .handover_grace(Duration::ZERO)
            .build()
    };
    let (a, b) = (build().await.unwrap(), build().await.unwrap());
    let held = a.lock("res").await.unwrap();
    let waiting = tokio::spawn(async move { b.lock_with("res", &waiter(ms(50))).await });
    tokio::time::sleep(ms(120)).await;
    assert_eq!(nodes.queued("res").await, vec![0; 3]);
    held.release().await.unwrap();
    let guard = within("the polling waiter", waiting)
        .await
        .unwrap()
        .unwrap();
    assert!(guard.is_valid());
}
