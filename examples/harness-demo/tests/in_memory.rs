//! The same application against in-memory nodes (`redlock_test::MemoryNodes`), beside
//! `orders.rs`, which runs it against real servers: no server binary, no ports, and tokio's
//! paused clock, so the ttls pass without waiting.

#![allow(clippy::unwrap_used)] // tests unwrap: a failure is the assertion

use std::time::Duration;

use axum::body::Body;
use harness_demo::{Orders, PayError, router};
use http::{Request, StatusCode};
use redlock_core::LockOptions;
use redlock_test::MemoryNodes;
use tower::ServiceExt;

#[tokio::test(start_paused = true)]
async fn pay_is_refused_while_another_holder_has_the_order() {
    let nodes = MemoryNodes::new(3);
    let orders = Orders::new(
        nodes
            .redlock_with(LockOptions::default().retry_count(0))
            .await,
    );
    assert_eq!(orders.pay(7).await.unwrap(), 1);
    assert!(nodes.is_free("order:7"));

    let other = nodes.redlock().await;
    let guard = other.lock("order:7").await.unwrap();
    assert_eq!(
        nodes.holder("order:7").as_deref(),
        Some(guard.token().expose())
    );
    match orders.pay(7).await {
        Err(PayError::Lock(error)) => assert!(error.is_busy(), "{error}"),
        other => panic!("expected busy, got {other:?}"),
    }
    // The other holder crashed without releasing: its 30 s ttl passes at once on the paused
    // clock, and the order can be paid again.
    std::mem::forget(guard);
    tokio::time::sleep(Duration::from_secs(31)).await;
    assert!(nodes.is_free("order:7"));
    assert_eq!(orders.pay(7).await.unwrap(), 2);
}

#[tokio::test(start_paused = true)]
async fn the_route_answers_423_while_the_order_is_held() {
    let nodes = MemoryNodes::new(3);
    let app = router(
        nodes
            .redlock_with(LockOptions::default().retry_count(0))
            .await,
    )
    .unwrap();
    let ship = || Request::post("/orders/9/ship").body(Body::empty()).unwrap();

    let guard = nodes.redlock().await.lock("order:9").await.unwrap();
    let refused = app.clone().oneshot(ship()).await.unwrap();
    assert_eq!(refused.status(), StatusCode::LOCKED);

    guard.release().await.unwrap();
    let shipped = app.oneshot(ship()).await.unwrap();
    assert_eq!(shipped.status(), StatusCode::OK);
}
