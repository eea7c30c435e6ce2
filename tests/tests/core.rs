//! redlock-core against 5 real redis-server processes.

#![allow(clippy::unwrap_used)] // tests unwrap: a failure is the assertion

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;
use tokio::time::Instant;

use fred::interfaces::{ClientLike, KeysInterface, LuaInterface};
use redlock_core::{BuildError, LockError, LockOptions, LostReason, NodeVote, Redlock};
use redlock_tests::{
    RedisNodes, RedisServer, foreign_set_nx, free_within, lock_everywhere, plain_client, redlock,
    within,
};

/// A handle over `nodes` with a per-node timeout of `timeout`.
async fn with_node_timeout(nodes: &RedisNodes, timeout: Duration) -> Redlock {
    Redlock::builder()
        .nodes(nodes.urls())
        .node_timeout(timeout)
        .build()
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn mutual_exclusion_under_contention() {
    let nodes = RedisNodes::start(5);
    // Four independent handles (separate fred clients), as four replicas would have.
    let mut handles = Vec::new();
    for _ in 0..4 {
        handles.push(redlock(&nodes).await);
    }
    let counter = Arc::new(AtomicU64::new(0));
    let inside = Arc::new(AtomicBool::new(false));
    let successes = Arc::new(AtomicU64::new(0));
    let options = LockOptions::default()
        .ttl(Duration::from_secs(5))
        .retry_delay(Duration::from_millis(2))
        .retry_jitter(Duration::from_millis(5))
        .wait_timeout(Duration::from_secs(30));
    let mut tasks = Vec::new();
    for task in 0..16 {
        let redlock = handles[task % 4].clone();
        let (counter, inside, successes, options) = (
            counter.clone(),
            inside.clone(),
            successes.clone(),
            options.clone(),
        );
        tasks.push(tokio::spawn(async move {
            for _ in 0..10 {
                let guard = redlock.lock_with("counter", &options).await.unwrap();
                assert!(!inside.swap(true, Ordering::SeqCst), "two holders at once");
                // A lost-update register: read, yield, write.
                let seen = counter.load(Ordering::SeqCst);
                tokio::task::yield_now().await;
                tokio::time::sleep(Duration::from_micros(200)).await;
                counter.store(seen + 1, Ordering::SeqCst);
                assert!(guard.is_valid());
                inside.store(false, Ordering::SeqCst);
                successes.fetch_add(1, Ordering::SeqCst);
                assert!(guard.release().await.unwrap().was_held());
            }
        }));
    }
    for task in tasks {
        within("a contending task", task).await.unwrap();
    }
    assert_eq!(successes.load(Ordering::SeqCst), 160);
    assert_eq!(counter.load(Ordering::SeqCst), 160, "lost updates");
    // Every key released; a hand-over reservation for a waiter that had already got the lock
    // elsewhere expires with its grace.
    nodes.gone_everywhere("counter").await;
}

#[tokio::test]
async fn a_minority_down_keeps_locking_and_excluding() {
    let mut nodes = RedisNodes::start(5);
    let a = redlock(&nodes).await;
    let b = redlock(&nodes).await;
    nodes.servers[0].kill();
    nodes.servers[3].kill();
    let guard = a.lock("res").await.unwrap();
    let once = LockOptions::default().retry_count(0);
    match b.lock_with("res", &once).await {
        Err(LockError::Busy { outcomes, .. }) => {
            assert_eq!(outcomes.held(), 3);
            assert!(matches!(
                outcomes.as_slice()[0].vote,
                NodeVote::Failed(_) | NodeVote::Undecided
            ));
        }
        other => panic!("expected Busy, got {other:?}"),
    }
    let released = guard.release().await.unwrap();
    assert!(released.was_held());
    assert_eq!(released.deleted, 3, "the 3 live nodes make the quorum");
    b.lock_with("res", &once)
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
}

#[tokio::test]
async fn try_lock_takes_a_free_resource_and_answers_none_at_once_when_held() {
    let mut nodes = RedisNodes::start(5);
    let (a, b) = (redlock(&nodes).await, redlock(&nodes).await);
    // Retries and waiting in the options are ignored: one attempt.
    let patient = LockOptions::default()
        .retry_delay(Duration::from_secs(5))
        .wait_timeout(Duration::from_secs(30));
    let guard = a.try_lock_with("job", &patient).await.unwrap().unwrap();
    let started = Instant::now();
    assert!(b.try_lock_with("job", &patient).await.unwrap().is_none());
    // Well under the first retry delay: `lock_with` would have waited 30 s.
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "{:?}",
        started.elapsed()
    );
    // The holder's keys are untouched.
    assert!(guard.is_valid());
    let token = Some(guard.token().expose().to_owned());
    assert_eq!(nodes.values("job").await, vec![token; 5]);
    guard.release().await.unwrap();
    let again = b.try_lock("job").await.unwrap().unwrap();
    again.release().await.unwrap();

    // Held by another application's `SET NX` on a quorum: `None`, and its keys untouched.
    for i in 0..3 {
        foreign_set_nx(&nodes.servers[i].url(), "shared").await;
    }
    assert!(b.try_lock("shared").await.unwrap().is_none());
    let theirs = Some("theirs".to_owned());
    assert_eq!(
        nodes.values("shared").await,
        [theirs.clone(), theirs.clone(), theirs, None, None]
    );

    // No quorum of nodes: an error, which says a later call may succeed.
    for i in [0, 2, 4] {
        nodes.servers[i].kill();
    }
    let error = b.try_lock("job").await.unwrap_err();
    assert!(error.is_unavailable() && error.is_retryable(), "{error}");
}

#[tokio::test]
async fn a_majority_down_fails_fast_with_a_typed_error() {
    let mut nodes = RedisNodes::start(5);
    let a = redlock(&nodes).await;
    for i in [0, 2, 4] {
        nodes.servers[i].kill();
    }
    let started = Instant::now();
    let error = a
        .lock_with("res", &LockOptions::default().retry_count(2))
        .await
        .unwrap_err();
    // 3 attempts, each bounded by the node timeout, plus two delays of at most 300 ms.
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    assert!(error.is_unavailable(), "{error}");
    match error {
        LockError::Unavailable {
            attempts, outcomes, ..
        } => {
            assert_eq!(attempts, 3);
            assert_eq!(outcomes.failed(), 3);
        }
        other => panic!("expected Unavailable, got {other}"),
    }
    // What the 2 live nodes granted was released (step 5).
    for i in [1, 3] {
        let client = plain_client(&nodes.servers[i].url()).await;
        assert_eq!(client.get::<Option<String>, _>("res").await.unwrap(), None);
    }
}

#[tokio::test]
async fn a_stalled_majority_is_bounded_and_a_stalled_minority_does_not_slow_acquisition() {
    let nodes = RedisNodes::start(5);
    let node_timeout = Duration::from_secs(1);
    let a = with_node_timeout(&nodes, node_timeout).await;
    nodes.servers[1].pause();
    nodes.servers[2].pause();
    let started = Instant::now();
    let guard = a.lock("res").await.unwrap();
    // Decided by the three live nodes, without waiting a node timeout for the stalled ones.
    assert!(
        started.elapsed() < node_timeout / 2,
        "{:?}",
        started.elapsed()
    );
    guard.release().await.unwrap();

    nodes.servers[3].pause();
    let started = Instant::now();
    let error = a
        .lock_with("other", &LockOptions::default().retry_count(0))
        .await
        .unwrap_err();
    assert!(matches!(error, LockError::Unavailable { .. }), "{error}");
    // One node timeout for the attempt plus one for the cleanup release, not a hang.
    assert!(
        started.elapsed() < node_timeout * 3,
        "{:?}",
        started.elapsed()
    );
    for i in 1..=3 {
        nodes.servers[i].resume();
    }
}

#[tokio::test]
async fn only_the_owner_releases() {
    let nodes = RedisNodes::start(5);
    let a = redlock(&nodes).await;
    let b = redlock(&nodes).await;
    let short = LockOptions::default().ttl(Duration::from_millis(100));
    let stale = a.lock_with("res", &short).await.unwrap();
    let b_guard = b
        .lock_with(
            "res",
            &LockOptions::default().wait_timeout(Duration::from_secs(2)),
        )
        .await
        .unwrap();
    assert!(!stale.is_valid());
    // Where b's key is before the stale release (b's grants land after its quorum, and a
    // node may have refused b while a's key was still there), it stays.
    let b_token = b_guard.token().expose().to_owned();
    assert_eq!(nodes.holder("res").await.as_deref(), Some(b_token.as_str()));
    let before = nodes.values("res").await;
    let released = stale.release().await.unwrap();
    assert!(!released.was_held());
    assert_eq!(released.deleted, 0);
    let after = nodes.values("res").await;
    for (node, (was, is)) in before.iter().zip(&after).enumerate() {
        if was.as_deref() == Some(b_token.as_str()) {
            assert_eq!(was, is, "node {node} lost b's key: {before:?} -> {after:?}");
        }
    }
    assert!(b_guard.release().await.unwrap().was_held());
}

#[tokio::test]
async fn validity_is_ttl_minus_elapsed_minus_drift() {
    let nodes = RedisNodes::start(5);
    let a = redlock(&nodes).await;
    let ttl = Duration::from_secs(10);
    let options = LockOptions::default().ttl(ttl).drift_factor(0.05);
    let before = Instant::now();
    let guard = a.lock_with("res", &options).await.unwrap();
    let after = Instant::now();
    let drift = options.drift();
    assert_eq!(drift, Duration::from_millis(502));
    assert!(guard.valid_until() <= after + ttl - drift);
    assert!(guard.valid_until() >= before + ttl - drift);
    // The key's ttl on every node that holds it (a quorum at least; the last grants land
    // after the quorum) is the full ttl.
    let token = guard.token().expose();
    let holdings = nodes.settle("res", |h| h.value.holds(token)).await;
    let holding: Vec<_> = holdings.iter().filter(|h| h.value.holds(token)).collect();
    assert!(holding.len() >= nodes.quorum(), "{holdings:?}");
    for h in holding {
        let ttl = h.ttl.unwrap();
        assert!(
            (Duration::from_secs(9)..=Duration::from_secs(10)).contains(&ttl),
            "{h:?}"
        );
    }
    guard.release().await.unwrap();
}

#[tokio::test]
async fn plain_set_nx_holders_exclude_and_are_excluded() {
    let nodes = RedisNodes::start(5);
    let a = redlock(&nodes).await;
    let once = LockOptions::default().retry_count(0);
    let foreign = |i: usize| nodes.servers[i].url();
    // Another client (node-redlock, redis-py, Hyperf...) holds the key on 3 nodes.
    for i in 0..3 {
        foreign_set_nx(&foreign(i), "shared").await;
    }
    let error = a.lock_with("shared", &once).await.unwrap_err();
    assert!(error.is_busy(), "{error}");
    // Our partial lock on nodes 3 and 4 was cleaned up, theirs untouched.
    assert_eq!(
        nodes.values("shared").await,
        [
            Some("theirs".to_owned()),
            Some("theirs".to_owned()),
            Some("theirs".to_owned()),
            None,
            None
        ]
    );
    // The other way round: while we hold it, their SET NX is refused everywhere.
    let guard = lock_everywhere(&a, &nodes, "mine", None, &LockOptions::default()).await;
    for i in 0..5 {
        assert_eq!(foreign_set_nx(&foreign(i), "mine").await, None);
    }
    guard.release().await.unwrap();
}

#[tokio::test]
async fn release_survives_a_script_cache_flush() {
    let nodes = RedisNodes::start(5);
    let a = redlock(&nodes).await;
    a.lock("warm").await.unwrap().release().await.unwrap();
    let guard = a.lock("res").await.unwrap();
    let token = guard.token().expose();
    nodes.settle("res", |h| h.value.holds(token)).await;
    for url in nodes.urls() {
        let _: () = plain_client(&url).await.script_flush(false).await.unwrap();
    }
    assert!(guard.release().await.unwrap().was_held());
    nodes.gone_everywhere("res").await;
}

/// The releases a quorum did not wait for are finished even when their node answers
/// `NOSCRIPT` after the round returned: two nodes are paused while the script caches are
/// empty, the release returns on the other three, and once the two resume their keys go too
/// (sent again by source), not after the ttl.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn releases_left_behind_at_quorum_survive_a_script_cache_flush() {
    let nodes = RedisNodes::start(5);
    let a = redlock(&nodes).await;
    let options = LockOptions::default().ttl(Duration::from_secs(30));
    for round in 0..3 {
        let resource = format!("behind:{round}");
        // Every node holds the key before the caches are emptied, so that nodes 3 and 4 have
        // a key for their left-behind release to delete (a late grant would find NOSCRIPT
        // and, its round decided, not be sent again).
        let guard = lock_everywhere(&a, &nodes, &resource, None, &options).await;
        for url in nodes.urls() {
            let _: () = plain_client(&url).await.script_flush(false).await.unwrap();
        }
        nodes.servers[3].pause();
        nodes.servers[4].pause();
        let released = guard.release().await.unwrap();
        assert!(
            released.was_held() && released.answered == 3,
            "{released:?}"
        );
        nodes.servers[3].resume();
        nodes.servers[4].resume();
        nodes.gone_everywhere(&resource).await;
    }
}

#[tokio::test]
async fn a_dropped_guard_is_released_without_waiting_for_the_ttl() {
    let nodes = RedisNodes::start(5);
    let a = redlock(&nodes).await;
    let b = redlock(&nodes).await;
    let guard = a
        .lock_with("res", &LockOptions::default().ttl(Duration::from_secs(30)))
        .await
        .unwrap();
    drop(guard);
    assert!(free_within(&b, "res").await < Duration::from_secs(1));
}

#[tokio::test]
async fn release_all_releases_every_held_lock_and_shutdown_refuses_new_ones() {
    let nodes = RedisNodes::start(5);
    let a = redlock(&nodes).await;
    let g1 = a.lock("one").await.unwrap();
    let g2 = a.lock("two").await.unwrap();
    assert_eq!(a.held_count(), 2);
    let report = a.shutdown(Duration::from_secs(1)).await;
    let mut released = report.released.clone();
    released.sort();
    assert_eq!(released, ["one", "two"]);
    assert!(report.unconfirmed.is_empty());
    assert_eq!(nodes.values("one").await, vec![None; 5]);
    assert!(matches!(
        a.lock("three").await,
        Err(LockError::ShuttingDown)
    ));
    // The guards learn it: their lost signals fired, and their own release reports it.
    assert_eq!(g2.lost().reason(), Some(LostReason::Released));
    assert!(matches!(
        g1.release().await,
        Err(LockError::Lost {
            reason: LostReason::Released,
            ..
        })
    ));
    drop(g2);
}

#[tokio::test]
async fn invalid_input_is_rejected_before_anything_is_sent() {
    let nodes = RedisNodes::start(3);
    let a = redlock(&nodes).await;
    // Building wrote the node-set marker (one SET per node): the baseline.
    let mut before = Vec::new();
    for url in nodes.urls() {
        before.push(calls(&url, "set").await);
    }
    let cases = [
        a.lock("").await.unwrap_err(),
        a.lock_with("r", &LockOptions::default().ttl(Duration::ZERO))
            .await
            .unwrap_err(),
        a.lock_with(
            "r",
            &LockOptions::default().ttl(Duration::from_secs(90_000)),
        )
        .await
        .unwrap_err(),
        a.lock_with("r", &LockOptions::default().ttl(Duration::from_millis(2)))
            .await
            .unwrap_err(),
    ];
    for error in &cases {
        assert!(matches!(error, LockError::Invalid(_)), "{error}");
    }
    for (url, before) in nodes.urls().iter().zip(before) {
        assert_eq!(calls(url, "set").await, before, "a SET was sent to {url}");
    }
}

#[tokio::test]
async fn building_needs_a_reachable_quorum_of_distinct_nodes() {
    let mut nodes = RedisNodes::start(5);
    let urls = nodes.urls();
    // The same server under two names is one node, not two.
    let alias = urls[0].replace("127.0.0.1", "localhost");
    let error = Redlock::builder()
        .nodes([urls[0].clone(), alias, urls[1].clone()])
        .build()
        .await
        .unwrap_err();
    assert!(matches!(error, BuildError::DuplicateNode { .. }), "{error}");

    nodes.servers[0].kill();
    nodes.servers[1].kill();
    let with_two_down = Redlock::builder()
        .nodes(urls.clone())
        .connect_timeout(Duration::from_millis(300))
        .build()
        .await
        .unwrap();
    nodes.servers[2].kill();
    let started = Instant::now();
    let error = Redlock::builder()
        .nodes(urls.clone())
        .connect_timeout(Duration::from_millis(300))
        .build()
        .await
        .unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(1));
    match error {
        BuildError::TooFewReachable {
            reachable,
            quorum,
            failures,
            ..
        } => {
            assert_eq!((reachable, quorum, failures.len()), (2, 3, 3));
        }
        other => panic!("expected TooFewReachable, got {other}"),
    }
    // Nodes that come back join the handle built while they were down.
    for i in 0..3 {
        nodes.servers[i].restart();
    }
    nodes.servers[3].kill();
    nodes.servers[4].kill();
    let wait = LockOptions::default()
        .retry_delay(Duration::from_millis(50))
        .wait_timeout(Duration::from_secs(10));
    let guard = with_two_down.lock_with("res", &wait).await.unwrap();
    assert_eq!(
        guard.release().await.unwrap().deleted,
        3,
        "the 3 live nodes"
    );
}

#[tokio::test]
async fn dropping_an_acquisition_mid_attempt_releases_what_it_took() {
    let nodes = RedisNodes::start(5);
    let a = with_node_timeout(&nodes, Duration::from_secs(2)).await;
    for i in 2..5 {
        nodes.servers[i].pause();
    }
    // Nodes 0 and 1 grant at once; the attempt then waits on the stalled majority.
    let cancelled = tokio::time::timeout(Duration::from_millis(300), a.lock("res")).await;
    assert!(cancelled.is_err());
    // The cleanup was spawned on drop; shutdown waits for spawned releases.
    a.shutdown(Duration::from_secs(5)).await;
    for i in 0..2 {
        let client = plain_client(&nodes.servers[i].url()).await;
        assert_eq!(
            client.get::<Option<String>, _>("res").await.unwrap(),
            None,
            "node {i}"
        );
    }
    for i in 2..5 {
        nodes.servers[i].resume();
    }
}

#[tokio::test]
async fn credentials_in_urls_work_with_a_least_privilege_acl_user_and_are_never_echoed() {
    // The commands the guide lists for an ACL user, on `lock:*` keys only (scripts run
    // under the caller's ACL, so the release script needs GET and DEL).
    let acl = [
        "--user",
        "locker",
        "on",
        ">p@ss:w/rd",
        "~lock:*",
        "resetchannels",
        "-@all",
        "+set",
        "+get",
        "+del",
        "+eval",
        "+evalsha",
        "+info",
        "--user",
        "default",
        "off",
    ];
    let servers: Vec<_> = (0..3).map(|_| RedisServer::start_with(&acl)).collect();
    let url = |s: &RedisServer, password: &str| {
        format!("redis://locker:{password}@127.0.0.1:{}", s.port())
    };
    let a = Redlock::builder()
        .nodes(servers.iter().map(|s| url(s, "p%40ss%3Aw%2Frd")))
        .key_prefix("lock:")
        .build()
        .await
        .unwrap();
    let guard = a.lock("order:1").await.unwrap();
    assert_eq!(guard.key(), "lock:order:1");
    assert!(guard.release().await.unwrap().was_held());

    // Outside the ACL's key pattern the nodes answer NOPERM: unavailable, not busy.
    let unprefixed = Redlock::builder()
        .nodes(servers.iter().map(|s| url(s, "p%40ss%3Aw%2Frd")))
        .build()
        .await
        .unwrap();
    let error = unprefixed
        .lock_with("order:1", &LockOptions::default().retry_count(0))
        .await
        .unwrap_err();
    assert!(error.is_unavailable(), "{error}");
    assert!(error.to_string().contains("NOPERM"), "{error}");

    let started = Instant::now();
    let error = Redlock::builder()
        .nodes(servers.iter().map(|s| url(s, "wrong-s3cret")))
        .connect_timeout(Duration::from_millis(500))
        .build()
        .await
        .unwrap_err();
    assert!(
        matches!(error, BuildError::TooFewReachable { .. }),
        "{error}"
    );
    assert!(!error.to_string().contains("wrong-s3cret"), "{error}");
    assert!(started.elapsed() < Duration::from_secs(2));
}

#[tokio::test]
async fn nodes_can_be_unix_sockets_and_ready_fred_clients() {
    let dir = std::env::temp_dir().join(format!("redlock-unix-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let sockets: Vec<_> = (0..2).map(|i| dir.join(format!("node{i}.sock"))).collect();
    let unix_servers: Vec<_> = sockets
        .iter()
        .map(|path| {
            RedisServer::start_with(&[
                "--unixsocket",
                path.to_str().unwrap(),
                "--unixsocketperm",
                "700",
            ])
        })
        .collect();
    let tcp = RedisServer::start();
    // A client the application built and connected itself.
    let ready = plain_client(&tcp.url()).await;
    let a = Redlock::builder()
        .nodes(
            sockets
                .iter()
                .map(|path| format!("redis+unix://{}", path.display())),
        )
        .client(ready)
        .build()
        .await
        .unwrap();
    let labels: Vec<&str> = a.node_labels().collect();
    assert_eq!(labels[2], format!("127.0.0.1:{}", tcp.port()));
    assert!(labels[0].ends_with("node0.sock"), "{labels:?}");
    let guard = a.lock("res").await.unwrap();
    assert!(guard.release().await.unwrap().was_held());
    drop(unix_servers);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Calls of `command` recorded by a node's `INFO commandstats`.
async fn calls(url: &str, command: &str) -> u64 {
    let stats: String = plain_client(url)
        .await
        .info(Some(fred::types::InfoKind::CommandStats))
        .await
        .unwrap();
    let prefix = format!("cmdstat_{command}:calls=");
    stats
        .lines()
        .find_map(|line| line.strip_prefix(&prefix))
        .and_then(|rest| rest.split(',').next())
        .map_or(0, |n| n.parse().unwrap())
}

#[tokio::test]
async fn a_set_that_lands_after_its_timeout_is_removed_by_the_queued_release() {
    let nodes = RedisNodes::start(5);
    let a = with_node_timeout(&nodes, Duration::from_millis(200)).await;
    // Building wrote the node-set marker (one SET per node): the baseline.
    let mut before = Vec::new();
    for url in nodes.urls() {
        before.push(calls(&url, "set").await);
    }
    for i in 0..3 {
        nodes.servers[i].pause();
    }
    // Nodes 3 and 4 grant; the stalled majority times out on the SET and on the release,
    // both of which sit unanswered in the stalled nodes' sockets.
    let error = a
        .lock_with("res", &LockOptions::default().retry_count(0))
        .await
        .unwrap_err();
    assert!(matches!(error, LockError::Unavailable { .. }), "{error}");
    for i in 0..3 {
        nodes.servers[i].resume();
    }
    // On resume each stalled node runs the late SET, then the queued release after it.
    for (i, before) in before.iter().enumerate().take(3) {
        let url = nodes.servers[i].url();
        within("the queued release to run", async {
            while calls(&url, "evalsha").await == 0 {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await;
        assert_eq!(
            calls(&url, "set").await - before,
            1,
            "the late SET did not land on node {i}"
        );
    }
    assert_eq!(
        nodes.values("res").await,
        vec![None; 5],
        "a late SET outlived the attempt"
    );
}

#[tokio::test]
async fn the_release_script_is_reloaded_when_a_node_restarts_empty() {
    let mut nodes = RedisNodes::start(3);
    let a = redlock(&nodes).await;
    let url = nodes.servers[0].url();
    assert!(
        calls(&url, "script|load").await >= 1,
        "not loaded at start-up"
    );
    nodes.servers[0].restart();
    // The client reconnects on its own and loads the script into the empty cache.
    within("the script to be reloaded", async {
        while calls(&url, "script|load").await == 0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    let guard = a.lock("res").await.unwrap();
    assert!(guard.release().await.unwrap().was_held());
    nodes.gone_everywhere("res").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_error_says_when_the_holders_ttl_runs_out() {
    let nodes = RedisNodes::start(3);
    let (a, b) = (redlock(&nodes).await, redlock(&nodes).await);
    let once = LockOptions::default()
        .retry_count(1)
        .retry_delay(Duration::from_millis(10));
    // A longer ttl and a shorter one: the hint follows the holder's ttl, not ours.
    for (resource, ttl) in [("ra:long", 10_000), ("ra:short", 1_000)] {
        let ttl = Duration::from_millis(ttl);
        let guard = a.lock_with(resource, &once.clone().ttl(ttl)).await.unwrap();
        let busy = b.lock_with(resource, &once).await.unwrap_err();
        assert!(busy.is_busy(), "{busy}");
        let after = busy.retry_after().expect("a holder with a ttl");
        assert!(
            after <= ttl && after > ttl - Duration::from_millis(500),
            "{after:?} of {ttl:?}"
        );
        guard.release().await.unwrap();
    }
    // A mode holder: a writer waits for the reader's entry.
    let ttl = Duration::from_secs(3);
    let reader = a
        .lock_mode("ra:modes", redlock_core::Mode::ProtectedRead, ttl)
        .await
        .unwrap();
    let writer = once.clone();
    let busy = b
        .lock_mode_with("ra:modes", redlock_core::Mode::Exclusive, &writer)
        .await
        .unwrap_err();
    let after = busy.retry_after().expect("a mode holder with a ttl");
    assert!(
        after <= ttl && after > ttl - Duration::from_millis(500),
        "{after:?}"
    );
    reader.release().await.unwrap();
    // A foreign key with no expiry never frees up by itself: no hint.
    for url in nodes.urls() {
        let client = plain_client(&url).await;
        let _: () = client
            .set(a.key_for("ra:foreign"), "someone", None, None, false)
            .await
            .unwrap();
    }
    let busy = b.lock_with("ra:foreign", &once).await.unwrap_err();
    assert!(busy.is_busy(), "{busy}");
    assert_eq!(busy.retry_after(), None);
    // Other errors carry none.
    assert_eq!(LockError::ShuttingDown.retry_after(), None);
}
