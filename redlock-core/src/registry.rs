//! Named [`Redlock`] handles, for `#[redlock(pool = "...")]` (RedLock-Hyperf's `poolName`).
//!
//! Register handles once at start-up; the attribute looks them up by name (default
//! `"default"`) each time the function runs.
//!
//! ```no_run
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let redlock = redlock_core::Redlock::builder().from_env().build().await?;
//! redlock_core::registry::register(redlock_core::registry::DEFAULT, redlock);
//! # Ok(()) }
//! ```

use std::collections::HashMap;
use std::sync::{LazyLock, PoisonError, RwLock};

use crate::error::LockError;
use crate::kernel::redlock::Redlock;

/// The name used when none is given.
pub const DEFAULT: &str = "default";

static HANDLES: LazyLock<RwLock<HashMap<String, Redlock>>> =
    LazyLock::new(|| RwLock::new(HashMap::new()));

/// Registers `redlock` under `name`, returning the handle it replaces, if any.
pub fn register(name: impl Into<String>, redlock: Redlock) -> Option<Redlock> {
    HANDLES
        .write()
        .unwrap_or_else(PoisonError::into_inner)
        .insert(name.into(), redlock)
}

/// Removes the handle registered under `name`.
pub fn unregister(name: &str) -> Option<Redlock> {
    HANDLES
        .write()
        .unwrap_or_else(PoisonError::into_inner)
        .remove(name)
}

/// The handle registered under `name`.
///
/// # Errors
/// [`LockError::NotRegistered`] if none is.
pub fn get(name: &str) -> Result<Redlock, LockError> {
    HANDLES
        .read()
        .unwrap_or_else(PoisonError::into_inner)
        .get(name)
        .cloned()
        .ok_or_else(|| LockError::NotRegistered(name.to_owned()))
}
