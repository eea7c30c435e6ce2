//! [`LockRejection`]: a lock error as an HTTP response.

use std::time::Duration;

use axum::response::{IntoResponse, Response};
use http::{HeaderValue, StatusCode, header};
use redlock_core::LockError;

/// Default `Retry-After` sent with a busy or unavailable answer: 1 s.
pub const DEFAULT_RETRY_AFTER: Duration = Duration::from_secs(1);

/// A [`LockError`] rendered as a response:
///
/// - busy ([`LockError::Busy`]): `423 Locked` (configurable) with `Retry-After`;
/// - Redis unavailable, no validity left, or shutting down: `503 Service Unavailable` with
///   `Retry-After`;
/// - anything else (invalid resource, unregistered handle): `500 Internal Server Error`.
///
/// Return it from `#[redlock]` axum handlers: `Result<impl IntoResponse, LockRejection>`, or
/// wrap it in your own error type.
#[derive(Debug)]
pub struct LockRejection {
    error: LockError,
    busy_status: StatusCode,
    retry_after: Duration,
}

impl LockRejection {
    /// Wraps `error` with the default statuses.
    pub fn new(error: LockError) -> Self {
        Self {
            error,
            busy_status: StatusCode::LOCKED,
            retry_after: DEFAULT_RETRY_AFTER,
        }
    }

    /// The status answered when the resource is busy (default `423 Locked`).
    #[must_use]
    pub fn busy_status(mut self, status: StatusCode) -> Self {
        self.busy_status = status;
        self
    }

    /// The `Retry-After` sent with busy and unavailable answers (whole seconds, rounded up).
    #[must_use]
    pub fn retry_after(mut self, after: Duration) -> Self {
        self.retry_after = after;
        self
    }

    /// The lock error.
    pub fn error(&self) -> &LockError {
        &self.error
    }

    /// The status this rejection answers with.
    pub fn status(&self) -> StatusCode {
        if self.error.is_busy() {
            self.busy_status
        } else if self.error.is_unavailable() || matches!(self.error, LockError::Lost { .. }) {
            StatusCode::SERVICE_UNAVAILABLE
        } else {
            StatusCode::INTERNAL_SERVER_ERROR
        }
    }
}

impl From<LockError> for LockRejection {
    fn from(error: LockError) -> Self {
        Self::new(error)
    }
}

impl std::fmt::Display for LockRejection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.error.fmt(f)
    }
}

impl std::error::Error for LockRejection {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.error)
    }
}

impl IntoResponse for LockRejection {
    fn into_response(self) -> Response {
        let status = self.status();
        // Resource names can be internal: the body says what happened, not which key.
        let message = if self.error.is_busy() {
            "the resource is locked by another request; retry later"
        } else if matches!(self.error, LockError::Lost { .. }) {
            "the lock was lost before the request completed; its work was stopped, retry later"
        } else if matches!(self.error, LockError::ShuttingDown) {
            "the server is shutting down; retry on another instance"
        } else if self.error.is_unavailable() {
            "the lock service is unavailable; retry later"
        } else {
            tracing::error!(error = %self.error, "lock request rejected");
            "the lock could not be requested"
        };
        let mut response = (status, message).into_response();
        if status != StatusCode::INTERNAL_SERVER_ERROR {
            let secs = self.retry_after.as_secs() + u64::from(self.retry_after.subsec_nanos() > 0);
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(secs.max(1)));
        }
        response
    }
}
