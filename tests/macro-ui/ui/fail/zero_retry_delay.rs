use redlock_core::{LockError, redlock};

// The handle's retry_count (default 1) applies.
#[redlock(resource = "x", retry_delay = "0ms", retry_jitter = 0)]
async fn default_retries() -> Result<(), LockError> {
    Ok(())
}

#[redlock(resource = "x", retry_count = 3, retry_delay = 0, retry_jitter = "0s")]
async fn three_retries() -> Result<(), LockError> {
    Ok(())
}

// wait_timeout replaces retry_count.
#[redlock(resource = "x", retry_count = 0, wait_timeout = "1s", retry_delay = "0ms", retry_jitter = "0ms")]
async fn until_deadline() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
