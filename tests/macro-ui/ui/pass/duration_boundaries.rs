//! The shortest and longest literal durations `#[redlock]` must still accept.
#![allow(dead_code)]

use redlock_core::{LockError, redlock};

// 3 ms leaves 1 ms after the 2 ms drift floor (1 % of 3 ms is 30 µs).
#[redlock(resource = "x", ttl = "3ms")]
async fn shortest() -> Result<(), LockError> {
    Ok(())
}

#[redlock(resource = "x", ttl = 3, drift_factor = 0.01)]
async fn shortest_default_factor() -> Result<(), LockError> {
    Ok(())
}

// 4 ms × 0.4 + 2 ms = 3.6 ms of drift. The default lost margin (0.4 ms) would not be shorter
// than the 0.4 ms left, but the handle may set a smaller one: that check waits for run time.
#[redlock(resource = "x", ttl = "4ms", drift_factor = 0.4)]
async fn shortest_at_factor_0_4() -> Result<(), LockError> {
    Ok(())
}

// Exactly the cap.
#[redlock(resource = "x", ttl = "24h")]
async fn longest() -> Result<(), LockError> {
    Ok(())
}

// No retries, so no delay is needed.
#[redlock(resource = "x", retry_count = 0, retry_delay = "0ms", retry_jitter = "0ms")]
async fn single_attempt() -> Result<(), LockError> {
    Ok(())
}

// The jitter alone spaces the retries.
#[redlock(resource = "x", retry_count = 3, retry_delay = "0ms", retry_jitter = "20ms")]
async fn jitter_only() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
