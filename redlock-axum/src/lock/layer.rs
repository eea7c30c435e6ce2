//! [`RedlockLayer`] and its builder methods.

use std::sync::Arc;
use std::time::Duration;

use axum::response::IntoResponse;
use http::StatusCode;
use http::request::Parts;
use redlock_core::{LockOptions, Mode, Redlock};
use tower_layer::Layer;

use super::config::{Config, OnRejection, ReleaseOn};
use super::mode::ModeFrom;
use super::resource::{ResourceFrom, Template, TemplateError};
use super::service::RedlockService;
use crate::rejection::LockRejection;

/// A tower [`Layer`] that holds a Redlock for each request.
///
/// It computes a resource from each request (a template over the matched route's path
/// parameters, or a closure over the request parts), takes the lock before the handler runs,
/// and keeps it until the response body has been sent or dropped.
///
/// Use it with `Router::route_layer` (or `MethodRouter::layer`): path parameters are only
/// known once the route has matched. It answers without calling the handler
/// ([`LockRejection`], or your [`on_rejection`](Self::on_rejection) hook):
///
/// - busy: `423 Locked`, with `Retry-After` the holder's remaining ttl (whole seconds,
///   rounded up) when the nodes reported it;
/// - Redis unavailable or the server shutting down: `503` with `Retry-After`;
/// - a path parameter that renders a resource that cannot be locked (empty, longer than
///   [`MAX_RESOURCE_LEN`](redlock_core::MAX_RESOURCE_LEN), or holding a NUL byte, e.g.
///   `%00`): `400 Bad Request`, logged at debug level only.
///
/// While the request is in flight the lock is auto-extended (see
/// [`auto_extend`](Self::auto_extend)), up to [`max_hold`](Self::max_hold) (default 60 s), and
/// the handler takes the lock — fencing token, lost signal — with the
/// [`HeldLock`](crate::HeldLock) extractor (the layer puts its
/// [`LockInfo`](redlock_core::LockInfo) in the request extensions). If the lock is lost before
/// the handler has answered, the handler's future is dropped and the client gets `503`. If it
/// is lost while the response body is being sent, the body ends with
/// [`BodyError::LockLost`](crate::BodyError::LockLost) in place of its next frame and the
/// server aborts the response: the client gets a body cut short. Frames the server had
/// already written to the socket before the loss still reach the client.
///
/// Each locked request runs in a `redlock.layer` span (level INFO) with the fields
/// `http.route` (the matched route's template, e.g. `/orders/{id}/pay`) and
/// `redlock.resource_class` (the resource up to its first `:` when that part is the
/// template's own text, e.g. `order`); never the token, the raw path or a path parameter.
/// With the `metrics` feature, every answer the layer gives in the handler's place counts in
/// the counter `redlock_layer_rejections_total`, labelled `route` (the template) and `status`
/// (e.g. `"423"`).
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
///
/// # Slow clients: timeouts
///
/// The lock is held from before the handler runs until the response body has been sent, so a
/// slow client holds it too: one that trickles its request body, or stops reading the
/// response. [`max_hold`](Self::max_hold) bounds that; shorter timeouts in front of the layer
/// end such a request sooner and release its lock with it:
///
/// - a request timeout (tower-http's `TimeoutLayer`): the whole request — the lock wait, the
///   handler and its reading of the request body — answered `408` when it runs out; the
///   handler is dropped and the lock released;
/// - a request body timeout (tower-http's `RequestBodyTimeoutLayer`): the longest pause
///   between two frames of the request body; reading the body then fails (axum's body
///   extractors answer `400`) and the lock is released with the response;
/// - a write timeout for a client that stops reading the response: axum's server has none,
///   and a response body timeout times the production of the next frame, not its writing, so
///   it belongs to the proxy in front (nginx's `send_timeout`, say); until then `max_hold`
///   bounds the lock, which runs out on the nodes.
///
/// ```no_run
/// # async fn run(redlock: redlock_core::Redlock) -> Result<(), redlock_axum::TemplateError> {
/// use std::time::Duration;
/// use axum::{Router, body::Bytes, routing::post};
/// use http::StatusCode;
/// use redlock_axum::RedlockLayer;
/// use tower_http::timeout::{RequestBodyTimeoutLayer, TimeoutLayer};
///
/// async fn pay(body: Bytes) -> String { format!("paid with {} bytes", body.len()) }
///
/// let app: Router = Router::new()
///     .route("/orders/{id}/pay", post(pay))
///     .route_layer(RedlockLayer::from_template(redlock, "order:{id}")?)
///     // Outside the lock: these end a slow request, and its lock with it.
///     .layer((
///         TimeoutLayer::with_status_code(StatusCode::REQUEST_TIMEOUT, Duration::from_secs(10)),
///         RequestBodyTimeoutLayer::new(Duration::from_secs(5)),
///     ));
/// # Ok(()) }
/// ```
///
/// tests/tests/axum_body.rs runs this stack (with shorter durations) against a client that
/// pauses its body and one that trickles it.
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
    /// redlock-template crate, whose docs give the full grammar; every case is tested against both.
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

    /// A concurrency limit across every replica: each request takes one of `permits` permits
    /// of a counting semaphore on its resource ([`Redlock::semaphore`]) instead of the
    /// resource's lock, so at most `permits` requests per resource run at once, fleet-wide
    /// ("at most 3 exports per tenant"); the others are answered as for a busy lock (`423`,
    /// after the options' retries). A permit takes no mode: with [`mode`](Self::mode),
    /// [`mode_by_method`](Self::mode_by_method) or [`mode_from_fn`](Self::mode_from_fn) every
    /// request is refused (`500`, `InvalidInput::PermitsWith` logged).
    #[must_use]
    pub fn concurrency_limit(mut self, permits: u32) -> Self {
        self.config.permits = Some(permits);
        self
    }

    /// Takes every request's lock in `mode` ([`Redlock::lock_mode_with`]; default: none, the
    /// plain exclusive lock). The last
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

    /// Keep each request's lock extended while the request is in flight (default `true`),
    /// for at most [`max_hold`](Self::max_hold). Off, a request holds its lock for one ttl at
    /// most.
    #[must_use]
    pub fn auto_extend(mut self, on: bool) -> Self {
        self.config.auto_extend = on;
        self
    }

    /// The longest time a request holds its lock, counted from the acquisition: the
    /// auto-extension stops there ([`LockOptions::max_hold`]). Default: the cap of the
    /// [`options`](Self::options) when they set one, else [`DEFAULT_MAX_HOLD`] (60 s);
    /// `Duration::MAX` for no cap. A zero cap is refused by every acquisition (`500`, logged).
    /// The lock always lives its first ttl: a cap shorter than the ttl means no extension, and
    /// a hold of one ttl.
    ///
    /// When the cap comes, the lock's lost signal fires a margin before its validity ends
    /// ([`LockOptions::lost_margin`]), as for any loss: a handler still running is dropped and
    /// the client gets `503`; a response body still being sent ends with an error
    /// ([`BodyError::LockLost`](crate::BodyError::LockLost)) the next time the server polls
    /// it. A client that does not read the response leaves the body unpolled: the lock then
    /// runs out on the nodes at the cap, and the next request gets it.
    ///
    /// It bounds what one slow client costs the others: without it, a client that trickles
    /// its request body, or stops reading the response, keeps the route's lock for as long as
    /// its connection lives. Set it above the slowest request the route serves.
    ///
    /// [`DEFAULT_MAX_HOLD`]: crate::DEFAULT_MAX_HOLD
    #[must_use]
    pub fn max_hold(mut self, max: Duration) -> Self {
        self.config.max_hold = Some(max);
        self
    }

    /// The status answered when the resource is busy (default `423 Locked`; `409 Conflict`
    /// or `429 Too Many Requests` are common alternatives).
    #[must_use]
    pub fn busy_status(mut self, status: StatusCode) -> Self {
        self.config.busy_status = status;
        self
    }

    /// The `Retry-After` sent with busy and unavailable answers (default 1 s); a busy answer
    /// sends the holder's remaining ttl instead when that is sooner ([`LockRejection`]).
    #[must_use]
    pub fn retry_after(mut self, after: Duration) -> Self {
        self.config.retry_after = after;
        self
    }

    /// Renders the layer's rejections with `hook` instead of [`LockRejection`]'s own response:
    /// busy, unavailable, shutting down, lost in flight, invalid resource. The rejection
    /// comes with this layer's [`busy_status`](Self::busy_status) and
    /// [`retry_after`](Self::retry_after) applied: read [`LockRejection::status`],
    /// [`body_text`](LockRejection::body_text), [`retry_after_secs`](LockRejection::retry_after_secs)
    /// and [`error`](LockRejection::error). Clones of the layer share the hook.
    ///
    /// For example an RFC 9457 problem document (`application/problem+json`):
    ///
    /// ```no_run
    /// # async fn run(redlock: redlock_core::Redlock) -> Result<(), redlock_axum::TemplateError> {
    /// use axum::{Json, Router, response::IntoResponse, routing::post};
    /// use http::header::{CONTENT_TYPE, RETRY_AFTER};
    /// use redlock_axum::{LockRejection, RedlockLayer};
    ///
    /// fn problem(rejection: LockRejection) -> impl IntoResponse {
    ///     let status = rejection.status();
    ///     let mut response = (
    ///         status,
    ///         [(CONTENT_TYPE, "application/problem+json")],
    ///         Json(serde_json::json!({
    ///             "type": "about:blank",
    ///             "title": status.canonical_reason(),
    ///             "status": status.as_u16(),
    ///             "detail": rejection.body_text(),
    ///         })),
    ///     )
    ///         .into_response();
    ///     if let Some(secs) = rejection.retry_after_secs() {
    ///         response.headers_mut().insert(RETRY_AFTER, secs.into());
    ///     }
    ///     response
    /// }
    ///
    /// async fn pay() -> &'static str { "paid" }
    ///
    /// let layer = RedlockLayer::from_template(redlock, "order:{id}")?.on_rejection(problem);
    /// let app: Router = Router::new()
    ///     .route("/orders/{id}/pay", post(pay))
    ///     .route_layer(layer);
    /// # Ok(()) }
    /// ```
    #[must_use]
    pub fn on_rejection<F, R>(mut self, hook: F) -> Self
    where
        F: Fn(LockRejection) -> R + Send + Sync + 'static,
        R: IntoResponse,
    {
        self.config.on_rejection = Some(OnRejection(Arc::new(move |rejection| {
            hook(rejection).into_response()
        })));
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
