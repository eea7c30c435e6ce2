//! Acquisition: the public entry points, the checks made before anything is sent, re-entry,
//! and turning a grant into a held lease. The retry and wait loop is in [`wait`], what it
//! does after each attempt in [`decide`], one attempt (distlock steps 1–5) in [`attempt`],
//! the fencing round in [`fence`].

mod attempt;
mod decide;
mod fence;
pub(crate) use fence::fence;
mod many;
mod permit;
mod wait;

use many::ManyKeys;
use wait::Target;

use std::sync::Arc;
use std::time::{Duration, Instant};

use tracing::Instrument;

use crate::error::LostReason;
use crate::error::{InvalidInput, LockError};
use crate::guard::LockGuard;
use crate::keys::{ResourceKeys, validate_resource};
use crate::lease::{Grant, Lease, Reentry, find_reentry};
use crate::mode::Mode;
use crate::options::LockOptions;
use crate::outcome::Outcomes;
use crate::redlock::Redlock;
use crate::telemetry::Acquisition;
use crate::token::Token;

/// The longest local wait for a sibling re-entry (`tokio::time::timeout` takes any duration,
/// but a year is as good as forever here).
const MAX_LOCAL_WAIT: Duration = Duration::from_secs(365 * 24 * 60 * 60);

impl Redlock {
    /// Acquires `resource` with the default options. See [`lock_with`](Self::lock_with).
    ///
    /// # Errors
    /// As [`lock_with`](Self::lock_with).
    pub async fn lock(&self, resource: &str) -> Result<LockGuard, LockError> {
        self.lock_with(resource, self.options()).await
    }

    /// Acquires `resource` in `mode` for `ttl`, with the handle's other default options: see
    /// [`Mode`] for the compatibility table and [`LockOptions::mode`] for how mode locks
    /// relate to the plain lock. [`lock_with`](Self::lock_with) and
    /// `options.mode(..)` give every other option.
    ///
    /// ```no_run
    /// # async fn run(redlock: redlock_core::Redlock) -> Result<(), redlock_core::LockError> {
    /// use std::time::{Duration, Instant};
    /// use redlock_core::Mode;
    ///
    /// // Many readers may hold "catalog" together; a writer (EX) waits for them.
    /// let reader = redlock.lock_mode("catalog", Mode::ProtectedRead, Duration::from_secs(5)).await?;
    /// reader.release().await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// As [`lock_with`](Self::lock_with); [`LockError::Busy`] when holders in an incompatible
    /// mode (or incompatible waiters ahead) kept it on every attempt.
    pub async fn lock_mode(
        &self,
        resource: &str,
        mode: Mode,
        ttl: Duration,
    ) -> Result<LockGuard, LockError> {
        let options = self.options().clone().mode(mode).ttl(ttl);
        self.lock_with(resource, &options).await
    }

    /// Acquires `resource` as a reader ([`Mode::ProtectedRead`]) with the default options:
    /// shared with other readers, excluded by writers.
    ///
    /// # Errors
    /// As [`lock_mode`](Self::lock_mode).
    pub async fn read_lock(&self, resource: &str) -> Result<LockGuard, LockError> {
        let options = self.options().clone().mode(Mode::ProtectedRead);
        self.lock_with(resource, &options).await
    }

    /// Acquires `resource` as a writer ([`Mode::Exclusive`]) with the default options: alone
    /// but for NL holders. A writer that asked first is not passed by readers that come after
    /// it.
    ///
    /// # Errors
    /// As [`lock_mode`](Self::lock_mode).
    pub async fn write_lock(&self, resource: &str) -> Result<LockGuard, LockError> {
        let options = self.options().clone().mode(Mode::Exclusive);
        self.lock_with(resource, &options).await
    }

    /// Acquires `resource` by the Redlock algorithm (distlock spec, steps 1–5).
    ///
    /// Each attempt draws a fresh token, reads the monotonic clock, sends `SET key token NX PX
    /// ttl` to all nodes at once (each bounded by the per-node timeout), and stops as soon as
    /// the outcome is decided: a quorum granted, or too many refused or failed for a quorum to
    /// be possible. The lock is held if a quorum granted it and `ttl − elapsed − drift` is
    /// positive. Otherwise the attempt's key is released on *every* node — including those
    /// that timed out, since a timed-out `SET` can still land — and the next attempt follows a
    /// random delay, until the retries or the wait deadline run out.
    ///
    /// Dropping the returned future mid-attempt still releases what the attempt took.
    ///
    /// With [`LockOptions::fencing`], the lock also gets a fencing token once a fencing quorum
    /// confirmed it (see the crate docs);
    /// with [`LockOptions::auto_extend`], the handle's driver keeps it extended; with
    /// [`LockOptions::reentrant`], code running inside the scope of a guard holding the
    /// resource ([`LockGuard::scope`]) gets a guard sharing its lock at once.
    ///
    /// # Errors
    /// - [`LockError::Invalid`]: empty or over-long resource, a resource or key prefix
    ///   holding a NUL byte, bad ttl or drift factor (nothing is sent);
    /// - [`LockError::Busy`]: another holder kept the resource on every attempt;
    /// - [`LockError::Unavailable`]: too few nodes answered (with fencing: fewer than a
    ///   fencing quorum confirmed the token; its `quorum` says how many were needed);
    /// - [`LockError::NoValidity`]: a quorum granted it but too late to be valid;
    /// - [`LockError::ShuttingDown`]: [`begin_shutdown`](Self::begin_shutdown) was called;
    /// - [`LockError::Lost`]: a reentrant acquisition found the task's lock already lost.
    pub async fn lock_with(
        &self,
        resource: &str,
        options: &LockOptions,
    ) -> Result<LockGuard, LockError> {
        validate_resource(resource)?;
        options.validate()?;
        self.masters().check_quarantine(options.get_ttl())?;
        if self.is_shutting_down() {
            return Err(LockError::ShuttingDown);
        }
        let key = self.key_for(resource);
        if key.contains('\0') {
            // A key prefix holding NUL: the lock's bookkeeping keys.
            return Err(InvalidInput::ReservedResource.into());
        }
        if options.get_reentrant()
            && let Some(reentry) = find_reentry(self.id(), &key, options.get_mode())
            && let Some(guard) = self.reenter(resource, reentry, options).await?
        {
            return Ok(guard);
        }
        let mut acquisition =
            Acquisition::start(resource, options, self.node_count(), self.quorum());
        let span = acquisition.span().clone();
        // A semaphore's permit: the queue's keys, and the slots' (`permits` only).
        let (keys, target) = match options.get_permits() {
            Some(permits) => {
                let (queue, slots) = self.permit_keys(key, permits);
                (queue, Target::Permit(slots))
            }
            None => (self.resource_keys(key), Target::Lock),
        };
        let result = self
            .acquire_loop(resource, keys, target, options, &mut acquisition)
            .instrument(span)
            .await;
        acquisition.end(result.as_ref().map(|_| ()));
        result
    }

    /// Acquires every resource of `resources` at once with the default options: see
    /// [`lock_many_with`](Self::lock_many_with).
    ///
    /// # Errors
    /// As [`lock_many_with`](Self::lock_many_with).
    pub async fn lock_many<S: AsRef<str>>(&self, resources: &[S]) -> Result<LockGuard, LockError> {
        let options = self.options().clone().reentrant(false);
        self.lock_many_with(resources, &options).await
    }

    /// Acquires several resources at once, all or none, under one guard: a transfer that
    /// locks `account:{from}` and `account:{to}`. Each is the plain exclusive lock of its
    /// resource, so a lock of one of them (`lock`, `#[redlock]`, the axum layer, a foreign
    /// client's `SET NX`) excludes this one and is excluded by it.
    ///
    /// On each node one script takes every resource's key or none (a key already there
    /// refuses the whole attempt, and nothing is written), and the lock is held when a quorum
    /// of nodes took them all within the validity (distlock spec, steps 1–5, the quorum
    /// counted over nodes). The guard extends, auto-extends and releases every key together;
    /// an extension counts a node only where every key still holds its token. Repeated
    /// resources count once; one resource is [`lock_with`](Self::lock_with).
    ///
    /// **No deadlock, for any overlap of sets**: an attempt never keeps part of its set while
    /// it waits (each node takes all or none, and a failed attempt releases what it took on
    /// every node before the next), so nobody holds some resources while waiting for others.
    /// Two requests for overlapping sets that meet split the nodes and both fail; they attempt
    /// again after random delays (the retry jitter), which tell them apart as they do two
    /// contenders for one resource: no livelock beyond that of one lock. A lock of several
    /// does not join the resources' waiter queues: it attempts at its retry delays (`retry_*`,
    /// `wait_timeout`), and a release of one of its resources wakes it no sooner.
    ///
    /// ```no_run
    /// # async fn run(redlock: redlock_core::Redlock) -> Result<(), redlock_core::LockError> {
    /// let guard = redlock.lock_many(&["account:1", "account:2"]).await?;
    /// assert_eq!(guard.resources(), ["account:1", "account:2"]);
    /// // ... move the money ...
    /// guard.release().await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// - [`LockError::Invalid`]: no resource, more than [`MAX_RESOURCES`](crate::MAX_RESOURCES),
    ///   a bad resource, bad options, or options a lock of several cannot give
    ///   ([`InvalidInput::ManyWith`]: a mode, permits, fencing, re-entry, a minimum hold);
    ///   nothing is sent;
    /// - otherwise as [`lock_with`](Self::lock_with): [`LockError::Busy`] when a holder of one
    ///   of them kept it on every attempt.
    pub async fn lock_many_with<S: AsRef<str>>(
        &self,
        resources: &[S],
        options: &LockOptions,
    ) -> Result<LockGuard, LockError> {
        let mut names: Vec<&str> = resources.iter().map(AsRef::as_ref).collect();
        names.sort_unstable();
        names.dedup();
        if names.is_empty() {
            return Err(InvalidInput::NoResources.into());
        }
        if names.len() > crate::MAX_RESOURCES {
            return Err(InvalidInput::TooManyResources {
                len: names.len(),
                max: crate::MAX_RESOURCES,
            }
            .into());
        }
        let refused = if options.get_mode().is_some() {
            Some("mode")
        } else if options.get_permits().is_some() {
            Some("permits")
        } else if options.get_fencing() {
            Some("fencing")
        } else if options.get_reentrant() {
            Some("reentrant")
        } else if options.get_lock_at_least_for().is_some() {
            Some("lock_at_least_for")
        } else {
            None
        };
        if let Some(option) = refused {
            return Err(InvalidInput::ManyWith { option }.into());
        }
        if let [one] = names.as_slice() {
            return self.lock_with(one, options).await;
        }
        let mut many = Vec::with_capacity(names.len());
        for name in &names {
            validate_resource(name)?;
            let key = self.key_for(name);
            if key.contains('\0') {
                return Err(InvalidInput::ReservedResource.into());
            }
            many.push(((*name).to_owned(), self.resource_keys(key)));
        }
        options.validate()?;
        self.masters().check_quarantine(options.get_ttl())?;
        if self.is_shutting_down() {
            return Err(LockError::ShuttingDown);
        }
        let first = names[0];
        let mut acquisition = Acquisition::start(first, options, self.node_count(), self.quorum());
        let span = acquisition.span().clone();
        let keys = many[0].1.clone();
        let target = Target::Many(ManyKeys { resources: many });
        let result = self
            .acquire_loop(first, keys, target, options, &mut acquisition)
            .instrument(span)
            .await;
        acquisition.end(result.as_ref().map(|_| ()));
        result
    }

    /// Re-enters the lease of the scope the caller runs in: waits for the scope's turn (a
    /// sibling re-entry may hold it) within the request's own budget, adds a hold, and gives
    /// the request what it asks for or an error, never less: a longer ttl than the validity
    /// left is an extension round; fencing, auto-extension or a minimum hold the lease was
    /// taken without, or auto-extension capped sooner (`max_hold`, `max_extensions`) than
    /// asked, is [`InvalidInput::ReentryAsksMore`]. `Ok(None)`: the lease was released
    /// meanwhile, so the caller acquires afresh.
    async fn reenter(
        &self,
        resource: &str,
        reentry: Reentry,
        options: &LockOptions,
    ) -> Result<Option<LockGuard>, LockError> {
        let lease = reentry.lease();
        let missing = if options.get_fencing() && lease.fencing_token.is_none() {
            Some("fencing")
        } else if options.get_auto_extend() && lease.auto_extend.is_none() {
            Some("auto_extend")
        } else if let (true, Some(kept)) = (options.get_auto_extend(), lease.auto_extend) {
            // Auto-extended both: the lease's caps must reach as far as the request's.
            let asked_until = options
                .get_max_hold()
                .and_then(|max| Instant::now().checked_add(max));
            if kept
                .hold_until
                .is_some_and(|until| asked_until.is_none_or(|asked| until < asked))
            {
                Some("max_hold")
            } else if kept.max_extensions.is_some_and(|kept| {
                options
                    .get_max_extensions()
                    .is_none_or(|asked| kept < asked)
            }) {
                Some("max_extensions")
            } else {
                None
            }
        } else if let Some(at_least) = options.get_lock_at_least_for()
            && Instant::now()
                .checked_add(at_least)
                .is_none_or(|until| lease.keep_until.is_none_or(|kept| kept < until))
        {
            Some("lock_at_least_for")
        } else {
            None
        };
        if let Some(option) = missing {
            return Err(InvalidInput::ReentryAsksMore { option }.into());
        }
        // Another re-entry of this scope (a sibling future of the body) holds the turn:
        // wait for it as for any holder, within the request's own budget.
        let turn = match reentry.try_turn() {
            Some(turn) => Some(turn),
            None => match local_wait(options) {
                Some(budget) => tokio::time::timeout(budget, reentry.turn())
                    .await
                    .ok()
                    .flatten(),
                None => None,
            },
        };
        let Some(turn) = turn else {
            return Err(LockError::Busy {
                resource: resource.to_owned(),
                attempts: 1,
                quorum: self.quorum(),
                outcomes: Outcomes::default(),
            });
        };
        let Some(lease) = reentry.enter() else {
            // Released meanwhile: acquire afresh.
            return Ok(None);
        };
        // The hold is the guard's from here: dropping it on any way out below gives the hold
        // back, and releases the lock if it was the last (a lost lock the outer guard left
        // meanwhile is not stranded in the ledger).
        let guard = LockGuard::reentered(self.clone(), Arc::clone(&lease), turn);
        if let Err(reason) = lease.check() {
            drop(guard);
            return match reason {
                LostReason::Released => Ok(None),
                reason => Err(LockError::Lost {
                    resource: resource.to_owned(),
                    reason,
                }),
            };
        }
        // A longer ttl than the validity left: extend the lock to the ttl asked for, as the
        // nodes would have given a new lock (an extension never shortens it).
        let drift = crate::timing::drift(options.sent_ttl(), options.get_drift_factor());
        if lease.remaining_validity() < options.sent_ttl().saturating_sub(drift) {
            guard.extend(options.get_ttl()).await?;
        }
        Ok(Some(guard))
    }

    /// Turns a grant into a held lease: recorded in the ledger (and handed to the
    /// auto-extension driver), owned by the returned guard.
    pub(crate) fn register(
        &self,
        resource: &str,
        class: &str,
        keys: ResourceKeys,
        token: Token,
        options: &LockOptions,
        grant: Grant,
    ) -> LockGuard {
        let ledger = &self.inner().ledger;
        let lease = Lease::new(
            ledger.next_id(),
            resource,
            class,
            keys,
            token,
            grant,
            options,
        )
        .with_owner(self.inner().owner.as_ref());
        let lease = Arc::new(lease);
        ledger.hold(&lease, self.masters());
        if let Some(owner) = &lease.owner {
            // Not awaited: the label is for operators, and the lock is held without it.
            let keys = (lease.keys.lock.as_str(), owner.key.as_str());
            let (token, label) = (lease.token.expose(), &*owner.label);
            let (mode, limit) = (lease.mode.get().is_some(), self.masters().node_timeout);
            for node in &self.masters().nodes {
                drop(node.label_holder(keys, (token, label), options.ttl_millis(), mode, limit));
            }
        }
        LockGuard::new(self.clone(), lease)
    }
}

/// How long a request may wait for a holder in this process (a sibling re-entry of the same
/// scope): its wait deadline, or its retries' delays; `None` for a single attempt.
fn local_wait(options: &LockOptions) -> Option<Duration> {
    if let Some(wait) = options.get_wait_timeout() {
        return Some(wait.min(MAX_LOCAL_WAIT));
    }
    let retries = options.get_retry_count();
    (retries > 0).then(|| {
        options
            .get_retry_delay()
            .saturating_add(options.get_retry_jitter())
            .saturating_mul(retries)
            .min(MAX_LOCAL_WAIT)
    })
}
