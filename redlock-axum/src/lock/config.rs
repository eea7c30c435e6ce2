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

/// When the lock taken for a request is released.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ReleaseOn {
    /// When the response body has been fully sent, has failed, or was dropped (default): a
    /// streaming response stays under the lock.
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
    pub(crate) auto_extend: bool,
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
            mode: ModeFrom::Options,
            auto_extend: true,
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

    /// The configuration the services run with: `auto_extend` applied to the options, which
    /// are made reentrant (so that `#[redlock]` functions the handler calls on the same
    /// resource share the lock).
    pub(crate) fn for_requests(&self) -> Self {
        let mut config = self.clone();
        config.options = config.options.auto_extend(self.auto_extend).reentrant(true);
        config
    }
}
