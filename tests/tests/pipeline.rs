//! The node pipeline: script calls issued together by one handle share one `EVALSHA` per
//! node, and a call that fails in a batch fails alone.

#![allow(clippy::unwrap_used)] // tests unwrap: a failure is the assertion

use std::time::Duration;

use futures_util::future::join_all;
use redlock_core::{LockError, LockOptions, Redlock};
use redlock_tests::{RedisNodes, RedisServer, fencing_key, redlock};

const LOCKERS: usize = 32;

fn once() -> LockOptions {
    LockOptions::default()
        .ttl(Duration::from_secs(10))
        .retry_count(0)
}

/// On a current-thread runtime the 32 releases are issued before any answer comes: the first
/// goes out alone (the node was idle), the 31 made while it is outstanding share one batch per
/// node, where one script per release would be 32.
#[tokio::test]
async fn releases_issued_together_share_scripts() {
    let nodes = RedisNodes::start(3);
    let redlock = redlock(&nodes).await;
    let resources: Vec<String> = (0..LOCKERS).map(|i| format!("batch:{i}")).collect();
    let options = once();
    let guards: Vec<_> = join_all(resources.iter().map(|r| redlock.lock_with(r, &options)))
        .await
        .into_iter()
        .map(Result::unwrap)
        .collect();
    let before = nodes.script_calls().await;
    // One task per release: spawned before any of them runs, they run in turn and queue their
    // calls before the pipeline tasks (woken by the first call) get their turn.
    let releases: Vec<_> = guards
        .into_iter()
        .map(|g| tokio::spawn(g.release()))
        .collect();
    for release in releases {
        assert!(release.await.unwrap().unwrap().was_held());
    }
    // Every node ran every release (the round returned at quorum).
    for resource in &resources {
        nodes.gone_everywhere(resource).await;
    }
    let scripts: Vec<u64> = nodes
        .script_calls()
        .await
        .iter()
        .zip(&before)
        .map(|(now, then)| now - then)
        .collect();
    assert_eq!(
        scripts,
        vec![2; 3],
        "scripts per node for {LOCKERS} releases"
    );
}

/// Fenced locks alternating between resources the ACL user may touch and resources it may
/// not, all issued in one tick of a current-thread runtime: they share one batch per node,
/// which the node refuses whole (`NOPERM` for the keys of every other call), and which is
/// sent again call by call.
#[tokio::test]
async fn a_call_refused_in_a_batch_does_not_fail_its_neighbours() {
    let acl = [
        "--user", "locker", "on", ">pw", "~ok:*", "-@all", "+set", "+get", "+del", "+pttl",
        "+eval", "+evalsha", "+info", "--user", "default", "off",
    ];
    let servers: Vec<_> = (0..3).map(|_| RedisServer::start_with(&acl)).collect();
    let redlock = Redlock::builder()
        .nodes(
            servers
                .iter()
                .map(|s| format!("redis://locker:pw@127.0.0.1:{}", s.port())),
        )
        .build()
        .await
        .unwrap();
    let fenced = once().fencing(true);
    let resources: Vec<String> = (0..LOCKERS)
        .map(|i| format!("{}:{i}", if i % 2 == 0 { "ok" } else { "no" }))
        .collect();
    let results = join_all(resources.iter().map(|r| redlock.lock_with(r, &fenced))).await;
    for (resource, result) in resources.iter().zip(results) {
        if resource.starts_with("ok") {
            let guard = result.unwrap_or_else(|e| panic!("{resource}: {e}"));
            assert!(guard.fencing_token().is_some());
        } else {
            let error = result.unwrap_err();
            assert!(
                matches!(error, LockError::Unavailable { .. })
                    && error.to_string().contains("NOPERM"),
                "{resource}: {error}"
            );
        }
    }
}

/// A call that raises an error while its batch runs (here `WRONGTYPE`: a sorted set at the fencing
/// counter's key) answers that error alone; the calls before and after it in the batch took
/// effect once and report it (run twice, a `SET NX` would find its own key and refuse).
#[tokio::test]
async fn a_call_that_raises_in_a_batch_does_not_fail_its_neighbours() {
    let nodes = RedisNodes::start(3);
    let redlock = redlock(&nodes).await;
    let resources: Vec<String> = (0..LOCKERS).map(|i| format!("raise:{i}")).collect();
    for resource in resources.iter().skip(1).step_by(2) {
        let not_a_counter = ["1".to_owned(), "not a counter".to_owned()];
        nodes.zadd(&fencing_key(resource), &not_a_counter).await;
    }
    let fenced = once().fencing(true);
    let results = join_all(resources.iter().map(|r| redlock.lock_with(r, &fenced))).await;
    for (i, (resource, result)) in resources.iter().zip(results).enumerate() {
        if i % 2 == 0 {
            let guard = result.unwrap_or_else(|e| panic!("{resource}: {e}"));
            assert_eq!(guard.fencing_token(), Some(1), "{resource}");
        } else {
            let error = result.unwrap_err();
            assert!(
                error.to_string().contains("WRONGTYPE"),
                "{resource}: {error}"
            );
        }
    }
}
