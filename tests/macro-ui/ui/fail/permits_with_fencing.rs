use redlock_core::{LockError, Redlock, redlock};

#[redlock(resource = "export:{tenant}", permits = 3, fencing, redlock = handle)]
async fn export(handle: &Redlock, tenant: u64) -> Result<(), LockError> {
    let _ = (handle, tenant);
    Ok(())
}

fn main() {}
