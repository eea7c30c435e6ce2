//! The [`Redlock`] handle: acquisition over N masters, release, shutdown.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use rand::Rng;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::Instrument;

use crate::builder::RedlockBuilder;
use crate::error::LockError;
use crate::guard::{Lease, LockGuard};
use crate::node::Node;
use crate::options::{LockOptions, validate_resource};
use crate::outcome::{NodeOutcome, NodeVote, Outcomes};
use crate::timing;
use crate::token::Token;

/// A Redlock distributed lock manager over N independent Redis masters.
///
/// Cheap to clone (an `Arc` inside): build it once at start-up with [`Redlock::builder`] and
/// share it. Every node has its own `fred` client, configured for locking: a per-command
/// timeout, no silent command re-sends, reconnection in the background.
///
/// ```no_run
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// use redlock_core::Redlock;
///
/// let redlock = Redlock::builder()
///     .nodes(["redis://10.0.0.1:6379", "redis://10.0.0.2:6379", "redis://10.0.0.3:6379"])
///     .build()
///     .await?;
/// let guard = redlock.lock("order:42").await?;
/// // ... work that must happen once at a time, within guard.remaining_validity() ...
/// guard.release().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Redlock {
    inner: Arc<Inner>,
}

struct Inner {
    nodes: Vec<Node>,
    quorum: usize,
    defaults: LockOptions,
    key_prefix: String,
    node_timeout: Duration,
    held: Mutex<HashMap<u64, Arc<Lease>>>,
    next_id: AtomicU64,
    shutdown: CancellationToken,
    tracker: TaskTracker,
}

impl std::fmt::Debug for Redlock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Redlock")
            .field(
                "nodes",
                &self
                    .inner
                    .nodes
                    .iter()
                    .map(|n| &n.label)
                    .collect::<Vec<_>>(),
            )
            .field("quorum", &self.inner.quorum)
            .field("key_prefix", &self.inner.key_prefix)
            .field("node_timeout", &self.inner.node_timeout)
            .field("defaults", &self.inner.defaults)
            .finish_non_exhaustive()
    }
}

/// The result of releasing a lock on every node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Released {
    /// Nodes where our key was still there and was deleted.
    pub deleted: usize,
    /// Nodes that answered (deleted or not).
    pub answered: usize,
    /// Nodes in all.
    pub nodes: usize,
    /// Nodes needed for a majority.
    pub quorum: usize,
}

impl Released {
    /// `true` if the lock was still held on a quorum when it was released; `false` means it
    /// had expired (or been taken over) before the release.
    pub fn was_held(&self) -> bool {
        self.deleted >= self.quorum
    }
}

/// What [`Redlock::release_all`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReleaseAllReport {
    /// Locks whose release a quorum confirmed.
    pub released: Vec<String>,
    /// Locks whose release fewer than a quorum confirmed (they expire with their ttl).
    pub unconfirmed: Vec<String>,
}

/// Why one acquisition attempt failed.
enum AttemptFailure {
    Votes(Outcomes),
    NoValidity(Duration),
}

impl Redlock {
    /// Starts a [`RedlockBuilder`].
    pub fn builder() -> RedlockBuilder {
        RedlockBuilder::default()
    }

    pub(crate) fn from_parts(
        nodes: Vec<Node>,
        defaults: LockOptions,
        key_prefix: String,
        node_timeout: Duration,
    ) -> Self {
        Self {
            inner: Arc::new(Inner {
                quorum: timing::quorum(nodes.len()),
                nodes,
                defaults,
                key_prefix,
                node_timeout,
                held: Mutex::new(HashMap::new()),
                next_id: AtomicU64::new(0),
                shutdown: CancellationToken::new(),
                tracker: TaskTracker::new(),
            }),
        }
    }

    /// The default options used by [`lock`](Self::lock).
    pub fn options(&self) -> &LockOptions {
        &self.inner.defaults
    }

    /// The number of nodes (N).
    pub fn node_count(&self) -> usize {
        self.inner.nodes.len()
    }

    /// The nodes' labels (`host:port`), in order.
    pub fn node_labels(&self) -> impl Iterator<Item = &str> {
        self.inner.nodes.iter().map(|n| n.label.as_str())
    }

    /// The number of nodes that must agree: `N / 2 + 1`.
    pub fn quorum(&self) -> usize {
        self.inner.quorum
    }

    /// The Redis key used for `resource`: the key prefix followed by the resource.
    pub fn key_for(&self, resource: &str) -> String {
        format!("{}{resource}", self.inner.key_prefix)
    }

    /// Acquires `resource` with the default options. See [`lock_with`](Self::lock_with).
    ///
    /// # Errors
    /// As [`lock_with`](Self::lock_with).
    pub async fn lock(&self, resource: &str) -> Result<LockGuard, LockError> {
        self.lock_with(resource, &self.inner.defaults).await
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
    /// # Errors
    /// - [`LockError::Invalid`]: empty or over-long resource, bad ttl or drift factor (nothing
    ///   is sent);
    /// - [`LockError::Busy`]: another holder kept the resource on every attempt;
    /// - [`LockError::Unavailable`]: too few nodes answered;
    /// - [`LockError::NoValidity`]: a quorum granted it but too late to be valid;
    /// - [`LockError::ShuttingDown`]: [`begin_shutdown`](Self::begin_shutdown) was called.
    pub async fn lock_with(
        &self,
        resource: &str,
        options: &LockOptions,
    ) -> Result<LockGuard, LockError> {
        validate_resource(resource)?;
        options.validate()?;
        if self.is_shutting_down() {
            return Err(LockError::ShuttingDown);
        }
        let key = self.key_for(resource);
        let span = tracing::debug_span!(
            "redlock.acquire",
            resource,
            ttl_ms = options.ttl_millis(),
            nodes = self.inner.nodes.len(),
            quorum = self.inner.quorum,
        );
        self.acquire(resource, key, options).instrument(span).await
    }

    async fn acquire(
        &self,
        resource: &str,
        key: String,
        options: &LockOptions,
    ) -> Result<LockGuard, LockError> {
        let started = Instant::now();
        let deadline = options.get_wait_timeout().map(|wait| started + wait);
        let mut attempts = 0u32;
        loop {
            attempts += 1;
            let token = Token::generate().map_err(LockError::Entropy)?;
            let failure = match self.attempt(&key, &token, options).await {
                Ok(valid_until) => {
                    let guard = self.register(resource, key, token, options, valid_until);
                    if self.is_shutting_down() {
                        // Shutdown began during the attempt: refuse, and release what was
                        // taken (the guard's drop; `shutdown` waits for it).
                        drop(guard);
                        return Err(LockError::ShuttingDown);
                    }
                    tracing::debug!(attempts, "acquired");
                    return Ok(guard);
                }
                Err(failure) => failure,
            };
            let mut delay = self.retry_delay(options);
            let retry = match deadline {
                Some(deadline) => {
                    let left = deadline.saturating_duration_since(Instant::now());
                    delay = delay.min(left);
                    !left.is_zero()
                }
                None => attempts <= options.get_retry_count(),
            };
            if !retry {
                let error = self.failure_error(resource, attempts, options, failure);
                tracing::debug!(attempts, error = %error, "giving up");
                return Err(error);
            }
            tracing::trace!(attempts, delay_ms = delay.as_millis() as u64, "retrying");
            tokio::select! {
                () = tokio::time::sleep(delay) => {}
                () = self.inner.shutdown.cancelled() => return Err(LockError::ShuttingDown),
            }
        }
    }

    fn retry_delay(&self, options: &LockOptions) -> Duration {
        let jitter = options.get_retry_jitter();
        let extra = if jitter.is_zero() {
            Duration::ZERO
        } else {
            rand::rng().random_range(Duration::ZERO..=jitter)
        };
        options.get_retry_delay() + extra
    }

    fn failure_error(
        &self,
        resource: &str,
        attempts: u32,
        options: &LockOptions,
        failure: AttemptFailure,
    ) -> LockError {
        let resource = resource.to_owned();
        let quorum = self.inner.quorum;
        match failure {
            AttemptFailure::NoValidity(elapsed) => LockError::NoValidity {
                resource,
                attempts,
                elapsed,
                ttl: options.sent_ttl(),
            },
            AttemptFailure::Votes(outcomes) => {
                let answered = outcomes.acquired() + outcomes.held();
                if answered >= quorum || outcomes.held() > self.inner.nodes.len() - quorum {
                    LockError::Busy {
                        resource,
                        attempts,
                        quorum,
                        outcomes,
                    }
                } else {
                    LockError::Unavailable {
                        resource,
                        attempts,
                        quorum,
                        outcomes,
                    }
                }
            }
        }
    }

    /// One attempt: Redlock steps 1–5. Returns the instant the lock stops being valid.
    async fn attempt(
        &self,
        key: &str,
        token: &Token,
        options: &LockOptions,
    ) -> Result<Instant, AttemptFailure> {
        let inner = &self.inner;
        let ttl = options.sent_ttl();
        let ttl_ms = options.ttl_millis();
        let drift = timing::drift(ttl, options.get_drift_factor());
        let limit = inner.node_timeout.min(ttl.saturating_sub(drift));
        let n = inner.nodes.len();
        let mut cleanup = Cleanup::new(self, key, token);

        // Step 1: the monotonic clock, read before the first SET is sent.
        let start = Instant::now();
        // Step 2: all nodes at once.
        let mut pending: FuturesUnordered<_> =
            inner
                .nodes
                .iter()
                .enumerate()
                .map(|(i, node)| async move {
                    (i, node.try_lock(key, token.expose(), ttl_ms, limit).await)
                })
                .collect();
        let mut votes = vec![NodeVote::Undecided; n];
        let (mut granted, mut against) = (0, 0);
        while let Some((i, vote)) = pending.next().await {
            if vote == NodeVote::Acquired {
                granted += 1;
            } else {
                against += 1;
            }
            votes[i] = vote;
            if granted >= inner.quorum || against > n - inner.quorum {
                break;
            }
        }
        // Step 3: elapsed time, measured when the outcome was decided.
        let elapsed = start.elapsed();
        drop(pending);
        let outcomes = Outcomes(
            inner
                .nodes
                .iter()
                .zip(votes)
                .map(|(node, vote)| NodeOutcome {
                    node: node.label.clone(),
                    vote,
                })
                .collect(),
        );
        tracing::debug!(
            granted = outcomes.acquired(),
            held = outcomes.held(),
            failed = outcomes.failed(),
            elapsed_us = elapsed.as_micros() as u64,
            "attempt decided"
        );
        if granted >= inner.quorum {
            // Step 4: validity = ttl − elapsed − drift.
            if timing::validity(ttl, elapsed, options.get_drift_factor()).is_some() {
                cleanup.disarm();
                return Ok(start + ttl - drift);
            }
            cleanup.run().await;
            return Err(AttemptFailure::NoValidity(elapsed));
        }
        // Step 5: failed; unlock every node, even those we believe we did not lock.
        cleanup.run().await;
        Err(AttemptFailure::Votes(outcomes))
    }

    fn register(
        &self,
        resource: &str,
        key: String,
        token: Token,
        options: &LockOptions,
        valid_until: Instant,
    ) -> LockGuard {
        let lease = Arc::new(Lease {
            id: self.inner.next_id.fetch_add(1, Ordering::Relaxed),
            resource: resource.to_owned(),
            key,
            token,
            ttl: options.sent_ttl(),
            valid_until,
        });
        self.held().insert(lease.id, Arc::clone(&lease));
        LockGuard::new(self.clone(), lease)
    }

    fn held(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Arc<Lease>>> {
        self.inner
            .held
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn forget(&self, id: u64) {
        self.held().remove(&id);
    }

    /// Releases `key` signed by `token` on every node at once (compare-and-delete).
    pub(crate) async fn release_key(&self, key: &str, token: &Token) -> Released {
        let limit = self.inner.node_timeout;
        let replies = futures_util::future::join_all(
            self.inner
                .nodes
                .iter()
                .map(|node| node.unlock(key, token.expose(), limit)),
        )
        .await;
        let answered = replies.iter().filter(|r| r.is_ok()).count();
        let deleted = replies.iter().filter(|r| matches!(r, Ok(true))).count();
        Released {
            deleted,
            answered,
            nodes: self.inner.nodes.len(),
            quorum: self.inner.quorum,
        }
    }

    /// Releases a lease in a tracked task, so that dropping the caller does not cut the release
    /// short.
    pub(crate) fn spawn_release(
        &self,
        lease: Arc<Lease>,
    ) -> Option<tokio::task::JoinHandle<Released>> {
        self.forget(lease.id);
        let handle = tokio::runtime::Handle::try_current().ok()?;
        let redlock = self.clone();
        let span = tracing::debug_span!("redlock.release", resource = %lease.resource);
        Some(
            self.inner.tracker.spawn_on(
                async move {
                    let released = redlock.release_key(&lease.key, &lease.token).await;
                    tracing::debug!(
                        deleted = released.deleted,
                        answered = released.answered,
                        "released"
                    );
                    released
                }
                .instrument(span),
                &handle,
            ),
        )
    }

    /// Refuses new acquisitions from now on ([`LockError::ShuttingDown`]); attempts waiting for
    /// a retry stop too. Locks already held stay held until released.
    pub fn begin_shutdown(&self) {
        self.inner.shutdown.cancel();
    }

    /// `true` once [`begin_shutdown`](Self::begin_shutdown) was called.
    pub fn is_shutting_down(&self) -> bool {
        self.inner.shutdown.is_cancelled()
    }

    /// Number of locks currently held through this handle (and its clones).
    pub fn held_count(&self) -> usize {
        self.held().len()
    }

    /// Releases, by quorum compare-and-delete, every lock still held through this handle, and
    /// reports which releases a quorum confirmed. Their guards become inert.
    ///
    /// Safe against a late holder: a release only deletes a key still signed by our token, so
    /// it can never delete a lock another process took after ours expired.
    pub async fn release_all(&self) -> ReleaseAllReport {
        let leases: Vec<Arc<Lease>> = self.held().drain().map(|(_, lease)| lease).collect();
        let results = futures_util::future::join_all(leases.iter().map(|lease| async move {
            (
                lease.resource.clone(),
                self.release_key(&lease.key, &lease.token).await,
            )
        }))
        .await;
        let mut report = ReleaseAllReport::default();
        for (resource, released) in results {
            if released.answered >= self.inner.quorum {
                report.released.push(resource);
            } else {
                report.unconfirmed.push(resource);
            }
        }
        tracing::info!(
            released = report.released.len(),
            unconfirmed = report.unconfirmed.len(),
            "released all held locks"
        );
        report
    }

    /// Graceful shutdown: [`begin_shutdown`](Self::begin_shutdown), then
    /// [`release_all`](Self::release_all), then waits up to `timeout` for releases started by
    /// dropped guards to finish.
    pub async fn shutdown(&self, timeout: Duration) -> ReleaseAllReport {
        self.begin_shutdown();
        let report = self.release_all().await;
        self.inner.tracker.close();
        if tokio::time::timeout(timeout, self.inner.tracker.wait())
            .await
            .is_err()
        {
            tracing::warn!(?timeout, "background releases still running at shutdown");
        }
        report
    }
}

/// Releases an attempt's key on every node unless disarmed; if dropped while armed (the
/// acquire future was cancelled), the release is spawned instead.
struct Cleanup<'a> {
    redlock: &'a Redlock,
    key: &'a str,
    token: &'a Token,
    armed: bool,
}

impl<'a> Cleanup<'a> {
    fn new(redlock: &'a Redlock, key: &'a str, token: &'a Token) -> Self {
        Self {
            redlock,
            key,
            token,
            armed: true,
        }
    }

    fn disarm(&mut self) {
        self.armed = false;
    }

    async fn run(&mut self) {
        self.redlock.release_key(self.key, self.token).await;
        self.armed = false;
    }
}

impl Drop for Cleanup<'_> {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            let redlock = self.redlock.clone();
            let (key, token) = (self.key.to_owned(), self.token.clone());
            redlock.inner.tracker.clone().spawn_on(
                async move {
                    redlock.release_key(&key, &token).await;
                },
                &handle,
            );
        }
    }
}
