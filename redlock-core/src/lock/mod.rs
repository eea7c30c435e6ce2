//! The plain lock: of one resource ([`Redlock::lock`], [`Redlock::lock_with`]) and of several
//! at once ([`Redlock::lock_many`], its attempt in [`many`]), and locking a scope
//! ([`scoped`]).

mod many;
pub(crate) mod scoped;

use many::ManyKeys;

use crate::error::{InvalidInput, LockError};
use crate::kernel::guard::LockGuard;
use crate::kernel::redlock::Redlock;
use crate::keys::validate_resource;
use crate::options::LockOptions;

impl Redlock {
    /// Acquires `resource` with the default options. See [`lock_with`](Self::lock_with).
    ///
    /// # Cancel safety
    /// As [`lock_with`](Self::lock_with).
    ///
    /// # Errors
    /// As [`lock_with`](Self::lock_with).
    pub async fn lock(&self, resource: &str) -> Result<LockGuard, LockError> {
        self.lock_with(resource, self.options()).await
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
    /// # Cancel safety
    /// Dropping the future stops the acquisition: whatever the attempt under way took on the nodes
    /// is released in the background (on the handle's runtime;
    /// [`Redlock::shutdown`](crate::Redlock::shutdown) waits for it), and a waiter leaves the
    /// queue. Nothing is held afterwards, and the call can be made again.
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
        self.lock_one(resource, None, options).await
    }

    /// Takes `resource` if it is free now, with the default options: see
    /// [`try_lock_with`](Self::try_lock_with).
    ///
    /// # Errors
    /// As [`try_lock_with`](Self::try_lock_with).
    ///
    /// # Cancel safety
    /// As [`lock_with`](Self::lock_with): dropping the future releases what its attempt took.
    pub async fn try_lock(&self, resource: &str) -> Result<Option<LockGuard>, LockError> {
        self.try_lock_with(resource, self.options()).await
    }

    /// Takes `resource` if it is free now: one attempt, without retries or waiting
    /// (`tryLock` in Redisson, `get()` in Laravel, `acquire(false)` in Symfony). `Ok(None)`
    /// when another holder has it ([`LockError::Busy`] from [`lock_with`](Self::lock_with)).
    ///
    /// The attempt is [`lock_with`](Self::lock_with)'s with `options`, but for
    /// [`retry_count`](LockOptions::retry_count) and
    /// [`wait_timeout`](LockOptions::wait_timeout), which are ignored. One exception to "one
    /// attempt", as in every acquisition: when the nodes split their votes among contenders
    /// attempting at the same time, so that nobody holds the resource, each contender
    /// attempts again after a short random delay (distlock spec, "Retry on failure"), so that
    /// two `try_lock`s at the same moment do not both come away with nothing. When the
    /// resource is held it returns after one round of the nodes and the clean-up of what that
    /// round took, never after a retry delay. A key reserved for the waiter a release handed
    /// it to counts as held. For how long the holder has left, call
    /// [`lock_with`](Self::lock_with) with `retry_count(0)`: its [`LockError::Busy`] carries
    /// [`retry_after`](LockError::retry_after).
    ///
    /// # Errors
    /// As [`lock_with`](Self::lock_with), but for [`LockError::Busy`], which is `Ok(None)`.
    /// [`LockError::is_retryable`] says whether another call later may succeed.
    ///
    /// # Cancel safety
    /// As [`lock_with`](Self::lock_with): dropping the future releases what its attempt took.
    pub async fn try_lock_with(
        &self,
        resource: &str,
        options: &LockOptions,
    ) -> Result<Option<LockGuard>, LockError> {
        let mut once = options.clone().retry_count(0);
        once.wait_timeout = None;
        match self.lock_one(resource, None, &once).await {
            Ok(guard) => Ok(Some(guard)),
            Err(LockError::Busy { .. }) => Ok(None),
            Err(error) => Err(error),
        }
    }

    /// Acquires every resource of `resources` at once with the default options: see
    /// [`lock_many_with`](Self::lock_many_with).
    ///
    /// # Cancel safety
    /// As [`lock_many_with`](Self::lock_many_with).
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
    /// # Cancel safety
    /// Dropping the future stops the acquisition: whatever the attempt under way took on the nodes
    /// is released in the background (on the handle's runtime;
    /// [`Redlock::shutdown`](crate::Redlock::shutdown) waits for it), and a waiter leaves the
    /// queue. Nothing is held afterwards, and the call can be made again.
    ///
    /// # Errors
    /// - [`LockError::Invalid`]: no resource, more than [`MAX_RESOURCES`](crate::MAX_RESOURCES),
    ///   a bad resource, bad options, or options a lock of several cannot give
    ///   ([`InvalidInput::ManyWith`]: fencing, re-entry, a minimum hold);
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
        let refused = if options.fencing {
            Some("fencing")
        } else if options.reentrant {
            Some("reentrant")
        } else if options.lock_at_least_for.is_some() {
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
        let first = names[0];
        self.admit(first, options)?;
        let keys = many[0].1.clone();
        self.acquire(first, keys, ManyKeys::new(many), options)
            .await
    }
}
