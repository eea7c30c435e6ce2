//! The layer's body phase over a real HTTP server and 5 real Redis nodes: a client that
//! trickles its request body or does not read the response holds a route's lock only until
//! the layer's `max_hold`; a streaming response ends with an error once its lock is lost; and
//! the timeout layers the docs recommend (tower-http's) cut a trickling client off.

#![allow(clippy::unwrap_used)] // tests unwrap: a failure is the assertion

use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::routing::{get, post};
use http::StatusCode;
use redlock_axum::{HeldLock, RedlockLayer, ShutdownHandle};
use redlock_core::{LockOptions, LostSignal, Redlock};
use redlock_tests::{RedisNodes, within};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;

/// A handle with a node timeout of 500 ms: the tests run beside others on 2 cores, and a
/// node slower than the default 100 ms would turn a request into a `503`.
async fn handle(nodes: &RedisNodes) -> Redlock {
    Redlock::builder()
        .nodes(nodes.urls())
        .node_timeout(Duration::from_millis(500))
        .lock_options(LockOptions::default().retry_count(0))
        .build()
        .await
        .unwrap()
}

/// Serves `app` on a free loopback port until `shutdown` fires; returns the base URL.
async fn serve(app: Router, shutdown: ShutdownHandle) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        axum::serve(listener, app)
            .with_graceful_shutdown(shutdown.signal())
            .await
            .unwrap();
    });
    base
}

/// Locks of 1 s, auto-extended (the layer's default) every ~333 ms: a loss or a cap shows
/// within about a second.
fn short_ttl() -> LockOptions {
    LockOptions::default()
        .ttl(Duration::from_secs(1))
        .retry_count(0)
}

/// Waits (polling every 20 ms, at most 10 s) until a majority of the nodes hold the key of
/// `resource` (the default key prefix is empty). It only reads: a probe that took the lock
/// could make the request under test see `423`.
async fn held(nodes: &RedisNodes, resource: &str) {
    within(&format!("{resource} to be locked"), async {
        loop {
            let values = nodes.values(resource).await;
            if values.iter().flatten().count() > values.len() / 2 {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
}

/// The answer a request task gives: the response, or the error that cut it off.
type Answer = tokio::task::JoinHandle<reqwest::Result<reqwest::Response>>;

/// Spawns `send` until the request it makes holds the lock of `resource` on a majority of
/// the nodes, and returns that request's task. The layer tries once (`retry_count(0)`): on
/// a loaded machine that attempt can miss its node timeout and answer `503`, and then nothing
/// would ever hold the lock; such an answer (or `423`) is a retry, never a pass. At most 5.
async fn sent_and_held(nodes: &RedisNodes, resource: &str, send: impl Fn() -> Answer) -> Answer {
    for _ in 0..5 {
        let mut task = send();
        tokio::select! {
            () = held(nodes, resource) => return task,
            answer = &mut task => {
                let status = answer.unwrap().unwrap().status();
                assert!(
                    status == StatusCode::SERVICE_UNAVAILABLE || status == StatusCode::LOCKED,
                    "the request ended with {status} before it was seen holding {resource}"
                );
            }
        }
    }
    panic!("5 requests in a row could not take {resource}");
}

/// A request body that sends one byte every `every`, `bytes` times.
fn trickle(bytes: usize, every: Duration) -> reqwest::Body {
    let stream = futures_util::stream::unfold(0, move |sent| async move {
        if sent == bytes {
            return None;
        }
        tokio::time::sleep(every).await;
        Some((Ok::<_, Infallible>(Bytes::from_static(b"x")), sent + 1))
    });
    reqwest::Body::wrap_stream(stream)
}

/// Sends `POST {url}` with an empty body every 100 ms until the answer is neither `423` nor
/// `503`; returns that answer's status and how many `423`s came before it. A `503` (a node
/// slower than the node timeout on a loaded machine) is not what these tests are about.
async fn until_not_busy(http: &reqwest::Client, url: &str) -> (StatusCode, usize) {
    let mut busy = 0;
    loop {
        let status = http.post(url).send().await.unwrap().status();
        match status {
            StatusCode::LOCKED => busy += 1,
            StatusCode::SERVICE_UNAVAILABLE => {}
            _ => return (status, busy),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streaming_body_ends_with_an_error_once_its_lock_is_lost() {
    let nodes = RedisNodes::start(5);
    let redlock = handle(&nodes).await;
    let other = handle(&nodes).await;
    let (signal_tx, mut signal_rx) = mpsc::unbounded_channel::<LostSignal>();
    let app = Router::new()
        .route(
            "/reports/{id}",
            get(move |lock: HeldLock| {
                let lost = lock.lost();
                signal_tx.send(lost.clone()).unwrap();
                async move {
                    // A chunk every 50 ms, without end; each says whether the lock had been
                    // lost when it was produced.
                    let stream = futures_util::stream::unfold(0u64, move |i| {
                        let lost = lost.clone();
                        async move {
                            tokio::time::sleep(Duration::from_millis(50)).await;
                            let chunk = format!("chunk {i} lost={};", lost.is_lost());
                            Some((Ok::<_, Infallible>(Bytes::from(chunk)), i + 1))
                        }
                    });
                    Body::from_stream(stream)
                }
            }),
        )
        .route_layer(
            RedlockLayer::from_template(redlock.clone(), "report:{id}")
                .unwrap()
                .options(short_ttl()),
        );
    let base = serve(app, ShutdownHandle::new(redlock)).await;

    let mut response = reqwest::get(format!("{base}/reports/1")).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let lost = within("the handler's lost signal", signal_rx.recv())
        .await
        .unwrap();
    // The client reads the body as it comes.
    let received = Arc::new(Mutex::new(String::new()));
    let reader = tokio::spawn({
        let received = received.clone();
        async move {
            loop {
                match response.chunk().await {
                    Ok(Some(chunk)) => received
                        .lock()
                        .unwrap()
                        .push_str(std::str::from_utf8(&chunk).unwrap()),
                    Ok(None) => return Ok(()),
                    Err(error) => return Err(error),
                }
            }
        }
    });
    within("three chunks", async {
        while received.lock().unwrap().matches("lost=false").count() < 3 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;

    // The lock is taken away: its next extension (within ~333 ms) is refused, the lost signal
    // fires, and another handle gets the lock.
    nodes.delete("report:1").await;
    within("the lost signal", lost.cancelled()).await;
    let taken = within("another handle to take the lock", other.lock("report:1"))
        .await
        .unwrap();

    // The body ends with an error: it does not stream on while another holder runs.
    let ended = tokio::time::timeout(Duration::from_secs(3), reader).await;
    // Chunks the client got that were produced once the lock was lost.
    let after_loss = || received.lock().unwrap().matches("lost=true").count();
    let ended = ended.unwrap_or_else(|_| {
        panic!(
            "the body still streamed 3 s after the lost signal, another handle holding the \
             lock: the client got {} chunks produced after the loss",
            after_loss(),
        )
    });
    let error = ended
        .unwrap()
        .expect_err("the body ended cleanly after the loss");
    // hyper closes the connection: the chunked body is cut short.
    assert!(error.is_body() || error.is_decode(), "{error:?}");
    // The body checks the signal before it polls for the next chunk, so no chunk produced
    // after the loss is sent, but for one: the signal can fire in the instant between that
    // check and the chunk's production, which reads it again.
    assert!(after_loss() <= 1, "{} chunks after the loss", after_loss());
    taken.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trickled_upload_holds_the_lock_only_until_max_hold() {
    let nodes = RedisNodes::start(5);
    let redlock = handle(&nodes).await;
    let max_hold = Duration::from_secs(2);
    let app = Router::new()
        .route(
            "/orders/{id}",
            post(|body: Bytes| async move { body.len().to_string() }),
        )
        .route_layer(
            RedlockLayer::from_template(redlock.clone(), "order:{id}")
                .unwrap()
                .options(short_ttl())
                .max_hold(max_hold),
        );
    let base = serve(app, ShutdownHandle::new(redlock)).await;
    let http = reqwest::Client::new();
    let url = format!("{base}/orders/1");

    // 1 byte every 200 ms for 15 s: without a cap it would hold the lock all that time.
    let trickler = sent_and_held(&nodes, "order:1", || {
        let request = http
            .post(&url)
            .body(trickle(75, Duration::from_millis(200)));
        tokio::spawn(request.send())
    })
    .await;
    let started = Instant::now();
    let (status, busy) = within("another request to get in", until_not_busy(&http, &url)).await;
    let waited = started.elapsed();
    assert_eq!(status, StatusCode::OK);
    // The trickler held it at first (a control), and then only until max_hold (its lost
    // signal fires a margin before; the slack covers the release and the 100 ms polling).
    assert!(busy >= 1, "the trickled upload never held the lock");
    assert!(
        waited < max_hold + Duration::from_millis(1500),
        "another request waited {waited:?} (max_hold {max_hold:?})"
    );
    // The trickler was answered 503 (lost in flight) or cut off mid-upload.
    match within("the trickler's answer", trickler).await.unwrap() {
        Ok(response) => assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE),
        Err(error) => assert!(error.is_request() || error.is_body(), "{error:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_does_not_read_the_response_holds_the_lock_only_until_max_hold() {
    let nodes = RedisNodes::start(5);
    let redlock = handle(&nodes).await;
    let max_hold = Duration::from_secs(2);
    let app = Router::new()
        // An endless body of 64 KiB chunks: it fills the socket buffers of a client that does
        // not read, and then waits for them to drain.
        .route(
            "/dumps/{id}",
            get(|| async {
                let chunk = Bytes::from(vec![b'x'; 64 * 1024]);
                let stream =
                    futures_util::stream::repeat_with(move || Ok::<_, Infallible>(chunk.clone()));
                Body::from_stream(stream)
            })
            .post(|| async { "ok" }),
        )
        .route_layer(
            RedlockLayer::from_template(redlock.clone(), "dump:{id}")
                .unwrap()
                .options(short_ttl())
                .max_hold(max_hold),
        );
    let base = serve(app, ShutdownHandle::new(redlock)).await;
    let address = base.trim_start_matches("http://").to_owned();

    // Sends the request and never reads the answer's body. As in `sent_and_held`, a first
    // attempt that could not take the lock (`503` or `423`, its status line read) is retried.
    let mut stalled = None;
    for _ in 0..5 {
        let mut stream = tokio::net::TcpStream::connect(&address).await.unwrap();
        stream
            .write_all(b"GET /dumps/1 HTTP/1.1\r\nhost: test\r\n\r\n")
            .await
            .unwrap();
        let mut status_line = [0; 12];
        tokio::select! {
            () = held(&nodes, "dump:1") => {
                stalled = Some(stream);
                break;
            }
            read = stream.read_exact(&mut status_line) => {
                read.unwrap();
                let status = String::from_utf8_lossy(&status_line[9..]).into_owned();
                if status == "200" {
                    held(&nodes, "dump:1").await;
                    stalled = Some(stream);
                    break;
                }
                assert!(status == "503" || status == "423", "answered {status}");
            }
        }
    }
    let stalled = stalled.expect("5 requests in a row could not take dump:1");
    let started = Instant::now();
    let http = reqwest::Client::new();
    let url = format!("{base}/dumps/1");
    let (status, busy) = within("another request to get in", until_not_busy(&http, &url)).await;
    let waited = started.elapsed();
    assert_eq!(status, StatusCode::OK);
    assert!(busy >= 1, "the stalled client never held the lock");
    // The cap ends the extensions: the lock runs out at max_hold (the lease's last validity;
    // the body is not polled while the socket is full, so nothing releases it earlier).
    assert!(
        waited < max_hold + Duration::from_millis(1500),
        "another request waited {waited:?} (max_hold {max_hold:?})"
    );
    drop(stalled);
}

/// The stack `RedlockLayer`'s docs recommend, with the test's durations: tower-http's
/// request timeout around the whole request (lock wait and handler) and its request body
/// timeout between the body's frames.
fn with_timeouts(redlock: Redlock, request: Duration, body: Duration) -> Router {
    use tower_http::timeout::{RequestBodyTimeoutLayer, TimeoutLayer};
    Router::new()
        .route(
            "/orders/{id}/pay",
            post(|body: Bytes| async move { body.len().to_string() }),
        )
        .route_layer(
            RedlockLayer::from_template(redlock, "order:{id}")
                .unwrap()
                .options(short_ttl()),
        )
        .layer((
            TimeoutLayer::with_status_code(StatusCode::REQUEST_TIMEOUT, request),
            RequestBodyTimeoutLayer::new(body),
        ))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tower_http_timeouts_cut_a_trickling_client_off_and_release_its_lock() {
    let nodes = RedisNodes::start(5);
    let redlock = handle(&nodes).await;
    let (request_timeout, body_timeout) = (Duration::from_millis(1500), Duration::from_millis(500));
    let app = with_timeouts(redlock.clone(), request_timeout, body_timeout);
    let base = serve(app, ShutdownHandle::new(redlock)).await;
    let http = reqwest::Client::new();
    let url = format!("{base}/orders/1/pay");

    // A pause longer than the body timeout between two bytes: the body read fails.
    let pauses = sent_and_held(&nodes, "order:1", || {
        let request = http.post(&url).body(trickle(10, Duration::from_secs(1)));
        tokio::spawn(request.send())
    })
    .await;
    let started = Instant::now();
    let (status, _) = within("another request to get in", until_not_busy(&http, &url)).await;
    assert_eq!(status, StatusCode::OK);
    let waited = started.elapsed();
    assert!(waited < Duration::from_secs(2), "waited {waited:?}");
    // axum's `Bytes` extractor answers `400` when reading the body fails. The client may
    // instead see the connection closed while it still sends.
    let answer = within("the paused client's answer", pauses).await.unwrap();
    if let Ok(response) = answer {
        assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    }

    // Bytes often enough for the body timeout, for longer than the request timeout: `408`
    // at the request timeout, and the lock goes with it.
    let trickles = sent_and_held(&nodes, "order:1", || {
        let request = http
            .post(&url)
            .body(trickle(50, Duration::from_millis(100)));
        tokio::spawn(request.send())
    })
    .await;
    let started = Instant::now();
    let (status, busy) = within("another request to get in", until_not_busy(&http, &url)).await;
    assert_eq!(status, StatusCode::OK);
    assert!(busy >= 1, "the trickling client never held the lock");
    let waited = started.elapsed();
    assert!(
        waited < request_timeout + Duration::from_secs(1),
        "waited {waited:?}"
    );
    let answer = within("the trickling client's answer", trickles)
        .await
        .unwrap();
    // As above, a closed connection is the other way the client can learn it.
    if let Ok(response) = answer {
        assert_eq!(response.status(), StatusCode::REQUEST_TIMEOUT);
    }
}
