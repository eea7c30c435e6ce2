//! [`Lease`]: what a holder knows about its lock, shared by its guard, its [`LockInfo`] views,
//! its [`LostSignal`] and the auto-extension driver.

use std::future::{Future, IntoFuture};
use std::pin::Pin;
use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::error::LostReason;
use crate::mode::Mode;
use crate::token::Token;

/// Auto-extension settings of one lease.
#[derive(Debug, Clone, Copy)]
pub(crate) struct AutoExtend {
    pub(crate) fraction: f64,
    pub(crate) hold_until: Option<Instant>,
    pub(crate) max_extensions: Option<u32>,
}

/// What a holder knows about its lock.
#[derive(Debug)]
pub(crate) struct Lease {
    pub(crate) id: u64,
    pub(crate) resource: String,
    pub(crate) key: String,
    pub(crate) token: Token,
    /// The mode it is held in; `None` for the plain exclusive lock.
    pub(crate) mode: Option<Mode>,
    /// A mode request's waiter marker (empty for the plain lock): its release removes the
    /// request's waiter entries.
    pub(crate) marker: String,
    /// The ttl sent at acquisition (and by default at each extension).
    pub(crate) ttl: Duration,
    pub(crate) drift_factor: f64,
    pub(crate) lost_margin: Duration,
    pub(crate) fencing_token: Option<u64>,
    pub(crate) auto_extend: Option<AutoExtend>,
    /// Whether code in its scope may re-enter it ([`crate::reentrant`]).
    pub(crate) reentrant: bool,
    /// When the attempt that took it started (monotonic clock).
    pub(crate) acquired_at: Instant,
    /// How long the key had been busy without a window for foreign clients when it was
    /// granted (the longest streak a granting node reported; see `keys::busy`).
    pub(crate) busy_at_grant: Duration,
    /// Guards sharing this lease (re-entries + 1); 0 once the last is done.
    pub(crate) holds: AtomicUsize,
    /// The monotonic instant the lock stops being valid; moved forward by extensions.
    valid_until: watch::Sender<Instant>,
    lost: CancellationToken,
    reason: OnceLock<LostReason>,
}

/// What [`Lease::new`] needs beyond the acquisition's options.
pub(crate) struct LeaseParts {
    pub(crate) id: u64,
    pub(crate) resource: String,
    pub(crate) key: String,
    pub(crate) token: Token,
    pub(crate) marker: String,
    pub(crate) valid_until: Instant,
    pub(crate) fencing_token: Option<u64>,
    /// The streak the granting nodes reported ([`Lease::busy_at_grant`]).
    pub(crate) busy: Duration,
}

impl Lease {
    pub(crate) fn new(
        parts: LeaseParts,
        options: &crate::LockOptions,
        acquired_at: Instant,
    ) -> Self {
        let auto_extend = options.get_auto_extend().then(|| AutoExtend {
            fraction: options.get_extend_fraction(),
            // A cap too far for the clock (`Duration::MAX`) is no cap.
            hold_until: options
                .get_max_hold()
                .and_then(|max| acquired_at.checked_add(max)),
            max_extensions: options.get_max_extensions(),
        });
        Self {
            id: parts.id,
            resource: parts.resource,
            key: parts.key,
            token: parts.token,
            mode: options.get_mode(),
            marker: parts.marker,
            ttl: options.sent_ttl(),
            drift_factor: options.get_drift_factor(),
            lost_margin: options.get_lost_margin(),
            fencing_token: parts.fencing_token,
            auto_extend,
            reentrant: options.get_reentrant(),
            acquired_at,
            busy_at_grant: parts.busy,
            holds: AtomicUsize::new(1),
            valid_until: watch::Sender::new(parts.valid_until),
            lost: CancellationToken::new(),
            reason: OnceLock::new(),
        }
    }

    pub(crate) fn valid_until(&self) -> Instant {
        *self.valid_until.borrow()
    }

    /// How long the key has been busy without a window for foreign clients, by this
    /// holder's count: the streak when it was granted, plus its hold so far.
    pub(crate) fn busy(&self) -> Duration {
        self.busy_at_grant
            .saturating_add(self.acquired_at.elapsed())
    }

    /// When the lost signal fires unless an extension is confirmed first.
    pub(crate) fn lost_at(&self) -> Instant {
        self.valid_until() - self.lost_margin
    }

    /// Moves the validity forward (never back) after a confirmed extension.
    pub(crate) fn extend_to(&self, until: Instant) {
        self.valid_until.send_if_modified(|current| {
            let later = until > *current;
            if later {
                *current = until;
            }
            later
        });
    }

    /// Fires the lost signal; the first reason given is kept.
    pub(crate) fn mark_lost(&self, reason: LostReason) {
        let _first = self.reason.set(reason);
        self.lost.cancel();
    }

    /// `Err(reason)` once the lock can no longer be trusted: the signal fired, or the lost
    /// deadline has passed (which fires it now).
    pub(crate) fn check(&self) -> Result<(), LostReason> {
        if !self.lost.is_cancelled() && Instant::now() >= self.lost_at() {
            self.mark_lost(LostReason::Expired);
        }
        if self.lost.is_cancelled() {
            return Err(self.reason.get().cloned().unwrap_or(LostReason::Expired));
        }
        Ok(())
    }

    pub(crate) fn is_lost(&self) -> bool {
        self.check().is_err()
    }

    /// Completes once the lock can no longer be trusted.
    async fn lost(&self) {
        let mut validity = self.valid_until.subscribe();
        loop {
            if self.is_lost() {
                return;
            }
            let deadline = *validity.borrow_and_update() - self.lost_margin;
            tokio::select! {
                () = self.lost.cancelled() => return,
                () = tokio::time::sleep_until(deadline.into()) => {}
                // The sender lives in `self`, so this only reports a moved deadline.
                _ = validity.changed() => {}
            }
        }
    }
}

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
    /// deadline less the lost margin.
    pub fn deadline(&self) -> Instant {
        self.lease.lost_at()
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

    /// The fencing token, if the lock was taken with
    /// [`LockOptions::fencing`](crate::LockOptions::fencing): strictly greater than every
    /// earlier holder's. Pass it to storage, which must refuse writes with a token lower than
    /// one it has seen.
    pub fn fencing_token(&self) -> Option<u64> {
        self.lease.fencing_token
    }

    /// The mode the lock is held in; `None` for the plain exclusive lock.
    pub fn mode(&self) -> Option<Mode> {
        self.lease.mode
    }

    /// The monotonic instant the lock stops being valid (moved forward by extensions).
    pub fn valid_until(&self) -> Instant {
        self.lease.valid_until()
    }

    /// Validity left now; zero once expired.
    pub fn remaining_validity(&self) -> Duration {
        self.valid_until().saturating_duration_since(Instant::now())
    }

    /// The lost signal.
    pub fn lost(&self) -> LostSignal {
        LostSignal::new(Arc::clone(&self.lease))
    }
}
