use redlock_core::{LockError, Redlock, redlock};

#[redlock(resource = "a", resources = ["b", "c"], redlock = handle)]
async fn both(handle: &Redlock) -> Result<(), LockError> {
    let _ = handle;
    Ok(())
}

fn main() {}
