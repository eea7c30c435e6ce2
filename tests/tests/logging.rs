//! The token never reaches the logs. Alone in its own test binary: tracing caches callsite
//! interest per process, so a capture shared with concurrently running tests would miss
//! events.

#![allow(clippy::unwrap_used)] // tests unwrap: a failure is the assertion

use std::time::Duration;

use redlock_core::{LockOptions, Redlock};
use redlock_tests::{LogCapture, RedisNodes};

async fn redlock(nodes: &RedisNodes) -> Redlock {
    Redlock::builder()
        .nodes(nodes.urls())
        .build()
        .await
        .unwrap()
}

#[test]
fn tokens_never_reach_the_logs() {
    let capture = LogCapture::default();
    let writer = capture.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_writer(move || writer.clone())
        .finish();
    let nodes = RedisNodes::start(3);
    let tokens = tracing::subscriber::with_default(subscriber, || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(async {
                let a = redlock(&nodes).await;
                let once = LockOptions::default()
                    .retry_count(1)
                    .retry_delay(Duration::ZERO);
                let guard = a.lock_with("res", &once).await.unwrap();
                let token = guard.token().expose().to_owned();
                tracing::info!(?guard, "holding");
                // A contended acquisition logs its failed attempts too.
                assert!(a.lock_with("res", &once).await.is_err());
                guard.release().await.unwrap();
                a.shutdown(Duration::from_secs(1)).await;
                token
            })
    });
    let logs = capture.text();
    assert!(
        logs.contains("redlock.acquire"),
        "the acquire span is missing: {logs}"
    );
    assert!(
        logs.contains("attempt decided") && logs.contains("giving up"),
        "{logs}"
    );
    assert!(logs.contains("<redacted>"));
    assert!(!logs.contains(&tokens), "a token was logged");
}
