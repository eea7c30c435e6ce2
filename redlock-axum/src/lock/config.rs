//! [`Config`] and [`ReleaseOn`]: what the layer, the service and the response future share.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use axum::response::{IntoResponse, Response};
use http::StatusCode;
use redlock_core::{LockError, LockOptions, Redlock};

use super::mode::ModeFrom;
use super::resource::ResourceFrom;
use crate::rejection::{DEFAULT_RETRY_AFTER, LockRejection};

/// Default [`RedlockLayer::max_hold`](super::RedlockLayer::max_hold): 60 s, the longest a
/// request holds its lock when neither the layer nor its lock options set a cap.
///
/// Two of the handle's default ttl ([`DEFAULT_TTL`](redlock_core::DEFAULT_TTL), 30 s), and
/// the time common proxies in front of a server give a request before they give up on it
/// (nginx's `proxy_read_timeout`, an AWS load balancer's idle timeout): a request that runs
/// longer has usually lost its client already. Without a cap, a client that trickles its
/// request body or stops reading the response would keep the route's lock, auto-extended,
/// for as long as its connection lives.
pub const DEFAULT_MAX_HOLD: Duration = Duration::from_secs(60);

/// When the lock taken for a request is released.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ReleaseOn {
    /// When the response body has been fully sent, has failed, or was dropped (default). The
    /// body is sent while the lock is held: once the lock is lost, the body ends with an error
    /// ([`BodyError::LockLost`](crate::BodyError::LockLost)) instead of its next frame, and
    /// the connection is aborted.
    #[default]
    BodyEnd,
    /// As soon as the handler has produced the response head.
    Response,
}

/// A [`RedlockLayer`](super::RedlockLayer)'s configuration, shared by its services and their
/// futures behind an `Arc`.
#[derive(Debug, Clone)]
pub(crate) struct Config {
    pub(crate) redlock: Redlock,
    pub(crate) resource: ResourceFrom,
    pub(crate) mode: ModeFrom,
    /// The options as given; [`for_requests`](Self::for_requests) applies `auto_extend`.
    pub(crate) options: LockOptions,
    /// [`RedlockLayer::concurrency_limit`](super::RedlockLayer::concurrency_limit): a permit
    /// of a semaphore of this many permits per request, instead of the resource's lock.
    pub(crate) permits: Option<u32>,
    pub(crate) auto_extend: bool,
    /// [`RedlockLayer::max_hold`](super::RedlockLayer::max_hold); `None` keeps the options'
    /// own cap, or [`DEFAULT_MAX_HOLD`] when they have none.
    pub(crate) max_hold: Option<Duration>,
    pub(crate) busy_status: StatusCode,
    pub(crate) retry_after: Duration,
    pub(crate) release_on: ReleaseOn,
    /// [`RedlockLayer::on_rejection`](super::RedlockLayer::on_rejection); `None` renders the
    /// rejection itself.
    pub(crate) on_rejection: Option<OnRejection>,
}

type RejectFn = dyn Fn(LockRejection) -> Response + Send + Sync;

/// The hook that renders the layer's rejections, shared by every clone of the layer.
#[derive(Clone)]
pub(crate) struct OnRejection(pub(crate) Arc<RejectFn>);

impl fmt::Debug for OnRejection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("OnRejection(..)")
    }
}

impl Config {
    pub(crate) fn new(redlock: Redlock, resource: ResourceFrom) -> Self {
        Self {
            options: redlock.options().clone(),
            redlock,
            resource,
            mode: ModeFrom::Plain,
            permits: None,
            auto_extend: true,
            max_hold: None,
            busy_status: StatusCode::LOCKED,
            retry_after: DEFAULT_RETRY_AFTER,
            release_on: ReleaseOn::BodyEnd,
            on_rejection: None,
        }
    }

    /// The response for a lock error: a [`LockRejection`] with this layer's statuses, through
    /// the [`on_rejection`](super::RedlockLayer::on_rejection) hook when there is one.
    pub(crate) fn reject(&self, error: LockError) -> Response {
        let rejection = LockRejection::new(error)
            .busy_status(self.busy_status)
            .retry_after(self.retry_after);
        match &self.on_rejection {
            Some(OnRejection(hook)) => hook(rejection),
            None => rejection.into_response(),
        }
    }

    /// The configuration the services run with: the options of [`request_options`].
    pub(crate) fn for_requests(&self) -> Self {
        let mut config = self.clone();
        let permit = self.permits.is_some();
        config.options = request_options(&self.options, permit, self.auto_extend, self.max_hold);
        config
    }
}

/// The options each request's lock is taken with: `options` with `auto_extend` applied, the
/// hold capped (the layer's `max_hold`, else the options' own cap, else
/// [`DEFAULT_MAX_HOLD`]), and made reentrant (so that `#[redlock]` functions the handler
/// calls on the same resource share the lock), unless it is a semaphore's `permit`
/// (`Redlock::semaphore`), which is never re-entered.
fn request_options(
    options: &LockOptions,
    permit: bool,
    auto_extend: bool,
    max_hold: Option<Duration>,
) -> LockOptions {
    let max_hold = max_hold.or(options.max_hold).unwrap_or(DEFAULT_MAX_HOLD);
    options
        .clone()
        .auto_extend(auto_extend)
        .max_hold(max_hold)
        .reentrant(!permit)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_permit_per_request_is_not_made_reentrant() {
        let lock = request_options(&LockOptions::default(), false, true, None);
        assert!(lock.reentrant);
        let permit = request_options(&LockOptions::default(), true, true, None);
        assert!(!permit.reentrant);
        assert_eq!(permit.validate(), Ok(()));
    }

    #[test]
    fn the_hold_is_capped_by_the_layer_else_the_options_else_the_default() {
        let minute = Duration::from_secs(60);
        let ten = Duration::from_secs(600);
        let cases = [
            (LockOptions::default(), None, DEFAULT_MAX_HOLD),
            (LockOptions::default().max_hold(ten), None, ten),
            (LockOptions::default().max_hold(ten), Some(minute), minute),
            (LockOptions::default(), Some(Duration::MAX), Duration::MAX),
        ];
        for (options, layer, expected) in cases {
            for auto_extend in [true, false] {
                let applied = request_options(&options, false, auto_extend, layer);
                assert_eq!(applied.max_hold, Some(expected), "{options:?} {layer:?}");
                assert_eq!(applied.auto_extend, auto_extend);
                assert!(applied.reentrant);
            }
        }
        assert_eq!(DEFAULT_MAX_HOLD, 2 * redlock_core::DEFAULT_TTL);
    }
}
