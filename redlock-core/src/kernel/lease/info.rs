//! The public views of a lease: [`LockInfo`] and its [`LostSignal`].

use std::future::{Future, IntoFuture};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::time::Instant;

use super::Lease;
use crate::error::{LockError, LostReason};
use crate::mode::Mode;

/// Fires when a held lock can no longer be trusted, *before* its validity runs out: an
/// extension was refused by a majority, the validity deadline less the lost margin
/// ([`LockOptions::lost_margin`](crate::LockOptions::lost_margin)) came with no confirmed
/// extension, or the lock was released. Once fired it stays fired.
///
/// Await it directly (it is [`IntoFuture`]: the future owns the signal, so
/// `guard.lost()` needs no binding), or borrow it with [`cancelled`](Self::cancelled) to await
/// it again. Cheap to clone; no background task runs for it: the deadline is a timer in the
/// awaiting future, re-armed when an extension moves it.
///
/// ```no_run
/// # async fn run(redlock: redlock_core::Redlock) -> Result<(), redlock_core::LockError> {
/// use redlock_core::LockOptions;
///
/// let options = redlock.options().clone().auto_extend(true);
/// let guard = redlock.lock_with("report:daily", &options).await?;
/// tokio::select! {
///     () = guard.lost() => eprintln!("lock lost: {:?}; stopping", guard.info().lost().reason()),
///     () = async { /* the long work */ } => {}
/// }
/// guard.release().await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct LostSignal {
    lease: Arc<Lease>,
}

impl LostSignal {
    pub(crate) fn new(lease: Arc<Lease>) -> Self {
        Self { lease }
    }

    /// Completes as soon as the lock can no longer be trusted. Cancel-safe. To await a
    /// signal you do not keep, await the signal itself ([`IntoFuture`]).
    ///
    /// # Cancel safety
    /// Cancel safe: it only waits for the signal.
    pub async fn cancelled(&self) {
        self.lease.lost().await;
    }

    /// `true` once the signal has fired (checked against the deadline now).
    pub fn is_lost(&self) -> bool {
        self.lease.is_lost()
    }

    /// Why it fired, once it has.
    pub fn reason(&self) -> Option<LostReason> {
        self.lease.check().err()
    }

    /// The instant the signal fires unless an extension is confirmed first: the validity
    /// deadline less the lost margin. Once it has fired, the instant it fired: its lost
    /// deadline when it was lost by it ([`LostReason::Expired`]), the instant it was seen
    /// otherwise (released, an extension refused), so never later than now.
    pub fn deadline(&self) -> Instant {
        self.lease.fired_at()
    }

    /// Completes when the signal fires, with the error that work stopped by it returns:
    /// [`LockError::Lost`] with the resource and the reason. Cancel-safe; owns the signal.
    ///
    /// # Cancel safety
    /// Cancel safe: it only waits for the signal.
    pub async fn into_error(self) -> LockError {
        self.lease.lost().await;
        LockError::Lost {
            resource: self.lease.resource.clone(),
            reason: self.reason().unwrap_or(LostReason::Expired),
        }
    }
}

impl IntoFuture for LostSignal {
    type Output = ();
    type IntoFuture = LostFuture;

    /// The signal as a future that owns it: `guard.lost().await`, or `() = guard.lost()` in
    /// `tokio::select!`, without a binding that outlives the statement.
    fn into_future(self) -> LostFuture {
        LostFuture {
            inner: Box::pin(async move { self.lease.lost().await }),
        }
    }
}

/// The future of an awaited [`LostSignal`]: completes as soon as the lock can no longer be
/// trusted. Cancel-safe; owns the signal, so it is `'static` and can be spawned or stored.
#[must_use = "futures do nothing unless polled"]
pub struct LostFuture {
    inner: Pin<Box<dyn Future<Output = ()> + Send>>,
}

impl Future for LostFuture {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        self.inner.as_mut().poll(cx)
    }
}

impl std::fmt::Debug for LostFuture {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LostFuture").finish_non_exhaustive()
    }
}

/// A cheap, cloneable view of a held lock — resource, fencing token, validity, lost signal —
/// to pass to the work the lock guards (e.g. the fencing token to storage). It does not own
/// the lock: the [`LockGuard`](crate::LockGuard) does.
#[derive(Debug, Clone)]
pub struct LockInfo {
    lease: Arc<Lease>,
}

impl LockInfo {
    pub(crate) fn new(lease: Arc<Lease>) -> Self {
        Self { lease }
    }

    /// The locked resource.
    pub fn resource(&self) -> &str {
        &self.lease.resource
    }

    /// Every resource the lock holds: the one resource, or, for a lock of several
    /// ([`Redlock::lock_many`](crate::Redlock::lock_many)), each of them, sorted.
    pub fn resources(&self) -> Vec<&str> {
        std::iter::once(self.lease.resource.as_str())
            .chain(
                self.lease
                    .also()
                    .iter()
                    .map(|(resource, _)| resource.as_str()),
            )
            .collect()
    }

    /// The fencing token, if the lock was taken with
    /// [`LockOptions::fencing`](crate::LockOptions::fencing): strictly greater than every
    /// earlier holder's. Pass it to storage, which must refuse writes with a token lower than
    /// one it has seen.
    pub fn fencing_token(&self) -> Option<u64> {
        self.lease.fencing_token
    }

    /// The mode the lock is held in; `None` for the plain exclusive lock.
    pub fn mode(&self) -> Option<Mode> {
        self.lease.mode()
    }

    /// For a permit of a counting semaphore
    /// ([`Redlock::semaphore`](crate::Redlock::semaphore)): the semaphore's permits;
    /// `None` for a lock.
    pub fn permits(&self) -> Option<u32> {
        self.lease.permit().map(|permit| permit.permits)
    }

    /// For a permit of a counting semaphore: the slot held, from 0 to
    /// [`permits`](Self::permits) − 1 (the permit is the plain lock of that slot); `None`
    /// for a lock.
    pub fn slot(&self) -> Option<u32> {
        self.lease.permit().map(|permit| permit.slot)
    }

    /// The instant the lock stops being valid, on tokio's clock (so a paused clock in a test
    /// moves it): the acquisition's (or the last
    /// confirmed extension's) start + ttl − drift (distlock spec, step 4). Once the lock is
    /// lost — released, an extension refused by a majority, or its lost deadline passed (see
    /// [`LostSignal`]) — it is the instant that was seen, so it is never later than now.
    pub fn valid_until(&self) -> Instant {
        self.lease.valid_until()
    }

    /// Validity left now: zero once the lock is lost, released or expired.
    pub fn remaining_validity(&self) -> Duration {
        self.lease.remaining_validity()
    }

    /// `true` while the lock is held and trusted: not released, not lost, validity left.
    /// The same answer as [`LockGuard::is_valid`](crate::LockGuard::is_valid).
    pub fn is_valid(&self) -> bool {
        !self.remaining_validity().is_zero()
    }

    /// The lost signal.
    pub fn lost(&self) -> LostSignal {
        LostSignal::new(Arc::clone(&self.lease))
    }
}
