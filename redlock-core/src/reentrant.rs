//! Reentrancy (seed 001) that follows the call chain, not the task.
//!
//! A lock taken with [`LockOptions::reentrant`](crate::LockOptions::reentrant) can be
//! re-entered only by code running inside its holder's scope: the future given to
//! [`LockGuard::scope`](crate::LockGuard::scope) (which `#[redlock]`, `with_lock` and the axum
//! layer wrap around the locked body) and everything that future awaits. The scope is a
//! `tokio::task_local!`, so two sibling futures of one task (`join!`, `select!`,
//! `for_each_concurrent`, a server polling several requests in one task) are two holders that
//! exclude each other, as two tasks do; and work the body spawns with `tokio::spawn` runs
//! outside the scope, so it is another holder too (it waits for the lock, or is refused).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll};

use tokio::task::futures::TaskLocalFuture;

use crate::error::LostReason;
use crate::lease::Lease;
use crate::mode::Mode;

tokio::task_local! {
    /// The reentrant leases whose scope the running code is in, innermost first.
    static HELD: Chain;
}

/// A list of scopes, innermost first; cheap to clone.
#[derive(Clone, Default)]
pub(crate) struct Chain(Option<Arc<Link>>);

pub(crate) struct Link {
    lease: Arc<Lease>,
    /// The handle the lease belongs to (its `Inner`'s address): the same key locked through
    /// another handle is another lock.
    handle: usize,
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
        inner: TaskLocalFuture<Chain, F>,
    }
}

impl<F: Future> Future for Scoped<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        self.project().inner.poll(cx)
    }
}

impl<F> std::fmt::Debug for Scoped<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scoped").finish_non_exhaustive()
    }
}

/// Runs `work` inside `lease`'s scope: a reentrant acquisition of the same key and mode through
/// the same handle, made while `work` runs, re-enters `lease`. A lease that is not reentrant
/// adds nothing (`work` keeps the scopes it is in when this is called).
pub(crate) fn scope<F: Future>(lease: &Arc<Lease>, handle: usize, work: F) -> Scoped<F> {
    let parent = Chain::current();
    let chain = if lease.reentrant {
        Chain(Some(Arc::new(Link {
            lease: Arc::clone(lease),
            handle,
            parent,
        })))
    } else {
        parent
    };
    Scoped {
        inner: HELD.scope(chain, work),
    }
}

/// The lease of `key` in `mode` through `handle` whose scope the caller runs in, with one
/// more hold; `Err` if that lease can no longer be trusted (nothing is added then); `None` if
/// there is none (or it was released meanwhile).
pub(crate) fn enter(
    handle: usize,
    key: &str,
    mode: Option<Mode>,
) -> Option<Result<Arc<Lease>, LostReason>> {
    let chain = Chain::current();
    let lease = chain
        .links()
        .find(|link| link.handle == handle && link.lease.key == key && link.lease.mode == mode)
        .map(|link| Arc::clone(&link.lease))?;
    if let Err(reason) = lease.check() {
        return Some(Err(reason));
    }
    // Only while another guard still holds it: a released lease is gone, not re-entered.
    lease
        .holds
        .fetch_update(Ordering::AcqRel, Ordering::Acquire, |holds| {
            (holds > 0).then_some(holds + 1)
        })
        .ok()?;
    Some(Ok(lease))
}

/// Drops one hold on `lease`; `true` if it was the last (the lock must be released).
pub(crate) fn leave(lease: &Lease) -> bool {
    lease.holds.fetch_sub(1, Ordering::AcqRel) == 1
}
