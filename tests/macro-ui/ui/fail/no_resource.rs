use redlock_core::{LockError, Redlock, redlock};

#[redlock(ttl = "30s", redlock = handle)]
async fn nothing(handle: &Redlock) -> Result<(), LockError> {
    let _ = handle;
    Ok(())
}

fn main() {}
