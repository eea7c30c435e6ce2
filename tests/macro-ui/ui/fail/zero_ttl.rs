use redlock_core::{LockError, redlock};

#[redlock(resource = "x", ttl = "0s")]
async fn zero() -> Result<(), LockError> {
    Ok(())
}

#[redlock(resource = "x", ttl = 0)]
async fn zero_ms() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
