use redlock_core::redlock;

#[redlock(resource = "x")]
async fn wrong_error() -> Result<(), std::fmt::Error> {
    Ok(())
}

fn main() {}
