//! The spans and events an operator reads: one span per acquisition with its outcome, wait,
//! attempts and votes; one per release, explicit, by drop or by `release_all`; a warning when
//! a lock is lost by expiry; never the token. Alone in its own test binary, with a global
//! subscriber: the release of a dropped guard runs on another task.
//!
//! The spans are read from the `fmt` layer's lines (`FmtSpan::CLOSE` shows every field a span
//! recorded), not from an ordered mock subscriber such as `tracing-mock`: such a mock checks
//! every notification against the next expectation, and an instrumented future enters and
//! exits its span once per poll, as many times as the nodes' answers take to arrive, while
//! the releases by drop run on other tasks. "Exactly one span closed with these fields" and
//! "the token in no line" are what the test asserts.

#![allow(clippy::unwrap_used)] // tests unwrap: a failure is the assertion

use std::time::Duration;

use redlock_core::LockOptions;
use redlock_tests::{LogCapture, RedisNodes, redlock};
use tracing_subscriber::fmt::format::FmtSpan;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquisitions_releases_and_losses_are_traced_without_the_token() {
    let capture = LogCapture::default();
    let writer = capture.clone();
    tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_span_events(FmtSpan::CLOSE)
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .init();
    let nodes = RedisNodes::start(3);
    let (a, b) = (redlock(&nodes).await, redlock(&nodes).await);
    let once = LockOptions::default()
        .retry_count(1)
        .retry_delay(Duration::from_millis(10));
    let mut tokens = Vec::new();

    let guard = a.lock_with("spans:a", &once).await.unwrap();
    tokens.push(guard.token().expose().to_owned());
    assert!(b.lock_with("spans:a", &once).await.unwrap_err().is_busy());
    guard.release().await.unwrap();

    let dropped = a.lock_with("spans:b", &once).await.unwrap();
    tokens.push(dropped.token().expose().to_owned());
    drop(dropped);
    let kept = a.lock_with("spans:c", &once).await.unwrap();
    tokens.push(kept.token().expose().to_owned());
    a.release_all().await;

    // Lost by expiry, seen by a waiter on its lost signal, never released.
    let short = once.clone().ttl(Duration::from_millis(150));
    let expiring = a.lock_with("spans:d", &short).await.unwrap();
    tokens.push(expiring.token().expose().to_owned());
    expiring.lost().await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let logs = capture.lines().join("\n");

    // Per-operation spans are DEBUG, as tower-http's: an application logging at INFO does
    // not pay for them.
    let acquired = capture.with(&[
        "DEBUG",
        "redlock.acquire",
        "close",
        "redlock.resource=\"spans:a\"",
        "redlock.resource_class=\"spans\"",
        "redlock.outcome=\"acquired\"",
        "redlock.attempts=1",
        "redlock.votes.granted=",
        "redlock.wait_ms=",
    ]);
    assert_eq!(acquired.len(), 1, "{logs}");
    let busy = capture.with(&[
        "DEBUG",
        "redlock.acquire",
        "close",
        "redlock.resource=\"spans:a\"",
        "redlock.outcome=\"busy\"",
        "error.type=\"busy\"",
        "redlock.attempts=2",
        "redlock.votes.held=",
    ]);
    assert_eq!(busy.len(), 1, "{logs}");
    // No record repeats a field: an event inside a span does not name the span's fields
    // again, and the span carries no per-handle constants (node count, quorum).
    for line in capture.lines() {
        assert!(
            line.matches("resource=").count() <= 1 && !line.contains("redlock.nodes"),
            "a record repeats a field: {line}"
        );
    }
    for (resource, via) in [
        ("spans:a", "explicit"),
        ("spans:b", "drop"),
        ("spans:c", "release_all"),
    ] {
        let released = capture.with(&[
            "DEBUG",
            "redlock.release",
            "close",
            &format!("redlock.resource=\"{resource}\""),
            &format!("redlock.release.via=\"{via}\""),
            "redlock.confirmed=true",
            "redlock.deleted=",
        ]);
        assert_eq!(released.len(), 1, "{resource} {via}: {logs}");
    }
    let lost = capture.with(&[
        "WARN",
        "lock lost",
        "redlock.resource=\"spans:d\"",
        "redlock.lost.reason=\"expired\"",
    ]);
    assert_eq!(lost.len(), 1, "{logs}");
    // A release is not a loss.
    assert!(capture.with(&["lock lost", "spans:a"]).is_empty(), "{logs}");
    for token in tokens {
        assert!(!logs.contains(&token), "a token reached the logs: {logs}");
    }
}
