use redlock_core::{LockError, redlock};

struct Receipt {
    id: u64,
}

// A busy resource skips the body, and a `Receipt` has no "skipped" value.
#[redlock(resource = "x", on_busy = "skip")]
async fn pay() -> Result<Receipt, LockError> {
    Ok(Receipt { id: 1 })
}

fn main() {}
