use redlock_core::{LockError, redlock};

#[redlock(resource = "x", ttl = -1)]
async fn negative_ttl() -> Result<(), LockError> {
    Ok(())
}

#[redlock(resource = "x", retry_delay = -5)]
async fn negative_delay() -> Result<(), LockError> {
    Ok(())
}

#[redlock(resource = "x", wait_timeout = "-5s")]
async fn negative_text() -> Result<(), LockError> {
    Ok(())
}

#[redlock(resource = "x", retry_jitter = -"5ms")]
async fn negated_text() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
