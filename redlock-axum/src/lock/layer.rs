//! [`RedlockLayer`] and its configuration.

use std::sync::Arc;
use std::time::Duration;

use http::StatusCode;
use http::request::Parts;
use redlock_core::{LockOptions, Mode, Redlock};
use tower_layer::Layer;

use super::mode::ModeFrom;
use super::resource::{ResourceFrom, Template, TemplateError};
use super::service::RedlockService;
use crate::rejection::DEFAULT_RETRY_AFTER;

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

#[derive(Debug, Clone)]
pub(crate) struct Config {
    pub(crate) redlock: Redlock,
    pub(crate) resource: ResourceFrom,
    pub(crate) mode: ModeFrom,
    pub(crate) options: LockOptions,
    pub(crate) busy_status: StatusCode,
    pub(crate) retry_after: Duration,
    pub(crate) release_on: ReleaseOn,
}

impl Config {
    /// The options each request's lock is taken with: the configured ones, reentrant (so that
    /// `#[redlock]` functions the handler calls on the same resource share the lock).
    pub(crate) fn lock_options(options: LockOptions, auto_extend: bool) -> LockOptions {
        options.auto_extend(auto_extend).reentrant(true)
    }
}

/// A tower [`Layer`] that holds a Redlock for each request (see the [module docs](crate::lock)).
///
/// Use it with `Router::route_layer` (or `MethodRouter::layer`): path parameters are only
/// known once the route has matched. When the resource is busy it answers `423 Locked` with
/// `Retry-After`; when Redis is unavailable or the server is shutting down, `503`.
///
/// While the request is in flight the lock is auto-extended (see
/// [`auto_extend`](Self::auto_extend)), and the handler finds the lock's
/// [`LockInfo`](redlock_core::LockInfo) — fencing token, lost signal — in the request
/// extensions (`Extension<LockInfo>`). If the lock is lost before the handler has answered,
/// the handler's future is dropped and the client gets `503`.
#[derive(Debug, Clone)]
pub struct RedlockLayer {
    config: Arc<Config>,
}

impl RedlockLayer {
    fn new(redlock: Redlock, resource: ResourceFrom) -> Self {
        Self {
            config: Arc::new(Config {
                options: Config::lock_options(redlock.options().clone(), true),
                redlock,
                resource,
                mode: ModeFrom::Options,
                busy_status: StatusCode::LOCKED,
                retry_after: DEFAULT_RETRY_AFTER,
                release_on: ReleaseOn::BodyEnd,
            }),
        }
    }

    /// The configuration to change: this layer's own, copied first if clones share it (a
    /// setter on a clone never changes the layer it was cloned from).
    fn config_mut(&mut self) -> &mut Config {
        Arc::make_mut(&mut self.config)
    }

    /// Locks the resource named by `template` over the matched route's path parameters, e.g.
    /// `"order:{id}"` for `/orders/{id}/pay`.
    ///
    /// # Errors
    /// [`TemplateError`] if the template is empty or its braces do not match.
    pub fn from_template(redlock: Redlock, template: &str) -> Result<Self, TemplateError> {
        Ok(Self::new(
            redlock,
            ResourceFrom::Template(Template::parse(template)?),
        ))
    }

    /// Locks the resource returned by `resource` for each request; `None` lets the request
    /// through without a lock.
    pub fn from_fn<F>(redlock: Redlock, resource: F) -> Self
    where
        F: Fn(&Parts) -> Option<String> + Send + Sync + 'static,
    {
        Self::new(redlock, ResourceFrom::Fn(Arc::new(resource)))
    }

    /// Lock options: ttl, retries or wait deadline, fencing (default: the handle's defaults).
    /// Auto-extension follows [`auto_extend`](Self::auto_extend), whatever `options` says.
    #[must_use]
    pub fn options(mut self, options: LockOptions) -> Self {
        let auto_extend = self.config.options.get_auto_extend();
        self.config_mut().options = Config::lock_options(options, auto_extend);
        self
    }

    /// Takes every request's lock in `mode` ([`LockOptions::mode`]; default: the mode of the
    /// [`options`](Self::options), none unless set there: the plain exclusive lock). The last
    /// of `mode`, [`mode_by_method`](Self::mode_by_method) and
    /// [`mode_from_fn`](Self::mode_from_fn) wins.
    #[must_use]
    pub fn mode(mut self, mode: Mode) -> Self {
        self.config_mut().mode = ModeFrom::Fixed(mode);
        self
    }

    /// Takes the lock as a reader ([`Mode::ProtectedRead`]) for the safe methods — `GET`,
    /// `HEAD`, `OPTIONS`, `TRACE` — and as a writer ([`Mode::Exclusive`]) for the others, so
    /// reads of a resource run together and each write runs alone ([`by_method`]).
    ///
    /// [`by_method`]: super::by_method
    #[must_use]
    pub fn mode_by_method(mut self) -> Self {
        self.config_mut().mode = ModeFrom::Method;
        self
    }

    /// Takes each request's lock in the mode `mode` returns for it.
    #[must_use]
    pub fn mode_from_fn<F>(mut self, mode: F) -> Self
    where
        F: Fn(&Parts) -> Mode + Send + Sync + 'static,
    {
        self.config_mut().mode = ModeFrom::Fn(Arc::new(mode));
        self
    }

    /// Keep each request's lock extended while the request is in flight (default `true`).
    #[must_use]
    pub fn auto_extend(mut self, on: bool) -> Self {
        let options = self.config.options.clone();
        self.config_mut().options = Config::lock_options(options, on);
        self
    }

    /// The status answered when the resource is busy (default `423 Locked`; `409 Conflict`
    /// or `429 Too Many Requests` are common alternatives).
    #[must_use]
    pub fn busy_status(mut self, status: StatusCode) -> Self {
        self.config_mut().busy_status = status;
        self
    }

    /// The `Retry-After` sent with busy and unavailable answers (default 1 s).
    #[must_use]
    pub fn retry_after(mut self, after: Duration) -> Self {
        self.config_mut().retry_after = after;
        self
    }

    /// When the lock is released (default [`ReleaseOn::BodyEnd`]).
    #[must_use]
    pub fn release_on(mut self, release_on: ReleaseOn) -> Self {
        self.config_mut().release_on = release_on;
        self
    }
}

impl<S> Layer<S> for RedlockLayer {
    type Service = RedlockService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        RedlockService::new(inner, Arc::clone(&self.config))
    }
}
