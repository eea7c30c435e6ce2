//! Scoped locking: run work under an auto-extended lock, stop it when the lock is lost, and
//! release on every exit.

use std::future::Future;
use std::time::Duration;

use crate::error::LockError;
use crate::kernel::guard::LockGuard;
use crate::kernel::lease::LockInfo;
use crate::kernel::redlock::Redlock;
use crate::options::LockOptions;

impl Redlock {
    /// Runs `work` while holding `resource` with the given `ttl` (and this handle's other
    /// default options), auto-extended; stops it when the lock is lost; releases on every exit.
    ///
    /// `work` gets a [`LockInfo`] (fencing token, validity, lost signal). If the lock is lost
    /// first (see [`LostSignal`](crate::LostSignal)), the work's future is dropped at its next
    /// `.await` and [`LockError::Lost`] is returned. Cancelling the returned future drops the
    /// work and releases the lock too.
    ///
    /// ```no_run
    /// # async fn run(redlock: redlock_core::Redlock) -> Result<(), redlock_core::LockError> {
    /// use std::time::Duration;
    ///
    /// let rows = redlock
    ///     .with_lock("cron:rebuild-cache", Duration::from_secs(10), |lock| async move {
    ///         // may take far longer than 10 s: the lock is extended while this runs
    ///         let _fence = lock.fencing_token();
    ///         42
    ///     })
    ///     .await?;
    /// # let _ = rows; Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// As [`with_lock_options`](Self::with_lock_options).
    ///
    /// # Errors
    /// As [`lock_with`](Self::lock_with), plus [`LockError::Lost`] when the work was stopped.
    pub async fn with_lock<F, Fut, T>(
        &self,
        resource: &str,
        ttl: Duration,
        work: F,
    ) -> Result<T, LockError>
    where
        F: FnOnce(LockInfo) -> Fut,
        Fut: Future<Output = T>,
    {
        let options = self.options().clone().ttl(ttl);
        self.with_lock_options(resource, &options, work).await
    }

    /// [`with_lock`](Self::with_lock) with full options (auto-extension is switched on).
    ///
    /// # Cancel safety
    /// Dropped while it acquires, as [`Redlock::lock_with`](crate::Redlock::lock_with); dropped
    /// while `f`'s future runs, that future is dropped and the lock released in the background, as
    /// a dropped guard's is.
    ///
    /// # Errors
    /// As [`with_lock`](Self::with_lock).
    pub async fn with_lock_options<F, Fut, T>(
        &self,
        resource: &str,
        options: &LockOptions,
        work: F,
    ) -> Result<T, LockError>
    where
        F: FnOnce(LockInfo) -> Fut,
        Fut: Future<Output = T>,
    {
        let options = options.clone().auto_extend(true);
        let guard = self.lock_with(resource, &options).await?;
        let output = guard.until_lost(guard.scope(work(guard.info()))).await;
        finish(guard, output).await
    }
}

/// Releases `guard` after scoped work, reporting a failed release in the log: the work's
/// outcome is what the caller needs, and an unconfirmed release expires with the ttl.
async fn finish<T>(guard: LockGuard, output: Result<T, LockError>) -> Result<T, LockError> {
    if output.is_err() {
        drop(guard);
        return output;
    }
    let resource = guard.resource().to_owned();
    if let Err(error) = guard.release().await {
        tracing::warn!(resource, %error, "release after scoped work failed");
    }
    output
}
