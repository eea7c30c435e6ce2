//! Lock modes: the entry points of a lock held in a [`Mode`] (readers and writers, and the
//! six modes of the DLM table), with their Lua. The attempt, extension, release and downgrade
//! of a mode lock are the kernel's, which sends these scripts for a lease held in a mode.

use std::time::Duration;

use crate::error::LockError;
use crate::kernel::guard::LockGuard;
use crate::kernel::redlock::Redlock;
use crate::mode::Mode;
#[cfg(doc)]
use crate::options::LockOptions;

impl Redlock {
    /// Acquires `resource` in `mode` for `ttl`, with the handle's other default options: see
    /// [`Mode`] for the compatibility table and [`LockOptions::mode`] for how mode locks
    /// relate to the plain lock. [`lock_with`](Self::lock_with) and
    /// `options.mode(..)` give every other option.
    ///
    /// ```no_run
    /// # async fn run(redlock: redlock_core::Redlock) -> Result<(), redlock_core::LockError> {
    /// use std::time::{Duration, Instant};
    /// use redlock_core::Mode;
    ///
    /// // Many readers may hold "catalog" together; a writer (EX) waits for them.
    /// let reader = redlock.lock_mode("catalog", Mode::ProtectedRead, Duration::from_secs(5)).await?;
    /// reader.release().await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// As [`lock_with`](Self::lock_with); [`LockError::Busy`] when holders in an incompatible
    /// mode (or incompatible waiters ahead) kept it on every attempt.
    pub async fn lock_mode(
        &self,
        resource: &str,
        mode: Mode,
        ttl: Duration,
    ) -> Result<LockGuard, LockError> {
        let options = self.options().clone().mode(mode).ttl(ttl);
        self.lock_one(resource, &options).await
    }

    /// Acquires `resource` as a reader ([`Mode::ProtectedRead`]) with the default options:
    /// shared with other readers, excluded by writers.
    ///
    /// # Errors
    /// As [`lock_mode`](Self::lock_mode).
    pub async fn read_lock(&self, resource: &str) -> Result<LockGuard, LockError> {
        let options = self.options().clone().mode(Mode::ProtectedRead);
        self.lock_one(resource, &options).await
    }

    /// Acquires `resource` as a writer ([`Mode::Exclusive`]) with the default options: alone
    /// but for NL holders. A writer that asked first is not passed by readers that come after
    /// it.
    ///
    /// # Errors
    /// As [`lock_mode`](Self::lock_mode).
    pub async fn write_lock(&self, resource: &str) -> Result<LockGuard, LockError> {
        let options = self.options().clone().mode(Mode::Exclusive);
        self.lock_one(resource, &options).await
    }
}
