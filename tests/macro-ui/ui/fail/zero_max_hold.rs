use redlock_core::{LockError, redlock};

#[redlock(resource = "x", auto_extend, max_hold = "0s")]
async fn capped() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
