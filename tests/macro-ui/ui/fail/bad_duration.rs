use redlock_core::{LockError, redlock};

#[redlock(resource = "x", ttl = "30 parsecs")]
async fn bad() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
