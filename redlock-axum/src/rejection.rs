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
        self.kind().0
    }

    /// The text of the response body. Resource names can be internal: it says what happened,
    /// not which key.
    pub fn body_text(&self) -> &'static str {
        self.kind().1
    }

    /// The status and body text, decided in one place (as axum-core's rejections).
    fn kind(&self) -> (StatusCode, &'static str) {
        const UNAVAILABLE: StatusCode = StatusCode::SERVICE_UNAVAILABLE;
        match &self.error {
            LockError::Busy { .. } => (
                self.busy_status,
                "the resource is locked by another request; retry later",
            ),
            LockError::Lost { .. } => (
                UNAVAILABLE,
                "the lock was lost before the request completed; its work was stopped, retry later",
            ),
            LockError::ShuttingDown => (
                UNAVAILABLE,
                "the server is shutting down; retry on another instance",
            ),
            error if error.is_unavailable() => {
                (UNAVAILABLE, "the lock service is unavailable; retry later")
            }
            _ => (
                StatusCode::INTERNAL_SERVER_ERROR,
                "the lock could not be requested",
            ),
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
        let (status, text) = self.kind();
        if status == StatusCode::INTERNAL_SERVER_ERROR && !self.error.is_busy() {
            tracing::error!(error = %self.error, "lock request rejected");
        }
        let mut response = (status, text).into_response();
        if status != StatusCode::INTERNAL_SERVER_ERROR {
            let secs = self.retry_after.as_secs() + u64::from(self.retry_after.subsec_nanos() > 0);
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(secs.max(1)));
        }
        response
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // tests unwrap: a failure is the assertion

    use redlock_core::{InvalidInput, LostReason, Outcomes};

    use super::*;

    fn every_variant() -> Vec<(LockError, StatusCode)> {
        let resource = || "order:secret-42".to_owned();
        let unavailable = StatusCode::SERVICE_UNAVAILABLE;
        vec![
            (
                LockError::Invalid(InvalidInput::EmptyResource),
                StatusCode::INTERNAL_SERVER_ERROR,
            ),
            (
                LockError::Busy {
                    resource: resource(),
                    attempts: 1,
                    quorum: 2,
                    outcomes: Outcomes::default(),
                },
                StatusCode::LOCKED,
            ),
            (
                LockError::Unavailable {
                    resource: resource(),
                    attempts: 1,
                    quorum: 2,
                    outcomes: Outcomes::default(),
                },
                unavailable,
            ),
            (
                LockError::NoValidity {
                    resource: resource(),
                    attempts: 1,
                    elapsed: Duration::from_secs(2),
                    ttl: Duration::from_secs(1),
                },
                unavailable,
            ),
            (
                LockError::ReleaseUnconfirmed {
                    resource: resource(),
                    answered: 1,
                    nodes: 3,
                    quorum: 2,
                },
                unavailable,
            ),
            (LockError::ShuttingDown, unavailable),
            (
                LockError::NotRegistered("default".to_owned()),
                StatusCode::INTERNAL_SERVER_ERROR,
            ),
            (
                LockError::Lost {
                    resource: resource(),
                    reason: LostReason::Expired,
                },
                unavailable,
            ),
            // `LockError::Entropy` (500) cannot be built outside redlock-core: its source is
            // private.
        ]
    }

    #[tokio::test]
    async fn every_error_has_its_status_and_the_response_agrees() {
        for (error, status) in every_variant() {
            let rejection = LockRejection::new(error);
            assert_eq!(rejection.status(), status, "{:?}", rejection.error());
            let text = rejection.body_text();
            let retry = status != StatusCode::INTERNAL_SERVER_ERROR;
            let response = rejection.into_response();
            assert_eq!(response.status(), status);
            assert_eq!(response.headers().contains_key(header::RETRY_AFTER), retry);
            // The body is the kind's text, and never names the resource (a client-controlled
            // path may carry data the service does not echo).
            let body = axum::body::to_bytes(response.into_body(), usize::MAX)
                .await
                .unwrap();
            assert_eq!(body, text.as_bytes());
            assert!(!String::from_utf8_lossy(&body).contains("secret-42"));
        }
    }

    #[test]
    fn busy_status_applies_to_busy_only_and_retry_after_rounds_up() {
        for (error, status) in every_variant() {
            let busy = error.is_busy();
            let rejection = LockRejection::new(error)
                .busy_status(StatusCode::CONFLICT)
                .retry_after(Duration::from_millis(1500));
            let expected = if busy { StatusCode::CONFLICT } else { status };
            assert_eq!(rejection.status(), expected, "{:?}", rejection.error());
            let response = rejection.into_response();
            if expected != StatusCode::INTERNAL_SERVER_ERROR {
                assert_eq!(response.headers()[header::RETRY_AFTER], "2");
            }
        }
        let short = LockRejection::new(LockError::ShuttingDown).retry_after(Duration::ZERO);
        assert_eq!(short.into_response().headers()[header::RETRY_AFTER], "1");
    }
}
