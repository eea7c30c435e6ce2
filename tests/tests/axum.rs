//! redlock-axum over a real HTTP server and 5 real Redis nodes.

#![allow(clippy::unwrap_used)] // tests unwrap: a failure is the assertion

use std::convert::Infallible;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Path, State};
use axum::routing::{get, post};
use http::StatusCode;
use redlock_axum::{HeldLock, LockRejection, RedlockLayer, ShutdownHandle};
use redlock_core::{LockOptions, Redlock, redlock};
use redlock_tests::{DropFlag, RedisNodes, free_within, is_free, redlock_with, within};
use tokio::sync::{Mutex, mpsc, oneshot};

async fn handle(nodes: &RedisNodes) -> Redlock {
    redlock_with(nodes, LockOptions::default().retry_count(0)).await
}

/// Serves `app` on a free loopback port until `shutdown` fires; returns the base URL.
async fn serve(app: Router, shutdown: ShutdownHandle) -> (String, tokio::task::JoinHandle<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let server = tokio::spawn(async move {
        axum::serve(listener, app)
            .with_graceful_shutdown(shutdown.signal())
            .await
            .unwrap();
    });
    (base, server)
}

/// The next chunk of a streaming response body (bounded wait); `None` at the end.
async fn next_chunk(response: &mut reqwest::Response) -> Option<Bytes> {
    within("a body chunk", response.chunk()).await.unwrap()
}

type Gate = Arc<Mutex<Option<oneshot::Receiver<()>>>>;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn busy_routes_answer_423_and_unavailable_redis_503() {
    let mut nodes = RedisNodes::start(5);
    let redlock = handle(&nodes).await;
    let probe = handle(&nodes).await;
    let (release_tx, release_rx) = oneshot::channel::<()>();
    let (entered_tx, mut entered_rx) = mpsc::unbounded_channel::<()>();
    let gate: Gate = Arc::new(Mutex::new(Some(release_rx)));
    let app = Router::new()
        .route(
            "/orders/{id}/pay",
            post(move || {
                let (gate, entered_tx) = (gate.clone(), entered_tx.clone());
                async move {
                    let rx = gate.lock().await.take();
                    if let Some(rx) = rx {
                        let _ = entered_tx.send(());
                        let _ = rx.await;
                    }
                    "paid"
                }
            }),
        )
        .route_layer(RedlockLayer::from_template(redlock.clone(), "order:{id}").unwrap());
    let shutdown = ShutdownHandle::new(redlock);
    let (base, _server) = serve(app, shutdown).await;
    let http = reqwest::Client::new();

    let first = tokio::spawn({
        let (http, base) = (http.clone(), base.clone());
        async move {
            http.post(format!("{base}/orders/42/pay"))
                .send()
                .await
                .unwrap()
        }
    });
    // The first request is inside the handler, so it holds the lock.
    within("the first request to enter", entered_rx.recv())
        .await
        .unwrap();
    assert!(!is_free(&probe, "order:42").await);
    let busy = http
        .post(format!("{base}/orders/42/pay"))
        .send()
        .await
        .unwrap();
    assert_eq!(busy.status(), StatusCode::LOCKED);
    // Its Retry-After: `busy_answers_say_retry_soon_unless_the_holders_ttl_is_sooner`.
    // Other orders are not affected.
    let other = http
        .post(format!("{base}/orders/7/pay"))
        .send()
        .await
        .unwrap();
    assert_eq!(other.status(), StatusCode::OK);

    release_tx.send(()).unwrap();
    assert_eq!(
        within("the first response", first).await.unwrap().status(),
        StatusCode::OK
    );
    assert!(free_within(&probe, "order:42").await < Duration::from_secs(1));

    for i in [0, 1, 2] {
        nodes.servers[i].kill();
    }
    let down = http
        .post(format!("{base}/orders/1/pay"))
        .send()
        .await
        .unwrap();
    assert_eq!(down.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert!(down.headers().contains_key("retry-after"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lock_is_held_until_a_streaming_body_ends_or_is_dropped() {
    let nodes = RedisNodes::start(5);
    let redlock = handle(&nodes).await;
    let probe = handle(&nodes).await;
    let (chunks_tx, chunks_rx) = mpsc::unbounded_channel::<mpsc::UnboundedReceiver<Bytes>>();
    let chunks_rx = Arc::new(Mutex::new(chunks_rx));
    let app = Router::new()
        .route(
            "/reports/{id}",
            get(move || {
                let chunks_rx = chunks_rx.clone();
                async move {
                    let rx = chunks_rx.lock().await.recv().await.unwrap();
                    let stream = futures_util::stream::unfold(rx, |mut rx| async move {
                        rx.recv()
                            .await
                            .map(|chunk| (Ok::<_, Infallible>(chunk), rx))
                    });
                    Body::from_stream(stream)
                }
            }),
        )
        .route_layer(RedlockLayer::from_template(redlock.clone(), "report:{id}").unwrap());
    let (base, _server) = serve(app, ShutdownHandle::new(redlock)).await;
    let http = reqwest::Client::new();

    // A response whose body is still streaming keeps the lock.
    let (tx, rx) = mpsc::unbounded_channel();
    chunks_tx.send(rx).unwrap();
    tx.send(Bytes::from_static(b"first ")).unwrap();
    let mut response = http.get(format!("{base}/reports/1")).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(next_chunk(&mut response).await.unwrap(), "first ");
    assert!(
        !is_free(&probe, "report:1").await,
        "released before the body ended"
    );
    let busy = http.get(format!("{base}/reports/1")).send().await.unwrap();
    assert_eq!(busy.status(), StatusCode::LOCKED);
    tx.send(Bytes::from_static(b"last")).unwrap();
    drop(tx);
    assert_eq!(next_chunk(&mut response).await.unwrap(), "last");
    assert!(next_chunk(&mut response).await.is_none());
    assert!(free_within(&probe, "report:1").await < Duration::from_secs(1));

    // A client that disconnects mid-body releases it too.
    let (tx, rx) = mpsc::unbounded_channel();
    chunks_tx.send(rx).unwrap();
    tx.send(Bytes::from_static(b"partial")).unwrap();
    let mut response = http.get(format!("{base}/reports/2")).send().await.unwrap();
    assert_eq!(next_chunk(&mut response).await.unwrap(), "partial");
    assert!(!is_free(&probe, "report:2").await);
    drop(response);
    assert!(free_within(&probe, "report:2").await < Duration::from_secs(2));
    drop(tx);
}

#[derive(Clone)]
struct AppState {
    redlock: Redlock,
    entered: mpsc::UnboundedSender<u64>,
    /// Job 8 finishes when this fires; every other job hangs.
    finish_8: Gate,
}

#[redlock(resource = "job:{id}", redlock = state.redlock, ttl = "30s")]
async fn long_job(
    State(state): State<AppState>,
    Path(id): Path<u64>,
) -> Result<&'static str, LockRejection> {
    let _ = state.entered.send(id);
    let finish = if id == 8 {
        state.finish_8.lock().await.take()
    } else {
        None
    };
    match finish {
        Some(finish) => {
            let _ = finish.await;
        }
        None => std::future::pending::<()>().await,
    }
    Ok("done")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_refuses_new_locks_and_releases_held_ones_long_before_the_ttl() {
    let nodes = RedisNodes::start(5);
    let redlock = handle(&nodes).await;
    let probe = handle(&nodes).await;
    let (entered, mut entered_rx) = mpsc::unbounded_channel();
    let (finish_8, finish_8_rx) = oneshot::channel();
    let state = AppState {
        redlock: redlock.clone(),
        entered,
        finish_8: Arc::new(Mutex::new(Some(finish_8_rx))),
    };
    let app = Router::new()
        .route("/jobs/{id}", post(long_job))
        .route(
            "/orders/{id}",
            post(|| async { "ok" })
                .route_layer(RedlockLayer::from_template(redlock.clone(), "order:{id}").unwrap()),
        )
        .with_state(state);
    let shutdown = ShutdownHandle::new(redlock.clone());
    let (base, server) = serve(app.clone(), shutdown.clone()).await;
    let http = reqwest::Client::new();

    // The attribute on an extractor handler: held while running, 423 for a second caller.
    let stuck = tokio::spawn({
        let (http, base) = (http.clone(), base.clone());
        async move { http.post(format!("{base}/jobs/9")).send().await }
    });
    assert_eq!(within("job 9 to start", entered_rx.recv()).await, Some(9));
    let in_flight = tokio::spawn({
        let (http, base) = (http.clone(), base.clone());
        async move { http.post(format!("{base}/jobs/8")).send().await.unwrap() }
    });
    assert_eq!(within("job 8 to start", entered_rx.recv()).await, Some(8));
    let busy = http.post(format!("{base}/jobs/9")).send().await.unwrap();
    assert_eq!(busy.status(), StatusCode::LOCKED);
    assert!(!is_free(&probe, "job:9").await);

    shutdown.trigger();
    // New acquisitions are refused with 503, through the layer and through the attribute.
    use tower::ServiceExt;
    for uri in ["/orders/1", "/jobs/10"] {
        let request = http::Request::post(uri).body(Body::empty()).unwrap();
        let response = app.clone().oneshot(request).await.unwrap();
        assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE, "{uri}");
    }
    // A request already in flight finishes normally and releases its lock.
    finish_8.send(()).unwrap();
    let finished = within("the in-flight request", in_flight).await;
    assert_eq!(finished.unwrap().status(), StatusCode::OK);
    assert!(free_within(&probe, "job:8").await < Duration::from_secs(1));
    // The stuck request outlives a 200 ms grace; the held lock is released by quorum anyway.
    let started = Instant::now();
    assert!(
        shutdown
            .drain(server, Duration::from_millis(200))
            .await
            .is_none()
    );
    let report = shutdown.release_all(Duration::from_secs(1)).await;
    assert_eq!(report.released, ["job:9"]);
    assert!(report.unconfirmed.is_empty());
    assert!(
        is_free(&probe, "job:9").await,
        "still held after release_all"
    );
    assert!(started.elapsed() < Duration::from_secs(2), "ttl is 30 s");
    stuck.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closure_over_the_request_picks_the_resource_or_skips_locking() {
    use tower::ServiceExt;
    let nodes = RedisNodes::start(3);
    let redlock = handle(&nodes).await;
    let probe = Arc::new(handle(&nodes).await);
    let layer = RedlockLayer::from_fn(redlock.clone(), |parts| {
        parts
            .headers
            .get("x-tenant")
            .and_then(|v| v.to_str().ok())
            .map(|tenant| format!("tenant:{tenant}"))
    });
    let app = Router::new()
        .route(
            "/sync",
            post({
                let probe = probe.clone();
                move || async move {
                    // Report whether tenant:acme was held while the handler ran.
                    if is_free(&probe, "tenant:acme").await {
                        "free"
                    } else {
                        "held"
                    }
                }
            }),
        )
        .route_layer(layer)
        .route(
            "/misconfigured",
            get(|| async { "unreachable" })
                .route_layer(RedlockLayer::from_template(redlock, "order:{id}").unwrap()),
        );
    let body = |response: axum::response::Response| async move {
        let bytes = axum::body::to_bytes(response.into_body(), 1024)
            .await
            .unwrap();
        String::from_utf8(bytes.to_vec()).unwrap()
    };
    let with_tenant = http::Request::post("/sync")
        .header("x-tenant", "acme")
        .body(Body::empty())
        .unwrap();
    let response = app.clone().oneshot(with_tenant).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(body(response).await, "held");
    // Released once the body was read (in the background).
    assert!(free_within(&probe, "tenant:acme").await < Duration::from_secs(1));
    let without = http::Request::post("/sync").body(Body::empty()).unwrap();
    assert_eq!(
        body(app.clone().oneshot(without).await.unwrap()).await,
        "free"
    );
    // A template naming a parameter the route lacks is a 500, not a silent unlocked call.
    let request = http::Request::get("/misconfigured")
        .body(Body::empty())
        .unwrap();
    let response = app.oneshot(request).await.unwrap();
    assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handlers_get_the_fencing_token_the_lock_is_extended_and_a_lost_lock_stops_them() {
    let nodes = Arc::new(RedisNodes::start(5));
    let redlock = handle(&nodes).await;
    let probe = handle(&nodes).await;
    let dropped = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let options = LockOptions::default()
        .ttl(Duration::from_millis(300))
        .retry_count(0)
        .fencing(true);
    let app = Router::new()
        // Longer than the ttl: answers whether the lock was still held at the end.
        .route(
            "/jobs/{id}/slow",
            post(|lock: HeldLock, State(probe): State<Redlock>| async move {
                tokio::time::sleep(Duration::from_millis(900)).await;
                let held = !is_free(&probe, lock.resource()).await;
                format!("{} {held}", lock.fencing_token().unwrap())
            }),
        )
        // Loses its lock (an operator deletes it) and then hangs.
        .route(
            "/jobs/{id}/lose",
            post({
                let (nodes, dropped) = (nodes.clone(), dropped.clone());
                move |Path(id): Path<u32>| {
                    let (nodes, flag) = (nodes.clone(), DropFlag(dropped.clone()));
                    async move {
                        let _flag = flag;
                        nodes.delete(&format!("job:{id}")).await;
                        std::future::pending::<&str>().await
                    }
                }
            }),
        )
        .route_layer(
            RedlockLayer::from_template(redlock.clone(), "job:{id}")
                .unwrap()
                .options(options),
        )
        .with_state(probe.clone());
    let (base, _server) = serve(app, ShutdownHandle::new(redlock)).await;
    let http = reqwest::Client::new();

    let mut tokens = Vec::new();
    for _ in 0..2 {
        let response = within(
            "a slow job",
            http.post(format!("{base}/jobs/1/slow")).send(),
        )
        .await
        .unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        let text = response.text().await.unwrap();
        let (token, held) = text.split_once(' ').unwrap();
        assert_eq!(held, "true", "the lock ran out during a request 3x its ttl");
        tokens.push(token.parse::<u64>().unwrap());
        // The lock goes when the server drops the body, which can be just after the client
        // has read its end.
        free_within(&probe, "job:1").await;
    }
    assert!(tokens[1] > tokens[0], "fencing tokens {tokens:?}");

    let response = within(
        "a lost job",
        http.post(format!("{base}/jobs/2/lose")).send(),
    )
    .await
    .unwrap();
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert!(response.headers().contains_key(http::header::RETRY_AFTER));
    assert!(
        dropped.load(std::sync::atomic::Ordering::SeqCst),
        "the handler kept running"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_share_a_route_and_writes_take_it_alone_by_method() {
    use redlock_core::Mode;
    let nodes = RedisNodes::start(5);
    let redlock = handle(&nodes).await;
    let (open_tx, open_rx) = tokio::sync::watch::channel(false);
    let (entered_tx, mut entered_rx) = mpsc::unbounded_channel::<Option<Mode>>();
    // GET waits inside the handler until the test opens the gate; POST answers at once.
    let show = move |lock: HeldLock| {
        let (mut open, entered) = (open_rx.clone(), entered_tx.clone());
        async move {
            let _ = entered.send(lock.mode());
            let _ = open.wait_for(|open| *open).await;
            "the shelf"
        }
    };
    let edit = |lock: HeldLock| async move { format!("{:?}", lock.mode()) };
    let app = Router::new()
        .route("/catalog/{shelf}", get(show).post(edit))
        .route_layer(
            RedlockLayer::from_template(redlock.clone(), "catalog:{shelf}")
                .unwrap()
                .mode_by_method(),
        );
    let (base, _server) = serve(app, ShutdownHandle::new(redlock)).await;
    let http = reqwest::Client::new();
    let url = format!("{base}/catalog/a");
    let readers: Vec<_> = (0..2)
        .map(|_| tokio::spawn(http.get(&url).send()))
        .collect();
    // Both readers are inside their handlers at once, each holding a read lock.
    for _ in 0..2 {
        let mode = within("a reader to enter", entered_rx.recv())
            .await
            .unwrap();
        assert_eq!(mode, Some(Mode::ProtectedRead));
    }
    let write = http.post(&url).send().await.unwrap();
    assert_eq!(
        write.status(),
        StatusCode::LOCKED,
        "a write waits for the reads"
    );
    open_tx.send(true).unwrap();
    for reader in readers {
        let response = within("a reader", reader).await.unwrap().unwrap();
        assert_eq!(response.status(), StatusCode::OK);
    }
    let probe = handle(&nodes).await;
    assert!(free_within(&probe, "catalog:a").await < Duration::from_secs(1));
    let write = http.post(&url).send().await.unwrap();
    assert_eq!(write.status(), StatusCode::OK);
    assert_eq!(write.text().await.unwrap(), "Some(Exclusive)");
}

#[tokio::test]
async fn permits_let_that_many_requests_of_a_route_in_at_once() {
    let nodes = RedisNodes::start(5);
    let redlock = handle(&nodes).await;
    let (open_tx, open_rx) = tokio::sync::watch::channel(false);
    let (entered_tx, mut entered_rx) = mpsc::unbounded_channel::<Option<u32>>();
    // Each export waits inside the handler until the test opens the gate.
    let export = move |lock: HeldLock| {
        let (mut open, entered) = (open_rx.clone(), entered_tx.clone());
        async move {
            let _ = entered.send(lock.slot());
            let _ = open.wait_for(|open| *open).await;
            "exported"
        }
    };
    let app = Router::new()
        .route("/export/{tenant}", post(export))
        .route_layer(
            RedlockLayer::from_template(redlock.clone(), "export:{tenant}")
                .unwrap()
                .options(LockOptions::default().retry_count(0))
                .concurrency_limit(2),
        );
    let (base, _server) = serve(app, ShutdownHandle::new(redlock)).await;
    let http = reqwest::Client::new();
    let url = format!("{base}/export/t1");
    let exports: Vec<_> = (0..2)
        .map(|_| tokio::spawn(http.post(&url).send()))
        .collect();
    // Both are inside their handlers at once, each on its own slot.
    let mut slots = Vec::new();
    for _ in 0..2 {
        let slot = within("an export to enter", entered_rx.recv()).await;
        slots.push(slot.unwrap().unwrap());
    }
    slots.sort_unstable();
    assert_eq!(slots, [0, 1]);
    let third = http.post(&url).send().await.unwrap();
    assert_eq!(third.status(), StatusCode::LOCKED, "a third export is busy");
    // Another tenant's semaphore is another resource.
    let other = tokio::spawn(http.post(format!("{base}/export/t2")).send());
    within("another tenant's export", entered_rx.recv()).await;
    open_tx.send(true).unwrap();
    for export in exports {
        let response = within("an export", export).await.unwrap().unwrap();
        assert_eq!(response.status(), StatusCode::OK);
    }
    let other = within("another tenant's export", other)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(other.status(), StatusCode::OK);
}

#[tokio::test]
async fn a_closure_picks_each_requests_lock_mode() {
    use redlock_core::Mode;
    let nodes = RedisNodes::start(3);
    let redlock = handle(&nodes).await;
    let app = Router::new()
        .route(
            "/ledger/{id}",
            post(|lock: HeldLock| async move { format!("{:?}", lock.mode()) }),
        )
        .route_layer(
            RedlockLayer::from_template(redlock.clone(), "ledger:{id}")
                .unwrap()
                .mode_from_fn(|parts| {
                    parts
                        .headers
                        .get("x-lock-mode")
                        .and_then(|v| v.to_str().ok()?.parse().ok())
                        .unwrap_or(Mode::Exclusive)
                }),
        );
    let (base, _server) = serve(app, ShutdownHandle::new(redlock.clone())).await;
    let http = reqwest::Client::new();
    let url = format!("{base}/ledger/1");
    // A concurrent writer holds the ledger: CW requests may join it, PW may not.
    let held = redlock
        .lock_mode_with("ledger:1", Mode::ConcurrentWrite, &LockOptions::default())
        .await
        .unwrap();
    let send = |mode: &'static str| {
        let request = http.post(&url).header("x-lock-mode", mode);
        async move { request.send().await.unwrap() }
    };
    assert_eq!(
        send("CW").await.text().await.unwrap(),
        "Some(ConcurrentWrite)"
    );
    assert_eq!(send("PW").await.status(), StatusCode::LOCKED);
    let default = http.post(&url).send().await.unwrap();
    assert_eq!(default.status(), StatusCode::LOCKED, "no header: exclusive");
    held.release().await.unwrap();
    let pw = send("PW").await;
    assert_eq!(pw.text().await.unwrap(), "Some(ProtectedWrite)");
}

#[tokio::test]
async fn a_cloned_layer_is_configured_on_its_own() {
    use tower::ServiceExt;
    let nodes = RedisNodes::start(1);
    let redlock = handle(&nodes).await;
    let layer = RedlockLayer::from_template(redlock.clone(), "cloned:{id}").unwrap();
    // A setter on a clone (it panicked while the clone shared the configuration).
    let conflict = layer.clone().busy_status(StatusCode::CONFLICT);
    let app = Router::new()
        .route("/a/{id}", post(|| async { "ok" }).route_layer(layer))
        .route("/b/{id}", post(|| async { "ok" }).route_layer(conflict));
    let holder = redlock.lock("cloned:1").await.unwrap();
    let status = |uri: &'static str| {
        let app = app.clone();
        async move {
            let request = http::Request::post(uri).body(Body::empty()).unwrap();
            app.oneshot(request).await.unwrap().status()
        }
    };
    assert_eq!(
        status("/a/1").await,
        StatusCode::LOCKED,
        "the original changed"
    );
    assert_eq!(status("/b/1").await, StatusCode::CONFLICT);
    holder.release().await.unwrap();
    assert_eq!(status("/a/1").await, StatusCode::OK);
}

#[redlock(resource = "reent:{id}", redlock = redlock, retry_count = 0)]
async fn nested_in_handler(redlock: &Redlock, id: u32) -> Result<&'static str, LockRejection> {
    let _ = (redlock, id);
    Ok("re-entered")
}

#[tokio::test]
async fn a_handler_under_the_layer_re_enters_the_routes_lock() {
    use tower::ServiceExt;
    let nodes = RedisNodes::start(3);
    let redlock = handle(&nodes).await;
    let app = Router::new()
        .route(
            "/r/{id}",
            post(|State(r): State<Redlock>, Path(id): Path<u32>| async move {
                nested_in_handler(&r, id).await
            }),
        )
        .route_layer(RedlockLayer::from_template(redlock.clone(), "reent:{id}").unwrap())
        .with_state(redlock.clone());
    let request = http::Request::post("/r/7").body(Body::empty()).unwrap();
    let response = app.oneshot(request).await.unwrap();
    // Outside the layer's scope the nested call would be refused (423).
    assert_eq!(response.status(), StatusCode::OK);
}

/// A request through `app` in-process: its status, content type, `Retry-After` and body.
async fn call(app: &Router, method: http::Method, uri: &str) -> Answer {
    use tower::ServiceExt;
    let request = http::Request::builder()
        .method(method)
        .uri(uri)
        .body(Body::empty())
        .unwrap();
    let response = app.clone().oneshot(request).await.unwrap();
    let header = |name| {
        response
            .headers()
            .get(name)
            .map(|v: &http::HeaderValue| v.to_str().unwrap().to_owned())
    };
    let (content_type, retry_after) = (
        header(http::header::CONTENT_TYPE),
        header(http::header::RETRY_AFTER),
    );
    let status = response.status();
    let body = axum::body::to_bytes(response.into_body(), 1 << 16)
        .await
        .unwrap();
    Answer {
        status,
        content_type,
        retry_after,
        body: String::from_utf8(body.to_vec()).unwrap(),
    }
}

#[derive(Debug)]
struct Answer {
    status: StatusCode,
    content_type: Option<String>,
    retry_after: Option<String>,
    body: String,
}

#[tokio::test]
async fn handlers_take_the_held_lock_or_an_option_of_it_and_a_route_without_the_layer_is_a_500() {
    let nodes = RedisNodes::start(3);
    let redlock = handle(&nodes).await;
    let resource = |lock: HeldLock| async move { lock.resource().to_owned() };
    let maybe = |lock: Option<HeldLock>| async move {
        lock.map_or("unlocked".to_owned(), |lock| lock.resource().to_owned())
    };
    // Locks `asked:{x}` for requests that carry `?lock={x}`, and no other.
    let when_asked = RedlockLayer::from_fn(redlock.clone(), |parts| {
        let query = parts.uri.query()?;
        Some(format!("asked:{}", query.strip_prefix("lock=")?))
    });
    let held = RedlockLayer::from_template(redlock.clone(), "held:{id}").unwrap();
    let app = Router::new()
        .route("/locked/{id}", post(resource).route_layer(held.clone()))
        .route("/locked-maybe/{id}", post(maybe).route_layer(held))
        .route("/asked", post(maybe).route_layer(when_asked.clone()))
        .route("/asked-strict", post(resource).route_layer(when_asked))
        .route("/bare", post(resource))
        .route("/bare-maybe", post(maybe));
    let answer = call(&app, http::Method::POST, "/locked/7").await;
    assert_eq!(
        (answer.status, answer.body.as_str()),
        (StatusCode::OK, "held:7")
    );
    let answer = call(&app, http::Method::POST, "/locked-maybe/8").await;
    assert_eq!(answer.body, "held:8");
    assert_eq!(
        call(&app, http::Method::POST, "/asked?lock=1").await.body,
        "asked:1"
    );
    assert_eq!(
        call(&app, http::Method::POST, "/asked").await.body,
        "unlocked"
    );
    assert_eq!(
        call(&app, http::Method::POST, "/bare-maybe").await.body,
        "unlocked"
    );
    // A handler that needs the lock on a route that took none: a server bug, said so.
    let answer = call(&app, http::Method::POST, "/bare").await;
    assert_eq!(answer.status, StatusCode::INTERNAL_SERVER_ERROR);
    assert!(answer.body.contains("no RedlockLayer"), "{}", answer.body);
    let answer = call(&app, http::Method::POST, "/asked-strict").await;
    assert_eq!(answer.status, StatusCode::INTERNAL_SERVER_ERROR);
    assert!(answer.body.contains("took none"), "{}", answer.body);
    assert_eq!(
        call(&app, http::Method::POST, "/asked-strict?lock=2")
            .await
            .body,
        "asked:2"
    );
}

/// An RFC 9457 problem document for a lock rejection.
fn problem(rejection: LockRejection) -> axum::response::Response {
    use axum::response::IntoResponse;
    let status = rejection.status();
    let body = format!(
        r#"{{"type":"about:blank","status":{},"detail":"{}"}}"#,
        status.as_u16(),
        rejection.body_text()
    );
    let mut response = (
        status,
        [(http::header::CONTENT_TYPE, "application/problem+json")],
        body,
    )
        .into_response();
    if let Some(secs) = rejection.retry_after_secs() {
        response
            .headers_mut()
            .insert(http::header::RETRY_AFTER, secs.into());
    }
    response
}

#[tokio::test]
async fn on_rejection_renders_every_rejection_through_every_clone_of_the_layer() {
    let nodes = RedisNodes::start(3);
    let redlock = handle(&nodes).await;
    let holder = handle(&nodes).await;
    let layer = RedlockLayer::from_template(redlock.clone(), "problem:{id}")
        .unwrap()
        .on_rejection(problem);
    let app = Router::new()
        .route(
            "/a/{id}",
            post(|| async { "ok" }).route_layer(layer.clone()),
        )
        // Clones keep the hook, a setter on one too.
        .route(
            "/b/{id}",
            post(|| async { "ok" }).route_layer(layer.clone()),
        )
        .route(
            "/c/{id}",
            post(|| async { "ok" }).route_layer(layer.busy_status(StatusCode::CONFLICT)),
        );
    let held = holder.lock("problem:1").await.unwrap();
    for (uri, status) in [
        ("/a/1", StatusCode::LOCKED),
        ("/b/1", StatusCode::LOCKED),
        ("/c/1", StatusCode::CONFLICT),
    ] {
        let answer = call(&app, http::Method::POST, uri).await;
        assert_eq!(answer.status, status, "{uri}");
        assert_eq!(
            answer.content_type.as_deref(),
            Some("application/problem+json"),
            "{uri}: {answer:?}"
        );
        let expected = format!(r#""status":{}"#, status.as_u16());
        assert!(answer.body.contains(&expected), "{uri}: {answer:?}");
    }
    // Not a rejection: the handler's own answer.
    let answer = call(&app, http::Method::POST, "/b/2").await;
    assert_eq!(
        (answer.status, answer.body.as_str()),
        (StatusCode::OK, "ok")
    );
    // An invalid resource (400) and a shutting-down handle (503, Retry-After) too.
    let answer = call(&app, http::Method::POST, "/b/a%00b").await;
    assert_eq!(answer.status, StatusCode::BAD_REQUEST);
    assert_eq!(
        answer.content_type.as_deref(),
        Some("application/problem+json")
    );
    redlock.begin_shutdown();
    let answer = call(&app, http::Method::POST, "/b/3").await;
    assert_eq!(answer.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(
        answer.content_type.as_deref(),
        Some("application/problem+json")
    );
    assert_eq!(answer.retry_after.as_deref(), Some("1"));
    held.release().await.unwrap();
}

#[tokio::test]
async fn busy_answers_say_retry_soon_unless_the_holders_ttl_is_sooner() {
    let nodes = RedisNodes::start(3);
    let redlock = handle(&nodes).await;
    let holder = handle(&nodes).await;
    let app = |retry_after: Duration| {
        Router::new().route(
            "/orders/{id}/pay",
            post(|| async { "paid" }).route_layer(
                RedlockLayer::from_template(redlock.clone(), "order:{id}")
                    .unwrap()
                    .retry_after(retry_after),
            ),
        )
    };
    let retry_after = |answer: &Answer| -> u64 {
        answer
            .retry_after
            .as_deref()
            .expect("a busy answer without Retry-After")
            .parse()
            .unwrap()
    };
    // A holder with 20 s left, auto-extended as a handler's lock is: its ttl says nothing of
    // when it releases. The answer says the layer's delay (1 s by default).
    let long = LockOptions::default()
        .ttl(Duration::from_secs(20))
        .auto_extend(true);
    let held = holder.lock_with("order:1", &long).await.unwrap();
    let answer = call(
        &app(Duration::from_secs(1)),
        http::Method::POST,
        "/orders/1/pay",
    )
    .await;
    assert_eq!(answer.status, StatusCode::LOCKED);
    assert_eq!(retry_after(&answer), 1);
    // With a longer delay configured, the holder's ttl caps it: it expires by then (whole
    // seconds, rounded up).
    let answer = call(
        &app(Duration::from_secs(60)),
        http::Method::POST,
        "/orders/1/pay",
    )
    .await;
    let secs = retry_after(&answer);
    assert!(
        (15..=20).contains(&secs),
        "Retry-After {secs} for a 20 s ttl"
    );
    held.release().await.unwrap();
}

/// Starts tests/src/bin/axum_server.rs on `nodes`; returns it and its address.
async fn server_process(
    nodes: &RedisNodes,
) -> (
    tokio::process::Child,
    tokio::io::Lines<tokio::io::BufReader<tokio::process::ChildStdout>>,
    String,
) {
    use tokio::io::AsyncBufReadExt;
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_axum_server"))
        .args(nodes.urls())
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let mut lines = tokio::io::BufReader::new(stdout).lines();
    let line = within("the server to listen", lines.next_line())
        .await
        .unwrap()
        .unwrap();
    let addr = line.strip_prefix("LISTENING ").unwrap().to_owned();
    (child, lines, addr)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signal_releases_the_held_locks_and_the_server_exits_0() {
    use nix::sys::signal::{Signal, kill};
    use nix::unistd::Pid;
    let nodes = RedisNodes::start(3);
    for signal in [Signal::SIGTERM, Signal::SIGINT] {
        let (mut child, mut lines, addr) = server_process(&nodes).await;
        // A request that holds hold:1 (ttl 30 s) and never answers.
        let request = tokio::spawn(
            reqwest::Client::new()
                .post(format!("http://{addr}/hold/1"))
                .send(),
        );
        within("the lock to be taken", async {
            while nodes.pttls("hold:1").await.iter().any(|&ttl| ttl < 0) {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await;
        let pid = Pid::from_raw(i32::try_from(child.id().unwrap()).unwrap());
        kill(pid, signal).unwrap();
        let status = within("the server to exit", child.wait()).await.unwrap();
        assert!(status.success(), "{signal}: {status}");
        let report = within("the report", lines.next_line()).await.unwrap();
        assert_eq!(
            report.as_deref(),
            Some(r#"RELEASED ["hold:1"] UNCONFIRMED []"#),
            "{signal}"
        );
        // Released, not expired: the ttl had 30 s to run.
        nodes.gone_everywhere("hold:1").await;
        request.abort();
    }
}
