//! Redlock for axum: a tower [`Layer`](tower_layer::Layer) that locks per route, a
//! rejection type for `#[redlock]` handlers, and a graceful-shutdown handle that releases
//! every held lock.
//!
//! - [`RedlockLayer`]: `Router::route_layer(RedlockLayer::from_template(redlock,
//!   "order:{id}")?)` locks `order:42` for `/orders/42/...`, answers `423 Locked` with
//!   `Retry-After` when busy and `503` when Redis is unavailable (or your own response:
//!   [`on_rejection`](RedlockLayer::on_rejection)), and holds the lock until the response
//!   body has been sent, for at most [`max_hold`](RedlockLayer::max_hold) (default
//!   [`DEFAULT_MAX_HOLD`], 60 s); a body whose lock is lost ends with a [`BodyError`].
//! - [`HeldLock`]: the extractor for the lock the layer holds (fencing token, lost signal);
//!   `Option<HeldLock>` where the layer may not lock.
//! - [`LockRejection`]: return `Result<_, LockRejection>` from a handler annotated with
//!   `#[redlock(resource = "order:{id}")]`: a busy resource becomes `423`.
//! - [`ShutdownHandle`]: plugs into `axum::serve(..).with_graceful_shutdown(..)` and listens
//!   for SIGTERM and Ctrl-C; new acquisitions are refused once shutdown starts, and held
//!   locks are released by quorum before the process exits.
//! - [`redlock`](macro@redlock): the `#[redlock]` attribute, re-exported from redlock-core
//!   (its `macros` feature, on by default), so that a handler module needs one import.
//!
//! Feature `metrics`: the layer counts its rejections through the `metrics` facade
//! (`redlock_layer_rejections_total{route, status}`).
//!
//! Every public item is at the crate root (the middleware's parts, [`RedlockService`] and
//! [`ResponseFuture`], too): there is one path to each.
#![cfg_attr(docsrs, feature(doc_cfg))]

mod extract;
mod lock;
mod rejection;
mod shutdown;

// Compile-time checks: the public types are `Send + Sync`, the response future `Send`.
mod send_sync;

pub use extract::{HeldLock, HeldLockRejection};
pub use lock::{
    BodyError, DEFAULT_MAX_HOLD, RedlockLayer, RedlockService, ReleaseOn, ResponseFuture,
    TemplateError, by_method,
};
pub use rejection::{DEFAULT_RETRY_AFTER, LockRejection};
pub use shutdown::ShutdownHandle;

pub use redlock_core::redlock;
