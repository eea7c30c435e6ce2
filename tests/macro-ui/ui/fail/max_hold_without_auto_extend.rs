use redlock_core::{LockError, redlock};

#[redlock(resource = "x", max_hold = "1h")]
async fn capped() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
