//! Clients of the servers: a plain client for looking at keys from the outside, another
//! client's foreign write, the lock's bookkeeping key names, and probes through a second
//! lock handle.

use std::time::Duration;

use tokio::time::Instant;

use redlock_core::{LockOptions, Redlock};

/// The waiter queue of the lock key `key` (redlock-core's bookkeeping namespace).
pub fn waiters_key(key: &str) -> String {
    format!("{key}{}waiters", redlock_core::BOOKKEEPING_SEPARATOR)
}

/// The fencing counter of the lock key `key` (redlock-core's bookkeeping namespace).
pub fn fencing_key(key: &str) -> String {
    format!("{key}{}fencing", redlock_core::BOOKKEEPING_SEPARATOR)
}

/// A plain fred client to one server, for looking at keys from the outside (2 s command
/// timeout).
///
/// # Cancel safety
/// Dropping the future drops the client and its connection.
///
/// # Panics
/// If `url` is not a server URL or the server cannot be reached.
pub async fn plain_client(url: &str) -> fred::clients::Client {
    use fred::interfaces::ClientLike;
    let config = fred::types::config::Config::from_url(url).unwrap_or_else(|e| panic!("{e}"));
    let client = fred::types::Builder::from_config(config)
        .with_performance_config(|p| p.default_command_timeout = Duration::from_secs(2))
        .build()
        .unwrap_or_else(|e| panic!("{e}"));
    client
        .init()
        .await
        .unwrap_or_else(|e| panic!("connect {url}: {e}"));
    client
}

/// Another client's plain `SET key theirs NX PX 10000` on one node: `Some("OK")` if it
/// took the key.
///
/// # Cancel safety
/// Dropped after the command was sent, the key may be set: it expires with its ttl.
///
/// # Panics
/// If the server cannot be reached or refuses the command.
pub async fn foreign_set_nx(url: &str, key: &str) -> Option<String> {
    use fred::interfaces::KeysInterface;
    use fred::types::{Expiration, SetOptions};
    plain_client(url)
        .await
        .set(
            key,
            "theirs",
            Some(Expiration::PX(10_000)),
            Some(SetOptions::NX),
            false,
        )
        .await
        .unwrap_or_else(|e| panic!("SET {key} on {url}: {e}"))
}

/// Another client's view: is `resource` free right now? One attempt to lock it through
/// `probe` (released at once when it succeeds).
///
/// # Cancel safety
/// Dropped midway, a lock its attempt took is released in the background, as any dropped
/// acquisition's is.
///
/// # Panics
/// Unless the answer is "acquired" or "busy" (e.g. the nodes are unreachable).
pub async fn is_free(probe: &Redlock, resource: &str) -> bool {
    let once = LockOptions::default().retry_count(0);
    match probe.lock_with(resource, &once).await {
        Ok(guard) => {
            guard.release().await.unwrap_or_else(|e| panic!("{e}"));
            true
        }
        Err(error) if error.is_busy() => false,
        Err(error) => panic!("{error}"),
    }
}

/// Waits (at most 5 s, polling every 5 ms) until `resource` can be taken through `probe`;
/// returns how long that took.
///
/// # Cancel safety
/// As [`is_free`].
///
/// # Panics
/// If it is not free within 5 s.
pub async fn free_within(probe: &Redlock, resource: &str) -> Duration {
    let started = Instant::now();
    let wait = LockOptions::default()
        .retry_delay(Duration::from_millis(5))
        .retry_jitter(Duration::ZERO)
        .wait_timeout(Duration::from_secs(5));
    let guard = probe
        .lock_with(resource, &wait)
        .await
        .unwrap_or_else(|e| panic!("{resource} never became free: {e}"));
    let elapsed = started.elapsed();
    guard.release().await.unwrap_or_else(|e| panic!("{e}"));
    elapsed
}
