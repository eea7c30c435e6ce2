//! The bank's primitives against three real servers started by `redlock-test`, with two
//! replicas (two handles, each labelled) sharing them.

#![allow(clippy::unwrap_used)] // tests unwrap: a failure is the assertion

use std::time::Duration;

use bank::{Bank, BankError};
use redlock_core::{LockError, Mode, Redlock};
use redlock_test::TestNodes;

/// A replica's handle, labelled `name`.
async fn replica(nodes: &TestNodes, name: &str) -> Redlock {
    Redlock::builder()
        .nodes(nodes.urls())
        .owner(name)
        .build()
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transfers_in_opposite_directions_all_complete() {
    let nodes = TestNodes::start(3);
    let (a, b) = (
        Bank::new(replica(&nodes, "replica-a").await),
        Bank::new(replica(&nodes, "replica-b").await),
    );
    // 1 -> 2 on one replica while 2 -> 1 on the other: locks taken one by one could deadlock.
    let (left, right) = tokio::join!(
        async {
            for _ in 0..10 {
                a.transfer(1, 2).await.unwrap();
            }
        },
        async {
            for _ in 0..10 {
                b.transfer(2, 1).await.unwrap();
            }
        }
    );
    let ((), ()) = (left, right);
    assert!(nodes.is_free("account:1").await && nodes.is_free("account:2").await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_most_two_exports_of_a_tenant_run_at_once() {
    let nodes = TestNodes::start(3);
    let (a, b) = (
        Bank::new(replica(&nodes, "replica-a").await),
        Bank::new(replica(&nodes, "replica-b").await),
    );
    let long = Duration::from_millis(800);
    let (first, second) = tokio::join!(a.export(9, long), b.export(9, long));
    assert!(first.unwrap().is_some() && second.unwrap().is_some());
    // While both run, a third is skipped: shown by running it during two long ones.
    let (x, y, third) = tokio::join!(a.export(4, long), b.export(4, long), async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        a.export(4, Duration::ZERO).await
    });
    assert!(x.unwrap().is_some() && y.unwrap().is_some());
    assert_eq!(third.unwrap(), None);
    // Another tenant is not limited by this one.
    assert!(b.export(5, Duration::ZERO).await.unwrap().is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_report_requested_on_one_replica_is_made_by_exactly_one_worker() {
    let nodes = TestNodes::start(3);
    let (web, worker) = (
        Bank::new(replica(&nodes, "web-1").await),
        Bank::new(replica(&nodes, "worker-1").await),
    );
    let job = web.request_report(42).await.unwrap();
    // The lock is held from the request on: a second request is refused.
    assert!(matches!(web.request_report(42).await, Err(BankError::Lock(e)) if e.is_busy()));
    // The same job delivered twice: one worker makes the report, the other is refused.
    let (once, twice) = tokio::join!(worker.run_report(&job), worker.run_report(&job));
    let made: Vec<_> = [&once, &twice].into_iter().filter(|r| r.is_ok()).collect();
    assert_eq!(made.len(), 1, "{once:?} {twice:?}");
    assert!(matches!(
        [once, twice].into_iter().find(Result::is_err),
        Some(Err(BankError::Lock(LockError::Lost { .. })))
    ));
    assert!(nodes.is_free("report:42").await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_catalog_is_read_on_beside_readers_after_its_rebuild_and_labels_say_who() {
    let nodes = TestNodes::start(3);
    let (a, b) = (
        replica(&nodes, "replica-a").await,
        replica(&nodes, "replica-b").await,
    );
    let bank = Bank::new(a);
    let other = Bank::new(b.clone());
    let reader = b.clone();
    bank.rebuild_catalog(async move {
        // Readers come in beside the downgraded writer; a writer does not.
        let read = redlock_core::LockOptions::default().retry_count(0);
        let guard = reader
            .lock_mode_with("catalog", Mode::ProtectedRead, &read)
            .await
            .unwrap();
        let write = read.clone();
        assert!(
            reader
                .lock_mode_with("catalog", Mode::Exclusive, &write)
                .await
                .is_err()
        );
        guard.release().await.unwrap();
    })
    .await
    .unwrap();

    // Who holds a report while it is being made.
    let job = bank.request_report(7).await.unwrap();
    let detached: redlock_core::DetachedLock = serde_json::from_str(&job).unwrap();
    let resumed = b.resume(&detached).await.unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while other.who_holds("report:7").await.unwrap().as_deref() != Some("replica-b") {
        assert!(tokio::time::Instant::now() < deadline, "no label");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    resumed.release().await.unwrap();
    assert_eq!(other.who_holds("report:7").await.unwrap(), None);
}
