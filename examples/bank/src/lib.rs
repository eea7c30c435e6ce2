//! A bank's back office guarded by Redlock, to show the lock's primitives in application code
//! (its tests, under `tests/`, run it against real servers):
//!
//! - [`Bank::transfer`] locks both accounts together, all or none
//!   (`#[redlock(resources = [..])]`), so two transfers in opposite directions never deadlock;
//! - [`Bank::export`] runs at most 2 exports of a tenant at once across every replica (a
//!   counting semaphore, `permits = 2`);
//! - [`Bank::request_report`] takes a report's lock in a web request and hands it to a worker
//!   as JSON ([`DetachedLock`]); [`Bank::run_report`] resumes it there, exactly once;
//! - [`Bank::rebuild_catalog`] writes the catalog under an exclusive lock, then keeps reading it
//!   beside other readers without letting a writer in between (a downgrade);
//! - the handle's owner label says who holds what ([`Bank::who_holds`]).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use redlock_core::{DetachedLock, LockError, LockOptions, Mode, Redlock, redlock};

/// What the bank's operations fail with.
#[derive(Debug, thiserror::Error)]
pub enum BankError {
    /// A lock could not be taken (busy: [`LockError::is_busy`]), or was lost.
    #[error("lock: {0}")]
    Lock(#[from] LockError),
    /// A handed-on job could not be read.
    #[error("job: {0}")]
    Job(#[from] serde_json::Error),
}

/// The back office of one replica.
#[derive(Debug, Clone)]
pub struct Bank {
    redlock: Redlock,
    transfers: Arc<AtomicU64>,
    exports: Arc<AtomicU64>,
}

impl Bank {
    /// A back office locking through `redlock` (give the handle an owner label:
    /// `RedlockBuilder::owner`).
    pub fn new(redlock: Redlock) -> Self {
        Self {
            redlock,
            transfers: Arc::default(),
            exports: Arc::default(),
        }
    }

    /// Moves money from one account to another, holding both accounts' locks together
    /// (sorted, all or none); returns how many transfers this replica made.
    ///
    /// # Errors
    /// [`BankError::Lock`] when one of the accounts stayed busy (another transfer or
    /// operation holds it) for the 2 s wait.
    #[redlock(resources = ["account:{from}", "account:{to}"], redlock = self.redlock, wait_timeout = "2s")]
    pub async fn transfer(&self, from: u64, to: u64) -> Result<u64, BankError> {
        tokio::time::sleep(Duration::from_millis(5)).await;
        Ok(self.transfers.fetch_add(1, Ordering::SeqCst) + 1)
    }

    /// Exports a tenant's statements: at most 2 at once per tenant across every replica.
    /// `Ok(None)` when both permits are taken (skipped).
    ///
    /// # Errors
    /// [`BankError::Lock`] when the nodes are unavailable.
    #[redlock(resource = "export:{tenant}", permits = 2, redlock = self.redlock, retry_count = 0, on_busy = "skip")]
    pub async fn export(&self, tenant: u64, work: Duration) -> Result<Option<u64>, BankError> {
        tokio::time::sleep(work).await;
        Ok(Some(self.exports.fetch_add(1, Ordering::SeqCst) + 1))
    }

    /// In a web request: takes report `id`'s lock and returns the job to queue for a worker,
    /// as JSON. **It carries the lock's token**: queue it where you would keep a password.
    ///
    /// # Errors
    /// [`BankError::Lock`] when the report is being made already (busy).
    pub async fn request_report(&self, id: u64) -> Result<String, BankError> {
        let options = LockOptions::default()
            .ttl(Duration::from_secs(60))
            .retry_count(0);
        let guard = self
            .redlock
            .lock_with(&format!("report:{id}"), &options)
            .await?;
        Ok(serde_json::to_string(&guard.detach()?)?)
    }

    /// In a worker: resumes the job's lock (exactly one worker can), makes the report while
    /// the lock is auto-extended, and releases it.
    ///
    /// # Errors
    /// [`BankError::Lock`] (`LockError::Lost`) when the job's lock is gone, or another worker
    /// resumed it first; [`BankError::Job`] for a job that is not one.
    pub async fn run_report(&self, job: &str) -> Result<String, BankError> {
        let detached: DetachedLock = serde_json::from_str(job)?;
        let options = LockOptions::default()
            .ttl(Duration::from_secs(60))
            .auto_extend(true);
        let guard = self.redlock.resume_with(&detached, &options).await?;
        let report = guard
            .until_lost(async { format!("{} made", guard.resource()) })
            .await?;
        guard.release().await?;
        Ok(report)
    }

    /// Rebuilds the catalog under an exclusive lock, then moves to a read lock in place (no
    /// writer can slip in) and calls `read` while other readers may come in.
    ///
    /// # Errors
    /// [`BankError::Lock`] when the catalog stayed busy, or the downgrade could not be
    /// confirmed.
    pub async fn rebuild_catalog<F: Future<Output = ()>>(&self, read: F) -> Result<(), BankError> {
        let write = LockOptions::default().wait_timeout(Duration::from_secs(5));
        let guard = self
            .redlock
            .lock_mode_with("catalog", Mode::Exclusive, &write)
            .await?;
        // ... write the catalog ...
        guard.downgrade(Mode::ProtectedRead).await?;
        guard.until_lost(read).await?;
        guard.release().await?;
        Ok(())
    }

    /// Who holds `resource`: the owner label of its holder, when a quorum of nodes show one.
    ///
    /// # Errors
    /// [`BankError::Lock`] for a bad resource name.
    pub async fn who_holds(&self, resource: &str) -> Result<Option<String>, BankError> {
        let status = self.redlock.inspect(resource).await?;
        Ok(status.owner().map(str::to_owned))
    }
}
