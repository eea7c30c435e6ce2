use redlock_core::{LockError, Redlock, redlock};

#[redlock(resources = ["account:{from}", "account:{to}"], mode = "read", redlock = handle)]
async fn transfer(handle: &Redlock, from: u64, to: u64) -> Result<(), LockError> {
    let _ = (handle, from, to);
    Ok(())
}

fn main() {}
