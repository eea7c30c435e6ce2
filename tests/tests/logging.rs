//! The token never reaches the logs. Alone in its own test binary: tracing caches callsite
//! interest per process, so a capture shared with concurrently running tests would miss
//! events.

#![allow(clippy::unwrap_used)] // tests unwrap: a failure is the assertion

use std::sync::Arc;
use std::time::Duration;

use redlock_core::{LockOptions, Redlock};
use redlock_tests::RedisNodes;

async fn redlock(nodes: &RedisNodes) -> Redlock {
    Redlock::builder()
        .nodes(nodes.urls())
        .build()
        .await
        .unwrap()
}

#[test]
fn tokens_never_reach_the_logs() {
    use std::io::Write;
    use std::sync::Mutex;

    #[derive(Clone, Default)]
    struct Capture(Arc<Mutex<Vec<u8>>>);
    impl Write for Capture {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    let capture = Capture::default();
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
    let logs = String::from_utf8(capture.0.lock().unwrap().clone()).unwrap();
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
