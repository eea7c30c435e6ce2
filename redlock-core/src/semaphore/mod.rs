//! The counting semaphore: K permits on a resource, each the plain lock of one of K slots,
//! with the slots' Lua. Its attempt ([`permit`]) is a [`Protocol`] the kernel's loop runs;
//! its waiters queue and are woken as the lock's are.

mod node;
mod permit;

use std::sync::atomic::AtomicUsize;

use permit::{NO_PREFERENCE, PermitAsk};

use crate::error::{InvalidInput, LockError};
use crate::kernel::acquire::attempt::{AttemptFailure, Granted};
use crate::kernel::acquire::{Ask, Protocol};
use crate::kernel::guard::LockGuard;
use crate::kernel::redlock::Redlock;
use crate::keys::PermitSlots;
use crate::options::{LockOptions, MAX_PERMITS};
use crate::telemetry::Acquisition;

/// A counting semaphore: at most [`permits`](Self::permits) holders of `resource` at once,
/// across every handle and process (at most 3 exports per tenant). Made by
/// [`Redlock::semaphore`]; cheap to clone.
///
/// A semaphore of K permits is K plain locks on the resource's slots (bookkeeping keys of
/// the resource); a permit is the lock of one slot, granted by a majority within its
/// validity like the lock (distlock spec, steps 1–5), so extension, auto-extension, the lost
/// signal and release work as for the lock, through the [`LockGuard`] it returns. Each
/// attempt is one round: every node takes the first free slot for the request, and the
/// request holds the slot a majority gave it. A semaphore of 1 permit is a lock on its one
/// slot: it does not exclude the resource's plain lock, which is another key. Waiters queue
/// and are woken by a release as the lock's are. See the guide,
/// [`guide::semaphore`](crate::guide::semaphore).
///
/// Every handle on the resource must use the same number of permits: the first attempt
/// stores it on the nodes, and an attempt with another number is refused with
/// [`LockError::PermitsMismatch`] while permits taken with the stored one live
/// ([`Redlock::semaphore_permits`] reads it).
///
/// ```no_run
/// # async fn run(redlock: redlock_core::Redlock) -> Result<(), redlock_core::LockError> {
/// let exports = redlock.semaphore("exports:tenant-7", 3);
/// let permit = exports.acquire().await?;
/// // ... at most 3 of these run at once, fleet-wide ...
/// permit.release().await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct Semaphore {
    redlock: Redlock,
    resource: String,
    permits: u32,
}

impl Redlock {
    /// The counting semaphore of `permits` permits on `resource`: see [`Semaphore`]. Nothing
    /// is sent, and nothing is checked, until [`Semaphore::acquire`].
    pub fn semaphore(&self, resource: impl Into<String>, permits: u32) -> Semaphore {
        Semaphore {
            redlock: self.clone(),
            resource: resource.into(),
            permits,
        }
    }
}

impl Semaphore {
    /// The resource the permits are of.
    pub fn resource(&self) -> &str {
        &self.resource
    }

    /// How many permits the semaphore has.
    pub fn permits(&self) -> u32 {
        self.permits
    }

    /// Acquires one permit with the handle's default options, without the fencing and
    /// re-entry a permit cannot give (a handle may default to them): see
    /// [`acquire_with`](Self::acquire_with).
    ///
    /// # Cancel safety
    /// As [`acquire_with`](Self::acquire_with).
    ///
    /// # Errors
    /// As [`acquire_with`](Self::acquire_with).
    pub async fn acquire(&self) -> Result<LockGuard, LockError> {
        let options = self
            .redlock
            .options()
            .clone()
            .fencing(false)
            .reentrant(false);
        self.acquire_with(&options).await
    }

    /// Acquires one permit with `options`: the ttl, retries, wait deadline, auto-extension and
    /// minimum hold work as for [`Redlock::lock_with`]. Dropping the future mid-attempt still
    /// releases every slot the attempt took.
    ///
    /// # Cancel safety
    /// Dropping the future stops the acquisition: every slot the attempt under way took is released
    /// in the background (on the handle's runtime), and a waiter leaves the queue. Nothing is held
    /// afterwards.
    ///
    /// # Errors
    /// - [`LockError::Invalid`] (nothing is sent): a semaphore of 0 permits
    ///   ([`InvalidInput::ZeroPermits`]) or above [`MAX_PERMITS`]
    ///   ([`InvalidInput::PermitsAboveCap`]); options a permit cannot give
    ///   ([`InvalidInput::PermitsWith`]: fencing, re-entry); as for
    ///   [`Redlock::lock_with`] otherwise;
    /// - [`LockError::Busy`]: every permit stayed held on every attempt;
    /// - [`LockError::PermitsMismatch`]: the semaphore is in use with another number of
    ///   permits (at the first attempt that finds it; nothing is taken);
    /// - otherwise as [`Redlock::lock_with`].
    pub async fn acquire_with(&self, options: &LockOptions) -> Result<LockGuard, LockError> {
        check(self.permits, options)?;
        let redlock = &self.redlock;
        let key = redlock.admit(&self.resource, options)?;
        let (queue, slots) = redlock.permit_keys(key, self.permits);
        let permit = Permit {
            slots,
            prefer: AtomicUsize::new(NO_PREFERENCE),
        };
        redlock
            .acquire(&self.resource, queue, permit, options)
            .await
    }
}

/// The checks of a semaphore of `permits` permits, asked for with `options`: between 1 and
/// [`MAX_PERMITS`], and none of the options a permit cannot give: fencing would give one slot's holders a register of their
/// own, not the resource's; re-entry would count a permit held by the caller's scope as the
/// request's, which a semaphore of one permit per request cannot tell apart.
fn check(permits: u32, options: &LockOptions) -> Result<(), InvalidInput> {
    if permits == 0 {
        return Err(InvalidInput::ZeroPermits);
    }
    if permits > MAX_PERMITS {
        return Err(InvalidInput::PermitsAboveCap {
            permits,
            max: MAX_PERMITS,
        });
    }
    let option = if options.fencing {
        "fencing"
    } else if options.reentrant {
        "reentrant"
    } else {
        return Ok(());
    };
    Err(InvalidInput::PermitsWith { option })
}

/// A request for one permit: the semaphore's slots, and the slot to try first after a split
/// round ([`PermitAsk::prefer`]).
struct Permit {
    slots: PermitSlots,
    prefer: AtomicUsize,
}

impl Protocol for Permit {
    fn permits(&self) -> Option<u32> {
        u32::try_from(self.slots.slots.len()).ok()
    }

    fn alive(&self) -> Option<&str> {
        Some(&self.slots.alive)
    }

    fn attempt<'a>(
        &'a self,
        redlock: &'a Redlock,
        ask: Ask<'a>,
        acquisition: &'a mut Acquisition,
    ) -> impl Future<Output = Result<Granted, AttemptFailure>> + Send + 'a {
        let asking = PermitAsk {
            waiter: ask.waiter.get(),
            queued: ask.queued,
            alive_ms: ask.alive_ms,
            prefer: &self.prefer,
        };
        redlock.attempt_permit(
            ask.keys,
            &self.slots,
            ask.token,
            ask.options,
            asking,
            acquisition,
        )
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn permits_are_bounded_and_refuse_what_a_permit_cannot_give() {
        let base = LockOptions::default();
        assert_eq!(check(1, &base), Ok(()));
        assert_eq!(check(MAX_PERMITS, &base), Ok(()));
        assert_eq!(check(0, &base), Err(InvalidInput::ZeroPermits));
        assert_eq!(
            check(MAX_PERMITS + 1, &base),
            Err(InvalidInput::PermitsAboveCap {
                permits: MAX_PERMITS + 1,
                max: MAX_PERMITS
            })
        );
        let refused = |options: LockOptions, option| {
            assert_eq!(
                check(3, &options),
                Err(InvalidInput::PermitsWith { option })
            );
        };
        refused(base.clone().fencing(true), "fencing");
        refused(base.clone().reentrant(true), "reentrant");
        // What a permit can give as a lock does.
        let extended = base
            .auto_extend(true)
            .lock_at_least_for(Duration::from_secs(1));
        assert_eq!(check(3, &extended), Ok(()));
    }
}
