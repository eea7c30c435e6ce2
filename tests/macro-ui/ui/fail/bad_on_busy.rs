use redlock_core::{LockError, redlock};

#[redlock(resource = "x", on_busy = "ignore")]
async fn bad() -> Result<Option<()>, LockError> {
    Ok(None)
}

fn main() {}
