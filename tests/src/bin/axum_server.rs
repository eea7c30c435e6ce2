//! An axum server in its own process, for the test that stops it with a signal
//! (tests/axum.rs, `a_signal_releases_the_held_locks_and_the_server_exits_0`), shaped as the
//! axum snippet of the README and the guide.
//!
//! `axum_server <node-url>...` serves `POST /hold/{id}` under a `RedlockLayer` on `hold:{id}`
//! (ttl 30 s, auto-extended) whose handler never answers. It prints `LISTENING <addr>` once
//! the signal handlers are installed; on SIGTERM or Ctrl-C (SIGINT) it lets requests finish
//! for 200 ms, releases every lock still held, prints `RELEASED <resources> UNCONFIRMED
//! <resources>` and exits 0.

#![allow(clippy::unwrap_used, clippy::print_stdout)] // a test helper: a failure is the report

use std::future::IntoFuture;
use std::time::Duration;

use axum::Router;
use axum::routing::post;
use redlock_axum::{RedlockLayer, ShutdownHandle};
use redlock_core::{LockOptions, Redlock};

#[tokio::main]
async fn main() {
    let nodes: Vec<String> = std::env::args().skip(1).collect();
    let redlock = Redlock::builder()
        .nodes(nodes)
        .lock_options(LockOptions::default().retry_count(0))
        .build()
        .await
        .unwrap();
    let layer = RedlockLayer::from_template(redlock.clone(), "hold:{id}")
        .unwrap()
        .options(
            LockOptions::default()
                .ttl(Duration::from_secs(30))
                .retry_count(0),
        );
    let app = Router::new()
        .route("/hold/{id}", post(std::future::pending::<&str>))
        .route_layer(layer);
    let shutdown = ShutdownHandle::new(redlock);
    shutdown.trigger_on_signals().unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    println!("LISTENING {}", listener.local_addr().unwrap());
    let serve = axum::serve(listener, app).with_graceful_shutdown(shutdown.signal());
    shutdown
        .drain(serve.into_future(), Duration::from_millis(200))
        .await;
    let report = shutdown.release_all(Duration::from_secs(2)).await;
    println!(
        "RELEASED {:?} UNCONFIRMED {:?}",
        report.released, report.unconfirmed
    );
}
