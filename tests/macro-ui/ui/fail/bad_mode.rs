use redlock_core::{LockError, redlock};

#[redlock(resource = "x", mode = "shared")]
async fn bad() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
