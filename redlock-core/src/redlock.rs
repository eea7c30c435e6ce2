//! The [`Redlock`] handle: acquisition over N masters, release, shutdown.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use rand::Rng;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::Instrument;

use crate::builder::RedlockBuilder;
use crate::error::{InvalidInput, LockError, LostReason};
use crate::guard::LockGuard;
use crate::holders::ModeRequest;
use crate::keys;
use crate::lease::{Lease, LeaseParts};
use crate::mode::Mode;
use crate::node::{AcquireReply, Handover, Node, QueuePlace, WindowKeys};
use crate::options::{LockOptions, validate_resource};
use crate::outcome::{NodeVote, Outcomes};
use crate::quorum::{self, Stop};
use crate::reentrant;
use crate::timing;
use crate::token::Token;
use crate::waiters::{Listener, WaitTiming, Waiters, Wake};
use crate::watchdog::Watchdog;

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

pub(crate) struct Inner {
    pub(crate) nodes: Vec<Node>,
    pub(crate) quorum: usize,
    /// Confirmations a fencing token needs ([`timing::fencing_quorum`]).
    fencing_quorum: usize,
    defaults: LockOptions,
    key_prefix: String,
    pub(crate) node_timeout: Duration,
    /// The release registry: every lease handed out and not yet released.
    held: Mutex<HashMap<u64, Arc<Lease>>>,
    /// The runtime the handle was built on, which drives its node connections; background
    /// work (releases of dropped guards, clean-ups, the auto-extension driver) runs there.
    pub(crate) runtime: Option<tokio::runtime::Handle>,
    /// The auto-extension driver, started with the first auto-extended lock.
    pub(crate) watchdog: OnceLock<Watchdog>,
    /// Pub/sub waiters and fair hand-over (`None` when the hand-over grace is zero).
    waiters: Option<Arc<Waiters>>,
    /// How long a released key stays reserved for the waiter it was handed to.
    handover_grace: Duration,
    /// Windows for foreign clients ([`RedlockBuilder::foreign_window`]): zero when off,
    /// and always zero without hand-over.
    foreign_window: Duration,
    /// Restarted nodes grant nothing for this long ([`RedlockBuilder::quarantine`]).
    quarantine: Duration,
    /// The minimum `uptime_in_seconds` sent to the acquire scripts (0: none): the quarantine
    /// rounded up to whole seconds, plus one, because Redis computes that uptime from
    /// whole-second timestamps (a reported 1 may mean a few milliseconds).
    quarantine_s: u64,
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
#[non_exhaustive]
pub struct Released {
    /// Nodes where our key was still there and was deleted.
    pub deleted: usize,
    /// Nodes that answered (deleted or not) before the release was decided: a release
    /// confirmed by a quorum does not wait for the other nodes, whose commands are already
    /// sent.
    pub answered: usize,
    /// Nodes in all.
    pub nodes: usize,
    /// Nodes needed for a majority.
    pub quorum: usize,
    /// `true` when the guard was a reentrant acquisition and another guard of its task still
    /// holds the lock: nothing was sent, the lock stays held.
    pub kept: bool,
}

impl Released {
    /// `true` if the lock was still held on a quorum when it was released (or is still held,
    /// when [`kept`](Self::kept)); `false` means it had expired (or been taken over) before
    /// the release.
    pub fn was_held(&self) -> bool {
        self.kept || self.deleted >= self.quorum
    }
}

/// What finishing a guard did.
pub(crate) enum Finish {
    /// Another guard of the task still holds the lock.
    Kept,
    /// [`Redlock::release_all`] already released it.
    AlreadyReleased,
    /// This was the last hold: the caller releases it on the nodes.
    Release,
}

/// What [`Redlock::release_all`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReleaseAllReport {
    /// Locks whose release a quorum confirmed.
    pub released: Vec<String>,
    /// Locks whose release fewer than a quorum confirmed (they expire with their ttl).
    pub unconfirmed: Vec<String>,
}

/// What a handle is built from.
pub(crate) struct Parts {
    pub(crate) nodes: Vec<Node>,
    pub(crate) defaults: LockOptions,
    pub(crate) key_prefix: String,
    pub(crate) node_timeout: Duration,
    pub(crate) handover_grace: Duration,
    /// [`RedlockBuilder::foreign_window`], as set.
    pub(crate) foreign_window: Duration,
    pub(crate) quarantine: Duration,
    /// The subscriptions that wake waiters; `None` when hand-over is off.
    pub(crate) waiters: Option<Arc<Waiters>>,
}

/// One acquisition's identity as a waiter, drawn once for all its attempts.
struct Ticket {
    /// `~` and a random id: its member in the queue of plain waiters, the value of a key
    /// reserved for it, the field of a mode request's waiter entry.
    marker: String,
    /// When it started, in ms since the Unix epoch: its rank among waiters.
    score_ms: i64,
}

impl Ticket {
    fn draw() -> Self {
        let score_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
        Self {
            marker: format!("~{:016x}", rand::rng().random::<u64>()),
            score_ms,
        }
    }
}

/// What a release removes.
#[derive(Clone, Copy)]
pub(crate) enum Releasing<'a> {
    /// A failed attempt's grants, in a mode or not: nothing is handed over, and a mode
    /// request keeps its waiter entry (its place among the waiters).
    Attempt(Option<Mode>),
    /// A holder's lock, in a mode or not, with its request's waiter marker and how long the
    /// key has been busy without a window for foreign clients ([`Lease::busy`]).
    Holder(Option<Mode>, &'a str, Duration),
}

/// How an attempt asks the nodes.
#[derive(Clone, Copy)]
enum Place<'a> {
    /// A plain attempt (`SET NX`).
    None,
    /// A plain attempt by a queued waiter.
    Queue(&'a Ticket),
    /// A request in a lock mode.
    Mode(&'a ModeRequest),
}

/// Why one acquisition attempt failed.
enum AttemptFailure {
    Votes(Outcomes),
    /// A quorum granted the lock, but fewer than a fencing quorum confirmed its token.
    Fence(Outcomes),
    NoValidity(Duration),
}

/// What a successful attempt produced.
struct Granted {
    /// Every node granted it (so a queued waiter left the queue on all of them).
    everywhere: bool,
    started: Instant,
    valid_until: Instant,
    fencing_token: Option<u64>,
    /// A mode request's waiter marker (empty for the plain lock).
    marker: String,
    /// The longest streak of hand-overs a granting node reported ([`AcquireReply::busy_ms`]).
    busy: Duration,
}

/// How long a waiter queue outlives its last enqueue: waiters refresh it at every attempt,
/// so this only bounds how long the entries of waiters that died linger. Also how long a
/// streak's start ([`keys::busy`]) outlives the hand-over that wrote it.
const QUEUE_TTL_MS: u64 = 30_000;

/// A waiter that saw another waiter named attempts this long after the grace if nothing else
/// happened: by then the reservation has expired if the named waiter did not take it.
const AFTER_OTHER_SLACK: Duration = Duration::from_millis(5);

/// The shortest life of a mode request's waiter entry.
const MIN_INTENT_TTL: Duration = Duration::from_millis(100);

/// Default window for foreign clients (see [`RedlockBuilder::foreign_window`]): 350 ms, longer
/// than node-redlock's longest default retry delay (200 ms ± 100 ms jitter) plus its attempt,
/// and than redis-py's blocking sleep (0.1 s).
pub const DEFAULT_FOREIGN_WINDOW: Duration = Duration::from_millis(350);

/// The longest window for foreign clients: a longer one is cut to this (10 s).
pub const MAX_FOREIGN_WINDOW: Duration = Duration::from_secs(10);

/// A window for foreign clients opens once the key has been handed over for this many windows'
/// lengths without one (T = 2 W): under a continuous load of ours with no foreign client, at
/// most a third of the time goes to windows nobody uses.
pub const FOREIGN_WINDOW_EVERY: u32 = 2;

/// A waiter named for a window attempts this long after the window (its message arrived after
/// the window opened on that node, so the window there has closed by then).
const AFTER_WINDOW_SLACK: Duration = Duration::from_millis(2);

/// The longest wait between two attempts, whatever the retry delay: a waiter attempts at
/// least once a minute (releases wake it sooner). It bounds how long a crashed mode
/// request's waiter entry, which must outlive the wait, holds up incompatible requests, and
/// keeps the node's expiry arithmetic exact.
const MAX_RETRY_WAIT: Duration = Duration::from_secs(60);

/// The longest local wait for a sibling re-entry (`tokio::time::timeout` takes any duration,
/// but a year is as good as forever here).
const MAX_LOCAL_WAIT: Duration = Duration::from_secs(365 * 24 * 60 * 60);

/// Rounds of the fencing write-back before giving up (each round after the first follows a
/// node that reported a counter at or above the claim). Compatible holders of a mode lock
/// claiming at once are confirmed about one per round (the highest claim wins every node it
/// reaches), so this bounds how many can fence at once without retrying the attempt; each
/// round is one round trip, and the validity check after them counts them all.
const FENCE_ROUNDS: usize = 16;

/// When a claim was split (some nodes confirmed it, others had a counter at or above it: a
/// compatible holder claiming at once), the next claim goes up to this much further above the
/// highest counter seen, at random. Claiming the same value again, both would be confirmed by
/// the nodes each reached first and neither by a fencing quorum, round after round.
const FENCE_SPREAD: u64 = 64;

/// How many times [`Redlock::release_all`] sends a release that fewer than a quorum answered.
pub const RELEASE_ROUNDS: usize = 3;

impl Redlock {
    /// Starts a [`RedlockBuilder`].
    pub fn builder() -> RedlockBuilder {
        RedlockBuilder::default()
    }

    pub(crate) fn from_parts(parts: Parts) -> Self {
        let Parts {
            nodes,
            defaults,
            key_prefix,
            node_timeout,
            handover_grace,
            foreign_window,
            quarantine,
            waiters,
        } = parts;
        let foreign_window = if waiters.is_some() {
            foreign_window.min(MAX_FOREIGN_WINDOW)
        } else {
            Duration::ZERO
        };
        Self {
            inner: Arc::new(Inner {
                quorum: timing::quorum(nodes.len()),
                fencing_quorum: timing::fencing_quorum(nodes.len()),
                nodes,
                defaults,
                key_prefix,
                node_timeout,
                waiters,
                handover_grace,
                foreign_window,
                quarantine,
                quarantine_s: if quarantine.is_zero() {
                    0
                } else {
                    quarantine.as_secs() + u64::from(quarantine.subsec_nanos() > 0) + 1
                },
                held: Mutex::new(HashMap::new()),
                runtime: tokio::runtime::Handle::try_current().ok(),
                watchdog: OnceLock::new(),
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

    /// This handle's identity for reentrancy: clones share it.
    pub(crate) fn id(&self) -> usize {
        Arc::as_ptr(&self.inner) as usize
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

    /// Acquires `resource` in `mode` for `ttl`, with the handle's other default options: see
    /// [`Mode`] for the compatibility table and [`LockOptions::mode`] for how mode locks
    /// relate to the plain lock. [`lock_with`](Self::lock_with) and
    /// `options.mode(..)` give every other option.
    ///
    /// ```no_run
    /// # async fn run(redlock: redlock_core::Redlock) -> Result<(), redlock_core::LockError> {
    /// use std::time::Duration;
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
        let options = self.inner.defaults.clone().mode(mode).ttl(ttl);
        self.lock_with(resource, &options).await
    }

    /// Acquires `resource` as a reader ([`Mode::ProtectedRead`]) with the default options:
    /// shared with other readers, excluded by writers.
    ///
    /// # Errors
    /// As [`lock_mode`](Self::lock_mode).
    pub async fn read_lock(&self, resource: &str) -> Result<LockGuard, LockError> {
        let options = self.inner.defaults.clone().mode(Mode::ProtectedRead);
        self.lock_with(resource, &options).await
    }

    /// Acquires `resource` as a writer ([`Mode::Exclusive`]) with the default options: alone
    /// but for NL holders. A writer that asked first is not passed by readers that come after
    /// it.
    ///
    /// # Errors
    /// As [`lock_mode`](Self::lock_mode).
    pub async fn write_lock(&self, resource: &str) -> Result<LockGuard, LockError> {
        let options = self.inner.defaults.clone().mode(Mode::Exclusive);
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
        self.check_quarantine(options.get_ttl())?;
        if self.is_shutting_down() {
            return Err(LockError::ShuttingDown);
        }
        let key = self.key_for(resource);
        if key.contains('\0') {
            // A key prefix holding NUL: the lock's bookkeeping keys.
            return Err(InvalidInput::ReservedResource.into());
        }
        if options.get_reentrant()
            && let Some(reentry) = reentrant::find(self.id(), &key, options.get_mode())
        {
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
                    quorum: self.inner.quorum,
                    outcomes: Outcomes::default(),
                });
            };
            match reentry.enter() {
                Some(Ok(lease)) => return Ok(LockGuard::reentered(self.clone(), lease, turn)),
                Some(Err(reason)) => {
                    return Err(LockError::Lost {
                        resource: resource.to_owned(),
                        reason,
                    });
                }
                // Released meanwhile: acquire afresh.
                None => {}
            }
        }
        let span = tracing::debug_span!(
            "redlock.acquire",
            resource,
            mode = options.get_mode().map(Mode::as_str),
            ttl_ms = options.ttl_millis(),
            nodes = self.inner.nodes.len(),
            quorum = self.inner.quorum,
        );
        self.acquire(resource, key, options).instrument(span).await
    }

    /// Refuses a ttl the node quarantine does not cover (see
    /// [`RedlockBuilder::quarantine`]).
    pub(crate) fn check_quarantine(&self, ttl: Duration) -> Result<(), InvalidInput> {
        let quarantine = self.inner.quarantine;
        if quarantine.is_zero() || ttl <= quarantine {
            return Ok(());
        }
        Err(InvalidInput::TtlAboveQuarantine { ttl, quarantine })
    }

    async fn acquire(
        &self,
        resource: &str,
        key: String,
        options: &LockOptions,
    ) -> Result<LockGuard, LockError> {
        let started = Instant::now();
        // `Some(None)`: a wait too long for the clock (`Duration::MAX`), i.e. until acquired.
        let deadline = options
            .get_wait_timeout()
            .map(|wait| started.checked_add(wait));
        let mut attempts = 0u32;
        let ticket = Ticket::draw();
        let request = options.get_mode().map(|mode| {
            ModeRequest::new(
                mode,
                keys::window(&key),
                ticket.marker.clone(),
                ticket.score_ms,
                self.intent_ttl_ms(options),
            )
        });
        // A mode request that was refused has left a waiter's entry on some nodes.
        let mut entered = false;
        let mut waiting: Option<Listener> = None;
        // Armed while this request may have a place in a queue (a plain waiter's, or a mode
        // request's waiter entry, from its first attempt on): every way out of this function
        // but a grant that keeps the place leaves the queue, this future being dropped
        // included.
        let mut exit = request
            .is_some()
            .then(|| QueueExit::new(self, &key, &ticket.marker, true));
        // The attempt that follows joining the queue is not a retry: it only closes the gap
        // between the first attempt and the subscription.
        let mut free_attempt = false;
        loop {
            if !std::mem::take(&mut free_attempt) {
                attempts += 1;
            }
            let token = Token::generate().map_err(LockError::Entropy)?;
            let place = match (&request, &waiting) {
                (Some(request), _) => Place::Mode(request),
                (None, Some(_)) => Place::Queue(&ticket),
                (None, None) => Place::None,
            };
            let failure = match self.attempt(&key, &token, options, place).await {
                Ok(granted) => {
                    let queued = waiting.is_some() || entered;
                    // A plain waiter leaves the queues of the nodes that did not grant it (a
                    // granting node removed it); a mode request's waiter entries go with its
                    // release.
                    if let Some(exit) = &mut exit {
                        exit.armed = request.is_none() && !granted.everywhere;
                    }
                    let guard = self.register(resource, key, token, options, granted);
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
            if let AttemptFailure::Votes(votes) = &failure {
                entered |= request.is_some() && votes.held() > 0;
            }
            if !retry {
                let error = self.failure_error(resource, attempts, options, failure);
                tracing::debug!(attempts, error = %error, "giving up");
                return Err(error);
            }
            let shutdown = &self.inner.shutdown;
            match (&mut waiting, &self.inner.waiters) {
                // Only a busy resource is worth queueing for: enough nodes answered for a
                // quorum, and some refused. Too few answers is unavailability, which a queue
                // (and subscribing to nodes that do not answer) cannot help.
                (None, Some(waiters))
                    if matches!(&failure, AttemptFailure::Votes(votes)
                        if votes.held() > 0 && votes.acquired() + votes.held() >= self.inner.quorum) =>
                {
                    tracing::trace!(attempts, "busy; joining the waiter queue");
                    let queue = keys::waiters(&key);
                    exit.get_or_insert_with(|| QueueExit::new(self, &key, &ticket.marker, false));
                    waiting = Some(waiters.join(&queue).await);
                    free_attempt = true;
                }
                (Some(listener), _) => {
                    tracing::trace!(attempts, fallback_ms = delay.as_millis() as u64, "waiting");
                    let grace = self.inner.handover_grace;
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
                        quorum: self.inner.quorum,
                    };
                    let wake = listener.wait(&ticket.marker, timing, shutdown).await;
                    if wake == Wake::Shutdown {
                        return Err(LockError::ShuttingDown);
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

    /// Leaves `key`'s waiters on every node, in the background (a waiter that gave up, or was
    /// granted by only some nodes): its place in the queue of plain waiters, or, for a mode
    /// request, its waiter's entry in the holders' hash.
    fn leave_queue(&self, key: &str, marker: &str, mode: bool) {
        let redlock = self.clone();
        let (key, marker) = (key.to_owned(), marker.to_owned());
        self.spawn_background(async move {
            let limit = redlock.inner.node_timeout;
            let queue = keys::waiters(&key);
            let nodes = redlock.inner.nodes.iter();
            futures_util::future::join_all(nodes.map(|node| {
                let leave = async {
                    if mode {
                        node.withdraw(&key, &marker).await
                    } else {
                        node.leave_queue(&queue, &marker).await
                    }
                };
                tokio::time::timeout(limit, leave)
            }))
            .await;
        });
    }

    /// How long a refused mode request's waiter entry lives after each attempt: longer than
    /// the longest wait between two attempts (a retry delay with its jitter, twice, plus the
    /// node timeouts), so that it lives exactly as long as its waiter keeps attempting.
    fn intent_ttl_ms(&self, options: &LockOptions) -> u64 {
        let between = options
            .get_retry_delay()
            .saturating_add(options.get_retry_jitter())
            .min(MAX_RETRY_WAIT)
            .saturating_add(self.inner.node_timeout);
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
        let quorum = self.inner.quorum;
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
                quorum: self.inner.fencing_quorum,
                outcomes,
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

    /// One attempt: Redlock steps 1–5, plus the fencing write-back when asked for.
    async fn attempt(
        &self,
        key: &str,
        token: &Token,
        options: &LockOptions,
        place: Place<'_>,
    ) -> Result<Granted, AttemptFailure> {
        let inner = &self.inner;
        let ttl = options.sent_ttl();
        let ttl_ms = options.ttl_millis();
        let drift = timing::drift(ttl, options.get_drift_factor());
        let limit = inner.node_timeout.min(ttl.saturating_sub(drift));
        let n = inner.nodes.len();
        let fence_key = options.get_fencing().then(|| keys::fencing(key));
        let windows = WindowKeys::of(key);
        let windows = &windows;
        // While windows for foreign clients may open, a plain attempt also looks at the window.
        let windowed = !inner.foreign_window.is_zero();
        // The longest streak of hand-overs a granting node reports.
        let busy_ms = &AtomicU64::new(0);
        let mut cleanup = Cleanup::new(self, key, token, options.get_mode());
        let queued = match place {
            Place::Queue(ticket) => Some(QueuePlace {
                queue: keys::waiters(key),
                windows: WindowKeys::of(key),
                marker: ticket.marker.clone(),
                score_ms: ticket.score_ms,
                queue_ttl_ms: QUEUE_TTL_MS,
            }),
            Place::Mode(_) | Place::None => None,
        };
        let queued = queued.as_ref();

        // Step 1: the monotonic clock, read before the first SET is sent.
        let start = Instant::now();
        // Step 2: all nodes at once, decided at quorum.
        let fence = fence_key.as_deref();
        let quarantine_s = inner.quarantine_s;
        let tally = quorum::decide(
            n,
            inner.quorum,
            limit,
            Stop::Decided,
            inner.nodes.iter().enumerate().map(|(i, node)| async move {
                let token = token.expose();
                let reply = match (place, queued) {
                    (Place::Mode(request), _) => {
                        node.try_lock_mode(key, fence, token, ttl_ms, request, quarantine_s)
                            .await
                    }
                    (_, Some(queued)) => {
                        node.try_lock_queued(key, fence, token, ttl_ms, queued, quarantine_s)
                            .await
                    }
                    _ if fence.is_some() || quarantine_s > 0 => {
                        node.try_lock_scripted(key, windows, fence, token, ttl_ms, quarantine_s)
                            .await
                    }
                    _ if windowed => {
                        node.try_lock_outside_windows(key, windows, token, ttl_ms)
                            .await
                    }
                    _ => AcquireReply::vote(node.try_lock(key, token, ttl_ms).await),
                };
                if matches!(reply.vote, NodeVote::Acquired) {
                    busy_ms.fetch_max(reply.busy_ms, Ordering::Relaxed);
                }
                (i, reply.vote, reply.counter)
            }),
        )
        .await;
        let granted_by = tally.granted;
        let granted = granted_by >= inner.quorum;
        let highest = tally.data.iter().flatten().copied().max().unwrap_or(0);
        let outcomes = tally.outcomes(&inner.nodes);
        tracing::debug!(
            granted = outcomes.acquired(),
            held = outcomes.held(),
            failed = outcomes.failed(),
            elapsed_us = start.elapsed().as_micros() as u64,
            %outcomes,
            "attempt decided"
        );
        if !granted {
            // Step 5: failed; unlock every node, even those we believe we did not lock.
            cleanup.run().await;
            return Err(AttemptFailure::Votes(outcomes));
        }
        let fencing_token = match &fence_key {
            None => None,
            Some(_) => match self.fence(key, highest, limit).await {
                Ok(value) => Some(value),
                Err(outcomes) => {
                    cleanup.run().await;
                    return Err(AttemptFailure::Fence(outcomes));
                }
            },
        };
        // Steps 3–4: elapsed time (including the fencing round) and validity = ttl − elapsed
        // − drift.
        let elapsed = start.elapsed();
        if timing::validity(ttl, elapsed, options.get_drift_factor()).is_none() {
            cleanup.run().await;
            return Err(AttemptFailure::NoValidity(elapsed));
        }
        cleanup.disarm();
        Ok(Granted {
            everywhere: granted_by == n,
            started: start,
            valid_until: start + ttl - drift,
            fencing_token,
            marker: match place {
                Place::Mode(request) => request.marker.clone(),
                Place::Queue(_) | Place::None => String::new(),
            },
            busy: Duration::from_millis(busy_ms.load(Ordering::Relaxed)),
        })
    }

    /// The fencing write-back: claims `highest + 1` on every node as a max register, and
    /// returns it once a fencing quorum ([`timing::fencing_quorum`], 4 of 5) confirmed their
    /// counter was below it. A node reporting a counter at or above the claim (one the read
    /// missed, or a compatible holder's claim) starts another round above it (spread out when
    /// the claim was split, [`FENCE_SPREAD`]). The legacy counter of 0.1.0 counts as a floor.
    ///
    /// Why tokens strictly increase, with one node restarted empty and any minority cut off
    /// (crate docs, "Fencing tokens"): let P be the previous holder with a token t. P's
    /// confirmations came before P's lock was returned, so before its validity ended, so
    /// before our lock was granted (Redlock's exclusion), so before this round. Any two
    /// fencing quorums share `2F − N` nodes (3 of 5); while fewer than that many lost their
    /// data since P's round, one still holds a counter ≥ t and confirmed our claim only
    /// because the claim was above it. (Compatible holders of a mode lock are not ordered by
    /// exclusion: their tokens are distinct, in no particular order.)
    async fn fence(&self, key: &str, highest: u64, limit: Duration) -> Result<u64, Outcomes> {
        let inner = &self.inner;
        let (fence_key, legacy_key) = (keys::fencing(key), keys::legacy_fencing(key));
        let (fence_key, legacy_key) = (fence_key.as_str(), legacy_key.as_str());
        let mut claim = highest.saturating_add(1);
        let mut last = Outcomes::default();
        for _ in 0..FENCE_ROUNDS {
            let tally = quorum::decide(
                inner.nodes.len(),
                inner.fencing_quorum,
                limit,
                Stop::Decided,
                inner.nodes.iter().enumerate().map(|(i, node)| async move {
                    let (vote, before) = node.fence(fence_key, legacy_key, claim).await;
                    (i, vote, before)
                }),
            )
            .await;
            if tally.granted >= inner.fencing_quorum {
                return Ok(claim);
            }
            let above = tally
                .data
                .iter()
                .flatten()
                .copied()
                .filter(|&c| c >= claim)
                .max();
            let split = tally.granted > 0;
            last = tally.outcomes(&inner.nodes);
            match above {
                Some(counter) => {
                    let spread = if split {
                        rand::rng().random_range(0..=FENCE_SPREAD)
                    } else {
                        0
                    };
                    claim = counter.saturating_add(1).saturating_add(spread);
                }
                None => break,
            }
        }
        tracing::debug!(outcomes = %last, "fencing write-back not confirmed by a fencing quorum");
        Err(last)
    }

    fn register(
        &self,
        resource: &str,
        key: String,
        token: Token,
        options: &LockOptions,
        granted: Granted,
    ) -> LockGuard {
        let parts = LeaseParts {
            id: self.inner.next_id.fetch_add(1, Ordering::Relaxed),
            resource: resource.to_owned(),
            key,
            token,
            marker: granted.marker,
            valid_until: granted.valid_until,
            fencing_token: granted.fencing_token,
            busy: granted.busy,
        };
        let lease = Arc::new(Lease::new(parts, options, granted.started));
        self.held().insert(lease.id, Arc::clone(&lease));
        if lease.auto_extend.is_some() {
            self.watchdog().watch(Arc::clone(&lease));
        }
        LockGuard::new(self.clone(), lease)
    }

    fn watchdog(&self) -> &Watchdog {
        self.inner.watchdog.get_or_init(|| {
            Watchdog::start(Arc::downgrade(&self.inner), self.inner.runtime.as_ref())
        })
    }

    pub(crate) fn from_inner(inner: Arc<Inner>) -> Self {
        Self { inner }
    }

    pub(crate) fn inner(&self) -> &Inner {
        &self.inner
    }

    fn held(&self) -> MutexGuard<'_, HashMap<u64, Arc<Lease>>> {
        self.inner
            .held
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// A guard is done with `lease`: drop one hold, and when it was the last, fire the lost
    /// signal (released) and stop extending; the caller then releases it on the nodes.
    pub(crate) fn finish(&self, lease: &Lease) -> Finish {
        if !reentrant::leave(lease) {
            return Finish::Kept;
        }
        if !self.retire(lease) {
            return Finish::AlreadyReleased;
        }
        Finish::Release
    }

    /// Takes a lease out of the registry and the driver, and fires its lost signal; `false`
    /// if it was already retired (e.g. by [`release_all`](Self::release_all)).
    fn retire(&self, lease: &Lease) -> bool {
        if self.held().remove(&lease.id).is_none() {
            return false;
        }
        lease.mark_lost(LostReason::Released);
        if let Some(watchdog) = self.inner.watchdog.get() {
            watchdog.unwatch(lease.id);
        }
        true
    }

    /// What a kept (reentrant, not last) release reports.
    pub(crate) fn kept(&self) -> Released {
        Released {
            deleted: 0,
            answered: 0,
            nodes: self.inner.nodes.len(),
            quorum: self.inner.quorum,
            kept: true,
        }
    }

    /// Releases `key` signed by `token` on every node at once (compare-and-delete), decided
    /// at quorum: it returns as soon as a quorum confirmed the delete (the other nodes'
    /// commands are already sent and land anyway), otherwise once every node answered or the
    /// node timeout passed, so that the report is exact when the lock was not fully held.
    ///
    /// A holder's plain key goes, with waking on, to the longest queued waiter (a failed
    /// attempt's key is just deleted), unless the key has been busy for
    /// [`FOREIGN_WINDOW_EVERY`] windows by the holder's count: then a release that finds a
    /// waiter opens a window for foreign clients instead
    /// ([`RELEASE_HANDOVER`](crate::node::RELEASE_HANDOVER)). A mode request removes only its own entry, and wakes
    /// the resource's waiters ([`RELEASE_MODE`](crate::holders::RELEASE_MODE)).
    pub(crate) async fn release_key(
        &self,
        key: &str,
        token: &Token,
        releasing: Releasing<'_>,
    ) -> Released {
        let inner = &self.inner;
        let millis = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        let busy = match releasing {
            Releasing::Holder(_, _, busy) => busy,
            Releasing::Attempt(_) => Duration::ZERO,
        };
        let window = inner.foreign_window;
        let handover = inner.waiters.is_some().then(|| Handover {
            channel: keys::waiters(key),
            grace_ms: millis(inner.handover_grace),
            windows: WindowKeys::of(key),
            window_ms: millis(window),
            window_due: !window.is_zero() && busy >= window.saturating_mul(FOREIGN_WINDOW_EVERY),
            busy_ms: millis(busy),
            busy_ttl_ms: QUEUE_TTL_MS,
        });
        let handover = handover.as_ref();
        let tally = quorum::decide(
            inner.nodes.len(),
            inner.quorum,
            inner.node_timeout,
            Stop::Granted,
            inner.nodes.iter().enumerate().map(|(i, node)| async move {
                let token = token.expose();
                let channel = handover.map(|h| h.channel.as_str());
                let limit = inner.node_timeout;
                let released = match releasing {
                    Releasing::Attempt(None) => node.unlock(key, token, None, limit).await,
                    Releasing::Holder(None, _, _) => node.unlock(key, token, handover, limit).await,
                    Releasing::Attempt(Some(_)) => {
                        node.unlock_mode(key, token, channel, None, limit).await
                    }
                    Releasing::Holder(Some(_), marker, _) => {
                        node.unlock_mode(key, token, channel, Some(marker), limit)
                            .await
                    }
                };
                let vote = match released {
                    Ok(true) => NodeVote::Acquired,
                    Ok(false) => NodeVote::Held,
                    Err(e) => NodeVote::Failed(e),
                };
                (i, vote, ())
            }),
        )
        .await;
        Released {
            deleted: tally.granted,
            answered: tally.granted + tally.refused,
            nodes: inner.nodes.len(),
            quorum: inner.quorum,
            kept: false,
        }
    }

    /// Releases a holder's lease on every node ([`release_key`](Self::release_key), waking
    /// the waiters).
    pub(crate) async fn release_lease(&self, lease: &Lease) -> Released {
        let releasing = Releasing::Holder(lease.mode, &lease.marker, lease.busy());
        self.release_key(&lease.key, &lease.token, releasing).await
    }

    /// Runs `work` in a tracked task ([`shutdown`](Self::shutdown) waits for it) on the
    /// runtime the handle was built on, where its node connections are driven: a guard
    /// dropped by a second runtime that is shutting down is still released by the first.
    /// Without that runtime, on the current one; `false` when there is none.
    pub(crate) fn spawn_background(&self, work: impl Future<Output = ()> + Send + 'static) -> bool {
        let handle = match &self.inner.runtime {
            Some(handle) => handle.clone(),
            None => match tokio::runtime::Handle::try_current() {
                Ok(handle) => handle,
                Err(_) => return false,
            },
        };
        self.inner.tracker.spawn_on(work, &handle);
        true
    }

    /// Releases a dropped guard's lease in the background ([`spawn_background`]); `false`
    /// where nothing can be sent. If the release never runs (no runtime, or the runtime shut
    /// down first), a warning says so: the lock then expires with its ttl.
    ///
    /// [`spawn_background`]: Self::spawn_background
    pub(crate) fn spawn_release(&self, lease: Arc<Lease>) -> bool {
        let redlock = self.clone();
        let span = tracing::debug_span!("redlock.release", resource = %lease.resource);
        // Made before the task: a task dropped before its first poll reports too.
        let unsent = Unsent(Some(lease.resource.clone()));
        self.spawn_background(
            async move {
                let released = redlock.release_lease(&lease).await;
                unsent.sent();
                tracing::debug!(
                    deleted = released.deleted,
                    answered = released.answered,
                    "released"
                );
            }
            .instrument(span),
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

    /// Releases, by quorum compare-and-delete, every lock still held through this handle (the
    /// release registry: every guard handed out and not yet released), and reports which
    /// releases a quorum confirmed. Their lost signals fire (reason
    /// [`LostReason::Released`]), their auto-extension stops, and their guards become inert.
    ///
    /// A release that fewer than a quorum answered (a node timeout under load, a node
    /// briefly away) is sent again, up to [`RELEASE_ROUNDS`] rounds in all, each bounded by
    /// the node timeout; a release is idempotent (a node that already deleted answers "not
    /// held"). Safe against a late holder: a release only deletes a key still signed by our
    /// token, so it can never delete a lock another process took after ours expired.
    pub async fn release_all(&self) -> ReleaseAllReport {
        let leases: Vec<Arc<Lease>> = self.held().values().cloned().collect();
        let mut pending: Vec<Arc<Lease>> = leases.into_iter().filter(|l| self.retire(l)).collect();
        let mut report = ReleaseAllReport::default();
        for _ in 0..RELEASE_ROUNDS {
            let results = futures_util::future::join_all(
                pending
                    .iter()
                    .map(|lease| async move { (lease, self.release_lease(lease).await) }),
            )
            .await;
            let mut again = Vec::new();
            for (lease, released) in results {
                if released.answered >= self.inner.quorum {
                    report.released.push(lease.resource.clone());
                } else {
                    again.push(Arc::clone(lease));
                }
            }
            pending = again;
            if pending.is_empty() {
                break;
            }
        }
        report.unconfirmed = pending.iter().map(|l| l.resource.clone()).collect();
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
    mode: Option<Mode>,
    armed: bool,
}

impl<'a> Cleanup<'a> {
    fn new(redlock: &'a Redlock, key: &'a str, token: &'a Token, mode: Option<Mode>) -> Self {
        Self {
            redlock,
            key,
            token,
            mode,
            armed: true,
        }
    }

    fn disarm(&mut self) {
        self.armed = false;
    }

    async fn run(&mut self) {
        let releasing = Releasing::Attempt(self.mode);
        self.redlock
            .release_key(self.key, self.token, releasing)
            .await;
        self.armed = false;
    }
}

impl Drop for Cleanup<'_> {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let redlock = self.redlock.clone();
        let (key, token, mode) = (self.key.to_owned(), self.token.clone(), self.mode);
        self.redlock.spawn_background(async move {
            redlock
                .release_key(&key, &token, Releasing::Attempt(mode))
                .await;
        });
    }
}

/// Warns, when dropped before [`sent`](Self::sent), that a dropped guard's release never ran:
/// there was no runtime, or it shut down first. Silence would hide a lock that stays until
/// its ttl.
struct Unsent(Option<String>);

impl Unsent {
    fn sent(mut self) {
        self.0 = None;
    }
}

impl Drop for Unsent {
    fn drop(&mut self) {
        if let Some(resource) = self.0.take() {
            tracing::warn!(
                resource,
                "the release of a dropped lock guard never ran (no tokio runtime, or it shut down first); the lock expires with its ttl"
            );
        }
    }
}

/// Leaves a request's place in the queue when dropped while armed
/// ([`Redlock::leave_queue`]: in the background, each node bounded by the node timeout): a
/// waiter that gave up, failed, or whose future was dropped while it waited does not keep
/// costing the resource a hand-over grace per release.
struct QueueExit {
    redlock: Redlock,
    key: String,
    marker: String,
    /// A mode request's waiter entry, rather than a plain waiter's place.
    mode: bool,
    armed: bool,
}

impl QueueExit {
    fn new(redlock: &Redlock, key: &str, marker: &str, mode: bool) -> Self {
        Self {
            redlock: redlock.clone(),
            key: key.to_owned(),
            marker: marker.to_owned(),
            mode,
            armed: true,
        }
    }
}

impl Drop for QueueExit {
    fn drop(&mut self) {
        if self.armed {
            self.redlock.leave_queue(&self.key, &self.marker, self.mode);
        }
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
