use redlock_core::{LockError, redlock};

#[redlock(resourse = "x")]
async fn typo() -> Result<(), LockError> {
    Ok(())
}

#[redlock(resource = "x", tll = "30s")]
async fn transposed() -> Result<(), LockError> {
    Ok(())
}

#[redlock(resource = "x", frobnicate = 1)]
async fn unknown() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
