//! The return types `on_busy = "skip"` accepts, and `on_busy = "error"` spelled out.
#![allow(dead_code)]

use redlock_core::{LockError, redlock};

#[redlock(resource = "report", on_busy = "skip")]
async fn optional() -> Result<Option<u64>, LockError> {
    Ok(Some(1))
}

#[redlock(resource = "report", on_busy = "skip")]
async fn unit() -> Result<(), LockError> {
    Ok(())
}

#[derive(Default)]
struct Summary {
    rows: u64,
}

type Outcome<T> = Result<T, LockError>;

// The skipped value comes from the type, through an alias too.
#[redlock(resource = "report", on_busy = "skip")]
async fn summary() -> Outcome<Summary> {
    Ok(Summary { rows: 1 })
}

#[redlock(resource = "report", on_busy = "error")]
async fn strict() -> Result<u64, LockError> {
    Ok(1)
}

fn main() {}
