use redlock_core::{LockError, redlock};

#[redlock(resource = "x", wait_timeout = "0ms")]
async fn no_wait() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
