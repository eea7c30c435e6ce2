use redlock_core::redlock;

#[redlock(resource = "x")]
async fn no_result() -> u32 {
    1
}

#[redlock(resource = "y")]
async fn unit() {}

fn main() {}
