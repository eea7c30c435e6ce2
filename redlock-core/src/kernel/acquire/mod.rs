//! Acquisition: the checks made before anything is sent, the loop for any [`Protocol`],
//! re-entry, and turning a grant into a held lease. The retry and wait loop is in [`wait`],
//! what it does after each attempt in [`decide`], one attempt (distlock steps 1–5) in
//! [`attempt`], the fencing round in [`fence`].

pub(crate) mod attempt;
#[cfg(feature = "model")]
pub(crate) mod checked;
mod decide;
mod fence;
pub(crate) use fence::fence;
mod wait;

pub(crate) use wait::{Ask, One, Protocol};

use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

use tracing::Instrument;

use crate::error::LostReason;
use crate::error::{InvalidInput, LockError};
use crate::kernel::guard::LockGuard;
use crate::kernel::lease::{Grant, Lease, Reentry, find_reentry};
use crate::kernel::redlock::Redlock;
use crate::keys::{ResourceKeys, validate_resource};
use crate::mode::Mode;
use crate::options::LockOptions;
use crate::outcome::Outcomes;
use crate::telemetry::Acquisition;
use crate::token::Token;

/// The longest local wait for a sibling re-entry (`tokio::time::timeout` takes any duration,
/// but a year is as good as forever here).
const MAX_LOCAL_WAIT: Duration = Duration::from_secs(365 * 24 * 60 * 60);

impl Redlock {
    /// The checks every acquisition of `resource` makes before anything is sent: the
    /// resource, the options, the quarantine against the ttl, shutdown; returns the
    /// resource's key.
    ///
    /// # Errors
    /// [`LockError::Invalid`] for a bad resource or bad options, [`LockError::ShuttingDown`].
    pub(crate) fn admit(&self, resource: &str, options: &LockOptions) -> Result<String, LockError> {
        validate_resource(resource)?;
        options.validate()?;
        self.masters().check_quarantine(options.ttl)?;
        if self.is_shutting_down() {
            return Err(LockError::ShuttingDown);
        }
        let key = self.key_for(resource);
        if key.contains('\0') {
            // A key prefix holding NUL: the lock's bookkeeping keys.
            return Err(InvalidInput::ReservedResource.into());
        }
        Ok(key)
    }

    /// Acquires `resource`'s lock (plain, or in `mode`), re-entering the
    /// caller's scope's lease when the options ask for it: the kernel's own [`One`].
    ///
    /// # Errors
    /// As [`Redlock::lock_with`].
    pub(crate) async fn lock_one(
        &self,
        resource: &str,
        mode: Option<Mode>,
        options: &LockOptions,
    ) -> Result<LockGuard, LockError> {
        let key = self.admit(resource, options)?;
        if options.reentrant
            && let Some(reentry) = find_reentry(self.id(), &key, mode)
            && let Some(guard) = self.reenter(resource, reentry, options).await?
        {
            return Ok(guard);
        }
        self.acquire(resource, self.resource_keys(key), One(mode), options)
            .await
    }

    /// Runs the acquisition loop for `protocol` on `keys`, in its span, with its metrics.
    ///
    /// # Errors
    /// As [`Redlock::lock_with`].
    pub(crate) async fn acquire<P: Protocol>(
        &self,
        resource: &str,
        keys: ResourceKeys,
        protocol: P,
        options: &LockOptions,
    ) -> Result<LockGuard, LockError> {
        let kind = (protocol.mode(), protocol.permits());
        let mut acquisition = Acquisition::start(resource, options, kind);
        let span = acquisition.span().clone();
        let result = self
            .acquire_loop(resource, keys, protocol, options, &mut acquisition)
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
        let missing = if options.fencing && lease.fencing_token.is_none() {
            Some("fencing")
        } else if options.auto_extend && lease.auto_extend.is_none() {
            Some("auto_extend")
        } else if let (true, Some(kept)) = (options.auto_extend, lease.auto_extend) {
            // Auto-extended both: the lease's caps must reach as far as the request's.
            let asked_until = options
                .max_hold
                .and_then(|max| Instant::now().checked_add(max));
            if kept
                .hold_until
                .is_some_and(|until| asked_until.is_none_or(|asked| until < asked))
            {
                Some("max_hold")
            } else if kept
                .max_extensions
                .is_some_and(|kept| options.max_extensions.is_none_or(|asked| kept < asked))
            {
                Some("max_extensions")
            } else {
                None
            }
        } else if let Some(at_least) = options.lock_at_least_for
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
        let drift = crate::timing::drift(options.sent_ttl(), options.drift_factor);
        if lease.remaining_validity() < options.sent_ttl().saturating_sub(drift) {
            guard.extend(options.ttl).await?;
        }
        Ok(Some(guard))
    }

    /// Turns a grant into a held lease: recorded in the ledger (and handed to the
    /// auto-extension driver), owned by the returned guard.
    pub(crate) fn register(
        &self,
        resource: &str,
        class: &crate::telemetry::Class,
        keys: ResourceKeys,
        token: Token,
        options: &LockOptions,
        grant: Grant,
    ) -> LockGuard {
        let ledger = &self.inner().ledger;
        let mut grant = grant;
        let owner_key = grant.labelled.take();
        let labelled = owner_key.is_some();
        let lease = Lease::new(
            ledger.next_id(),
            resource,
            class,
            keys,
            token,
            grant,
            options,
        )
        .with_owner(self.inner().owner.as_ref(), owner_key);
        let lease = Arc::new(lease);
        ledger.hold(&lease, self.masters());
        // A native attempt wrote the label with its grant; any other grant writes it now.
        if let Some(owner) = lease.owner.as_ref().filter(|_| !labelled) {
            // Not awaited: the label is for operators, and the lock is held without it.
            let keys = (lease.keys.lock.as_str(), owner.key.as_str());
            let (token, label) = (lease.token.expose(), &*owner.label);
            let mode = lease.mode().is_some();
            for node in &self.masters().nodes {
                drop(node.label_holder(keys, (token, label), options.ttl_millis(), mode));
            }
        }
        LockGuard::new(self.clone(), lease)
    }
}

/// How long a request may wait for a holder in this process (a sibling re-entry of the same
/// scope): its wait deadline, or its retries' delays; `None` for a single attempt.
fn local_wait(options: &LockOptions) -> Option<Duration> {
    if let Some(wait) = options.wait_timeout {
        return Some(wait.min(MAX_LOCAL_WAIT));
    }
    let retries = options.retry_count;
    (retries > 0).then(|| {
        options
            .retry_delay
            .saturating_add(options.retry_jitter)
            .saturating_mul(retries)
            .min(MAX_LOCAL_WAIT)
    })
}
