//! Reentrancy that follows the call chain, not the task.
//!
//! A lock taken with [`LockOptions::reentrant`](crate::LockOptions::reentrant) can be
//! re-entered only by code running inside its holder's scope: the future given to
//! [`LockGuard::scope`](crate::LockGuard::scope) (which `#[redlock]`, `with_lock` and the axum
//! layer wrap around the locked body) and everything that future awaits. The scope is a
//! `tokio::task_local!` read when the scoped future is first polled, so:
//! - two sibling futures of one task (`join!`, `select!`, `for_each_concurrent`, a server
//!   polling several requests in one task) are two holders that exclude each other, as two
//!   tasks do, and so is work handed to `tokio::spawn` (a spawned scoped future carries only
//!   its own lock's scope, never the scopes around the place it was created);
//! - inside one scope, re-entries take turns: two sibling futures of a locked body that both
//!   re-enter its lock (`join!(debit(), debit())` inside `batch()`) run one after the other,
//!   each alone under the lock, while a re-entry nested inside another gets in at once. The
//!   turn belongs to the guard that opened the scope, so two scopes of one guard polled
//!   together (`join!(guard.scope(a), guard.scope(b))`) take turns too;
//! - a re-entry asks for the mode the lock is held in when it enters: once the lock is
//!   downgraded, a request in the mode it was taken in is another holder, including one that
//!   found the scope before the downgrade and waited for its turn meanwhile.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{Ordering, fence};
use std::task::{Context, Poll};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::task::futures::TaskLocalFuture;

use super::Lease;
use crate::error::LostReason;
use crate::mode::Mode;

tokio::task_local! {
    /// The reentrant leases whose scope the running code is in, innermost first.
    static HELD: Chain;
}

/// A list of scopes, innermost first; cheap to clone.
#[derive(Clone, Default)]
pub(crate) struct Chain(Option<Arc<Link>>);

/// One scope: a lease, and the turn its re-entries take.
pub(crate) struct Link {
    lease: Arc<Lease>,
    /// The handle the lease belongs to (its `Inner`'s address): the same key locked through
    /// another handle is another lock.
    handle: usize,
    /// One permit: the re-entries made in this scope hold it in turn.
    turn: Arc<Semaphore>,
    parent: Chain,
}

impl Chain {
    /// The chain of the code running now (empty outside every scope).
    fn current() -> Self {
        HELD.try_with(Clone::clone).unwrap_or_default()
    }

    fn links(&self) -> impl Iterator<Item = &Link> {
        std::iter::successors(self.0.as_deref(), |link| link.parent.0.as_deref())
    }
}

pin_project_lite::pin_project! {
    /// The future of [`LockGuard::scope`](crate::LockGuard::scope): `work`, run inside the
    /// lock's scope, so that reentrant acquisitions it makes re-enter the lock.
    #[must_use = "futures do nothing unless polled"]
    pub struct Scoped<F> {
        #[pin]
        state: State<F>,
    }
}

pin_project_lite::pin_project! {
    #[project = StateProj]
    #[project_replace = StateReplace]
    enum State<F> {
        /// Not polled yet: the scopes around it are read at the first poll, where it runs.
        Start { lease: Arc<Lease>, handle: usize, turn: Arc<Semaphore>, work: F },
        Running { #[pin] inner: TaskLocalFuture<Chain, F> },
        Taken,
    }
}

impl<F: Future> Future for Scoped<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let mut state = self.project().state;
        if let StateProj::Start { .. } = state.as_mut().project() {
            let StateReplace::Start {
                lease,
                handle,
                turn,
                work,
            } = state.as_mut().project_replace(State::Taken)
            else {
                unreachable!("the state was Start")
            };
            let parent = Chain::current();
            let chain = if lease.reentrant {
                Chain(Some(Arc::new(Link {
                    lease,
                    handle,
                    turn,
                    parent,
                })))
            } else {
                parent
            };
            state.set(State::Running {
                inner: HELD.scope(chain, work),
            });
        }
        match state.project() {
            StateProj::Running { inner } => inner.poll(cx),
            _ => unreachable!("a scoped future is polled after completion"),
        }
    }
}

impl<F> std::fmt::Debug for Scoped<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scoped").finish_non_exhaustive()
    }
}

/// `work` inside `lease`'s scope (see the module docs), whose re-entries take `turn`: the
/// turn of the guard that opened the scope, shared by every scope it opens, so that
/// `join!(guard.scope(a), guard.scope(b))` re-enter one at a time as the siblings inside one
/// scope do. A lease that is not reentrant adds nothing: `work` runs in the scopes of wherever
/// it is polled.
pub(crate) fn scope<F: Future>(
    lease: &Arc<Lease>,
    handle: usize,
    turn: &Arc<Semaphore>,
    work: F,
) -> Scoped<F> {
    Scoped {
        state: State::Start {
            lease: Arc::clone(lease),
            handle,
            turn: Arc::clone(turn),
            work,
        },
    }
}

/// A guard's turn for the re-entries of the scopes it opens (one permit).
pub(crate) fn new_turn() -> Arc<Semaphore> {
    Arc::new(Semaphore::new(1))
}

/// Where a reentrant acquisition may re-enter: the innermost scope the caller runs in of a
/// lease of `key` in `mode` through `handle` that is still held.
pub(crate) struct Reentry {
    lease: Arc<Lease>,
    turn: Arc<Semaphore>,
    /// The mode the lease was held in when found: a downgrade since then makes it another
    /// lock for this request ([`enter`](Self::enter)).
    mode: Option<Mode>,
}

/// The scope to re-enter, if the caller runs in one (see [`Reentry`]).
pub(crate) fn find(handle: usize, key: &str, mode: Option<Mode>) -> Option<Reentry> {
    Chain::current()
        .links()
        .find(|link| {
            link.handle == handle
                && link.lease.keys.lock == key
                && link.lease.mode() == mode
                && link.lease.holds.load(Ordering::Acquire) > 0
        })
        .map(|link| Reentry {
            lease: Arc::clone(&link.lease),
            turn: Arc::clone(&link.turn),
            mode,
        })
}

impl Reentry {
    /// This scope's turn, at once if no other re-entry of it holds it.
    pub(crate) fn try_turn(&self) -> Option<OwnedSemaphorePermit> {
        Arc::clone(&self.turn).try_acquire_owned().ok()
    }

    /// This scope's turn, once the re-entry holding it is done.
    pub(crate) async fn turn(&self) -> Option<OwnedSemaphorePermit> {
        Arc::clone(&self.turn).acquire_owned().await.ok()
    }

    /// The lease this scope re-enters.
    pub(crate) fn lease(&self) -> &Arc<Lease> {
        &self.lease
    }

    /// One more hold on the lease, which the caller owns from then on (a re-entered guard
    /// gives it back when dropped, releasing the lock if it was the last). `None` if the last
    /// hold was already given back (the lock is released, or being released), or if the lease
    /// was downgraded since it was found ([`find`]): a body written for the mode asked for
    /// must not run beside the holders the weaker mode lets in, so the caller acquires afresh,
    /// as for a re-entry that starts after the downgrade.
    ///
    /// The mode is read after the hold is counted, and the downgrade counts the holds after
    /// it changed the mode (`downgrade.rs`), each behind a sequentially consistent fence:
    /// a re-entry racing a downgrade from another thread either sees the weaker mode here or
    /// is seen there (and the downgrade is refused as shared). When it sees the weaker mode
    /// and every other guard went meanwhile, its hold is the last: the lease is returned
    /// marked lost (released), and the caller, which checks the lease before handing out the
    /// guard, drops that guard, which releases the lock, and acquires afresh.
    pub(crate) fn enter(self) -> Option<Arc<Lease>> {
        self.lease
            .holds
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |holds| {
                (holds > 0).then_some(holds + 1)
            })
            .ok()?;
        fence(Ordering::SeqCst);
        if self.lease.mode() == self.mode {
            return Some(self.lease);
        }
        // Downgraded since it was found: give the hold back, unless it is the last one.
        let given_back = self
            .lease
            .holds
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |holds| {
                (holds > 1).then_some(holds - 1)
            })
            .is_ok();
        if given_back {
            return None;
        }
        self.lease.mark_lost(LostReason::Released);
        Some(self.lease)
    }
}

/// Drops one hold on `lease`; `true` if it was the last (the lock must be released).
pub(crate) fn leave(lease: &Lease) -> bool {
    lease.holds.fetch_sub(1, Ordering::AcqRel) == 1
}
