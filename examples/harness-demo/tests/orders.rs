//! The application's lock-guarded code against three real servers started by `redlock-test`.

#![allow(clippy::unwrap_used)] // tests unwrap: a failure is the assertion

use std::time::Duration;

use axum::body::Body;
use harness_demo::{Orders, PayError, router};
use http::{Request, StatusCode};
use http_body_util::BodyExt;
use redlock_core::{LockOptions, Redlock};
use redlock_test::{HeldValue, TestNodes, redlock, redlock_with};
use tower::ServiceExt;

/// The application's handle: one attempt per lock, as in production.
async fn app_handle(nodes: &TestNodes) -> Redlock {
    redlock_with(nodes, LockOptions::default().retry_count(0)).await
}

#[tokio::test]
async fn pay_runs_when_free_and_is_refused_while_another_holder_has_the_order() {
    let nodes = TestNodes::start(3);
    let orders = Orders::new(app_handle(&nodes).await);

    // Free: the payment runs, and releases the lock when it returns.
    assert_eq!(orders.pay(7).await.unwrap(), 1);
    assert!(nodes.is_free("order:7").await);
    // Its release returned at a quorum; the last node's delete lands just after.
    nodes.gone_everywhere("order:7").await;

    // Another holder (say, another replica) takes the order's lock.
    let other = redlock(&nodes).await;
    let guard = other.lock("order:7").await.unwrap();
    assert_eq!(
        nodes.holder("order:7").await.as_deref(),
        Some(guard.token().expose())
    );
    // On each node that granted it (a quorum at least), with a ttl: `settle` waits for the
    // grants that land after the quorum.
    let token = guard.token().expose();
    for holding in nodes.settle("order:7", |h| h.value.holds(token)).await {
        if holding.value.holds(token) {
            assert!(holding.ttl.is_some_and(|ttl| ttl.as_millis() > 0));
        }
    }

    // Refused while held: the body does not run.
    match orders.pay(7).await {
        Err(PayError::Lock(error)) => assert!(error.is_busy(), "{error}"),
        other => panic!("expected busy, got {other:?}"),
    }
    assert_eq!(orders.paid(), 1);
    // Another order is not affected.
    assert_eq!(orders.pay(8).await.unwrap(), 2);

    // Released: the payment runs again.
    guard.release().await.unwrap();
    assert!(nodes.is_free("order:7").await);
    assert_eq!(orders.pay(7).await.unwrap(), 3);
}

#[tokio::test]
async fn the_cleanup_is_skipped_while_another_replica_runs_it() {
    let nodes = TestNodes::start(3);
    let orders = Orders::new(app_handle(&nodes).await);
    assert_eq!(orders.cleanup().await.unwrap(), Some(1));

    let other = redlock(&nodes).await;
    let guard = other.lock("cron:cleanup").await.unwrap();
    assert!(!nodes.is_free("cron:cleanup").await);
    assert_eq!(orders.cleanup().await.unwrap(), None, "ran while held");

    guard.release().await.unwrap();
    assert_eq!(orders.cleanup().await.unwrap(), Some(2));
}

#[tokio::test]
async fn the_route_answers_423_while_the_order_is_held_and_200_when_free() {
    let nodes = TestNodes::start(3);
    let app = router(app_handle(&nodes).await).unwrap();
    let ship = |id: u64| {
        Request::post(format!("/orders/{id}/ship"))
            .body(Body::empty())
            .unwrap()
    };

    let response = app.clone().oneshot(ship(5)).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    // The layer holds the lock until the response body has been sent, then releases it.
    let body = response.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(&body[..], b"shipped 5");
    assert!(
        nodes
            .wait_free("order:5", Duration::from_secs(2))
            .await
            .is_some(),
        "still held after the response"
    );

    let other = redlock(&nodes).await;
    let guard = other.lock("order:5").await.unwrap();
    let response = app.clone().oneshot(ship(5)).await.unwrap();
    assert_eq!(response.status(), StatusCode::LOCKED);
    // The holder kept its lock: the refused request took nothing.
    assert_eq!(
        nodes.holder("order:5").await.as_deref(),
        Some(guard.token().expose())
    );

    guard.release().await.unwrap();
    let response = app.clone().oneshot(ship(5)).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    drop(response);
}

#[tokio::test]
async fn the_lock_survives_one_node_down_and_a_slow_one() {
    let mut nodes = TestNodes::start(3);
    let proxies = nodes.proxies();
    let orders = Orders::new(
        Redlock::builder()
            .nodes(redlock_test::proxy_urls(&proxies))
            .lock_options(LockOptions::default().retry_count(0))
            .build()
            .await
            .unwrap(),
    );
    // One node cut off and another one 10 ms slower each way: a quorum (2 of 3) still answers.
    proxies[0].partition();
    proxies[1].delay(Duration::from_millis(10));
    assert_eq!(orders.pay(1).await.unwrap(), 1);

    // The cut node's server killed outright: the same.
    nodes.servers[0].kill();
    assert_eq!(nodes.holdings("order:1").await[0].value, HeldValue::Down);
    assert_eq!(orders.pay(1).await.unwrap(), 2);
    assert!(nodes.is_free("order:1").await);
}
