use redlock_core::{LockError, redlock};

// The drift allowance is at least 2 ms, whatever the handle's drift factor.
#[redlock(resource = "x", ttl = "2ms")]
async fn two_ms() -> Result<(), LockError> {
    Ok(())
}

// 3 ms × 0.4 + 2 ms = 3.2 ms of drift.
#[redlock(resource = "x", ttl = "3ms", drift_factor = 0.4)]
async fn large_factor() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
