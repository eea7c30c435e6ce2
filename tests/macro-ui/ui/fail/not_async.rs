use redlock_core::{LockError, redlock};

#[redlock(resource = "x")]
fn sync_fn() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
