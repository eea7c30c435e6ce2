//! [`RedlockLayer`] and its builder methods.

use std::sync::Arc;
use std::time::Duration;

use http::StatusCode;
use http::request::Parts;
use redlock_core::{LockOptions, Mode, Redlock};
use tower_layer::Layer;

use super::config::{Config, ReleaseOn};
use super::mode::ModeFrom;
use super::resource::{ResourceFrom, Template, TemplateError};
use super::service::RedlockService;

/// A tower [`Layer`] that holds a Redlock for each request.
///
/// It computes a resource from each request (a template over the matched route's path
/// parameters, or a closure over the request parts), takes the lock before the handler runs,
/// and keeps it until the response body has been sent or dropped.
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
///
/// ```no_run
/// # async fn run(redlock: redlock_core::Redlock) -> Result<(), redlock_axum::TemplateError> {
/// use axum::{Router, routing::{get, post}};
/// use redlock_axum::RedlockLayer;
///
/// async fn pay() -> &'static str { "paid" }
/// async fn show() -> &'static str { "the catalog" }
/// async fn edit() -> &'static str { "edited" }
///
/// let app: Router = Router::new()
///     .route("/orders/{id}/pay", post(pay))
///     .route_layer(RedlockLayer::from_template(redlock.clone(), "order:{id}")?)
///     // Reads share the catalog, writes take it alone (GET read, POST write).
///     .merge(
///         Router::new()
///             .route("/catalog/{shelf}", get(show).post(edit))
///             .route_layer(RedlockLayer::from_template(redlock, "catalog:{shelf}")?.mode_by_method()),
///     );
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct RedlockLayer {
    // By value, as tower-http's layers: a setter on a clone never changes the layer it was
    // cloned from. `layer()` puts it behind an `Arc` for the service.
    config: Config,
}

impl RedlockLayer {
    fn new(redlock: Redlock, resource: ResourceFrom) -> Self {
        Self {
            config: Config::new(redlock, resource),
        }
    }

    /// Locks the resource named by `template` over the matched route's path parameters, e.g.
    /// `"order:{id}"` for `/orders/{id}/pay`.
    ///
    /// The grammar is `#[redlock]`'s: `{{` and `}}` are literal braces, and `{name}` is the
    /// value of the path parameter `name` (whitespace around the name is ignored). Unlike the
    /// macro's, a name may be any text without braces, as axum's parameter names; a name the
    /// matched route lacks is answered `500` (and logged) per request. Both parse with the
    /// redlock-template crate; its `template_cases.rs` holds the full grammar and the cases.
    ///
    /// # Errors
    /// [`TemplateError`] if the template is empty, a `{` is empty, nested or never closed, or
    /// a `}` closes nothing.
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
        self.config.options = options;
        self
    }

    /// Takes every request's lock in `mode` ([`LockOptions::mode`]; default: the mode of the
    /// [`options`](Self::options), none unless set there: the plain exclusive lock). The last
    /// of `mode`, [`mode_by_method`](Self::mode_by_method) and
    /// [`mode_from_fn`](Self::mode_from_fn) wins.
    #[must_use]
    pub fn mode(mut self, mode: Mode) -> Self {
        self.config.mode = ModeFrom::Fixed(mode);
        self
    }

    /// Takes the lock as a reader ([`Mode::ProtectedRead`]) for the safe methods — `GET`,
    /// `HEAD`, `OPTIONS`, `TRACE` — and as a writer ([`Mode::Exclusive`]) for the others, so
    /// reads of a resource run together and each write runs alone ([`by_method`]).
    ///
    /// [`by_method`]: crate::by_method
    #[must_use]
    pub fn mode_by_method(mut self) -> Self {
        self.config.mode = ModeFrom::Method;
        self
    }

    /// Takes each request's lock in the mode `mode` returns for it.
    #[must_use]
    pub fn mode_from_fn<F>(mut self, mode: F) -> Self
    where
        F: Fn(&Parts) -> Mode + Send + Sync + 'static,
    {
        self.config.mode = ModeFrom::Fn(Arc::new(mode));
        self
    }

    /// Keep each request's lock extended while the request is in flight (default `true`).
    #[must_use]
    pub fn auto_extend(mut self, on: bool) -> Self {
        self.config.auto_extend = on;
        self
    }

    /// The status answered when the resource is busy (default `423 Locked`; `409 Conflict`
    /// or `429 Too Many Requests` are common alternatives).
    #[must_use]
    pub fn busy_status(mut self, status: StatusCode) -> Self {
        self.config.busy_status = status;
        self
    }

    /// The `Retry-After` sent with busy and unavailable answers (default 1 s).
    #[must_use]
    pub fn retry_after(mut self, after: Duration) -> Self {
        self.config.retry_after = after;
        self
    }

    /// When the lock is released (default [`ReleaseOn::BodyEnd`]).
    #[must_use]
    pub fn release_on(mut self, release_on: ReleaseOn) -> Self {
        self.config.release_on = release_on;
        self
    }
}

impl<S> Layer<S> for RedlockLayer {
    type Service = RedlockService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        RedlockService::new(inner, Arc::new(self.config.for_requests()))
    }
}
