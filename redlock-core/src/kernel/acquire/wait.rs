//! The acquisition loop: performs the steps [`decide`] chooses between single
//! attempts — random retry delays, joining the waiter queue when the resource is busy, waking
//! on hand-over messages, a split vote's short random delays — and leaves the queue on every
//! way out but a grant that keeps the place.

use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

use tokio_util::sync::CancellationToken;

use super::attempt::{AttemptFailure, Granted};
use super::decide::{self, Deadline, LoopState, MAX_RETRY_WAIT, Policy, SPLIT_RETRIES, Step};
use crate::error::LockError;
use crate::kernel::commands::{AcquireKind, LazyWaiter, ModeRequest};
use crate::kernel::guard::LockGuard;
use crate::kernel::redlock::Redlock;
use crate::kernel::waiters::{Listener, WaitTiming, Wake};
use crate::keys::ResourceKeys;
use crate::mode::Mode;
use crate::options::LockOptions;
use crate::telemetry::Acquisition;
use crate::token::Token;

/// What one kind of acquisition asks of the kernel: its attempt on every node, and how it
/// waits. The kernel's loop ([`Redlock::acquire_loop`]) draws the token, counts the attempts,
/// decides after each failure (`decide.rs`), joins and leaves the waiter queue and sleeps; a
/// protocol only makes one attempt. The plain lock of one resource is [`One`]; each other
/// primitive is a slice that implements this trait.
pub(crate) trait Protocol: Sync {
    /// Whether a request that waits joins the resource's waiter queue (and is woken by a
    /// release); otherwise it attempts again after its retry delays.
    fn queues(&self) -> bool {
        true
    }

    /// The mode of a lock taken in one (`None`: the plain lock, or not a lock).
    fn mode(&self) -> Option<Mode> {
        None
    }

    /// A semaphore's permits, for the acquisition's span and metrics labels.
    fn permits(&self) -> Option<u32> {
        None
    }

    /// A semaphore's `alive` set, which keeps an entry per queued waiter and is left with the
    /// queue.
    fn alive(&self) -> Option<&str> {
        None
    }

    /// One attempt (Redlock steps 1–5 for this primitive): on failure, what it took is
    /// released on every node before it returns, and in the background if it is dropped.
    fn attempt<'a>(
        &'a self,
        redlock: &'a Redlock,
        ask: Ask<'a>,
        acquisition: &'a mut Acquisition,
    ) -> impl Future<Output = Result<Granted, AttemptFailure>> + Send + 'a;
}

/// What the loop gives one attempt.
pub(crate) struct Ask<'a> {
    /// The keys of the acquisition (its queue's, for a permit).
    pub(crate) keys: &'a ResourceKeys,
    /// This attempt's token.
    pub(crate) token: &'a Token,
    /// The acquisition's options.
    pub(crate) options: &'a LockOptions,
    /// A plain attempt, a queued waiter's, or a mode request's.
    pub(crate) kind: AcquireKind<'a>,
    /// Refused while a window for foreign clients is open.
    pub(crate) windowed: bool,
    /// Reads the streak of hand-overs.
    pub(crate) streak: bool,
    /// The acquisition's waiter identity.
    pub(crate) waiter: &'a LazyWaiter,
    /// The waiter has joined the queue.
    pub(crate) queued: bool,
    /// How long a waiter's entry counts after this attempt, in ms.
    pub(crate) alive_ms: u64,
    /// May be the node's own `SET NX PX` ([`AcquireRequest::native`]).
    ///
    /// [`AcquireRequest::native`]: crate::kernel::commands::AcquireRequest
    pub(crate) native: bool,
}

/// The lock of one resource, plain (queued when it waits) or in a mode: the kernel's own
/// attempt.
pub(crate) struct One(pub(crate) Option<Mode>);

impl Protocol for One {
    fn mode(&self) -> Option<Mode> {
        self.0
    }

    fn attempt<'a>(
        &'a self,
        redlock: &'a Redlock,
        ask: Ask<'a>,
        acquisition: &'a mut Acquisition,
    ) -> impl Future<Output = Result<Granted, AttemptFailure>> + Send + 'a {
        let windows = (ask.kind, ask.windowed, ask.streak, ask.native);
        let keys = std::slice::from_ref(ask.keys);
        redlock.attempt(keys, ask.token, ask.options, windows, acquisition)
    }
}

/// A waiter that saw another waiter named attempts this long after the grace if nothing else
/// happened: by then the reservation has expired if the named waiter did not take it.
const AFTER_OTHER_SLACK: Duration = Duration::from_millis(5);

/// The shortest life of a mode request's waiter entry.
const MIN_INTENT_TTL: Duration = Duration::from_millis(100);

/// A waiter named for a window attempts this long after the window (its message arrived after
/// the window opened on that node, so the window there has closed by then).
const AFTER_WINDOW_SLACK: Duration = Duration::from_millis(2);

impl Redlock {
    /// Attempts until a grant, the retries or the wait deadline run out, or shutdown: a busy
    /// resource's waiter joins its queue and sleeps until a release wakes it (or its retry
    /// delay passes); every exit but a grant that keeps its place leaves the queue. What to
    /// do after each attempt is [`LoopState::after_failure`]'s decision.
    pub(super) async fn acquire_loop<P: Protocol>(
        &self,
        resource: &str,
        keys: ResourceKeys,
        protocol: P,
        options: &LockOptions,
        acquisition: &mut Acquisition,
    ) -> Result<LockGuard, LockError> {
        let mode = protocol.mode();
        let mut policy = self.policy(resource, options, mode.is_some(), Instant::now());
        policy.queue &= protocol.queues();
        policy.permits = protocol.permits();
        // A request that polls takes a key a window left free, as a foreign client does.
        let polls = policy.polls() && !self.inner().foreign_window.is_zero();
        let windowed = !self.inner().foreign_window.is_zero() && !polls;
        let mut state = LoopState::default();
        let waiter = LazyWaiter::starting_now();
        let request =
            mode.map(|mode| ModeRequest::new(mode, waiter.get(), self.intent_ttl_ms(options)));
        let mut waiting: Option<Listener> = None;
        // Armed while this request may have a place in a queue (a plain waiter's, or a mode
        // request's waiter entry, from its first attempt on): every way out of this function
        // but a grant that keeps the place leaves the queue, this future being dropped
        // included.
        let alive = protocol.alive();
        let mut exit = request
            .is_some()
            .then(|| QueueExit::new(self, &keys, &waiter.get().marker, true, None));
        loop {
            let attempts = state.begin_attempt();
            acquisition.attempting(attempts);
            let token = Token::generate().map_err(LockError::Entropy)?;
            let kind = match (&request, state.listening()) {
                (Some(request), _) => AcquireKind::Mode(request),
                (None, true) => AcquireKind::Queued(waiter.get()),
                (None, false) => AcquireKind::Plain,
            };
            // A plain attempt checks for a window and reads the streak only on a key seen
            // contended lately: the spec's `SET NX PX` alone everywhere else (`contended`).
            let streak = !self.inner().foreign_window.is_zero()
                && (!matches!(kind, AcquireKind::Plain) || self.inner().contended.is(&keys.lock));
            let windowed = windowed && streak;
            let ask = Ask {
                keys: &keys,
                token: &token,
                options,
                kind,
                windowed,
                streak,
                waiter: &waiter,
                queued: state.listening(),
                alive_ms: self.intent_ttl_ms(options),
                // The first attempt of a request that may attempt again: the last attempt's
                // refusal comes from the script, which says how long the holder has left.
                native: attempts == 1 && policy.deadline != decide::Deadline::Retries(0),
            };
            let attempt = protocol.attempt(self, ask, acquisition).await;
            let failure = match attempt {
                Ok(granted) => {
                    if !granted.grant.busy.is_zero() {
                        // A streak of hand-overs: this lock's release may open a window.
                        self.inner().contended.mark(&keys.lock);
                    }
                    let queued = state.queued();
                    if let Some(exit) = &mut exit {
                        exit.armed = policy.leaves_queue_after_grant(granted.everywhere);
                    }
                    let class = acquisition.class();
                    // A permit's lease holds its slot's keys.
                    let keys = granted.slot_keys.unwrap_or(keys);
                    let guard = self.register(resource, class, keys, token, options, granted.grant);
                    if let Err(error) = decide::keep_grant(self.is_shutting_down()) {
                        // Shutdown began during the attempt: refuse, and release what was
                        // taken (the guard's drop; `shutdown` waits for it).
                        drop(guard);
                        return Err(error);
                    }
                    tracing::debug!(attempts, queued, "acquired");
                    return Ok(guard);
                }
                Err(failure) => failure,
            };
            if failure.refused_by_a_holder() {
                self.inner().contended.mark(&keys.lock);
            }
            let jitter = crate::random::delay_up_to(options.retry_jitter);
            let step = state.after_failure(&policy, failure, jitter, Instant::now());
            let shutdown = &self.inner().shutdown;
            let wake = match step {
                Step::GiveUp(error) => {
                    tracing::debug!(attempts, error = %error, "giving up");
                    return Err(error);
                }
                Step::SplitRetry { spread } => {
                    let delay = crate::random::delay_up_to(spread);
                    tracing::debug!(
                        attempts,
                        delay_ms = delay.as_millis() as u64,
                        "split vote; attempting again"
                    );
                    sleep(delay, shutdown).await
                }
                Step::JoinQueue => {
                    tracing::trace!(attempts, "busy; joining the waiter queue");
                    exit.get_or_insert_with(|| {
                        QueueExit::new(self, &keys, &waiter.get().marker, false, alive)
                    });
                    if let Some(waiters) = &self.inner().waiters {
                        waiting = Some(waiters.join(keys.waiters()).await);
                    }
                    continue;
                }
                Step::AwaitHandover { fallback, longest } => {
                    tracing::trace!(
                        attempts,
                        fallback_ms = fallback.as_millis() as u64,
                        "waiting"
                    );
                    let timing = self.wait_timing(fallback, longest);
                    let wake = match &mut waiting {
                        Some(listener) => {
                            listener.wait(&waiter.get().marker, timing, shutdown).await
                        }
                        None => sleep(fallback, shutdown).await,
                    };
                    match wake {
                        Wake::Named => acquisition.woken(true),
                        Wake::Timer => acquisition.woken(false),
                        Wake::Shutdown => {}
                    }
                    wake
                }
                Step::Retry { delay } => {
                    tracing::trace!(attempts, delay_ms = delay.as_millis() as u64, "retrying");
                    sleep(delay, shutdown).await
                }
            };
            decide::after_wait(wake)?;
        }
    }

    /// The decision's view of an acquisition of `resource` with `options` started at
    /// `started`.
    fn policy<'a>(
        &self,
        resource: &'a str,
        options: &LockOptions,
        mode: bool,
        started: Instant,
    ) -> Policy<'a> {
        Policy {
            resource,
            deadline: Deadline::new(options.wait_timeout, options.retry_count, started),
            retry_delay: options.retry_delay,
            quorum: self.quorum(),
            fencing_quorum: self.fencing_quorum(),
            nodes: self.node_count(),
            ttl: options.sent_ttl(),
            mode,
            queue: self.inner().waiters.is_some(),
            permits: None,
            split_retries: SPLIT_RETRIES,
        }
    }

    /// How a waiter in the queue waits for a hand-over message: attempting anyway after
    /// `fallback`, and never waiting for a window past `longest`; the other spans follow
    /// from the handle's hand-over grace.
    fn wait_timing(&self, fallback: Duration, longest: Duration) -> WaitTiming {
        let grace = self.inner().handover_grace;
        WaitTiming {
            fallback,
            after_other: grace + AFTER_OTHER_SLACK,
            settle: grace / 2,
            after_window: AFTER_WINDOW_SLACK,
            longest,
            quorum: self.quorum(),
        }
    }

    /// Leaves the resource's waiters on every node, in the background (a waiter that gave up,
    /// or was granted by only some nodes): its place in the queue of plain waiters, or, for a
    /// mode request, its waiter's entry in the holders' hash; for a permit, its entry in the
    /// semaphore's `alive` set too.
    fn leave_queue(&self, keys: ResourceKeys, marker: String, mode: bool, alive: Option<String>) {
        let masters = Arc::clone(self.masters());
        self.spawn_background(async move {
            let limit = masters.node_timeout;
            let leave = masters.nodes.iter().map(|node| {
                let leave = node.leave(&keys, &marker, mode, alive.as_deref());
                tokio::time::timeout(limit, leave)
            });
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
    pub(super) fn intent_ttl_ms(&self, options: &LockOptions) -> u64 {
        let node_timeout = self.masters().node_timeout.min(crate::options::MAX_TTL);
        let between = options
            .retry_delay
            .saturating_add(options.retry_jitter)
            .min(MAX_RETRY_WAIT)
            .saturating_add(node_timeout);
        let ttl = between.saturating_mul(2);
        u64::try_from(ttl.max(MIN_INTENT_TTL).as_millis()).unwrap_or(u64::MAX)
    }
}

/// Sleeps `delay`, or less if the handle begins shutting down: [`Wake::Timer`] or
/// [`Wake::Shutdown`].
async fn sleep(delay: Duration, shutdown: &CancellationToken) -> Wake {
    tokio::select! {
        biased;
        () = shutdown.cancelled() => Wake::Shutdown,
        () = tokio::time::sleep(delay) => Wake::Timer,
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
    /// A semaphore's `alive` set, which keeps an entry per queued waiter.
    alive: Option<String>,
    armed: bool,
}

impl QueueExit {
    fn new(
        redlock: &Redlock,
        keys: &ResourceKeys,
        marker: &str,
        mode: bool,
        alive: Option<&str>,
    ) -> Self {
        Self {
            redlock: redlock.clone(),
            keys: keys.clone(),
            marker: marker.to_owned(),
            mode,
            alive: alive.map(str::to_owned),
            armed: true,
        }
    }
}

impl Drop for QueueExit {
    fn drop(&mut self) {
        if self.armed {
            let (keys, marker) = (self.keys.clone(), std::mem::take(&mut self.marker));
            let alive = self.alive.take();
            self.redlock.leave_queue(keys, marker, self.mode, alive);
        }
    }
}
