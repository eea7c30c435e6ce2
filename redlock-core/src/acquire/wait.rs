//! The retry and wait loop around single attempts: random retry delays, joining the waiter
//! queue when the resource is busy, waking on hand-over messages, the wait deadline, and the
//! error an acquisition that gave up returns.

use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::Rng;

use super::attempt::{AttemptFailure, Split};
use crate::error::LockError;
use crate::guard::LockGuard;
use crate::keys::ResourceKeys;
use crate::node::{AcquireKind, ModeRequest, Waiter};
use crate::options::LockOptions;
use crate::redlock::Redlock;
use crate::telemetry::Acquisition;
use crate::token::Token;
use crate::waiters::{Listener, WaitTiming, Wake};

/// A waiter that saw another waiter named attempts this long after the grace if nothing else
/// happened: by then the reservation has expired if the named waiter did not take it.
const AFTER_OTHER_SLACK: Duration = Duration::from_millis(5);

/// The shortest life of a mode request's waiter entry.
const MIN_INTENT_TTL: Duration = Duration::from_millis(100);

/// A waiter named for a window attempts this long after the window (its message arrived after
/// the window opened on that node, so the window there has closed by then).
const AFTER_WINDOW_SLACK: Duration = Duration::from_millis(2);

/// The longest wait between two attempts, whatever the retry delay: a waiter attempts at
/// least once a minute (releases wake it sooner). It bounds how long a crashed mode
/// request's waiter entry, which must outlive the wait, holds up incompatible requests, and
/// keeps the node's expiry arithmetic exact.
const MAX_RETRY_WAIT: Duration = Duration::from_secs(60);

/// Attempts after a split vote beyond the retries and the wait deadline: enough for one of
/// several contenders that split the vote to take the resource alone (each backs off for a
/// random delay, see [`SPLIT_BACKOFF`]), few enough that a resource that stays split is
/// reported soon.
const SPLIT_RETRIES: u32 = 6;

/// The longest random delay before the first attempt after a split vote; it doubles at each
/// one after (20, 40, …, 640 ms: at most 1.26 s in all). Longer than a round and its
/// clean-up on a local network, so that the first contender to attempt again finds every
/// node free, and the others then find it held.
const SPLIT_BACKOFF: Duration = Duration::from_millis(20);

impl Redlock {
    /// Attempts until a grant, the retries or the wait deadline run out, or shutdown: a busy
    /// resource's waiter joins its queue and sleeps until a release wakes it (or its retry
    /// delay passes); every exit but a grant that keeps its place leaves the queue.
    pub(super) async fn acquire_loop(
        &self,
        resource: &str,
        keys: ResourceKeys,
        options: &LockOptions,
        acquisition: &mut Acquisition,
    ) -> Result<LockGuard, LockError> {
        let started = Instant::now();
        // `Some(None)`: a wait too long for the clock (`Duration::MAX`), i.e. until acquired.
        let deadline = options
            .get_wait_timeout()
            .map(|wait| started.checked_add(wait));
        let mut attempts = 0u32;
        let waiter = Waiter::draw();
        let request = options
            .get_mode()
            .map(|mode| ModeRequest::new(mode, &waiter, self.intent_ttl_ms(options)));
        // A mode request that was refused has left a waiter's entry on some nodes.
        let mut entered = false;
        let mut waiting: Option<Listener> = None;
        // Armed while this request may have a place in a queue (a plain waiter's, or a mode
        // request's waiter entry, from its first attempt on): every way out of this function
        // but a grant that keeps the place leaves the queue, this future being dropped
        // included.
        let mut exit = request
            .is_some()
            .then(|| QueueExit::new(self, &keys, &waiter.marker, true));
        // The attempt that follows joining the queue is not a retry: it only closes the gap
        // between the first attempt and the subscription.
        let mut free_attempt = false;
        // Attempts made after a split vote once the retries or the wait had run out.
        let mut split_retries = 0u32;
        // Who refused the last attempt, when it was a split ([`AttemptFailure::Votes`]).
        let mut last_refusing: Vec<String> = Vec::new();
        loop {
            if !std::mem::take(&mut free_attempt) {
                attempts += 1;
            }
            acquisition.attempting(attempts);
            let token = Token::generate().map_err(LockError::Entropy)?;
            let kind = match (&request, &waiting) {
                (Some(request), _) => AcquireKind::Mode(request),
                (None, Some(_)) => AcquireKind::Queued(&waiter),
                (None, None) => AcquireKind::Plain,
            };
            let failure = match self
                .attempt(&keys, &token, options, kind, acquisition)
                .await
            {
                Ok(granted) => {
                    let queued = waiting.is_some() || entered;
                    // A plain waiter leaves the queues of the nodes that did not grant it (a
                    // granting node removed it); a mode request's waiter entries go with its
                    // release.
                    if let Some(exit) = &mut exit {
                        exit.armed = request.is_none() && !granted.everywhere;
                    }
                    let class = acquisition.class();
                    let guard = self.register(resource, class, keys, token, options, granted.grant);
                    if self.is_shutting_down() {
                        // Shutdown began during the attempt: refuse, and release what was
                        // taken (the guard's drop; `shutdown` waits for it).
                        drop(guard);
                        return Err(LockError::ShuttingDown);
                    }
                    tracing::debug!(attempts, queued, "acquired");
                    return Ok(guard);
                }
                Err(failure) => failure,
            };
            let mut delay = self.retry_delay(options);
            let retry = match deadline {
                Some(Some(deadline)) => {
                    let left = deadline.saturating_duration_since(Instant::now());
                    delay = delay.min(left);
                    !left.is_zero()
                }
                Some(None) => true,
                None => attempts <= options.get_retry_count(),
            };
            if let AttemptFailure::Votes { outcomes, .. } = &failure {
                entered |= request.is_some() && outcomes.held() > 0;
            }
            // A split among contenders resolves by attempting again (each drew a new token);
            // one that names a holder the last attempt named too does not: that holder stays.
            let split = match &failure {
                AttemptFailure::Votes {
                    split, refusing, ..
                } => {
                    let seen = |holder: &String| last_refusing.contains(holder);
                    let resolvable = match split {
                        Split::No => false,
                        // A holder seen again could have a quorum with the silent nodes.
                        Split::Possible => !refusing.iter().any(seen),
                        // Nobody can have a quorum: worth attempting while someone new refused.
                        Split::Certain => !refusing.iter().all(seen),
                    };
                    last_refusing.clone_from(refusing);
                    resolvable.then_some(*split)
                }
                _ => None,
            };
            if !retry && split.is_some() && split_retries < SPLIT_RETRIES {
                // Nobody may hold it: only contenders split the vote (each released what it
                // took). Skipping now could leave the resource untaken by all of them, so
                // attempt again after a random delay, the first one back taking it alone.
                let spread = SPLIT_BACKOFF.saturating_mul(1 << split_retries);
                split_retries += 1;
                let delay = rand::rng().random_range(Duration::ZERO..=spread);
                tracing::debug!(
                    attempts,
                    delay_ms = delay.as_millis() as u64,
                    "split vote; attempting again"
                );
                tokio::select! {
                    () = tokio::time::sleep(delay) => {}
                    () = self.inner().shutdown.cancelled() => return Err(LockError::ShuttingDown),
                }
                continue;
            }
            if !retry {
                let error = self.failure_error(resource, attempts, options, failure);
                tracing::debug!(attempts, error = %error, "giving up");
                return Err(error);
            }
            let shutdown = &self.inner().shutdown;
            match (&mut waiting, &self.inner().waiters) {
                // Only a busy resource is worth queueing for: enough nodes answered for a
                // quorum, and some refused. Too few answers is unavailability, which a queue
                // (and subscribing to nodes that do not answer) cannot help.
                (None, Some(waiters))
                    if matches!(&failure, AttemptFailure::Votes { outcomes, .. }
                        if outcomes.held() > 0 && outcomes.acquired() + outcomes.held() >= self.quorum()) =>
                {
                    tracing::trace!(attempts, "busy; joining the waiter queue");
                    exit.get_or_insert_with(|| QueueExit::new(self, &keys, &waiter.marker, false));
                    waiting = Some(waiters.join(&keys.waiters).await);
                    free_attempt = true;
                }
                (Some(listener), _) => {
                    tracing::trace!(attempts, fallback_ms = delay.as_millis() as u64, "waiting");
                    let grace = self.inner().handover_grace;
                    let timing = WaitTiming {
                        fallback: delay,
                        after_other: grace + AFTER_OTHER_SLACK,
                        settle: grace / 2,
                        after_window: AFTER_WINDOW_SLACK,
                        longest: match deadline {
                            Some(Some(deadline)) => {
                                deadline.saturating_duration_since(Instant::now())
                            }
                            _ => MAX_RETRY_WAIT,
                        },
                        quorum: self.quorum(),
                    };
                    match listener.wait(&waiter.marker, timing, shutdown).await {
                        Wake::Shutdown => return Err(LockError::ShuttingDown),
                        Wake::Named => acquisition.woken(true),
                        Wake::Timer => acquisition.woken(false),
                    }
                }
                _ => {
                    tracing::trace!(attempts, delay_ms = delay.as_millis() as u64, "retrying");
                    tokio::select! {
                        () = tokio::time::sleep(delay) => {}
                        () = shutdown.cancelled() => return Err(LockError::ShuttingDown),
                    }
                }
            }
        }
    }

    /// Leaves the resource's waiters on every node, in the background (a waiter that gave up,
    /// or was granted by only some nodes): its place in the queue of plain waiters, or, for a
    /// mode request, its waiter's entry in the holders' hash.
    fn leave_queue(&self, keys: ResourceKeys, marker: String, mode: bool) {
        let masters = Arc::clone(self.masters());
        self.spawn_background(async move {
            let limit = masters.node_timeout;
            let leave = masters
                .nodes
                .iter()
                .map(|node| tokio::time::timeout(limit, node.leave(&keys, &marker, mode)));
            futures_util::future::join_all(leave).await;
        });
    }

    /// How long a refused mode request's waiter entry lives after each attempt: longer than
    /// the longest wait between two attempts (a retry delay with its jitter, twice, plus the
    /// node timeouts), so that it lives exactly as long as its waiter keeps attempting.
    ///
    /// The node timeout counts for at most [`MAX_TTL`](crate::options::MAX_TTL) (a day): an
    /// attempt's round never lasts longer than its ttl, which is capped there. That keeps
    /// the entry's expiry (the node's clock in ms plus this) an integer the scripts' Lua
    /// writes exactly: a `node_timeout(Duration::MAX)` used to give `u64::MAX`, which Lua
    /// wrote as `9.2233720368548e+18`, an entry no script could read.
    fn intent_ttl_ms(&self, options: &LockOptions) -> u64 {
        let node_timeout = self.masters().node_timeout.min(crate::options::MAX_TTL);
        let between = options
            .get_retry_delay()
            .saturating_add(options.get_retry_jitter())
            .min(MAX_RETRY_WAIT)
            .saturating_add(node_timeout);
        let ttl = between.saturating_mul(2);
        u64::try_from(ttl.max(MIN_INTENT_TTL).as_millis()).unwrap_or(u64::MAX)
    }

    fn retry_delay(&self, options: &LockOptions) -> Duration {
        let jitter = options.get_retry_jitter();
        let extra = if jitter.is_zero() {
            Duration::ZERO
        } else {
            rand::rng().random_range(Duration::ZERO..=jitter)
        };
        options
            .get_retry_delay()
            .saturating_add(extra)
            .min(MAX_RETRY_WAIT)
    }

    fn failure_error(
        &self,
        resource: &str,
        attempts: u32,
        options: &LockOptions,
        failure: AttemptFailure,
    ) -> LockError {
        let resource = resource.to_owned();
        let quorum = self.quorum();
        match failure {
            AttemptFailure::NoValidity(elapsed) => LockError::NoValidity {
                resource,
                attempts,
                elapsed,
                ttl: options.sent_ttl(),
            },
            AttemptFailure::Fence(outcomes) => LockError::Unavailable {
                resource,
                attempts,
                quorum: self.fencing_quorum(),
                outcomes,
            },
            AttemptFailure::Votes {
                outcomes,
                split: Split::Certain,
                ..
            } => LockError::SplitVote {
                resource,
                attempts,
                quorum,
                outcomes,
            },
            AttemptFailure::Votes { outcomes, .. } => {
                if let Some(error) = LockError::foreign_key(&resource, quorum, &outcomes) {
                    return error;
                }
                // Busy when the nodes that did not fail could have made a quorum (those left
                // unawaited once the attempt was decided did not fail), or when refusals alone
                // rule one out; otherwise too few answered to decide.
                let usable = self.node_count() - outcomes.failed();
                if usable >= quorum || outcomes.held() > self.node_count() - quorum {
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
}

/// Leaves a request's place in the queue when dropped while armed
/// ([`Redlock::leave_queue`]: in the background, each node bounded by the node timeout): a
/// waiter that gave up, failed, or whose future was dropped while it waited does not keep
/// costing the resource a hand-over grace per release.
struct QueueExit {
    redlock: Redlock,
    keys: ResourceKeys,
    marker: String,
    /// A mode request's waiter entry, rather than a plain waiter's place.
    mode: bool,
    armed: bool,
}

impl QueueExit {
    fn new(redlock: &Redlock, keys: &ResourceKeys, marker: &str, mode: bool) -> Self {
        Self {
            redlock: redlock.clone(),
            keys: keys.clone(),
            marker: marker.to_owned(),
            mode,
            armed: true,
        }
    }
}

impl Drop for QueueExit {
    fn drop(&mut self) {
        if self.armed {
            let (keys, marker) = (self.keys.clone(), std::mem::take(&mut self.marker));
            self.redlock.leave_queue(keys, marker, self.mode);
        }
    }
}
