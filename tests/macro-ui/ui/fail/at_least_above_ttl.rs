use redlock_core::{LockError, redlock};

#[redlock(resource = "report", ttl = "10s", lock_at_least_for = "1m")]
async fn report() -> Result<(), LockError> {
    Ok(())
}

#[redlock(resource = "catalog", mode = "read", lock_at_least_for = "1s")]
async fn read_catalog() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
