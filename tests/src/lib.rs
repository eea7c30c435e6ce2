//! Real-server test support: `redis-server` processes on free loopback ports, killed on drop
//! (modelled on redis-rs's `redis-test`), and the fault
//! toolkit of the reliability scenarios: a per-node fault [`proxy`], process control
//! (pause, kill, restart with or without AOF), a wall-clock shim ([`clock`]) and an exclusion
//! [`checker`] independent of the lock.
//!
//! The modules, bottom up: `server` (one process, its port claim), `clients` (plain clients,
//! key names, probes through a lock handle), `nodes` (a set of servers, probes on all of them,
//! the lock over them); everything they define is re-exported here.

pub mod checker;
mod clients;
pub mod clock;
mod logs;
mod nodes;
pub mod programs;
pub mod proxy;
mod server;
pub mod tls;
pub mod workload;

pub use clients::{fencing_key, foreign_set_nx, free_within, is_free, plain_client, waiters_key};
pub use logs::LogCapture;
pub use nodes::{RedisNodes, proxy_urls, redlock, redlock_with};
pub use programs::SERVER_BIN_ENV;
pub use server::{RedisServer, ServerOptions, free_port};

use std::time::Duration;

/// Awaits `future` for at most 10 s; panics with `what` if it takes longer. Every wait in the
/// tests goes through this or another bound, so a bug fails the test instead of hanging CI.
pub async fn within<F: std::future::IntoFuture>(what: &str, future: F) -> F::Output {
    tokio::time::timeout(Duration::from_secs(10), future)
        .await
        .unwrap_or_else(|_| panic!("timed out after 10 s waiting for {what}"))
}

/// Sets its flag when dropped: put one in a future to see that the future was dropped.
#[derive(Debug)]
pub struct DropFlag(pub std::sync::Arc<std::sync::atomic::AtomicBool>);

impl Drop for DropFlag {
    fn drop(&mut self) {
        self.0.store(true, std::sync::atomic::Ordering::SeqCst);
    }
}
