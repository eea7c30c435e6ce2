//! An axum shop run as several replicas. Two pieces of work go wrong without a lock:
//!
//! - paying an order (`POST /orders/{id}/pay`, guarded by [`RedlockLayer`]): read the order,
//!   call the payment provider, record the charge. Two concurrent requests would both see the
//!   order unpaid and both charge it. `POST /unsafe/orders/{id}/pay` is the same handler
//!   without the lock, as a baseline that does double-charge.
//! - selling stock (`POST /stock/{sku}/buy`, guarded by `#[redlock]`): read the stock, then
//!   write it back decremented. Unlocked, concurrent buyers oversell.
//!
//! - a catalog shelf (`GET` / `PUT /catalog/{shelf}`, a read/write route: the layer takes a
//!   read lock for `GET` and a write lock for `PUT`): a write updates the shelf's price and
//!   then its label, a read reads both. Readers share the shelf; unlocked
//!   (`/unsafe/catalog/{shelf}`), a read in the middle of a write sees a torn shelf.
//!
//! The pay route's lock carries a fencing token, which the handler hands to the data store: a
//! charge is recorded only with a token above every token the order has seen, so even a
//! holder that outlived its lock (a long pause) cannot record a charge after the next holder.
//!
//! `POST /jobs/{name}/rebuild?ms=N` holds `job:{name}` for N ms (a cache rebuild) under a 1 s
//! ttl that the layer keeps extending while the job runs; a second caller waits for it. On SIGTERM the replica stops taking locks, lets requests finish for
//! `SHUTDOWN_GRACE_MS`, then releases every lock it still holds before exiting.
//!
//! Environment: `REDLOCK_NODES` (lock masters), `SHOP_DATA_URL` (the Redis holding orders and
//! stock), `PORT`, `REPLICA` (a name for logs and responses), `SHUTDOWN_GRACE_MS`.

use std::time::{Duration, Instant};

use axum::extract::{Path, Query, State};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use fred::clients::Client;
use fred::interfaces::{ClientLike, KeysInterface, LuaInterface};
use redlock_axum::{HeldLock, LockRejection, RedlockLayer, ShutdownHandle};
use redlock_core::{LockError, LockOptions, Redlock, redlock};
use serde::Deserialize;
use serde_json::json;

#[derive(Clone)]
struct AppState {
    redlock: Redlock,
    data: Client,
    replica: String,
}

/// The shop's error: a lock that could not be taken, or Redis failing.
#[derive(Debug)]
enum ShopError {
    Lock(LockRejection),
    Data(fred::error::Error),
}

impl From<LockError> for ShopError {
    fn from(error: LockError) -> Self {
        Self::Lock(error.into())
    }
}

impl From<fred::error::Error> for ShopError {
    fn from(error: fred::error::Error) -> Self {
        Self::Data(error)
    }
}

impl IntoResponse for ShopError {
    fn into_response(self) -> Response {
        match self {
            Self::Lock(rejection) => rejection.into_response(),
            Self::Data(error) => {
                tracing::error!(%error, "data store error");
                (http::StatusCode::INTERNAL_SERVER_ERROR, "data store error").into_response()
            }
        }
    }
}

/// A max register: record `ARGV[1]` only if it is above every value seen (1), else refuse (0).
/// The data store's side of fencing (the order's highest token), and the catalog's count of
/// readers seen inside at once.
const RAISE: &str = r#"local seen = tonumber(redis.call("get", KEYS[1]) or "0")
if tonumber(ARGV[1]) > seen then redis.call("set", KEYS[1], ARGV[1]) return 1 end
return 0"#;

/// Pays an order once: read its status, "call the payment provider", record the charge —
/// fenced by the lock's token when there is a lock.
async fn pay(
    State(state): State<AppState>,
    Path(id): Path<u64>,
    // `None` on the unsafe route, which has no lock layer.
    lock: Option<HeldLock>,
) -> Result<Response, ShopError> {
    // The store refuses a holder older than one it has already seen.
    let fencing_token = lock.and_then(|lock| lock.fencing_token());
    if let Some(token) = fencing_token {
        let fence = vec![format!("order:{id}:fence")];
        let accepted: i64 = state.data.eval(RAISE, fence, token).await?;
        if accepted == 0 {
            return Ok((http::StatusCode::CONFLICT, "stale fencing token").into_response());
        }
    }
    let status: Option<String> = state.data.get(format!("order:{id}:status")).await?;
    if status.as_deref() == Some("paid") {
        return Ok(Json(json!({ "order": id, "result": "already_paid" })).into_response());
    }
    tokio::time::sleep(Duration::from_millis(5)).await; // the payment provider
    let charges: u64 = state.data.incr(format!("order:{id}:charges")).await?;
    let _: () = state
        .data
        .set(format!("order:{id}:status"), "paid", None, None, false)
        .await?;
    Ok(Json(json!({
        "order": id, "result": "paid", "charges": charges, "replica": state.replica,
        "fencing_token": fencing_token,
    }))
    .into_response())
}

/// Sells one unit of `sku` if any is left.
#[redlock(resource = "stock:{sku}", redlock = state.redlock, ttl = "5s", retry_count = 0)]
async fn buy(
    State(state): State<AppState>,
    Path(sku): Path<String>,
) -> Result<Response, ShopError> {
    let stock: Option<i64> = state.data.get(format!("stock:{sku}")).await?;
    let stock = stock.unwrap_or(0);
    if stock <= 0 {
        return Ok((http::StatusCode::CONFLICT, "sold out").into_response());
    }
    tokio::time::sleep(Duration::from_millis(2)).await; // reserve in the warehouse
    let _: () = state
        .data
        .set(format!("stock:{sku}"), stock - 1, None, None, false)
        .await?;
    let _: i64 = state.data.incr(format!("sold:{sku}")).await?;
    Ok(Json(json!({ "sku": sku, "left": stock - 1, "replica": state.replica })).into_response())
}

/// Reads a shelf: its price version, then (a moment later) its label version. A write between
/// the two would show them unequal: a torn read, counted in `shelf:{shelf}:torn`.
async fn show_shelf(
    State(state): State<AppState>,
    Path(shelf): Path<String>,
) -> Result<Response, ShopError> {
    let key = |field: &str| format!("shelf:{shelf}:{field}");
    let inside: i64 = state.data.incr(key("readers")).await?;
    let _: i64 = state
        .data
        .eval(RAISE, vec![key("most_readers")], inside)
        .await?;
    let price: Option<i64> = state.data.get(key("price_version")).await?;
    tokio::time::sleep(Duration::from_millis(3)).await; // render the price
    let label: Option<i64> = state.data.get(key("label_version")).await?;
    let _: i64 = state.data.decr(key("readers")).await?;
    let torn = price != label;
    if torn {
        let _: i64 = state.data.incr(key("torn")).await?;
    }
    Ok(Json(json!({
        "shelf": shelf, "version": price, "torn": torn, "readers_inside": inside,
        "replica": state.replica,
    }))
    .into_response())
}

/// Updates a shelf: a new price version, then (a moment later) the matching label. A write
/// that finds readers inside counts in `shelf:{shelf}:torn` too.
async fn edit_shelf(
    State(state): State<AppState>,
    Path(shelf): Path<String>,
) -> Result<Response, ShopError> {
    let key = |field: &str| format!("shelf:{shelf}:{field}");
    let readers: Option<i64> = state.data.get(key("readers")).await?;
    if readers.unwrap_or(0) > 0 {
        let _: i64 = state.data.incr(key("torn")).await?;
    }
    let version: i64 = state.data.incr(key("price_version")).await?;
    tokio::time::sleep(Duration::from_millis(3)).await; // print the label
    let _: () = state
        .data
        .set(key("label_version"), version, None, None, false)
        .await?;
    Ok(
        Json(json!({ "shelf": shelf, "version": version, "replica": state.replica }))
            .into_response(),
    )
}

#[derive(Deserialize)]
struct Rebuild {
    #[serde(default)]
    ms: u64,
}

/// Rebuilds a cache: holds `job:{name}` for `ms` milliseconds.
async fn rebuild(
    State(state): State<AppState>,
    Path(name): Path<String>,
    Query(query): Query<Rebuild>,
) -> Json<serde_json::Value> {
    let started = Instant::now();
    tokio::time::sleep(Duration::from_millis(query.ms)).await;
    Json(json!({
        "job": name, "replica": state.replica, "worked_ms": started.elapsed().as_millis() as u64,
    }))
}

fn app(state: AppState) -> Result<Router, redlock_axum::TemplateError> {
    let redlock = state.redlock.clone();
    let pay_lock = RedlockLayer::from_template(redlock.clone(), "order:{id}")?.options(
        LockOptions::default()
            .ttl(Duration::from_secs(10))
            .fencing(true)
            .retry_delay(Duration::from_millis(10))
            .retry_jitter(Duration::from_millis(10))
            .wait_timeout(Duration::from_secs(2)),
    );
    // GET takes a read lock (shared), PUT a write lock (alone).
    let shelf_lock = RedlockLayer::from_template(redlock.clone(), "shelf:{shelf}")?
        .mode_by_method()
        .options(
            LockOptions::default()
                .ttl(Duration::from_secs(5))
                .retry_delay(Duration::from_millis(10))
                .retry_jitter(Duration::from_millis(10))
                .wait_timeout(Duration::from_secs(5)),
        );
    let job_lock = RedlockLayer::from_template(redlock, "job:{name}")?.options(
        LockOptions::default()
            // Short: the layer extends it while the job runs, and a crashed replica's lock
            // frees within a second.
            .ttl(Duration::from_secs(1))
            .retry_delay(Duration::from_millis(20))
            .retry_jitter(Duration::from_millis(5))
            .wait_timeout(Duration::from_secs(20)),
    );
    Ok(Router::new()
        .route("/health", get(|| async { "ok" }))
        .route("/orders/{id}/pay", post(pay).route_layer(pay_lock))
        .route("/unsafe/orders/{id}/pay", post(pay))
        .route("/stock/{sku}/buy", post(buy))
        .route(
            "/catalog/{shelf}",
            get(show_shelf).put(edit_shelf).route_layer(shelf_lock),
        )
        .route("/unsafe/catalog/{shelf}", get(show_shelf).put(edit_shelf))
        .route("/jobs/{name}/rebuild", post(rebuild).route_layer(job_lock))
        .with_state(state))
}

fn env_or(name: &str, default: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| default.to_owned())
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    // The error's message, not its `Debug` form: it says what to fix.
    match run().await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("shop: {error}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn run() -> Result<(), Box<dyn std::error::Error>> {
    // Logs go to stderr, coloured only when that is a terminal (the demo pipes them).
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "info,fred=warn".into()),
        )
        .init();
    // The lock's metrics (redlock-core's and the layer's `metrics` feature), scraped at
    // GET /metrics in Prometheus's text format.
    let prometheus = metrics_exporter_prometheus::PrometheusBuilder::new().install_recorder()?;
    redlock_core::describe_metrics();
    let upkeep = prometheus.clone();
    tokio::spawn(async move {
        // Histograms keep their samples until the exporter's upkeep folds them.
        let mut every = tokio::time::interval(Duration::from_secs(5));
        loop {
            every.tick().await;
            upkeep.run_upkeep();
        }
    });
    let replica = env_or("REPLICA", "shop");
    let redlock = Redlock::builder()
        .from_env()
        .key_prefix("lock:")
        .build()
        .await?;
    let data = fred::types::Builder::from_config(fred::types::config::Config::from_url(&env_or(
        "SHOP_DATA_URL",
        "redis://127.0.0.1:6379",
    ))?)
    .with_performance_config(|p| p.default_command_timeout = Duration::from_secs(2))
    .build()?;
    data.init().await?;

    let shutdown = ShutdownHandle::new(redlock.clone());
    // SIGTERM (Kubernetes, `docker stop`) or Ctrl-C.
    shutdown.trigger_on_signals()?;
    let grace = Duration::from_millis(env_or("SHUTDOWN_GRACE_MS", "5000").parse()?);
    let listener =
        tokio::net::TcpListener::bind(("127.0.0.1", env_or("PORT", "3000").parse::<u16>()?))
            .await?;
    tracing::info!(%replica, addr = %listener.local_addr()?, nodes = redlock.node_count(), "serving");
    let app = app(AppState {
        redlock,
        data,
        replica: replica.clone(),
    })?
    .route(
        "/metrics",
        get(move || std::future::ready(prometheus.render())),
    );
    let serve = axum::serve(listener, app).with_graceful_shutdown(shutdown.signal());
    shutdown.drain(serve.into_future(), grace).await;
    let report = shutdown.release_all(Duration::from_secs(2)).await;
    tracing::info!(
        %replica,
        released = ?report.released,
        unconfirmed = ?report.unconfirmed,
        "shut down"
    );
    Ok(())
}
