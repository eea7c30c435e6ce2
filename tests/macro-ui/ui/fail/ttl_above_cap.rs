use redlock_core::{LockError, redlock};

#[redlock(resource = "x", ttl = "24h 1ms")]
async fn just_above() -> Result<(), LockError> {
    Ok(())
}

// 30 s meant, written in microseconds.
#[redlock(resource = "x", ttl = 30_000_000_000)]
async fn wrong_unit() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
