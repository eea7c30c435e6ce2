//! [`LockGuard`]: a held lock, extended and released explicitly, or released when dropped.

use std::sync::atomic::Ordering;
use std::sync::{Arc, OnceLock};
use std::time::Duration;
use tokio::time::Instant;

use std::future::Future;

use tokio::sync::Semaphore;

use crate::error::{LockError, LostReason};
use crate::kernel::lease::{self, Finish, Lease, LockInfo, LostSignal, Scoped};
use crate::kernel::redlock::Redlock;
use crate::kernel::release::{Released, report_unconfirmed};
use crate::mode::Mode;

use crate::token::Token;

/// A lock held on a quorum of nodes.
///
/// Release it with [`release`](Self::release). If the guard is dropped instead (early return,
/// panic, cancelled future), the release is still sent from a task spawned on the current
/// tokio runtime — never by blocking — and tracked so that
/// [`Redlock::shutdown`] waits for it.
///
/// The lock is only guaranteed until [`valid_until`](Self::valid_until): work past it may
/// overlap with the next holder (distlock spec, "Safety arguments"). Extend it with
/// [`extend`](Self::extend) or [`LockOptions::auto_extend`](crate::LockOptions::auto_extend),
/// and stop the work when [`lost`](Self::lost) fires.
#[derive(Debug)]
#[must_use = "dropping the guard releases the lock at once"]
pub struct LockGuard {
    redlock: Redlock,
    lease: Option<Arc<Lease>>,
    /// A re-entry's turn in its scope, held until the guard goes.
    _turn: Option<tokio::sync::OwnedSemaphorePermit>,
    /// The turn the re-entries of this guard's scopes take, made by the first scope.
    scope_turn: OnceLock<Arc<Semaphore>>,
}

impl LockGuard {
    pub(crate) fn new(redlock: Redlock, lease: Arc<Lease>) -> Self {
        Self {
            redlock,
            lease: Some(lease),
            _turn: None,
            scope_turn: OnceLock::new(),
        }
    }

    /// A guard re-entering `lease`, holding its turn in the scope it re-entered.
    pub(crate) fn reentered(
        redlock: Redlock,
        lease: Arc<Lease>,
        turn: tokio::sync::OwnedSemaphorePermit,
    ) -> Self {
        Self {
            redlock,
            lease: Some(lease),
            _turn: Some(turn),
            scope_turn: OnceLock::new(),
        }
    }

    /// The handle this guard's lock was taken through.
    pub(crate) fn handle(&self) -> &Redlock {
        &self.redlock
    }

    /// This guard's lease.
    pub(crate) fn lease_ref(&self) -> &Arc<Lease> {
        self.lease()
    }

    /// Consumes the guard without releasing its lock or giving back its hold: for a lease
    /// already taken out of the ledger ([`detach`](Self::detach)).
    pub(crate) fn forget(mut self) {
        self.lease = None;
    }

    fn lease(&self) -> &Arc<Lease> {
        // Only `release` and `drop` take the lease, and both consume the guard.
        self.lease
            .as_ref()
            .unwrap_or_else(|| unreachable!("lease taken before the guard was consumed"))
    }

    /// The locked resource (for a lock of several, the first of [`resources`](Self::resources)).
    pub fn resource(&self) -> &str {
        &self.lease().resource
    }

    /// Every resource the lock holds: the one resource, or, for a lock of several
    /// ([`Redlock::lock_many`]), each of them, sorted.
    pub fn resources(&self) -> Vec<&str> {
        let lease = self.lease();
        std::iter::once(lease.resource.as_str())
            .chain(lease.also().iter().map(|(resource, _)| resource.as_str()))
            .collect()
    }

    /// The Redis key (key prefix + resource).
    pub fn key(&self) -> &str {
        &self.lease().keys.lock
    }

    /// The token signing this lock on every node. Treat it as a secret.
    pub fn token(&self) -> &Token {
        &self.lease().token
    }

    /// The mode the lock is held in ([`Redlock::lock_mode_with`](crate::Redlock::lock_mode_with)); `None`
    /// for the plain exclusive lock.
    pub fn mode(&self) -> Option<Mode> {
        self.lease().mode()
    }

    /// For a permit of a counting semaphore
    /// ([`Redlock::semaphore`](crate::Redlock::semaphore)): the semaphore's permits;
    /// `None` for a lock. See [`LockInfo::slot`](crate::LockInfo::slot) for the slot held.
    pub fn permits(&self) -> Option<u32> {
        self.lease().permit().map(|permit| permit.permits)
    }

    /// The ttl the lock was taken with.
    pub fn ttl(&self) -> Duration {
        self.lease().ttl
    }

    /// The instant the lock stops being valid, on tokio's clock (so a paused clock in a test
    /// moves it): the acquisition's (or the last
    /// confirmed extension's) start + ttl − drift (distlock spec, step 4). Once the lock is
    /// lost — an extension refused by a majority, its lost deadline passed, or
    /// [`Redlock::release_all`] released it — it is the instant that was seen, never later
    /// than now.
    pub fn valid_until(&self) -> Instant {
        self.lease().valid_until()
    }

    /// Validity left now: zero once the lock is lost or expired.
    pub fn remaining_validity(&self) -> Duration {
        self.lease().remaining_validity()
    }

    /// `true` while the lock is trusted: validity left, and its lost signal has not fired
    /// ([`lost`](Self::lost)).
    pub fn is_valid(&self) -> bool {
        !self.remaining_validity().is_zero()
    }

    /// The fencing token, if the lock was taken with
    /// [`LockOptions::fencing`](crate::LockOptions::fencing). See
    /// [`LockInfo::fencing_token`].
    pub fn fencing_token(&self) -> Option<u64> {
        self.lease().fencing_token
    }

    /// The signal that fires when this lock can no longer be trusted (before it expires).
    pub fn lost(&self) -> LostSignal {
        LostSignal::new(Arc::clone(self.lease()))
    }

    /// A cloneable view of this lock (resource, fencing token, validity, lost signal) to hand
    /// to the guarded work.
    pub fn info(&self) -> LockInfo {
        LockInfo::new(Arc::clone(self.lease()))
    }

    /// Guards sharing this lock: 1, plus one per reentrant acquisition still alive
    /// ([`LockOptions::reentrant`](crate::LockOptions::reentrant)).
    pub fn hold_count(&self) -> usize {
        self.lease().holds.load(Ordering::Acquire)
    }

    /// Runs `work` inside this lock's scope: while it runs, a reentrant acquisition of the same
    /// resource in the same mode through the same handle (`LockOptions::reentrant(true)`, as
    /// `#[redlock]` does by default) re-enters this lock instead of waiting for it. Only `work`
    /// and what it awaits are inside: a sibling future of the same task, or a task `work`
    /// spawns, is another holder. A lock taken without `reentrant` adds no scope. The
    /// re-entries of every scope of this guard take turns: each holds the turn until its guard
    /// is dropped (even one kept after its scope ended), and the next waits for it within its
    /// own retry budget, as for any holder.
    ///
    /// ```no_run
    /// # async fn run(redlock: redlock_core::Redlock) -> Result<(), redlock_core::LockError> {
    /// use redlock_core::LockOptions;
    ///
    /// let options = LockOptions::default().reentrant(true);
    /// let guard = redlock.lock_with("ledger", &options).await?;
    /// guard
    ///     .scope(async {
    ///         // Re-enters: the same lock, hold count 2, released with the inner guard's drop.
    ///         let inner = redlock.lock_with("ledger", &options).await?;
    ///         assert_eq!(inner.hold_count(), 2);
    ///         Ok::<_, redlock_core::LockError>(())
    ///     })
    ///     .await?;
    /// guard.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn scope<F: Future>(&self, work: F) -> Scoped<F> {
        let turn = self.scope_turn.get_or_init(lease::new_turn);
        lease::scope(self.lease(), self.redlock.id(), turn, work)
    }

    /// Runs `work` until it completes or this lock's lost signal fires, whichever is first
    /// (the signal wins a tie: the work may have overlapped another holder). The lock is not
    /// released here.
    ///
    /// # Cancel safety
    /// Dropping the future drops `work`; the lock is left as it is (held, and released when its
    /// guard is).
    ///
    /// # Errors
    /// [`LockError::Lost`] if the signal fired first; `work` was dropped.
    pub async fn until_lost<T>(&self, work: impl Future<Output = T>) -> Result<T, LockError> {
        tokio::select! {
            biased;
            error = self.lost().into_error() => Err(error),
            output = work => Ok(output),
        }
    }

    /// Extends the lock to `ttl` from now on every node at once (compare-and-pexpire; distlock
    /// spec, "Extending the lock"), and returns the new validity deadline.
    ///
    /// The extension counts only if a quorum confirmed it before the lost deadline; its
    /// validity follows the acquisition rule: start + ttl − drift. A key that is gone is never
    /// re-created, and an extension never shortens anything: with a `ttl` shorter than the
    /// time the lock has left, the keys keep their expiry and the returned deadline is the
    /// current one (to give a lock up early, release it).
    ///
    /// # Cancel safety
    /// Dropped mid-round, an extension may have reached some nodes: they keep the longer expiry,
    /// and the lock's validity stays what was last confirmed, never more. Extending again is safe.
    ///
    /// # Errors
    /// - [`LockError::Lost`]: a majority no longer holds our token, the lost deadline passed
    ///   first, or the lock was released; the lost signal fires;
    /// - [`LockError::Unavailable`]: too few nodes answered to decide; the lock stays valid
    ///   until its current deadline, and the extension can be tried again;
    /// - [`LockError::Invalid`]: `ttl` is zero, above the cap, or leaves no validity (nothing
    ///   is sent).
    pub async fn extend(&self, ttl: Duration) -> Result<Instant, LockError> {
        lease::extend(self.redlock.masters(), self.lease(), ttl).await
    }

    /// Moves this lock to a weaker mode ([`Mode::weaker_than`]) on every node at once, without
    /// a gap: each node converts the holder's entry in place, in one script, so the resource
    /// is never free in between. Write → read is `downgrade(Mode::ProtectedRead)` on a lock
    /// taken in [`Mode::Exclusive`] or [`Mode::ProtectedWrite`]; waiters the weaker mode
    /// admits are woken. The validity, the lost signal and the auto-extension stay as they
    /// are.
    ///
    /// Every view of the lock ([`mode`](Self::mode), [`LockInfo::mode`]) says `mode` from
    /// the moment the downgrade is sent, whatever its outcome: a node that converted admits
    /// holders compatible with `mode` only, and nodes that did not only exclude more. There
    /// is no upgrade (it could deadlock two upgraders): release and lock again.
    ///
    /// ```no_run
    /// # async fn run(redlock: redlock_core::Redlock) -> Result<(), redlock_core::LockError> {
    /// use std::time::Duration;
    /// use redlock_core::Mode;
    ///
    /// let guard = redlock.lock_mode("catalog", Mode::Exclusive, Duration::from_secs(10)).await?;
    /// // ... write the catalog, then keep reading it while other readers come in ...
    /// guard.downgrade(Mode::ProtectedRead).await?;
    /// guard.release().await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// Dropped mid-round, some nodes may hold the weaker mode and others the stronger one; every
    /// view already says the weaker mode, which is what a holder may rely on. Releasing releases
    /// both.
    ///
    /// # Errors
    /// - [`LockError::Invalid`]: `mode` is not weaker than the mode held, or the lock is the
    ///   plain lock, held in no mode ([`InvalidInput::NotADowngrade`]); re-entries share it
    ///   ([`InvalidInput::Shared`]). Nothing is sent.
    /// - [`LockError::Lost`]: the lock can no longer be trusted, or a majority no longer
    ///   holds it; the lost signal fires;
    /// - [`LockError::Unavailable`]: too few nodes answered to decide; the lock stays valid,
    ///   held in `mode` or stronger on each node.
    ///
    /// [`InvalidInput::NotADowngrade`]: crate::InvalidInput::NotADowngrade
    /// [`InvalidInput::Shared`]: crate::InvalidInput::Shared
    pub async fn downgrade(&self, mode: Mode) -> Result<(), LockError> {
        let lease = self.lease();
        if self.hold_count() > 1 {
            return Err(crate::InvalidInput::Shared {
                action: "downgraded",
            }
            .into());
        }
        let channel = if self.redlock.inner().waiters.is_some() {
            lease.keys.waiters()
        } else {
            ""
        };
        lease::downgrade(self.redlock.masters(), lease, mode, channel).await
    }

    /// Releases the lock on every node with the compare-and-delete script and reports whether
    /// it was still held on a quorum ([`Released::was_held`]). A guard whose lock another
    /// guard sharing it still holds (a re-entry, or the guard whose scope it re-entered) sends
    /// nothing ([`Released::kept`]).
    ///
    /// Decided at quorum: it returns once a quorum confirmed the delete, without waiting for
    /// the slowest node. Every node's command is sent on the first poll, so dropping this
    /// future afterwards does not cut the release short.
    ///
    /// # Cancel safety
    /// The guard is consumed and every node's command is sent at the first poll: dropping the
    /// future then does not cut the release short; dropped before its first poll, the guard is
    /// dropped and the lock released in the background, as a dropped guard's is.
    ///
    /// # Errors
    /// [`LockError::ReleaseUnconfirmed`] when fewer than a quorum of nodes answered; the keys
    /// then expire with their ttl. [`LockError::Lost`] (reason `Released`) when
    /// [`Redlock::release_all`] already released it, or, for a re-entered guard whose lock
    /// another guard still holds, when the lock can no longer be trusted.
    pub async fn release(mut self) -> Result<Released, LockError> {
        let Some(lease) = self.lease.take() else {
            unreachable!("lease taken before the guard was consumed")
        };
        match self.redlock.inner().ledger.finish(&lease) {
            // Another guard keeps the lock; one that can no longer be trusted is not reported
            // as held.
            Finish::Kept => {
                return match lease.check() {
                    Ok(()) => Ok(Released::still_held(
                        self.redlock.node_count(),
                        self.redlock.quorum(),
                    )),
                    Err(reason) => Err(LockError::Lost {
                        resource: lease.resource.clone(),
                        reason,
                    }),
                };
            }
            Finish::AlreadyReleased => {
                return Err(LockError::Lost {
                    resource: lease.resource.clone(),
                    reason: LostReason::Released,
                });
            }
            Finish::Release => {}
        }
        // Inline: the commands are handed to the clients on the first poll, so a caller that
        // stops waiting does not cut the release short.
        let released = self.redlock.release_lease(&lease, "explicit").await;
        if released.answered < released.quorum {
            report_unconfirmed(&lease, released.answered, released.quorum);
            return Err(LockError::ReleaseUnconfirmed {
                resource: lease.resource.clone(),
                answered: released.answered,
                nodes: released.nodes,
                quorum: released.quorum,
            });
        }
        Ok(released)
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        if let Some(lease) = self.lease.take()
            && let Finish::Release = self.redlock.inner().ledger.finish(&lease)
        {
            // Without a runtime the release cannot run; it warns itself.
            let _spawned = self.redlock.spawn_release(lease);
        }
    }
}
