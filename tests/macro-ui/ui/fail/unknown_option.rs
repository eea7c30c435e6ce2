use redlock_core::{LockError, redlock};

#[redlock(resourse = "x")]
async fn typo() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
