//! Leases: what a holder knows about its lock, shared by its guard, its public views
//! ([`LockInfo`], [`LostSignal`]), the ledger of held leases (with reentrancy), extension and
//! the auto-extension driver.

mod downgrade;
mod extend;
mod info;
mod ledger;
mod reentrant;
mod watchdog;

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::time::Duration;
use tokio::time::Instant;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::error::{LockError, LostReason};
use crate::kernel::masters::Masters;
use crate::keys::ResourceKeys;
use crate::mode::Mode;
use crate::options::LockOptions;
use crate::telemetry::{self, Class};
use crate::token::Token;

pub(crate) use downgrade::downgrade;
pub(crate) use extend::extend;
pub use info::{LockInfo, LostFuture, LostSignal};
pub(crate) use ledger::{Finish, Ledger};
pub use reentrant::Scoped;
pub(crate) use reentrant::{Reentry, find as find_reentry, new_turn, scope};

/// Auto-extension settings of one lease.
#[derive(Debug, Clone, Copy)]
pub(crate) struct AutoExtend {
    pub(crate) fraction: f64,
    pub(crate) hold_until: Option<Instant>,
    pub(crate) max_extensions: Option<u32>,
}

/// The mode a lease is held in, which [`LockGuard::downgrade`](crate::LockGuard::downgrade)
/// weakens while every view of the lock reads it.
#[derive(Debug)]
pub(crate) struct HeldMode {
    /// The place in [`Mode::ALL`] of the mode it is held in now.
    now: AtomicU8,
    taken: Mode,
}

impl HeldMode {
    /// Taken in `mode`.
    pub(crate) fn new(mode: Mode) -> Self {
        Self {
            now: AtomicU8::new(Self::code(mode)),
            taken: mode,
        }
    }

    /// The mode it is held in now.
    pub(crate) fn get(&self) -> Mode {
        let code = usize::from(self.now.load(Ordering::Acquire));
        Mode::ALL.get(code).copied().unwrap_or(self.taken)
    }

    /// The mode it was taken in (before any downgrade).
    pub(crate) fn taken(&self) -> Mode {
        self.taken
    }

    /// From now on held in `mode`.
    pub(crate) fn set(&self, mode: Mode) {
        self.now.store(Self::code(mode), Ordering::Release);
    }

    /// The mode's place in [`Mode::ALL`].
    fn code(mode: Mode) -> u8 {
        let place = Mode::ALL.iter().position(|&other| other == mode);
        place.and_then(|i| u8::try_from(i).ok()).unwrap_or(u8::MAX)
    }
}

/// What a lease holds beyond its resource's key, by the kind of lock that took it: the part
/// only that kind reads, so that no lease carries another kind's fields.
#[derive(Debug)]
pub(crate) enum Held {
    /// A plain lock: of one resource (`also` empty), or of several
    /// ([`Redlock::lock_many`](crate::Redlock::lock_many)), where `also` holds the resources
    /// after the lease's own, with their keys, all signed by its token and extended and
    /// released together.
    Keys {
        /// The set's other resources and their keys.
        also: Vec<(String, ResourceKeys)>,
    },
    /// A lock in a mode ([`Redlock::lock_mode_with`](crate::Redlock::lock_mode_with)).
    Mode {
        /// The mode it is held in; a downgrade changes it.
        mode: HeldMode,
        /// The request's waiter marker: its release removes the request's waiter entries.
        marker: String,
    },
    /// One permit of a semaphore ([`Redlock::semaphore`](crate::Redlock::semaphore)): the
    /// lease's keys are its slot's.
    Permit(Permit),
}

impl Held {
    /// A plain lock of one resource.
    pub(crate) const ONE: Self = Self::Keys { also: Vec::new() };

    /// Held in `mode`, by the waiter `marker`.
    pub(crate) fn mode(mode: Mode, marker: String) -> Self {
        Self::Mode {
            mode: HeldMode::new(mode),
            marker,
        }
    }
}

/// What a holder knows about its lock.
#[derive(Debug)]
pub(crate) struct Lease {
    pub(crate) id: u64,
    pub(crate) resource: String,
    /// The class its metrics are labelled by (see `telemetry`).
    pub(crate) class: Class,
    /// The lock key and its bookkeeping keys.
    pub(crate) keys: ResourceKeys,
    pub(crate) token: Token,
    /// What it holds beyond its resource's key: a set's other keys, a mode, or a permit.
    pub(crate) held: Held,
    /// The ttl sent at acquisition (and by default at each extension).
    pub(crate) ttl: Duration,
    pub(crate) drift_factor: f64,
    pub(crate) lost_margin: Duration,
    pub(crate) fencing_token: Option<u64>,
    pub(crate) auto_extend: Option<AutoExtend>,
    /// Whether code in its scope may re-enter it ([`reentrant`]).
    pub(crate) reentrant: bool,
    /// When the attempt that took it started (monotonic clock).
    pub(crate) acquired_at: Instant,
    /// Until when a release keeps the key instead of deleting it
    /// ([`LockOptions::lock_at_least_for`]).
    pub(crate) keep_until: Option<Instant>,
    /// How long the key had been busy without a window for foreign clients when it was
    /// granted (the longest streak a granting node reported; see `keys::busy`).
    pub(crate) busy_at_grant: Duration,
    /// The label written beside the lock, and its key
    /// ([`RedlockBuilder::owner`](crate::RedlockBuilder::owner)); refreshed by extensions.
    pub(crate) owner: Option<Owner>,
    /// Guards sharing this lease (re-entries + 1); 0 once the last is done.
    pub(crate) holds: AtomicUsize,
    /// The monotonic instant the lock stops being valid; moved forward by extensions.
    valid_until: watch::Sender<Instant>,
    lost: CancellationToken,
    reason: OnceLock<LostReason>,
    /// When it was seen lost (released, refused, expired): the views' validity ends there.
    ended: OnceLock<Instant>,
}

/// A holder's label beside its lock: the label and the key it is written at
/// ([`keys::owner`](crate::keys::owner)).
#[derive(Debug, Clone)]
pub(crate) struct Owner {
    pub(crate) key: String,
    pub(crate) label: std::sync::Arc<str>,
}

/// Which permit of a semaphore a lease holds ([`Redlock::semaphore`](crate::Redlock::semaphore)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Permit {
    /// The semaphore's permits.
    pub(crate) permits: u32,
    /// The slot held, from 0.
    pub(crate) slot: u32,
}

/// What a successful attempt establishes (Redlock steps 3–4, and the fencing round).
#[derive(Debug)]
pub(crate) struct Grant {
    /// When the attempt started (monotonic clock, read before the first `SET`).
    pub(crate) started: Instant,
    /// start + ttl − drift.
    pub(crate) valid_until: Instant,
    pub(crate) fencing_token: Option<u64>,
    /// The longest streak of hand-overs a granting node reported ([`Lease::busy_at_grant`]).
    pub(crate) busy: Duration,
    /// What the lease will hold beyond its resource's key ([`Lease::held`]).
    pub(crate) held: Held,
    /// The key of the owner label the attempt wrote with its grant (a native attempt by a
    /// handle with a label); `None` when none was written.
    pub(crate) labelled: Option<String>,
}

impl Grant {
    /// The grant of a plain lock of one resource, valid from `started` to `valid_until`: no
    /// fencing token, mode, permit or other resources; the attempt of each primitive adds its
    /// own with struct update syntax.
    pub(crate) fn new(started: Instant, valid_until: Instant) -> Self {
        Self {
            started,
            valid_until,
            fencing_token: None,
            busy: Duration::ZERO,
            held: Held::ONE,
            labelled: None,
        }
    }
}

impl Lease {
    /// The lease of `grant`, taken with `options`, as lease `id` of its handle.
    pub(crate) fn new(
        id: u64,
        resource: &str,
        class: &Class,
        keys: ResourceKeys,
        token: Token,
        grant: Grant,
        options: &LockOptions,
    ) -> Self {
        let acquired_at = grant.started;
        let auto_extend = options.auto_extend.then(|| AutoExtend {
            fraction: options.extend_fraction,
            // A cap too far for the clock (`Duration::MAX`) is no cap.
            hold_until: options
                .max_hold
                .and_then(|max| acquired_at.checked_add(max)),
            max_extensions: options.max_extensions,
        });
        Self {
            id,
            resource: resource.to_owned(),
            class: class.clone(),
            keys,
            token,
            held: grant.held,
            ttl: options.sent_ttl(),
            drift_factor: options.drift_factor,
            lost_margin: options.lost_margin_in_effect(),
            fencing_token: grant.fencing_token,
            auto_extend,
            reentrant: options.reentrant,
            acquired_at,
            keep_until: options
                .lock_at_least_for
                .and_then(|at_least| acquired_at.checked_add(at_least)),
            busy_at_grant: grant.busy,
            owner: None,
            holds: AtomicUsize::new(1),
            valid_until: watch::Sender::new(grant.valid_until),
            lost: CancellationToken::new(),
            reason: OnceLock::new(),
            ended: OnceLock::new(),
        }
    }

    /// [`LockError::Lost`] for this lease, with `reason`.
    pub(crate) fn lost_error(&self, reason: LostReason) -> LockError {
        LockError::Lost {
            resource: self.resource.clone(),
            reason,
        }
    }

    /// The error of a holder's round (an extension, a downgrade) that fewer than a quorum of
    /// `masters` confirmed: lost, and marked so, when more than N − quorum refused it (no
    /// quorum can hold the lock any more); otherwise [`LockError::Unavailable`] (the nodes
    /// that did not answer may still hold it: the holder may try again).
    pub(crate) fn short_of_quorum(
        &self,
        masters: &Masters,
        refused: usize,
        outcomes: crate::outcome::Outcomes,
    ) -> LockError {
        if refused > masters.len() - masters.quorum {
            let reason = LostReason::Refused(outcomes);
            self.mark_lost(reason.clone());
            return self.lost_error(reason);
        }
        LockError::Unavailable {
            resource: self.resource.clone(),
            attempts: 1,
            quorum: masters.quorum,
            outcomes,
        }
    }

    /// Every lock key the lease holds: its resource's, then those of [`also`](Self::also).
    pub(crate) fn lock_keys(&self) -> Vec<&str> {
        std::iter::once(self.keys.lock.as_str())
            .chain(self.also().iter().map(|(_, keys)| keys.lock.as_str()))
            .collect()
    }

    /// A lock of several resources: the resources after its own, with their keys; empty for
    /// every other lease.
    pub(crate) fn also(&self) -> &[(String, ResourceKeys)] {
        match &self.held {
            Held::Keys { also } => also,
            Held::Mode { .. } | Held::Permit(_) => &[],
        }
    }

    /// The mode it is held in now; `None` for a plain lock or a permit.
    pub(crate) fn mode(&self) -> Option<Mode> {
        match &self.held {
            Held::Mode { mode, .. } => Some(mode.get()),
            Held::Keys { .. } | Held::Permit(_) => None,
        }
    }

    /// The mode it was taken in (before any downgrade); `None` for a plain lock or a permit.
    pub(crate) fn mode_taken(&self) -> Option<Mode> {
        match &self.held {
            Held::Mode { mode, .. } => Some(mode.taken()),
            Held::Keys { .. } | Held::Permit(_) => None,
        }
    }

    /// A mode lock's waiter marker; empty for every other lease.
    pub(crate) fn marker(&self) -> &str {
        match &self.held {
            Held::Mode { marker, .. } => marker,
            Held::Keys { .. } | Held::Permit(_) => "",
        }
    }

    /// The permit it holds; `None` for a lock.
    pub(crate) fn permit(&self) -> Option<Permit> {
        match self.held {
            Held::Permit(permit) => Some(permit),
            Held::Keys { .. } | Held::Mode { .. } => None,
        }
    }

    /// The lease, labelled `label` (none: unchanged) at `key`, or at its own key
    /// ([`keys::owner`](crate::keys::owner)) when none is given.
    pub(crate) fn with_owner(
        mut self,
        label: Option<&std::sync::Arc<str>>,
        key: Option<String>,
    ) -> Self {
        self.owner = label.map(|label| Owner {
            key: key.unwrap_or_else(|| crate::keys::owner(&self.keys.lock, self.token.expose())),
            label: std::sync::Arc::clone(label),
        });
        self
    }

    /// The validity deadline the nodes were last confirmed to give (start + ttl − drift of
    /// the acquisition or the last confirmed extension), lost or not.
    pub(crate) fn deadline(&self) -> Instant {
        *self.valid_until.borrow()
    }

    /// The instant the lock stops being valid, as every public view reports it: the
    /// [`deadline`](Self::deadline) while the lock is trusted; once it is lost (released,
    /// an extension refused, the lost deadline passed), the instant it was seen lost, so that
    /// no view claims validity left on a lock that is gone.
    pub(crate) fn valid_until(&self) -> Instant {
        let deadline = self.deadline();
        match self.check() {
            Ok(()) => deadline,
            Err(_) => self
                .ended
                .get()
                .map_or(deadline, |ended| deadline.min(*ended)),
        }
    }

    /// Validity left now: zero once lost or expired.
    pub(crate) fn remaining_validity(&self) -> Duration {
        self.valid_until().saturating_duration_since(Instant::now())
    }

    /// How long the key has been busy without a window for foreign clients, by this
    /// holder's count: the streak when it was granted, plus its hold so far.
    pub(crate) fn busy(&self) -> Duration {
        self.busy_at_grant
            .saturating_add(self.acquired_at.elapsed())
    }

    /// When the lost signal fires unless an extension is confirmed first.
    pub(crate) fn lost_at(&self) -> Instant {
        self.deadline()
            .checked_sub(self.lost_margin)
            .unwrap_or(self.acquired_at)
    }

    /// When the lost signal fires unless an extension is confirmed first; once it fired, the
    /// instant it did (the lost deadline for an expiry, the instant it was seen otherwise).
    pub(crate) fn fired_at(&self) -> Instant {
        let lost_at = self.lost_at();
        match self.check() {
            Ok(()) => lost_at,
            Err(_) => self
                .ended
                .get()
                .map_or(lost_at, |ended| lost_at.min(*ended)),
        }
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
        let _first = self.ended.set(Instant::now().min(self.lost_at()));
        let reported = reason.clone();
        if self.reason.set(reason).is_ok() {
            telemetry::lost(
                &self.resource,
                &self.class,
                &reported,
                self.acquired_at.elapsed(),
            );
        }
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
    pub(crate) async fn lost(&self) {
        let mut validity = self.valid_until.subscribe();
        loop {
            if self.is_lost() {
                return;
            }
            let deadline = *validity.borrow_and_update() - self.lost_margin;
            tokio::select! {
                biased;
                () = self.lost.cancelled() => return,
                () = tokio::time::sleep_until(deadline) => {}
                // The sender lives in `self`, so this only reports a moved deadline.
                _ = validity.changed() => {}
            }
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A lease granted now for `options`, valid for `valid` from now.
    pub(crate) fn lease(options: &LockOptions, valid: Duration) -> Lease {
        let now = Instant::now();
        let grant = Grant::new(now, now + valid);
        let keys = ResourceKeys::new("lock:", "lock:r".to_owned());
        Lease::new(
            0,
            "r",
            &Class::from("r"),
            keys,
            Token::generate().unwrap(),
            grant,
            options,
        )
    }

    #[test]
    fn a_lease_is_lost_at_its_validity_less_the_margin() {
        // Valid for 10 s, lost 9.9 s before that: lost after 100 ms, long before it expires.
        let options = LockOptions::default()
            .ttl(Duration::from_secs(20))
            .lost_margin(Duration::from_millis(9_900));
        let lease = lease(&options, Duration::from_secs(10));
        assert_eq!(lease.check(), Ok(()));
        assert!(!lease.is_lost());
        std::thread::sleep(Duration::from_millis(150));
        assert_eq!(lease.check(), Err(LostReason::Expired));
        assert!(lease.is_lost());
        // The nodes keep it for 10 s; its views say it ended when it was seen lost.
        assert!(lease.deadline() > Instant::now() + Duration::from_secs(5));
        assert!(lease.valid_until() <= Instant::now());
    }

    #[test]
    fn the_first_reason_is_kept_and_extensions_never_move_back() {
        let lease = lease(&LockOptions::default(), Duration::from_secs(10));
        let until = lease.valid_until();
        lease.extend_to(until - Duration::from_secs(5));
        assert_eq!(lease.valid_until(), until);
        lease.extend_to(until + Duration::from_secs(5));
        assert_eq!(lease.valid_until(), until + Duration::from_secs(5));
        lease.mark_lost(LostReason::Released);
        lease.mark_lost(LostReason::Expired);
        assert_eq!(lease.check(), Err(LostReason::Released));
        // A lost lease stays lost, even when an extension lands after.
        lease.extend_to(until + Duration::from_secs(60));
        assert_eq!(lease.check(), Err(LostReason::Released));
    }

    #[test]
    fn the_busy_streak_grows_with_the_hold() {
        let lease = lease(&LockOptions::default(), Duration::from_secs(10));
        std::thread::sleep(Duration::from_millis(5));
        assert!(lease.busy() >= Duration::from_millis(5));
    }
}
