//! [`HeldLock`]: the extractor for the lock [`RedlockLayer`](crate::RedlockLayer) holds for a
//! request, and its rejection.

use std::collections::HashSet;
use std::convert::Infallible;
use std::ops::Deref;
use std::sync::{Mutex, PoisonError};

use axum::extract::{FromRequestParts, MatchedPath, OptionalFromRequestParts};
use axum::response::{IntoResponse, Response};
use http::StatusCode;
use http::request::Parts;
use redlock_core::LockInfo;

/// The lock [`RedlockLayer`](crate::RedlockLayer) holds for this request: its resource,
/// fencing token, mode, validity and lost signal ([`LockInfo`], through `Deref`).
///
/// A handler takes `HeldLock` where the layer always locks, and `Option<HeldLock>` where it
/// may not (a [`from_fn`](crate::RedlockLayer::from_fn) closure that returns `None`, or a
/// handler shared with unlocked routes). `HeldLock` on a route the layer did not lock is a
/// server bug: [`HeldLockRejection`], `500`.
///
/// ```no_run
/// # async fn run(redlock: redlock_core::Redlock) -> Result<(), redlock_axum::TemplateError> {
/// use axum::{Router, routing::post};
/// use redlock_axum::{HeldLock, RedlockLayer};
///
/// async fn pay(lock: HeldLock) -> String {
///     // Hand the fencing token to the store, which refuses an older holder's writes.
///     format!("paid under {} (token {:?})", lock.resource(), lock.fencing_token())
/// }
///
/// let options = redlock.options().clone().fencing(true);
/// let app: Router = Router::new()
///     .route("/orders/{id}/pay", post(pay))
///     .route_layer(RedlockLayer::from_template(redlock, "order:{id}")?.options(options));
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct HeldLock(pub LockInfo);

impl HeldLock {
    /// The lock's [`LockInfo`].
    pub fn into_inner(self) -> LockInfo {
        self.0
    }

    /// The lock the layer put in the request's extensions, if any.
    fn from_extensions(parts: &Parts) -> Option<Self> {
        parts.extensions.get::<LockInfo>().cloned().map(Self)
    }
}

impl Deref for HeldLock {
    type Target = LockInfo;

    fn deref(&self) -> &LockInfo {
        &self.0
    }
}

/// Put in a request's extensions by the layer when its closure chose not to lock the request,
/// so that [`HeldLock`]'s rejection can tell that apart from a route without the layer.
#[derive(Debug, Clone, Copy)]
pub(crate) struct NotLocked;

/// Why [`HeldLock`] found no lock: a handler that needs one runs on a route that did not take
/// it. A server bug, answered `500 Internal Server Error`; logged as an error once per route
/// (then at debug level), naming the route.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum HeldLockRejection {
    /// No [`RedlockLayer`](crate::RedlockLayer) runs on the route: add one with
    /// `Router::route_layer` (after the route), or take `Option<HeldLock>`.
    #[error(
        "the handler of route {} takes HeldLock, but no RedlockLayer runs on that route; add one with Router::route_layer after the route, or take Option<HeldLock>",
        route_name(.route.as_deref())
    )]
    NoLayer {
        /// The matched route's template (`None` outside a router).
        route: Option<String>,
    },
    /// The layer's [`from_fn`](crate::RedlockLayer::from_fn) closure returned `None` for
    /// this request: take `Option<HeldLock>` in this handler.
    #[error(
        "the handler of route {} takes HeldLock, but the route's RedlockLayer took no lock for this request (its closure returned None); take Option<HeldLock>",
        route_name(.route.as_deref())
    )]
    NotLocked {
        /// The matched route's template (`None` outside a router).
        route: Option<String>,
    },
}

/// A route template for logs and labels; `(unmatched)` outside a router.
pub(crate) fn route_name(route: Option<&str>) -> &str {
    route.unwrap_or("(unmatched)")
}

impl HeldLockRejection {
    /// The status answered: always `500 Internal Server Error`.
    pub fn status(&self) -> StatusCode {
        StatusCode::INTERNAL_SERVER_ERROR
    }

    /// The text of the response body (the route is not in it).
    pub fn body_text(&self) -> &'static str {
        match self {
            Self::NoLayer { .. } => {
                "server misconfigured: this route's handler needs a lock, and no RedlockLayer runs on the route"
            }
            Self::NotLocked { .. } => {
                "server misconfigured: this route's handler needs a lock, and the route's RedlockLayer took none for this request"
            }
        }
    }

    fn route(&self) -> Option<&str> {
        match self {
            Self::NoLayer { route } | Self::NotLocked { route } => route.as_deref(),
        }
    }

    /// Logs the bug: as an error the first time for its route, at debug level after that, so
    /// that a misconfigured route does not write a line per request.
    fn log(&self) {
        static LOGGED: Mutex<Option<HashSet<String>>> = Mutex::new(None);
        let route = route_name(self.route()).to_owned();
        // The set only grows by route templates, a bounded set (never raw paths).
        let first = LOGGED
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get_or_insert_with(HashSet::new)
            .insert(route);
        if first {
            tracing::error!(route = self.route(), "{self}");
        } else {
            tracing::debug!(route = self.route(), "{self}");
        }
    }
}

impl IntoResponse for HeldLockRejection {
    fn into_response(self) -> Response {
        (self.status(), self.body_text()).into_response()
    }
}

impl<S: Send + Sync> FromRequestParts<S> for HeldLock {
    type Rejection = HeldLockRejection;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        if let Some(held) = HeldLock::from_extensions(parts) {
            return Ok(held);
        }
        let route = parts
            .extensions
            .get::<MatchedPath>()
            .map(|path| path.as_str().to_owned());
        let rejection = if parts.extensions.get::<NotLocked>().is_some() {
            HeldLockRejection::NotLocked { route }
        } else {
            HeldLockRejection::NoLayer { route }
        };
        rejection.log();
        Err(rejection)
    }
}

impl<S: Send + Sync> OptionalFromRequestParts<S> for HeldLock {
    type Rejection = Infallible;

    async fn from_request_parts(
        parts: &mut Parts,
        _state: &S,
    ) -> Result<Option<Self>, Self::Rejection> {
        Ok(HeldLock::from_extensions(parts))
    }
}
