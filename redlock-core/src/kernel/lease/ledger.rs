//! The ledger of held leases: every lease a handle handed out and has not released, which
//! [`Redlock::release_all`](crate::Redlock::release_all) releases, and the auto-extension
//! driver that keeps the auto-extended ones alive.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};

use super::watchdog::Watchdog;
use super::{Lease, reentrant};
use crate::error::LostReason;
use crate::kernel::masters::Masters;
use crate::telemetry;

/// What finishing a guard did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Finish {
    /// Another guard of the scope still holds the lock.
    Kept,
    /// [`Redlock::release_all`](crate::Redlock::release_all) already released it.
    AlreadyReleased,
    /// This was the last hold: the caller releases it on the nodes.
    Release,
}

/// The held leases of one handle (and its clones).
pub(crate) struct Ledger {
    held: Mutex<BTreeMap<u64, Arc<Lease>>>,
    next_id: AtomicU64,
    /// The runtime the handle was built on: the auto-extension driver runs there.
    runtime: Option<tokio::runtime::Handle>,
    /// The auto-extension driver, started with the first auto-extended lock.
    watchdog: OnceLock<Watchdog>,
}

impl Ledger {
    pub(crate) fn new(runtime: Option<tokio::runtime::Handle>) -> Self {
        Self {
            held: Mutex::new(BTreeMap::new()),
            next_id: AtomicU64::new(0),
            runtime,
            watchdog: OnceLock::new(),
        }
    }

    /// A new lease id, unique within the handle.
    pub(crate) fn next_id(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    fn held(&self) -> MutexGuard<'_, BTreeMap<u64, Arc<Lease>>> {
        self.held.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Records a new lease, and hands it to the auto-extension driver if it is auto-extended
    /// (the driver extends it on `masters`, and stops when they are dropped).
    pub(crate) fn hold(&self, lease: &Arc<Lease>, masters: &Arc<Masters>) {
        self.held().insert(lease.id, Arc::clone(lease));
        telemetry::held(&lease.class);
        if lease.auto_extend.is_some() {
            self.watchdog
                .get_or_init(|| Watchdog::start(Arc::downgrade(masters), self.runtime.as_ref()))
                .watch(Arc::clone(lease));
        }
    }

    /// A guard is done with `lease`: drop one hold, and when it was the last, retire it; the
    /// caller then releases it on the nodes.
    pub(crate) fn finish(&self, lease: &Lease) -> Finish {
        if !reentrant::leave(lease) {
            return Finish::Kept;
        }
        if !self.retire(lease) {
            return Finish::AlreadyReleased;
        }
        Finish::Release
    }

    /// Takes a lease out of the ledger and the driver, and fires its lost signal (released);
    /// `false` if it was already retired (e.g. by `release_all`).
    pub(crate) fn retire(&self, lease: &Lease) -> bool {
        self.take_out(lease, LostReason::Released)
    }

    /// Takes `lease` out of the ledger and the driver without releasing it, to be resumed
    /// elsewhere ([`LockGuard::detach`](crate::LockGuard::detach)); its lost signal fires
    /// (detached). `false` if it is shared by re-entries, or was already retired: it stays as
    /// it was.
    pub(crate) fn detach(&self, lease: &Lease) -> bool {
        lease.holds.load(Ordering::Acquire) == 1 && self.take_out(lease, LostReason::Detached)
    }

    /// Takes `lease` out of the ledger and the driver, and fires its lost signal with
    /// `reason` (or expired, if it was past its lost deadline); `false` if it was not there.
    fn take_out(&self, lease: &Lease, reason: LostReason) -> bool {
        if self.held().remove(&lease.id).is_none() {
            return false;
        }
        // A lease past its lost deadline is reported lost by expiry.
        let _expired = lease.check();
        lease.mark_lost(reason);
        let permit = lease.permit().is_some();
        telemetry::unheld(
            &lease.class,
            lease.mode_taken(),
            permit,
            lease.acquired_at.elapsed(),
        );
        if lease.auto_extend.is_some()
            && let Some(watchdog) = self.watchdog.get()
        {
            watchdog.unwatch(lease.id);
        }
        true
    }

    /// Retires every held lease and returns them.
    pub(crate) fn retire_all(&self) -> Vec<Arc<Lease>> {
        let leases: Vec<Arc<Lease>> = self.held().values().cloned().collect();
        leases.into_iter().filter(|l| self.retire(l)).collect()
    }

    /// The number of held leases.
    pub(crate) fn len(&self) -> usize {
        self.held().len()
    }
}
