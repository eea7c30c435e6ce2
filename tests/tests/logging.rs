//! What the library logs: never a token, and a WARN for a fencing setup that one node down
//! stops. In a test binary of their own, each test with its own subscriber: tracing caches
//! callsite interest per process, so a capture shared with concurrently running tests would
//! miss events.

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

#[test]
fn fencing_that_needs_every_node_is_warned_about_at_build_and_at_a_campaign() {
    let capture = LogCapture::default();
    let writer = capture.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::WARN)
        .with_writer(move || writer.clone())
        .finish();
    let (three, five) = (RedisNodes::start(3), RedisNodes::start(5));
    let fenced = LockOptions::default().fencing(true);
    let warned = |logs: &str| logs.matches("a fencing token needs all").count();
    tracing::subscriber::with_default(subscriber, || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(async {
                // Over 5 nodes a fencing token needs 4 of them: nothing to warn about.
                let build = |nodes: &RedisNodes| {
                    Redlock::builder()
                        .nodes(nodes.urls())
                        .lock_options(fenced.clone())
                        .build()
                };
                let _five = build(&five).await.unwrap();
                assert_eq!(warned(&capture.text()), 0, "{}", capture.text());
                // Over 3 it needs all 3, while a lock needs 2.
                let _three = build(&three).await.unwrap();
                assert_eq!(warned(&capture.text()), 1, "{}", capture.text());
                // A fenced election on a handle whose own options are not fenced.
                let plain = redlock(&three).await;
                assert_eq!(warned(&capture.text()), 1, "{}", capture.text());
                let election = plain
                    .leader_election("leader:fenced")
                    .options(fenced.clone().ttl(Duration::from_secs(1)));
                let stop = election.shutdown_signal();
                let campaign = tokio::spawn(election.run(|_term| async {}));
                within_logs(&capture, 2).await;
                stop.cancel();
                campaign.await.unwrap().unwrap();
            });
    });
    assert!(capture.text().contains("3 nodes"), "{}", capture.text());
}

/// Waits until the capture holds `n` fencing warnings.
async fn within_logs(capture: &LogCapture, n: usize) {
    let started = std::time::Instant::now();
    while capture.text().matches("a fencing token needs all").count() < n {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{}",
            capture.text()
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}
