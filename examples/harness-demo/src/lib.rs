//! A small application guarded by Redlock, to show how its tests use the `redlock-test`
//! harness (see `tests/`): a payment function under `#[redlock]`, a nightly job that skips
//! while another replica runs it, and an axum route behind `RedlockLayer`.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use axum::Router;
use axum::extract::Path;
use axum::routing::post;
use redlock_axum::{RedlockLayer, TemplateError};
use redlock_core::{LockError, Redlock, redlock};

/// What [`Orders::pay`] can fail with.
#[derive(Debug, thiserror::Error)]
pub enum PayError {
    /// The order's lock could not be taken: another payment of the same order runs
    /// ([`LockError::is_busy`]), or the nodes are unavailable.
    #[error("the order's lock")]
    Lock(#[from] LockError),
}

/// Orders, paid one at a time per order across every replica.
#[derive(Debug, Clone)]
pub struct Orders {
    redlock: Redlock,
    paid: Arc<AtomicU64>,
    cleanups: Arc<AtomicU64>,
}

impl Orders {
    /// Orders whose payments lock through `redlock`.
    pub fn new(redlock: Redlock) -> Self {
        Self {
            redlock,
            paid: Arc::default(),
            cleanups: Arc::default(),
        }
    }

    /// Pays order `id` while holding the lock `order:{id}` (one attempt, 10 s ttl); returns
    /// how many payments this value has made so far.
    ///
    /// # Errors
    /// [`PayError::Lock`] when the lock is held by someone else (busy) or cannot be taken.
    #[redlock(resource = "order:{id}", redlock = self.redlock, ttl = "10s", retry_count = 0)]
    pub async fn pay(&self, id: u64) -> Result<u64, PayError> {
        Ok(self.paid.fetch_add(1, Ordering::SeqCst) + 1)
    }

    /// The nightly clean-up, run by one replica at a time: `Ok(Some(n))` when this call ran
    /// it (its `n`-th run here), `Ok(None)` when another holder had the lock `cron:cleanup`
    /// and the run was skipped.
    ///
    /// # Errors
    /// [`PayError::Lock`] when the lock cannot be taken for another reason than busy
    /// (e.g. the nodes are unavailable).
    #[redlock(resource = "cron:cleanup", redlock = self.redlock, retry_count = 0, on_busy = "skip")]
    pub async fn cleanup(&self) -> Result<Option<u64>, PayError> {
        Ok(Some(self.cleanups.fetch_add(1, Ordering::SeqCst) + 1))
    }

    /// Payments made so far through this value.
    pub fn paid(&self) -> u64 {
        self.paid.load(Ordering::SeqCst)
    }
}

/// The HTTP API: `POST /orders/{id}/ship` runs while holding the lock `order:{id}`; while
/// another holder has it, the layer answers `423 Locked` without running the handler.
///
/// # Errors
/// [`TemplateError`] if the layer's resource template is refused (it is a constant, so this
/// does not happen).
pub fn router(redlock: Redlock) -> Result<Router, TemplateError> {
    Ok(Router::new()
        .route(
            "/orders/{id}/ship",
            post(|Path(id): Path<u64>| async move { format!("shipped {id}") }),
        )
        .route_layer(RedlockLayer::from_template(redlock, "order:{id}")?))
}
