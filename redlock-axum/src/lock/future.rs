//! [`ResponseFuture`]: acquire, then call the inner service, then hand the guard to the body.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use axum::body::Body;
use axum::extract::MatchedPath;
use axum::response::{IntoResponse, Response};
use futures_util::future::{BoxFuture, Either};
use http::{Request, StatusCode};
use pin_project_lite::pin_project;
use redlock_core::{InvalidInput, LockError, LockGuard, Scoped};
use tower_service::Service;
use tracing::{Instrument, Span};

use super::body::{LockedBody, Lost, lost};
use super::config::{Config, ReleaseOn};
use super::observe;
use super::resource::{MissingParam, Resolved};
use crate::extract::NotLocked;

/// What the acquisition step produced: the request to pass on, or an answer to send.
type Acquired<ReqBody> = Result<Passed<ReqBody>, Response>;

/// A request let through: with its lock and the span it runs in, or unlocked.
struct Passed<ReqBody> {
    request: Request<ReqBody>,
    guard: Option<LockGuard>,
    span: Span,
}

pin_project! {
    /// The response future of [`RedlockService`](super::RedlockService).
    pub struct ResponseFuture<S, ReqBody>
    where
        S: Service<Request<ReqBody>>,
    {
        #[pin]
        state: State<S, ReqBody>,
        config: Arc<Config>,
        // The matched route's template, for the counter of rejections.
        route: Option<MatchedPath>,
        // `redlock.layer`, once the lock is held; entered while the handler is polled.
        span: Span,
    }
}

pin_project! {
    #[project = StateProj]
    enum State<S, ReqBody>
    where
        S: Service<Request<ReqBody>>,
    {
        Acquiring {
            acquire: BoxFuture<'static, Acquired<ReqBody>>,
            inner: Option<S>,
        },
        Calling {
            // Inside the lock's scope, so that `#[redlock]` functions the handler awaits on
            // the same resource re-enter its lock.
            #[pin]
            future: Either<Scoped<S::Future>, S::Future>,
            guard: Option<LockGuard>,
            lost: Option<Lost>,
        },
    }
}

impl<S, ReqBody> ResponseFuture<S, ReqBody>
where
    S: Service<Request<ReqBody>>,
    ReqBody: Send + 'static,
{
    pub(crate) fn new(config: Arc<Config>, request: Request<ReqBody>, inner: S) -> Self {
        let route = request.extensions().get::<MatchedPath>().cloned();
        let acquire = Box::pin(acquire(Arc::clone(&config), request));
        Self {
            state: State::Acquiring {
                acquire,
                inner: Some(inner),
            },
            config,
            route,
            span: Span::none(),
        }
    }
}

// By hand: `pin_project!` hides the struct from `missing_debug_implementations`, and neither
// the inner service nor its future need be `Debug` (axum's `from_fn` future does the same).
impl<S, ReqBody> fmt::Debug for ResponseFuture<S, ReqBody>
where
    S: Service<Request<ReqBody>>,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = match &self.state {
            State::Acquiring { .. } => "Acquiring",
            State::Calling { guard: Some(_), .. } => "Calling (locked)",
            State::Calling { guard: None, .. } => "Calling (unlocked)",
        };
        f.debug_struct("ResponseFuture")
            .field("state", &state)
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

async fn acquire<ReqBody>(config: Arc<Config>, request: Request<ReqBody>) -> Acquired<ReqBody> {
    let (mut parts, body) = request.into_parts();
    let resource = match config.resource.resolve(&mut parts).await {
        Resolved::Resource(resource) => resource,
        Resolved::Skip => {
            parts.extensions.insert(NotLocked);
            return Ok(Passed {
                request: Request::from_parts(parts, body),
                guard: None,
                span: Span::none(),
            });
        }
        Resolved::MissingParam(MissingParam(name)) => {
            tracing::error!(
                param = %name,
                route = ?parts.extensions.get::<MatchedPath>().map(MatchedPath::as_str),
                "RedlockLayer template names a path parameter this route does not have"
            );
            return Err((
                StatusCode::INTERNAL_SERVER_ERROR,
                "lock resource misconfigured for this route",
            )
                .into_response());
        }
    };
    let (mode, class) = (config.mode.resolve(&parts), config.resource.class());
    let options = if class.is_none() {
        std::borrow::Cow::Borrowed(&config.options)
    } else {
        let mut options = config.options.clone();
        if let Some(class) = class {
            options = options.resource_class(std::sync::Arc::clone(class));
        }
        std::borrow::Cow::Owned(options)
    };
    let class = match class {
        Some(class) => class.to_string(),
        None => redlock_core::resource_class(&resource),
    };
    let span = observe::span(parts.extensions.get::<MatchedPath>(), Some(&class));
    let locked = match (config.permits, mode) {
        // A permit takes no mode: each slot is one plain lock.
        (Some(_), Some(_)) => Err(LockError::Invalid(InvalidInput::PermitsWith {
            option: "mode",
        })),
        (Some(permits), None) => {
            let semaphore = config.redlock.semaphore(resource.as_str(), permits);
            semaphore
                .acquire_with(&options)
                .instrument(span.clone())
                .await
        }
        (None, Some(mode)) => {
            config
                .redlock
                .lock_mode_with(&resource, mode, &options)
                .instrument(span.clone())
                .await
        }
        (None, None) => {
            config
                .redlock
                .lock_with(&resource, &options)
                .instrument(span.clone())
                .await
        }
    };
    match locked {
        Ok(guard) => {
            parts.extensions.insert(guard.info());
            Ok(Passed {
                request: Request::from_parts(parts, body),
                guard: Some(guard),
                span,
            })
        }
        Err(error) => Err(config.reject(error)),
    }
}

impl<S, ReqBody, ResBody> Future for ResponseFuture<S, ReqBody>
where
    S: Service<Request<ReqBody>, Response = http::Response<ResBody>>,
    ResBody: http_body::Body<Data = bytes::Bytes> + Send + 'static,
    ResBody::Error: Into<axum::BoxError>,
{
    type Output = Result<Response, S::Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        loop {
            match this.state.as_mut().project() {
                StateProj::Acquiring { acquire, inner } => {
                    let Passed {
                        request,
                        guard,
                        span,
                    } = match ready!(acquire.as_mut().poll(cx)) {
                        Ok(passed) => passed,
                        Err(response) => {
                            observe::rejected(this.route.as_ref(), response.status());
                            return Poll::Ready(Ok(response));
                        }
                    };
                    *this.span = span;
                    let _entered = this.span.enter();
                    let Some(mut inner) = inner.take() else {
                        unreachable!("the inner service is taken once")
                    };
                    let future = match &guard {
                        Some(guard) => Either::Left(guard.scope(inner.call(request))),
                        None => Either::Right(inner.call(request)),
                    };
                    let lost = guard.as_ref().map(lost);
                    this.state.set(State::Calling {
                        future,
                        guard,
                        lost,
                    });
                }
                StateProj::Calling {
                    future,
                    guard,
                    lost,
                } => {
                    let _entered = this.span.enter();
                    if let Some(Poll::Ready(error)) = lost.as_mut().map(|l| l.as_mut().poll(cx)) {
                        // The handler no longer runs under the lock: stop it (our caller drops
                        // this future, and the handler's with it) and say so.
                        tracing::warn!(%error, "lock lost while the request was in flight");
                        let response = this.config.reject(error);
                        observe::rejected(this.route.as_ref(), response.status());
                        return Poll::Ready(Ok(response));
                    }
                    let response = ready!(future.poll(cx))?;
                    let (guard, lost) = match this.config.release_on {
                        // The body keeps the guard and watches its lost signal.
                        ReleaseOn::BodyEnd => (guard.take(), lost.take()),
                        // Dropping the guard releases the lock in the background.
                        ReleaseOn::Response => (None, None),
                    };
                    return Poll::Ready(Ok(
                        response.map(|body| Body::new(LockedBody::new(body, guard, lost)))
                    ));
                }
            }
        }
    }
}
