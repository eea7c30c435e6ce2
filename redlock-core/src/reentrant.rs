//! Reentrancy (seed 001): the leases each tokio task may re-enter, with a hold count.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};

/// Who may re-enter a lock: the tokio task that took it, or — for code outside any task, such
/// as the future given to `block_on` / `#[tokio::main]` — the thread running it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Holder {
    Task(tokio::task::Id),
    Thread(std::thread::ThreadId),
}

impl Holder {
    /// The caller's holder identity.
    pub(crate) fn current() -> Self {
        tokio::task::try_id().map_or_else(|| Self::Thread(std::thread::current().id()), Self::Task)
    }
}

use crate::error::LostReason;
use crate::lease::Lease;
use crate::mode::Mode;

/// Which lease a task may re-enter: the holder, the key, and the mode (a task holding a read
/// lock does not re-enter it as a write lock).
type Entry = (Holder, String, Option<Mode>);

/// The reentrant leases, keyed by the task holding them, their key and their mode.
#[derive(Debug, Default)]
pub(crate) struct Reentrant {
    leases: Mutex<HashMap<Entry, Weak<Lease>>>,
}

impl Reentrant {
    fn leases(&self) -> MutexGuard<'_, HashMap<Entry, Weak<Lease>>> {
        self.leases.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The lease `task` holds on `key` in `mode`, with one more hold; `Err` if that lease can
    /// no longer be trusted (nothing is added then); `None` if the task does not hold it.
    pub(crate) fn enter(
        &self,
        task: Holder,
        key: &str,
        mode: Option<Mode>,
    ) -> Option<Result<Arc<Lease>, LostReason>> {
        let leases = self.leases();
        let lease = leases.get(&(task, key.to_owned(), mode))?.upgrade()?;
        if let Err(reason) = lease.check() {
            return Some(Err(reason));
        }
        lease.holds.fetch_add(1, Ordering::AcqRel);
        drop(leases);
        Some(Ok(lease))
    }

    /// Records that `task` may re-enter `lease`.
    pub(crate) fn insert(&self, task: Holder, lease: &Arc<Lease>) {
        self.leases()
            .insert((task, lease.key.clone(), lease.mode), Arc::downgrade(lease));
    }

    /// Drops one hold on `lease`; `true` if it was the last (the lock must be released).
    pub(crate) fn leave(&self, lease: &Lease) -> bool {
        let Some(task) = lease.owner else {
            return true;
        };
        let mut leases = self.leases();
        if lease.holds.fetch_sub(1, Ordering::AcqRel) > 1 {
            return false;
        }
        let entry = (task, lease.key.clone(), lease.mode);
        if leases
            .get(&entry)
            .is_some_and(|weak| std::ptr::eq(weak.as_ptr(), lease))
        {
            leases.remove(&entry);
        }
        true
    }
}
