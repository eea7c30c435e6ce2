//! Lock modes: the entry points of a lock held in a [`Mode`] (readers and writers, and the
//! six modes of the DLM table), with their Lua. The attempt, extension, release and downgrade
//! of a mode lock are the kernel's, which sends these scripts for a lease held in a mode.

use std::time::Duration;

use crate::error::{InvalidInput, LockError};
use crate::kernel::guard::LockGuard;
use crate::kernel::redlock::Redlock;
use crate::mode::Mode;
use crate::options::LockOptions;

impl Redlock {
    /// Acquires `resource` in `mode` with `options`: see [`Mode`] for the compatibility
    /// table. Holders in compatible modes share the resource (any number of
    /// [`Mode::ProtectedRead`] readers, or one [`Mode::Exclusive`] writer); a plain lock and
    /// mode locks on one resource exclude each other entirely (NL included). A mode lock keeps
    /// the algorithm's quorum, validity, clean-up, extension and fencing rules (distlock spec,
    /// steps 1–5); each node checks compatibility and records the holder in one script
    /// (`acquire_mode.lua`). A reentrant acquisition re-enters only a lock of the same mode:
    /// there is no upgrade. Dropping the future mid-attempt still removes what the attempt
    /// took.
    ///
    /// ```no_run
    /// # async fn run(redlock: redlock_core::Redlock) -> Result<(), redlock_core::LockError> {
    /// use std::time::Duration;
    /// use redlock_core::{LockOptions, Mode};
    ///
    /// let options = LockOptions::default().ttl(Duration::from_secs(5)).fencing(true);
    /// let writer = redlock.lock_mode_with("catalog", Mode::Exclusive, &options).await?;
    /// writer.release().await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// Dropping the future stops the acquisition: whatever the attempt under way took on the nodes
    /// is released in the background (on the handle's runtime;
    /// [`Redlock::shutdown`](crate::Redlock::shutdown) waits for it), and a waiter leaves the
    /// queue. Nothing is held afterwards, and the call can be made again.
    ///
    /// # Errors
    /// As [`lock_with`](Self::lock_with); [`LockError::Invalid`] with
    /// [`InvalidInput::AtLeastWithMode`] for a minimum hold, which only the plain lock takes
    /// (nothing is sent); [`LockError::Busy`] when holders in an incompatible mode (or
    /// incompatible waiters ahead) kept it on every attempt.
    pub async fn lock_mode_with(
        &self,
        resource: &str,
        mode: Mode,
        options: &LockOptions,
    ) -> Result<LockGuard, LockError> {
        if options.lock_at_least_for.is_some() {
            return Err(InvalidInput::AtLeastWithMode.into());
        }
        self.lock_one(resource, Some(mode), options).await
    }

    /// Acquires `resource` in `mode` for `ttl`, with the handle's other default options: see
    /// [`lock_mode_with`](Self::lock_mode_with), which gives every other option.
    ///
    /// ```no_run
    /// # async fn run(redlock: redlock_core::Redlock) -> Result<(), redlock_core::LockError> {
    /// use std::time::Duration;
    /// use redlock_core::Mode;
    ///
    /// // Many readers may hold "catalog" together; a writer (EX) waits for them.
    /// let reader = redlock.lock_mode("catalog", Mode::ProtectedRead, Duration::from_secs(5)).await?;
    /// reader.release().await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// As [`lock_mode_with`](Self::lock_mode_with).
    ///
    /// # Errors
    /// As [`lock_mode_with`](Self::lock_mode_with).
    pub async fn lock_mode(
        &self,
        resource: &str,
        mode: Mode,
        ttl: Duration,
    ) -> Result<LockGuard, LockError> {
        let options = self.options().clone().ttl(ttl);
        self.lock_mode_with(resource, mode, &options).await
    }

    /// Acquires `resource` as a reader ([`Mode::ProtectedRead`]) with the default options:
    /// shared with other readers, excluded by writers.
    ///
    /// # Cancel safety
    /// As [`lock_mode_with`](Self::lock_mode_with).
    ///
    /// # Errors
    /// As [`lock_mode_with`](Self::lock_mode_with).
    pub async fn read_lock(&self, resource: &str) -> Result<LockGuard, LockError> {
        let options = self.options().clone();
        self.lock_mode_with(resource, Mode::ProtectedRead, &options)
            .await
    }

    /// Acquires `resource` as a writer ([`Mode::Exclusive`]) with the default options: alone
    /// but for NL holders. A writer that asked first is not passed by readers that come after
    /// it.
    ///
    /// # Cancel safety
    /// As [`lock_mode_with`](Self::lock_mode_with).
    ///
    /// # Errors
    /// As [`lock_mode_with`](Self::lock_mode_with).
    pub async fn write_lock(&self, resource: &str) -> Result<LockGuard, LockError> {
        let options = self.options().clone();
        self.lock_mode_with(resource, Mode::Exclusive, &options)
            .await
    }
}
