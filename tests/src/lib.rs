//! Real-server test support for this workspace's own tests. The servers, the lock over them,
//! the views of the keys and the fault proxy are the published `redlock-test` crate,
//! re-exported here under the names the tests use ([`RedisServer`], [`RedisNodes`]); what
//! stays here is only ours: a wall-clock shim ([`clock`], an LD_PRELOAD library built with
//! gcc while the tests run), an exclusion [`checker`] independent of the lock, the
//! [`workload`]s of the reliability scenarios and log capture.

pub mod checker;
pub mod clock;
mod logs;
pub mod lua;
pub mod workload;

pub use logs::LogCapture;
/// A set of servers (the published crate's `TestNodes`).
pub use redlock_test::TestNodes as RedisNodes;
/// One server process (the published crate's `TestServer`).
pub use redlock_test::TestServer as RedisServer;
pub use redlock_test::{
    HeldValue, Holding, SERVER_BIN_ENV, ServerKind, ServerOptions, StartError, VALKEY_BIN_ENV,
    fencing_key, foreign_set_nx, free_port, free_within, is_free, plain_client, proxy_urls,
    redlock, redlock_with, waiters_key,
};

/// The fault proxy (re-exported from `redlock-test`).
pub mod proxy {
    pub use redlock_test::{Direction, Fault, Proxy};
}

/// Test certificates (re-exported from `redlock-test`).
pub mod tls {
    pub use redlock_test::Certificates;
}

use std::time::Duration;

/// Awaits `future` for at most 10 s; panics with `what` if it takes longer. Every wait in the
/// tests goes through this or another bound, so a bug fails the test instead of hanging CI.
pub async fn within<F: std::future::IntoFuture>(what: &str, future: F) -> F::Output {
    tokio::time::timeout(Duration::from_secs(10), future)
        .await
        .unwrap_or_else(|_| panic!("timed out after 10 s waiting for {what}"))
}

/// Sets its flag when dropped: put one in a future to see that the future was dropped.
#[derive(Debug)]
pub struct DropFlag(pub std::sync::Arc<std::sync::atomic::AtomicBool>);

impl Drop for DropFlag {
    fn drop(&mut self) {
        self.0.store(true, std::sync::atomic::Ordering::SeqCst);
    }
}

/// Takes `resource`'s lock through `redlock` and returns it once every node holds it: a grant
/// the node timeout cut (a loaded machine) leaves the lock on a quorum only, so such a lock is
/// released and taken again, up to 5 times. For the tests whose point is every node.
///
/// # Panics
/// When the lock is refused, or never lands on every node.
pub async fn lock_everywhere(
    redlock: &redlock_core::Redlock,
    nodes: &RedisNodes,
    resource: &str,
    mode: Option<redlock_core::Mode>,
    options: &redlock_core::LockOptions,
) -> redlock_core::LockGuard {
    for _ in 0..5 {
        let guard = match lock_as(redlock, resource, mode, options).await {
            Ok(guard) => guard,
            Err(error) => panic!("{resource}: {error}"),
        };
        let (key, token) = (guard.key().to_owned(), guard.token().expose().to_owned());
        let holdings = nodes.settle(&key, |h| h.value.holds(&token)).await;
        if holdings.iter().all(|h| h.value.holds(&token)) {
            return guard;
        }
        if let Err(error) = guard.release().await {
            panic!("{resource}: {error}");
        }
        nodes.gone_everywhere(&key).await;
    }
    panic!("{resource} never held on every node in 5 tries");
}

/// `resource`'s lock with `options`: in `mode` when there is one
/// ([`Redlock::lock_mode_with`](redlock_core::Redlock::lock_mode_with)), the plain lock
/// otherwise ([`Redlock::lock_with`](redlock_core::Redlock::lock_with)). For scenarios that
/// draw the mode at random.
pub async fn lock_as(
    redlock: &redlock_core::Redlock,
    resource: &str,
    mode: Option<redlock_core::Mode>,
    options: &redlock_core::LockOptions,
) -> Result<redlock_core::LockGuard, redlock_core::LockError> {
    match mode {
        Some(mode) => redlock.lock_mode_with(resource, mode, options).await,
        None => redlock.lock_with(resource, options).await,
    }
}
