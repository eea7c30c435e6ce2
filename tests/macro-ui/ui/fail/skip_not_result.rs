use redlock_core::redlock;

#[redlock(resource = "x", redlock = handle, on_busy = "skip")]
async fn count(handle: &redlock_core::Redlock) -> Option<u64> {
    Some(1)
}

fn main() {}
