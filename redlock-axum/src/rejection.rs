//! [`LockRejection`]: a lock error as an HTTP response.

use std::time::Duration;

use axum::response::{IntoResponse, Response};
use http::{HeaderValue, StatusCode, header};
use redlock_core::{InvalidInput, LockError};

/// Default `Retry-After` sent with an unavailable answer (`503`): 1 s.
pub const DEFAULT_RETRY_AFTER: Duration = Duration::from_secs(1);

/// A [`LockError`] rendered as a response:
///
/// - busy ([`LockError::Busy`]): `423 Locked` (configurable), with `Retry-After` the configured
///   delay ([`retry_after`](Self::retry_after), default 1 s), or the holder's remaining ttl
///   ([`LockError::retry_after`]) when that is sooner. A holder usually releases long before
///   its ttl runs out, and one that auto-extends keeps renewing it, so the ttl alone would
///   tell a client to wait far longer than the work takes;
/// - Redis unavailable, no validity left, lock lost, or shutting down: `503 Service
///   Unavailable` with `Retry-After` ([`retry_after`](Self::retry_after), default 1 s);
/// - a resource that cannot be locked (empty, longer than
///   [`MAX_RESOURCE_LEN`](redlock_core::MAX_RESOURCE_LEN), or holding a NUL byte): `400 Bad
///   Request`. The resource is rendered from the request (a path segment, an argument), so
///   this is the client's input, as axum's own `Path` rejection answers `400`; logged at
///   debug level only, so that a client cannot fill the logs;
/// - anything else (invalid options, unregistered handle): `500 Internal Server Error`,
///   logged as an error.
///
/// `Retry-After` is in whole seconds, rounded up, at least 1.
///
/// Return it from `#[redlock]` axum handlers: `Result<impl IntoResponse, LockRejection>`, or
/// wrap it in your own error type; [`RedlockLayer::on_rejection`](crate::RedlockLayer::on_rejection)
/// renders the layer's own rejections your way.
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

    /// The `Retry-After` sent with unavailable answers (`503`) and with busy answers (whole
    /// seconds, rounded up, at least 1); a busy answer sends the holder's remaining ttl
    /// instead when the nodes reported one that is sooner.
    #[must_use]
    pub fn retry_after(mut self, after: Duration) -> Self {
        self.retry_after = after;
        self
    }

    /// The lock error.
    pub fn error(&self) -> &LockError {
        &self.error
    }

    /// Unwraps the lock error.
    pub fn into_error(self) -> LockError {
        self.error
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

    /// The `Retry-After` this rejection sends, in seconds (rounded up, at least 1): when
    /// busy, the configured delay or the holder's remaining ttl ([`LockError::retry_after`])
    /// if sooner; 1 after a split vote (nobody holds the resource); the configured delay when
    /// unavailable; `None` otherwise. For an [`on_rejection`](crate::RedlockLayer::on_rejection) hook that
    /// builds its own response.
    pub fn retry_after_secs(&self) -> Option<u64> {
        let after = if let LockError::SplitVote { .. } = self.error {
            Some(Duration::ZERO)
        } else if self.error.is_busy() {
            Some(
                self.error
                    .retry_after()
                    .map_or(self.retry_after, |ttl| ttl.min(self.retry_after)),
            )
        } else if self.status() == StatusCode::SERVICE_UNAVAILABLE {
            Some(self.retry_after)
        } else {
            None
        };
        after.map(whole_seconds)
    }

    /// The status and body text, decided in one place (as axum-core's rejections).
    fn kind(&self) -> (StatusCode, &'static str) {
        const UNAVAILABLE: StatusCode = StatusCode::SERVICE_UNAVAILABLE;
        match &self.error {
            LockError::Busy { .. } => (
                self.busy_status,
                "the resource is locked by another request; retry later",
            ),
            LockError::SplitVote { .. } => (
                self.busy_status,
                "other requests asked for the resource at the same moment; retry",
            ),
            LockError::Lost { .. } => (
                UNAVAILABLE,
                "the lock was lost before the request completed; its work was stopped, retry later",
            ),
            LockError::ShuttingDown => (
                UNAVAILABLE,
                "the server is shutting down; retry on another instance",
            ),
            LockError::Invalid(
                InvalidInput::EmptyResource
                | InvalidInput::ResourceTooLong { .. }
                | InvalidInput::ReservedResource,
            ) => (
                StatusCode::BAD_REQUEST,
                "the request names a resource that cannot be locked (empty, too long, or holding a NUL byte)",
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

/// A `Retry-After` delay in whole seconds: rounded up, at least 1, saturating at `u64::MAX`.
fn whole_seconds(after: Duration) -> u64 {
    after
        .as_secs()
        .saturating_add(u64::from(after.subsec_nanos() > 0))
        .max(1)
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
        match status {
            StatusCode::INTERNAL_SERVER_ERROR => {
                tracing::error!(error = %self.error, "lock request rejected");
            }
            // The client's input: one line per request at error level would let any client
            // fill the logs. The message holds no part of the resource.
            StatusCode::BAD_REQUEST => {
                tracing::debug!(error = %self.error, "lock request refused: invalid resource");
            }
            _ => {}
        }
        let retry_after = self.retry_after_secs();
        let mut response = (status, text).into_response();
        if let Some(secs) = retry_after {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        response
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // tests unwrap: a failure is the assertion

    use redlock_core::{LostReason, Outcomes};

    use super::*;

    fn every_variant() -> Vec<(LockError, StatusCode)> {
        let resource = || "order:secret-42".to_owned();
        let unavailable = StatusCode::SERVICE_UNAVAILABLE;
        vec![
            // A resource rendered from the request: the client's input.
            (
                LockError::Invalid(InvalidInput::EmptyResource),
                StatusCode::BAD_REQUEST,
            ),
            (
                LockError::Invalid(InvalidInput::ResourceTooLong {
                    len: 2000,
                    max: redlock_core::MAX_RESOURCE_LEN,
                }),
                StatusCode::BAD_REQUEST,
            ),
            (
                LockError::Invalid(InvalidInput::ReservedResource),
                StatusCode::BAD_REQUEST,
            ),
            // The layer's own options: a server bug.
            (
                LockError::Invalid(InvalidInput::ZeroTtl),
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
                LockError::SplitVote {
                    resource: resource(),
                    attempts: 7,
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
            // Busy: the holder's remaining ttl when the nodes reported it; a split vote: 1 s;
            // unavailable: the configured delay; never with a 400 or a 500.
            let retry = rejection.error().is_busy()
                || matches!(rejection.error(), LockError::SplitVote { .. })
                || status == StatusCode::SERVICE_UNAVAILABLE;
            assert_eq!(rejection.retry_after_secs().is_some(), retry);
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
    fn busy_status_applies_to_busy_only_and_retry_after_to_unavailable_answers() {
        for (error, status) in every_variant() {
            let split = matches!(error, LockError::SplitVote { .. });
            let busy = error.is_busy() || split;
            let rejection = LockRejection::new(error)
                .busy_status(StatusCode::CONFLICT)
                .retry_after(Duration::from_millis(1500));
            let expected = if busy { StatusCode::CONFLICT } else { status };
            assert_eq!(rejection.status(), expected, "{:?}", rejection.error());
            let sent = if expected == StatusCode::SERVICE_UNAVAILABLE {
                Some(2)
            } else if split {
                // Nobody holds it: attempt again soon.
                Some(1)
            } else if busy {
                // Busy: the configured delay, or the holder's ttl when known and sooner.
                Some(
                    rejection
                        .error()
                        .retry_after()
                        .map_or(2, |ttl| whole_seconds(ttl.min(Duration::from_millis(1500)))),
                )
            } else {
                None
            };
            assert_eq!(
                rejection.retry_after_secs(),
                sent,
                "{:?}",
                rejection.error()
            );
            let response = rejection.into_response();
            let header = response.headers().get(header::RETRY_AFTER);
            assert_eq!(
                header.map(|v| v.to_str().unwrap().to_owned()),
                sent.map(|s| s.to_string())
            );
        }
        let short = LockRejection::new(LockError::ShuttingDown).retry_after(Duration::ZERO);
        assert_eq!(short.into_response().headers()[header::RETRY_AFTER], "1");
    }

    #[test]
    fn retry_after_is_whole_seconds_rounded_up_at_least_one() {
        let cases = [
            (Duration::ZERO, 1),
            (Duration::from_nanos(1), 1),
            (Duration::from_millis(999), 1),
            (Duration::from_secs(1), 1),
            (Duration::from_millis(1001), 2),
            (Duration::from_millis(1500), 2),
            (Duration::from_secs(30), 30),
            (Duration::new(29, 1), 30),
            (Duration::from_secs(u64::MAX), u64::MAX),
            // Rounding up would overflow: saturates.
            (Duration::MAX, u64::MAX),
        ];
        for (after, secs) in cases {
            assert_eq!(whole_seconds(after), secs, "{after:?}");
            // As sent (the busy answer formats the holder's ttl the same way).
            let response = LockRejection::new(LockError::ShuttingDown)
                .retry_after(after)
                .into_response();
            assert_eq!(
                response.headers()[header::RETRY_AFTER].to_str().unwrap(),
                secs.to_string(),
                "{after:?}"
            );
        }
    }
}
