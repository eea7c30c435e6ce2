//! In-memory nodes on their own: paused time, and each fault knob seen by the lock.

#![allow(clippy::unwrap_used)] // tests unwrap: a failure is the assertion

use std::time::Duration;

use redlock_core::{LockError, LockOptions};
use redlock_test::MemoryNodes;
use tokio::time::Instant;

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

/// An hour of a 30 s lock, auto-extended, passes in the test without waiting: the nodes'
/// keys follow tokio's paused clock, and so does the lock's validity.
#[tokio::test(start_paused = true)]
async fn an_hour_of_auto_extension_passes_at_once() {
    let nodes = MemoryNodes::new(3);
    let options = LockOptions::default().ttl(secs(30)).auto_extend(true);
    let lock = nodes.redlock_with(options).await;
    let wall = std::time::Instant::now();
    let guard = lock.lock("hour").await.unwrap();
    let token = guard.token().expose().to_owned();
    let first_until = guard.valid_until();
    tokio::time::sleep(secs(3_600)).await;
    assert!(guard.is_valid());
    assert!(guard.valid_until() > first_until + secs(3_500));
    assert_eq!(nodes.holder("hour").as_deref(), Some(token.as_str()));
    assert!(
        nodes
            .pttls("hour")
            .iter()
            .all(|ttl| (1..=30_000).contains(ttl))
    );
    guard.release().await.unwrap();
    assert!(nodes.is_free("hour"));
    assert!(
        wall.elapsed() < secs(10),
        "took {:?} of real time",
        wall.elapsed()
    );
}

/// A node down does not vote, and a lock taken meanwhile is held by the others; back up,
/// it votes again with the keys it had.
#[tokio::test(start_paused = true)]
async fn a_stopped_node_does_not_vote_and_keeps_its_keys() {
    let nodes = MemoryNodes::new(3);
    let lock = nodes.redlock().await;
    let held = lock.lock("before").await.unwrap();
    nodes.stop(2);
    let guard = lock.lock("during").await.unwrap();
    assert_eq!(
        nodes.holder("during").as_deref(),
        Some(guard.token().expose())
    );
    assert_eq!(nodes.values("during")[2], None);
    nodes.start(2);
    assert_eq!(
        nodes.values("before")[2].as_deref(),
        Some(held.token().expose())
    );
}

/// A node restarted empty would vote for a second holder beside the first; with the
/// quarantine on, it refuses to vote until a ttl has passed.
#[tokio::test(start_paused = true)]
async fn a_restarted_node_is_quarantined() {
    let nodes = MemoryNodes::new(3);
    let ttl = secs(10);
    let options = LockOptions::default().ttl(ttl).retry_count(0);
    let lock = nodes
        .builder()
        .quarantine(ttl)
        .lock_options(options)
        .build()
        .await
        .unwrap();
    // The quarantine's first sight of each node.
    tokio::time::sleep(ttl + secs(1)).await;
    // Held by nodes 0 and 1 (node 2 is down); then node 2 comes back and node 0 restarts
    // empty: without the quarantine, nodes 0 and 2 would grant the resource again.
    nodes.stop(2);
    let first = lock.lock("q").await.unwrap();
    let token = first.token().expose().to_owned();
    assert_eq!(nodes.holder("q").as_deref(), Some(token.as_str()));
    nodes.start(2);
    nodes.restart(0);
    match lock.lock("q").await {
        Err(LockError::Busy { .. } | LockError::Unavailable { .. }) => {}
        other => panic!("a second holder while the first is valid: {other:?}"),
    }
    // Node 0 refused: it is still empty.
    assert_eq!(nodes.values("q")[0], None);
    assert!(first.is_valid());
}

/// A node whose replies come late is not waited for past the quorum, though its command
/// ran; with two late, the lock waits for them up to the node timeout and gives up.
#[tokio::test(start_paused = true)]
async fn a_delayed_node_is_not_waited_for() {
    let nodes = MemoryNodes::new(3);
    let lock = nodes
        .redlock_with(LockOptions::default().retry_count(0))
        .await;
    let late = Duration::from_millis(500);
    nodes.delay(0, late);
    let started = Instant::now();
    let guard = lock.lock("slow").await.unwrap();
    assert!(
        started.elapsed() < redlock_core::DEFAULT_NODE_TIMEOUT,
        "waited {:?} for a node the quorum did not need",
        started.elapsed()
    );
    assert_eq!(
        nodes.values("slow")[0].as_deref(),
        Some(guard.token().expose())
    );
    guard.release().await.unwrap();

    nodes.delay(1, late);
    let started = Instant::now();
    assert!(lock.lock("slower").await.is_err());
    let waited = started.elapsed();
    assert!(
        waited >= redlock_core::DEFAULT_NODE_TIMEOUT && waited < late,
        "gave up after {waited:?}"
    );
}

/// A node whose clock jumped forward drops a key early; the lock is still held by the
/// others.
#[tokio::test(start_paused = true)]
async fn a_fast_clock_expires_keys_early() {
    let nodes = MemoryNodes::new(3);
    let options = LockOptions::default().ttl(secs(10));
    let lock = nodes.redlock_with(options).await;
    let guard = lock.lock("clock").await.unwrap();
    let token = guard.token().expose().to_owned();
    nodes.clock_ahead(1, secs(11));
    assert_eq!(nodes.values("clock")[1], None);
    assert_eq!(nodes.holder("clock").as_deref(), Some(token.as_str()));
    assert!(guard.is_valid());
}

/// `FLUSHALL` on a node empties it in place.
#[tokio::test(start_paused = true)]
async fn a_flushed_node_is_empty() {
    let nodes = MemoryNodes::new(3);
    let lock = nodes.redlock().await;
    let _guard = lock.lock("flushed").await.unwrap();
    nodes.flush(1);
    assert_eq!(nodes.keys()[1], Vec::<String>::new());
    assert!(!nodes.keys()[0].is_empty());
}

/// A build needs a quorum of nodes up, as over servers.
#[tokio::test(start_paused = true)]
async fn a_build_needs_a_quorum_up() {
    let nodes = MemoryNodes::new(3);
    nodes.stop(0);
    let lock = nodes.builder().build().await.unwrap();
    lock.lock("one down")
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    nodes.stop(1);
    match nodes.builder().build().await {
        Err(redlock_core::BuildError::TooFewReachable { reachable: 1, .. }) => {}
        other => panic!("{other:?}"),
    }
}

/// `inspect`, `list_locks`, the leader and owner labels read the in-memory nodes as they
/// read servers.
#[tokio::test(start_paused = true)]
async fn inspect_list_and_the_leader_read_the_nodes() {
    let nodes = MemoryNodes::new(3);
    let lock = nodes
        .builder()
        .owner("host-1/42/app")
        .build()
        .await
        .unwrap();
    let guard = lock.lock("jobs:nightly").await.unwrap();
    let status = lock.inspect("jobs:nightly").await.unwrap();
    assert_eq!(status.answered(), 3);
    assert!(status.is_held());
    assert_eq!(status.owner(), Some("host-1/42/app"));

    let _reader = lock.read_lock("jobs:report").await.unwrap();
    let _other = lock.lock("other:cache").await.unwrap();
    let list = lock.list_locks("jobs:").await.unwrap();
    assert!(list.is_complete());
    let names: Vec<&str> = list.locks.iter().map(|l| l.resource.as_str()).collect();
    assert_eq!(names, ["jobs:nightly", "jobs:report"]);

    let election = lock.leader_election("jobs:nightly");
    assert_eq!(
        election.leader().await.unwrap().as_deref(),
        Some("host-1/42/app")
    );
    guard.release().await.unwrap();
    assert_eq!(election.leader().await.unwrap(), None);
}

/// What the nodes do not run (a downgrade, a resumption, force-release) fails, or reports no
/// node answering, never a wrong answer.
#[tokio::test(start_paused = true)]
async fn what_is_not_reproduced_is_an_error() {
    let nodes = MemoryNodes::new(3);
    let lock = nodes
        .redlock_with(LockOptions::default().retry_count(0))
        .await;

    let writer = lock.write_lock("w").await.unwrap();
    let refused = writer.downgrade(redlock_core::Mode::ProtectedRead).await;
    assert!(refused.is_err(), "{refused:?}");

    let detached = lock.lock("d").await.unwrap().detach().unwrap();
    let refused = lock.resume(&detached).await;
    assert!(refused.is_err(), "{refused:?}");

    // Force-release reports that no node answered it.
    let _held = lock.lock("f").await.unwrap();
    let report = lock.force_release("f").await.unwrap();
    assert_eq!((report.answered, report.removed), (0, 0), "{report:?}");
    // Nothing was removed by the refused calls.
    assert!(!nodes.is_free("f"));
}
