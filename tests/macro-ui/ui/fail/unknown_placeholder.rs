use redlock_core::{LockError, redlock};

#[redlock(resource = "order:{order}")]
async fn pay(order_id: u64) -> Result<(), LockError> {
    let _ = order_id;
    Ok(())
}

fn main() {}
