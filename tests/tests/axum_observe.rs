//! What redlock-axum tells an operator: its span, its counter of rejections, and the log
//! lines it does (and does not) write. Each test captures the spans and events of its own
//! thread (a current-thread runtime inside a scoped subscriber and a local metrics recorder),
//! in its own test binary: tracing caches callsite interest per process (see logging.rs).

#![allow(clippy::unwrap_used)] // tests unwrap: a failure is the assertion

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::routing::{get, post};
use http::StatusCode;
use metrics_util::debugging::{DebugValue, DebuggingRecorder};
use redlock_axum::{HeldLock, RedlockLayer};
use redlock_core::{LockOptions, MAX_RESOURCE_LEN, Redlock};
use redlock_tests::{RedisNodes, redlock_with};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;

/// A span or an event, as captured.
#[derive(Debug, Clone)]
struct Captured {
    /// The span's name, or the event's target.
    name: String,
    level: Level,
    /// The enclosing span's name.
    parent: Option<String>,
    fields: BTreeMap<String, String>,
}

impl Captured {
    fn text(&self) -> String {
        format!("{} {:?}", self.name, self.fields)
    }
}

#[derive(Default)]
struct Fields(BTreeMap<String, String>);

impl Visit for Fields {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.to_owned());
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.insert(field.name().to_owned(), format!("{value:?}"));
    }
}

/// Records every span (with the fields recorded later) and every event.
#[derive(Clone, Default)]
struct Capture {
    spans: Arc<Mutex<BTreeMap<u64, Captured>>>,
    events: Arc<Mutex<Vec<Captured>>>,
}

impl Capture {
    fn spans(&self, name: &str) -> Vec<Captured> {
        let spans = self.spans.lock().unwrap();
        spans.values().filter(|s| s.name == name).cloned().collect()
    }

    fn events(&self) -> Vec<Captured> {
        self.events.lock().unwrap().clone()
    }

    /// Everything captured, as text.
    fn all_text(&self) -> String {
        let spans = self.spans.lock().unwrap();
        let events = self.events.lock().unwrap();
        spans
            .values()
            .chain(events.iter())
            .map(Captured::text)
            .collect::<Vec<_>>()
            .join("\n")
    }
}

impl<S: Subscriber + for<'a> LookupSpan<'a>> Layer<S> for Capture {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let mut fields = Fields::default();
        attrs.record(&mut fields);
        let parent = ctx
            .span(id)
            .and_then(|span| span.parent())
            .map(|parent| parent.name().to_owned());
        let captured = Captured {
            name: attrs.metadata().name().to_owned(),
            level: *attrs.metadata().level(),
            parent,
            fields: fields.0,
        };
        self.spans.lock().unwrap().insert(id.into_u64(), captured);
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, _ctx: Context<'_, S>) {
        let mut fields = Fields::default();
        values.record(&mut fields);
        if let Some(span) = self.spans.lock().unwrap().get_mut(&id.into_u64()) {
            span.fields.extend(fields.0);
        }
    }

    fn on_event(&self, event: &Event<'_>, ctx: Context<'_, S>) {
        let mut fields = Fields::default();
        event.record(&mut fields);
        self.events.lock().unwrap().push(Captured {
            name: event.metadata().target().to_owned(),
            level: *event.metadata().level(),
            parent: ctx.event_span(event).map(|s| s.name().to_owned()),
            fields: fields.0,
        });
    }
}

/// Counter values by name and labels (sorted).
type Counters = BTreeMap<(String, Vec<(String, String)>), u64>;

/// Runs `test` on a current-thread runtime, with a subscriber capturing every span and event
/// of this thread, and a metrics recorder of its own; returns the capture and the counters
/// (name and sorted labels → value).
fn observed<F: Future<Output = ()>>(test: impl FnOnce() -> F) -> (Capture, Counters) {
    let capture = Capture::default();
    let subscriber = tracing_subscriber::registry().with(capture.clone());
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    tracing::subscriber::with_default(subscriber, || {
        metrics::with_local_recorder(&recorder, || {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap()
                .block_on(test());
        });
    });
    let counters = snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .filter_map(|(key, _, _, value)| {
            let DebugValue::Counter(n) = value else {
                return None;
            };
            let key = key.key();
            let mut labels: Vec<_> = key
                .labels()
                .map(|l| (l.key().to_owned(), l.value().to_owned()))
                .collect();
            labels.sort();
            Some(((key.name().to_owned(), labels), n))
        })
        .collect();
    (capture, counters)
}

async fn handle(nodes: &RedisNodes) -> Redlock {
    redlock_with(nodes, LockOptions::default().retry_count(0)).await
}

/// `method uri` through `app` in-process: the status and body.
async fn call(app: &Router, method: http::Method, uri: &str) -> (StatusCode, String) {
    let request = http::Request::builder().method(method).uri(uri);
    send(app, request).await
}

/// `request` through `app` in-process: the status and body.
async fn send(app: &Router, request: http::request::Builder) -> (StatusCode, String) {
    use tower::ServiceExt;
    let request = request.body(Body::empty()).unwrap();
    let response = app.clone().oneshot(request).await.unwrap();
    let status = response.status();
    let body = axum::body::to_bytes(response.into_body(), 1 << 16)
        .await
        .unwrap();
    (status, String::from_utf8(body.to_vec()).unwrap())
}

fn too_long() -> String {
    "x".repeat(MAX_RESOURCE_LEN + 1)
}

#[test]
fn a_path_that_renders_an_invalid_resource_is_a_400_and_no_error_line() {
    let nodes = RedisNodes::start(3);
    let (capture, _) = observed(|| async {
        let redlock = handle(&nodes).await;
        let order = RedlockLayer::from_template(redlock.clone(), "order:{id}").unwrap();
        // The whole resource from the path.
        let file = RedlockLayer::from_template(redlock.clone(), "{path}").unwrap();
        // axum never matches an empty path parameter (404); a header can be empty.
        let tenant = RedlockLayer::from_fn(redlock.clone(), |parts| {
            let tenant = parts.headers.get("x-tenant")?.to_str().ok()?;
            Some(tenant.to_owned())
        });
        let app = Router::new()
            .route(
                "/orders/{id}/pay",
                post(|| async { "paid" }).route_layer(order),
            )
            .route("/files/{*path}", get(|| async { "file" }).route_layer(file))
            .route("/sync", post(|| async { "synced" }).route_layer(tenant));
        let invalid = [
            (http::Method::POST, format!("/orders/{}/pay", too_long())),
            // The bookkeeping separator starts with a NUL byte.
            (http::Method::POST, "/orders/a%00b/pay".to_owned()),
            (http::Method::GET, "/files/%00redlock:waiters".to_owned()),
            // Empty (the x-tenant header every request carries).
            (http::Method::POST, "/sync".to_owned()),
        ];
        for (method, uri) in invalid {
            for _ in 0..3 {
                let request = http::Request::builder()
                    .method(method.clone())
                    .uri(&uri)
                    .header("x-tenant", "");
                let (status, body) = send(&app, request).await;
                assert_eq!(status, StatusCode::BAD_REQUEST, "{uri}");
                assert!(body.contains("cannot be locked"), "{body}");
            }
        }
        let (status, _) = call(&app, http::Method::POST, "/orders/42/pay").await;
        assert_eq!(status, StatusCode::OK);
        // The lock the last request took is released before the runtime ends.
        redlock.shutdown(Duration::from_secs(1)).await;
    });
    let errors: Vec<_> = capture
        .events()
        .into_iter()
        .filter(|e| e.level <= Level::WARN)
        .collect();
    assert!(errors.is_empty(), "{errors:#?}");
    // At most debug level, and without the path's text.
    let refused: Vec<_> = capture
        .events()
        .into_iter()
        .filter(|e| {
            e.fields
                .get("message")
                .is_some_and(|m| m.contains("invalid resource"))
        })
        .collect();
    assert_eq!(refused.len(), 12, "one debug line per refused request");
    assert!(refused.iter().all(|e| e.level == Level::DEBUG));
    assert!(!capture.all_text().contains("xxxxxxxxxxxxxxxx"));
}

#[test]
fn held_lock_on_a_route_without_the_layer_is_logged_once_naming_the_route() {
    let (capture, _) = observed(|| async {
        let needs_lock = |lock: HeldLock| async move { lock.resource().to_owned() };
        let app = Router::new()
            .route("/unlocked/{id}", post(needs_lock))
            .route("/also-unlocked", post(needs_lock));
        for uri in [
            "/unlocked/1",
            "/unlocked/2",
            "/also-unlocked",
            "/unlocked/3",
        ] {
            let (status, body) = call(&app, http::Method::POST, uri).await;
            assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR);
            assert!(body.contains("no RedlockLayer"), "{body}");
        }
    });
    let errors: Vec<_> = capture
        .events()
        .into_iter()
        .filter(|e| e.level == Level::ERROR)
        .map(|e| e.fields.get("route").cloned().unwrap_or_default())
        .collect();
    assert_eq!(errors, ["/unlocked/{id}", "/also-unlocked"], "{errors:?}");
}

#[test]
fn each_locked_request_runs_in_a_span_naming_the_route_template_and_the_resource_class() {
    let nodes = Arc::new(RedisNodes::start(3));
    let token = Arc::new(Mutex::new(String::new()));
    let (capture, _) = observed(|| {
        let (nodes, token) = (nodes.clone(), token.clone());
        async move {
            let redlock = handle(&nodes).await;
            // The handler reads its lock's token from the nodes: the test looks for it in
            // everything captured.
            let read_token = move |lock: HeldLock| async move {
                // A quorum holds it (the other grants may still be on their way).
                let holder = nodes.holder(lock.resource()).await;
                *token.lock().unwrap() = holder.unwrap();
                tracing::info!("handler ran");
                "paid"
            };
            let order = RedlockLayer::from_template(redlock.clone(), "order:{id}").unwrap();
            let tenant = RedlockLayer::from_template(redlock.clone(), "{tenant}:sync").unwrap();
            let app = Router::new()
                .route("/orders/{id}/pay", post(read_token).route_layer(order))
                .route(
                    "/tenants/{tenant}",
                    post(|| async { "ok" }).route_layer(tenant),
                );
            assert_eq!(
                call(&app, http::Method::POST, "/orders/4242/pay").await.0,
                StatusCode::OK
            );
            assert_eq!(
                call(&app, http::Method::POST, "/tenants/acme").await.0,
                StatusCode::OK
            );
            redlock.shutdown(Duration::from_secs(1)).await;
        }
    });
    let spans = capture.spans("redlock.layer");
    assert_eq!(spans.len(), 2, "{spans:#?}");
    let fields = |route: &str| {
        spans
            .iter()
            .find(|s| s.fields.get("http.route").map(String::as_str) == Some(route))
            .unwrap_or_else(|| panic!("no span for {route}: {spans:#?}"))
            .fields
            .clone()
    };
    assert_eq!(
        fields("/orders/{id}/pay"),
        BTreeMap::from([
            ("http.route".to_owned(), "/orders/{id}/pay".to_owned()),
            ("redlock.resource_class".to_owned(), "order".to_owned()),
        ])
    );
    // The text before the first `:` is the client's: the class is the template, never
    // "acme".
    assert_eq!(
        fields("/tenants/{tenant}"),
        BTreeMap::from([
            ("http.route".to_owned(), "/tenants/{tenant}".to_owned()),
            (
                "redlock.resource_class".to_owned(),
                "{tenant}:sync".to_owned()
            ),
        ])
    );
    // DEBUG, as tower-http's own spans: an application logging at INFO does not pay for it.
    assert!(spans.iter().all(|s| s.level == Level::DEBUG));
    // The acquisition and the handler run inside it.
    let acquire = capture.spans("redlock.acquire");
    assert!(!acquire.is_empty());
    assert!(
        acquire
            .iter()
            .all(|s| s.parent.as_deref() == Some("redlock.layer")),
        "{acquire:#?}"
    );
    let handler = capture
        .events()
        .into_iter()
        .find(|e| e.fields.get("message").map(String::as_str) == Some("handler ran"))
        .unwrap();
    assert_eq!(handler.parent.as_deref(), Some("redlock.layer"));
    // Never the token; never the raw path in the layer's span.
    let token = token.lock().unwrap().clone();
    assert!(token.len() >= 20, "token {token:?}");
    assert!(
        !capture.all_text().contains(&token),
        "the token was captured"
    );
    for span in &spans {
        for value in span.fields.values() {
            assert!(
                !value.contains("4242") && !value.contains("acme"),
                "{span:?}"
            );
        }
    }
}

#[test]
fn rejections_are_counted_by_route_template_and_status() {
    let nodes = RedisNodes::start(3);
    let (_, counters) = observed(|| async {
        let redlock = handle(&nodes).await;
        let holder = handle(&nodes).await;
        let order = RedlockLayer::from_template(redlock.clone(), "order:{id}").unwrap();
        // A hook's status is the one counted.
        let cart = RedlockLayer::from_template(redlock.clone(), "cart:{id}")
            .unwrap()
            .on_rejection(|_| StatusCode::TOO_MANY_REQUESTS);
        let app = Router::new()
            .route(
                "/orders/{id}/pay",
                post(|| async { "paid" }).route_layer(order.clone()),
            )
            .route("/carts/{id}", post(|| async { "ok" }).route_layer(cart))
            // The template names a parameter this route lacks.
            .route(
                "/misconfigured",
                post(|| async { "unreachable" }).route_layer(order),
            );
        let held = holder.lock("order:1").await.unwrap();
        let cart = holder.lock("cart:1").await.unwrap();
        let calls = [
            ("/orders/1/pay", StatusCode::LOCKED),
            ("/orders/1/pay", StatusCode::LOCKED),
            ("/orders/a%00b/pay", StatusCode::BAD_REQUEST),
            ("/orders/2/pay", StatusCode::OK),
            ("/carts/1", StatusCode::TOO_MANY_REQUESTS),
            ("/misconfigured", StatusCode::INTERNAL_SERVER_ERROR),
        ];
        for (uri, status) in calls {
            assert_eq!(call(&app, http::Method::POST, uri).await.0, status, "{uri}");
        }
        held.release().await.unwrap();
        cart.release().await.unwrap();
        redlock.shutdown(Duration::from_secs(1)).await;
    });
    let rejections: BTreeMap<_, _> = counters
        .into_iter()
        .filter(|((name, _), _)| name == "redlock_layer_rejections_total")
        .map(|((_, labels), n)| (labels, n))
        .collect();
    let labels = |route: &str, status: &str| {
        vec![
            ("route".to_owned(), route.to_owned()),
            ("status".to_owned(), status.to_owned()),
        ]
    };
    let expected = BTreeMap::from([
        (labels("/orders/{id}/pay", "423"), 2),
        (labels("/orders/{id}/pay", "400"), 1),
        (labels("/carts/{id}", "429"), 1),
        (labels("/misconfigured", "500"), 1),
    ]);
    assert_eq!(rejections, expected);
}
