//! [`RedlockService`]: the middleware service.

use std::sync::Arc;
use std::task::{Context, Poll};

use axum::response::Response;
use http::Request;
use tower_service::Service;

use super::config::Config;
use super::future::ResponseFuture;

/// The service made by [`RedlockLayer`](super::RedlockLayer).
#[derive(Debug, Clone)]
pub struct RedlockService<S> {
    inner: S,
    config: Arc<Config>,
}

impl<S> RedlockService<S> {
    pub(crate) fn new(inner: S, config: Arc<Config>) -> Self {
        Self { inner, config }
    }

    /// The wrapped service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The wrapped service, mutably.
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.inner
    }

    /// Unwraps this service, returning the wrapped one.
    pub fn into_inner(self) -> S {
        self.inner
    }
}

impl<S, ReqBody, ResBody> Service<Request<ReqBody>> for RedlockService<S>
where
    S: Service<Request<ReqBody>, Response = http::Response<ResBody>> + Clone + Send + 'static,
    S::Future: Send,
    ReqBody: Send + 'static,
    ResBody: http_body::Body<Data = bytes::Bytes> + Send + 'static,
    ResBody::Error: Into<axum::BoxError>,
{
    type Response = Response;
    type Error = S::Error;
    type Future = ResponseFuture<S, ReqBody>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<ReqBody>) -> Self::Future {
        // Take the service that was driven to readiness; leave a fresh clone in its place
        // (tower-service docs, "Be careful when cloning inner services").
        let clone = self.inner.clone();
        let inner = std::mem::replace(&mut self.inner, clone);
        ResponseFuture::new(Arc::clone(&self.config), request, inner)
    }
}
