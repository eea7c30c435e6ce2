//! The retry and wait policy of an acquisition, as a decision with no I/O: from what the last
//! attempt came to and what the loop remembers of the earlier ones, the next step — attempt
//! again after the retry delay, join the waiter queue, wait for a hand-over message (or a
//! window for foreign clients to pass), attempt again after a split vote's random delay, or
//! give up with an error.
//!
//! Nothing here reads the clock, draws a random number or talks to a node: the loop in
//! [`wait`](super::wait) passes the time and the random jitter in, draws a split vote's delay
//! from the range a step names, and performs the step.

use std::time::Duration;
use tokio::time::Instant;

use super::attempt::{AttemptFailure, Split};
use crate::error::LockError;
use crate::kernel::waiters::Wake;
use crate::outcome::Outcomes;

/// The longest wait between two attempts, whatever the retry delay: a waiter attempts at
/// least once a minute (releases wake it sooner). It bounds how long a crashed mode
/// request's waiter entry, which must outlive the wait, holds up incompatible requests, and
/// keeps the node's expiry arithmetic exact.
pub(super) const MAX_RETRY_WAIT: Duration = Duration::from_secs(60);

// A waiter's place in the queue and its listen flag outlive the longest wait between its
// attempts.
const _: () = assert!(crate::kernel::commands::QUEUE_TTL_MS > MAX_RETRY_WAIT.as_millis() as u64);

/// Attempts after a split vote beyond the retries and the wait deadline: enough for one of
/// several contenders that split the vote to take the resource alone (each backs off for a
/// random delay, see [`SPLIT_BACKOFF`]), few enough that a resource that stays split is
/// reported soon.
pub(super) const SPLIT_RETRIES: u32 = 6;

/// The longest random delay before the first attempt after a split vote; it doubles at each
/// one after (20, 40, …, 640 ms: at most 1.26 s in all). Longer than a round and its
/// clean-up on a local network, so that the first contender to attempt again finds every
/// node free, and the others then find it held.
const SPLIT_BACKOFF: Duration = Duration::from_millis(20);

/// When an acquisition stops attempting (the attempts after a split vote aside).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Deadline {
    /// After the first attempt and this many retries (`retry_count`, no `wait_timeout`).
    Retries(u32),
    /// At this instant: `wait_timeout` after the acquisition started.
    At(Instant),
    /// Never: a `wait_timeout` too long for the clock (`Duration::MAX`, `wait_forever`), so
    /// only a grant or shutdown ends the wait.
    Never,
}

impl Deadline {
    /// The deadline of an acquisition started at `started`: `wait_timeout` when given (the
    /// retry count then does not count), else `retry_count` retries.
    /// A `wait_timeout` of zero is one attempt, as `retry_count(0)` is.
    pub(super) fn new(wait_timeout: Option<Duration>, retry_count: u32, started: Instant) -> Self {
        match wait_timeout {
            None => Self::Retries(retry_count),
            Some(Duration::ZERO) => Self::Retries(0),
            Some(wait) => started.checked_add(wait).map_or(Self::Never, Self::At),
        }
    }

    /// The time left at `now` before a deadline at an instant (zero once it has passed);
    /// `None` for the other deadlines.
    fn left(self, now: Instant) -> Option<Duration> {
        match self {
            Self::At(at) => Some(at.saturating_duration_since(now)),
            Self::Retries(_) | Self::Never => None,
        }
    }

    /// Whether a failed attempt may be followed by another at `now`, after `attempts`
    /// attempts: while the retries last, or before the wait deadline.
    fn allows_retry(self, attempts: u32, now: Instant) -> bool {
        match self {
            Self::Retries(retries) => attempts <= retries,
            Self::At(_) => self.left(now).is_some_and(|left| !left.is_zero()),
            Self::Never => true,
        }
    }
}

/// What the decision knows of an acquisition that does not change between its attempts.
#[derive(Debug, Clone)]
pub(super) struct Policy<'a> {
    /// The resource, named in the error given up with.
    pub(super) resource: &'a str,
    /// When to stop attempting.
    pub(super) deadline: Deadline,
    /// The delay between two attempts before its random jitter (`retry_delay`).
    pub(super) retry_delay: Duration,
    /// Nodes that must grant a lock: N / 2 + 1.
    pub(super) quorum: usize,
    /// Nodes that must confirm a fencing token.
    pub(super) fencing_quorum: usize,
    /// Nodes in all (N).
    pub(super) nodes: usize,
    /// The ttl sent to the nodes (whole milliseconds), named in [`LockError::NoValidity`].
    pub(super) ttl: Duration,
    /// A request in a mode: a refusal leaves its waiter's entry on the refusing nodes, and
    /// those entries go with its release rather than when it is granted.
    pub(super) mode: bool,
    /// The handle wakes waiters on release (hand-over on): a busy resource is worth joining
    /// the waiter queue for.
    pub(super) queue: bool,
    /// A semaphore's number of permits ([`Protocol::permits`](super::Protocol::permits)),
    /// named in [`LockError::PermitsMismatch`].
    pub(super) permits: Option<u32>,
    /// Attempts after a split vote beyond the retries and the wait deadline:
    /// [`SPLIT_RETRIES`] (the protocol model explores fewer, to bound its depth).
    pub(super) split_retries: u32,
}

impl Policy<'_> {
    /// Whether this request polls, as a foreign client does: it never waits in the queue
    /// (one attempt and no wait, or no queue for it), so hand-overs never serve it. Such a
    /// request takes a key that a window for foreign clients left free.
    pub(super) fn polls(&self) -> bool {
        !self.queue || self.deadline == Deadline::Retries(0)
    }

    /// Whether a granted request still leaves the waiter queue: a plain waiter granted by
    /// only some nodes (each granting node took it out of its own queue, the others did
    /// not). A mode request's waiter entries go with its release instead.
    pub(super) fn leaves_queue_after_grant(&self, everywhere: bool) -> bool {
        !self.mode && !everywhere
    }

    /// The delay before the next attempt after a failure at `now`: the retry delay plus
    /// `jitter` (drawn by the caller), at most [`MAX_RETRY_WAIT`] and the time left before
    /// the wait deadline.
    fn retry_delay(&self, jitter: Duration, now: Instant) -> Duration {
        let delay = self.retry_delay.saturating_add(jitter).min(MAX_RETRY_WAIT);
        self.deadline
            .left(now)
            .map_or(delay, |left| delay.min(left))
    }

    /// Whether `failure` found the resource busy enough to queue for: enough nodes answered
    /// for a quorum, and some refused. Too few answers is unavailability, which a queue (and
    /// subscribing to nodes that do not answer) cannot help.
    fn worth_queueing(&self, failure: &AttemptFailure) -> bool {
        matches!(failure, AttemptFailure::Votes { outcomes, .. }
            if outcomes.held() > 0 && outcomes.acquired() + outcomes.held() >= self.quorum)
    }

    /// The error an acquisition that gives up after `attempts` attempts returns, the last
    /// one having failed with `failure`.
    pub(super) fn error(&self, attempts: u32, failure: AttemptFailure) -> LockError {
        let resource = self.resource.to_owned();
        let quorum = self.quorum;
        match failure {
            AttemptFailure::NoValidity(elapsed) => LockError::NoValidity {
                resource,
                attempts,
                elapsed,
                ttl: self.ttl,
            },
            AttemptFailure::Fence(outcomes) => LockError::Unavailable {
                resource,
                attempts,
                quorum: self.fencing_quorum,
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
            AttemptFailure::Votes { outcomes, .. } => self.refused(attempts, outcomes),
            AttemptFailure::Scattered(outcomes) => LockError::SplitVote {
                resource,
                attempts,
                quorum,
                outcomes,
            },
        }
    }

    /// Whether enough nodes store another number of permits that no quorum can grant this
    /// one: more than `N − quorum`. Fewer (a node restored from an old snapshot, say) are
    /// failed nodes: the attempt goes on, and their stored number expires with its slots.
    fn permits_rule_out_a_quorum(&self, outcomes: &Outcomes) -> bool {
        outcomes.permits_mismatched() > self.nodes - self.quorum
    }

    /// The error of a refused attempt that was not a certain split: data we did not write
    /// at the key ([`LockError::ForeignKey`]), else busy or unavailable.
    fn refused(&self, attempts: u32, outcomes: Outcomes) -> LockError {
        let resource = self.resource.to_owned();
        let quorum = self.quorum;
        if let Some(error) = LockError::foreign_key(&resource, quorum, &outcomes) {
            return error;
        }
        if self.permits_rule_out_a_quorum(&outcomes)
            && let Some(stored) = outcomes.permits_mismatch()
        {
            return LockError::PermitsMismatch {
                resource,
                permits: self.permits.unwrap_or(0),
                stored,
                outcomes,
            };
        }
        // Busy when the nodes that did not fail could have made a quorum (those left
        // unawaited once the attempt was decided did not fail), or when refusals alone rule
        // one out; otherwise too few answered to decide.
        let usable = self.nodes - outcomes.failed();
        if usable >= quorum || outcomes.held() > self.nodes - quorum {
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

/// The next step of an acquisition after an attempt failed.
#[derive(Debug)]
pub(super) enum Step {
    /// Sleep this long (the retry delay), then attempt again.
    Retry {
        /// The delay.
        delay: Duration,
    },
    /// Join the resource's waiter queue (subscribing to its hand-over messages), then attempt
    /// again at once: that attempt is not a retry, it only closes the gap between the failed
    /// attempt and the subscription.
    JoinQueue,
    /// Wait for a hand-over message naming this waiter, or for a window for foreign clients
    /// that named it to pass, then attempt again.
    AwaitHandover {
        /// Attempt anyway after this long without a message (the retry delay).
        fallback: Duration,
        /// The longest a wait for a window may last: the time left before the wait
        /// deadline, else [`MAX_RETRY_WAIT`].
        longest: Duration,
    },
    /// A split vote (nobody holds the resource) with the retries or the wait run out: attempt
    /// again after a random delay the caller draws from zero to `spread` (both included).
    SplitRetry {
        /// The longest delay.
        spread: Duration,
    },
    /// Stop and return this error.
    GiveUp(LockError),
}

/// What the acquisition loop remembers between attempts.
#[derive(Debug, Default, Clone, PartialEq, Eq, Hash)]
pub(super) struct LoopState {
    /// Attempts made, the one after joining the queue not counted.
    attempts: u32,
    /// The next attempt is not counted: it follows joining the queue.
    free_attempt: bool,
    /// Attempts made after a split vote once the retries or the wait had run out.
    split_retries: u32,
    /// The holders named by the nodes that refused the last refused attempt (each once,
    /// sorted), when it was a split; empty otherwise. An attempt a quorum granted (no
    /// validity left, too few fencing confirmations) leaves it as it was.
    last_refusing: Vec<String>,
    /// The waiter joined the resource's queue and listens for hand-over messages.
    listening: bool,
    /// A mode request was refused by some node, which keeps its waiter's entry.
    entered: bool,
}

impl LoopState {
    /// Counts the attempt about to be made (unless it follows joining the queue) and returns
    /// the attempts made with it.
    pub(super) fn begin_attempt(&mut self) -> u32 {
        if !std::mem::take(&mut self.free_attempt) {
            self.attempts += 1;
        }
        self.attempts
    }

    /// Attempts made after a split vote once the retries or the wait had run out.
    #[cfg(feature = "model")]
    pub(super) fn split_retries(&self) -> u32 {
        self.split_retries
    }

    /// Whether the waiter listens for hand-over messages, having joined the queue.
    pub(super) fn listening(&self) -> bool {
        self.listening
    }

    /// Whether the request has a place in a waiter queue: it joined one, or, in a mode, some
    /// node keeps its waiter's entry.
    pub(super) fn queued(&self) -> bool {
        self.listening || self.entered
    }

    /// The next step after an attempt failed with `failure` at `now`; `jitter` is the random
    /// part of the retry delay, drawn by the caller from zero to `retry_jitter`.
    pub(super) fn after_failure(
        &mut self,
        policy: &Policy<'_>,
        failure: AttemptFailure,
        jitter: Duration,
        now: Instant,
    ) -> Step {
        let delay = policy.retry_delay(jitter, now);
        let retry = policy.deadline.allows_retry(self.attempts, now);
        // A semaphore in use with another number of permits: no attempt can change that.
        if let AttemptFailure::Votes { outcomes, .. } | AttemptFailure::Scattered(outcomes) =
            &failure
            && policy.permits_rule_out_a_quorum(outcomes)
        {
            let outcomes = outcomes.clone();
            return Step::GiveUp(policy.refused(self.attempts, outcomes));
        }
        if let AttemptFailure::Votes { outcomes, .. } = &failure {
            self.entered |= policy.mode && outcomes.held() > 0;
        }
        let split = self.resolvable_split(&failure);
        if !retry {
            return if split && self.split_retries < policy.split_retries {
                self.split_retry()
            } else {
                Step::GiveUp(policy.error(self.attempts, failure))
            };
        }
        if matches!(failure, AttemptFailure::Scattered(_))
            && self.split_retries < policy.split_retries
        {
            // Slots may be free: a short random delay, not the retry delay or a wait; at most
            // `split_retries` times (slots held on too few nodes by keys that outlive their
            // holders split every round until they expire), then as a busy semaphore.
            return self.split_retry();
        }
        if !self.listening && policy.queue && policy.worth_queueing(&failure) {
            self.listening = true;
            self.free_attempt = true;
            return Step::JoinQueue;
        }
        if self.listening {
            let longest = policy.deadline.left(now).unwrap_or(MAX_RETRY_WAIT);
            Step::AwaitHandover {
                fallback: delay,
                longest,
            }
        } else {
            Step::Retry { delay }
        }
    }

    /// Whether `failure` is a split vote that attempting again may resolve, remembering who
    /// refused it. A split among contenders resolves by attempting again (each draws a new
    /// token); one that names a holder the last attempt named too does not: that holder
    /// stays.
    fn resolvable_split(&mut self, failure: &AttemptFailure) -> bool {
        if let AttemptFailure::Scattered(_) = failure {
            // Every request released what it took: attempting again may resolve it.
            self.last_refusing.clear();
            return true;
        }
        let AttemptFailure::Votes {
            split, refusing, ..
        } = failure
        else {
            return false;
        };
        let seen = |holder: &String| self.last_refusing.contains(holder);
        let resolvable = match split {
            Split::No => false,
            // A holder seen again could have a quorum with the silent nodes.
            Split::Possible => !refusing.iter().any(seen),
            // Nobody can have a quorum: worth attempting while someone new refused.
            Split::Certain => !refusing.iter().all(seen),
        };
        self.last_refusing.clone_from(refusing);
        resolvable
    }

    /// One more attempt after a split vote. Nobody may hold the resource: only contenders
    /// split the vote (each released what it took). Giving up now could leave it untaken by
    /// all of them, so each attempts again after a random delay, the first one back taking it
    /// alone; the longest delay doubles at each split attempt.
    fn split_retry(&mut self) -> Step {
        let spread = SPLIT_BACKOFF.saturating_mul(1 << self.split_retries);
        self.split_retries += 1;
        Step::SplitRetry { spread }
    }
}

/// Whether the acquisition goes on after a wait between two attempts: it stops with
/// [`LockError::ShuttingDown`] when the handle began shutting down during the wait.
pub(super) fn after_wait(wake: Wake) -> Result<(), LockError> {
    match wake {
        Wake::Shutdown => Err(LockError::ShuttingDown),
        Wake::Named | Wake::Timer => Ok(()),
    }
}

/// Whether a granted lock is kept: not when the handle began shutting down during the
/// attempt ([`LockError::ShuttingDown`]; the caller releases what was taken).
pub(super) fn keep_grant(shutting_down: bool) -> Result<(), LockError> {
    if shutting_down {
        Err(LockError::ShuttingDown)
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::outcome::{NodeError, NodeOutcome, NodeVote};

    const MS: Duration = Duration::from_millis(1);

    /// Five nodes' answers, one letter each: `+` granted, `-` held by another holder, `x`
    /// down, `?` not awaited, `f` data we did not write at the key, `p` a semaphore in use
    /// with 5 permits.
    fn outcomes(votes: &str) -> Outcomes {
        let vote = |letter| match letter {
            '+' => NodeVote::Acquired,
            '-' => NodeVote::Held,
            'x' => NodeVote::Failed(NodeError::Disconnected),
            '?' => NodeVote::Undecided,
            'f' => NodeVote::Failed(NodeError::ForeignKey { key: "k".into() }),
            'p' => NodeVote::Failed(NodeError::PermitsMismatch { stored: 5 }),
            other => panic!("no vote `{other}`"),
        };
        Outcomes::new(
            votes
                .chars()
                .enumerate()
                .map(|(i, letter)| NodeOutcome {
                    node: format!("n{i}:6379"),
                    vote: vote(letter),
                    holder_ttl: None,
                })
                .collect(),
        )
    }

    /// A refused attempt: `votes` as in [`outcomes`], `split` as the attempt judged it,
    /// `refusing` the holders named (for a split).
    fn refused(votes: &str, split: Split, refusing: &[&str]) -> AttemptFailure {
        AttemptFailure::Votes {
            outcomes: outcomes(votes),
            split,
            refusing: refusing.iter().map(|h| (*h).to_owned()).collect(),
        }
    }

    /// Another holder kept three of five nodes.
    fn busy() -> AttemptFailure {
        refused("++---", Split::No, &[])
    }

    /// Two contenders split four nodes between them; nobody can have a quorum.
    fn certain(refusing: &[&str]) -> AttemptFailure {
        refused("+----", Split::Certain, refusing)
    }

    /// As [`certain`], one node down: it could complete a holder's quorum.
    fn possible(refusing: &[&str]) -> AttemptFailure {
        refused("x----", Split::Possible, refusing)
    }

    /// Five nodes, quorum three, retries only, hand-over off, a plain request.
    fn policy(deadline: Deadline) -> Policy<'static> {
        Policy {
            resource: "r",
            deadline,
            retry_delay: 200 * MS,
            quorum: 3,
            fencing_quorum: 4,
            nodes: 5,
            ttl: 10_000 * MS,
            mode: false,
            queue: false,
            permits: None,
            split_retries: SPLIT_RETRIES,
        }
    }

    #[test]
    fn a_request_that_never_queues_polls() {
        let queued = |deadline| Policy {
            queue: true,
            ..policy(deadline)
        };
        // No queue (hand-over off, a lock of several): a poller whatever its retries.
        assert!(policy(Deadline::Retries(3)).polls());
        // With a queue: one attempt and no wait polls; retries or a wait queue.
        assert!(queued(Deadline::Retries(0)).polls());
        assert!(!queued(Deadline::Retries(1)).polls());
        assert!(!queued(Deadline::Never).polls());
        assert!(!queued(Deadline::At(Instant::now() + MS)).polls());
    }

    /// Runs one attempt that fails with `failure` at `now`, with no jitter.
    fn fail(
        state: &mut LoopState,
        policy: &Policy<'_>,
        failure: AttemptFailure,
        now: Instant,
    ) -> Step {
        state.begin_attempt();
        state.after_failure(policy, failure, Duration::ZERO, now)
    }

    #[test]
    fn the_deadline_is_the_retries_a_wait_or_never() {
        let started = Instant::now();
        assert_eq!(Deadline::new(None, 3, started), Deadline::Retries(3));
        // No wait at all: one attempt, whatever the retries (`redlock run --wait 0s`).
        assert_eq!(
            Deadline::new(Some(Duration::ZERO), 3, started),
            Deadline::Retries(0)
        );
        assert_eq!(
            Deadline::new(Some(5 * MS), 3, started),
            Deadline::At(started + 5 * MS)
        );
        // Too long for the clock: no deadline, rather than an overflow.
        assert_eq!(
            Deadline::new(Some(Duration::MAX), 3, started),
            Deadline::Never
        );
    }

    #[test]
    fn busy_is_retried_for_retry_count_then_given_up() {
        let policy = policy(Deadline::Retries(2));
        let (mut state, now) = (LoopState::default(), Instant::now());
        for _ in 0..2 {
            let step = fail(&mut state, &policy, busy(), now);
            assert!(
                matches!(step, Step::Retry { delay } if delay == 200 * MS),
                "{step:?}"
            );
        }
        let step = fail(&mut state, &policy, busy(), now);
        assert!(
            matches!(
                step,
                Step::GiveUp(LockError::Busy {
                    attempts: 3,
                    quorum: 3,
                    ..
                })
            ),
            "{step:?}"
        );
    }

    #[test]
    fn a_semaphore_in_use_with_another_number_of_permits_is_given_up_at_once() {
        let policy = Policy {
            permits: Some(3),
            ..policy(Deadline::Never)
        };
        let (mut state, now) = (LoopState::default(), Instant::now());
        // Enough nodes say so that no quorum can grant it: nothing can change that by
        // attempting again, however long the wait.
        for votes in ["++ppp", "ppppp", "-pp?p"] {
            let step = fail(&mut state, &policy, refused(votes, Split::No, &[]), now);
            assert!(
                matches!(
                    step,
                    Step::GiveUp(LockError::PermitsMismatch {
                        permits: 3,
                        stored: 5,
                        ..
                    })
                ),
                "{votes}: {step:?}"
            );
        }
        let scattered = AttemptFailure::Scattered(outcomes("+pp-p"));
        let step = fail(&mut state, &policy, scattered, now);
        assert!(matches!(
            step,
            Step::GiveUp(LockError::PermitsMismatch { .. })
        ));
        // Fewer (a node restored from an old snapshot) count as failed nodes: the attempt
        // waits on, as it does without them.
        for votes in ["++--p", "++-pp", "++---"] {
            let step = fail(&mut state, &policy, refused(votes, Split::No, &[]), now);
            assert!(matches!(step, Step::Retry { .. }), "{votes}: {step:?}");
        }
    }

    #[test]
    fn no_retries_means_one_attempt() {
        let policy = policy(Deadline::Retries(0));
        let mut state = LoopState::default();
        let step = fail(&mut state, &policy, busy(), Instant::now());
        assert!(
            matches!(step, Step::GiveUp(LockError::Busy { attempts: 1, .. })),
            "{step:?}"
        );
    }

    #[test]
    fn the_retry_delay_adds_the_jitter_and_is_capped() {
        let now = Instant::now();
        let mut policy = policy(Deadline::Never);
        let mut state = LoopState::default();
        state.begin_attempt();
        let step = state.after_failure(&policy, busy(), 30 * MS, now);
        assert!(
            matches!(step, Step::Retry { delay } if delay == 230 * MS),
            "{step:?}"
        );
        // At most a minute between two attempts, however long the delay (no overflow).
        policy.retry_delay = Duration::MAX;
        let step = state.after_failure(&policy, busy(), 30 * MS, now);
        assert!(
            matches!(step, Step::Retry { delay } if delay == MAX_RETRY_WAIT),
            "{step:?}"
        );
    }

    #[test]
    fn a_busy_resource_is_queued_for_then_waited_on() {
        let mut policy = policy(Deadline::Retries(3));
        policy.queue = true;
        let (mut state, now) = (LoopState::default(), Instant::now());
        assert!(!state.queued());
        let step = fail(&mut state, &policy, busy(), now);
        assert!(matches!(step, Step::JoinQueue), "{step:?}");
        assert!(state.listening() && state.queued());
        // The attempt after joining is not a retry.
        assert_eq!(state.begin_attempt(), 1);
        let step = state.after_failure(&policy, busy(), 10 * MS, now);
        assert!(
            matches!(step, Step::AwaitHandover { fallback, longest }
                if fallback == 210 * MS && longest == MAX_RETRY_WAIT),
            "{step:?}"
        );
        // Listening already: never joins twice; the retries still run out.
        for attempts in 2..=4 {
            let step = fail(&mut state, &policy, busy(), now);
            if attempts <= 3 {
                assert!(matches!(step, Step::AwaitHandover { .. }), "{step:?}");
            } else {
                assert!(
                    matches!(step, Step::GiveUp(LockError::Busy { attempts: 4, .. })),
                    "{step:?}"
                );
            }
        }
    }

    #[test]
    fn a_window_for_foreign_clients_is_waited_out_within_the_deadline() {
        // A window refuses our attempts on every node, naming no holder: the waiter queues,
        // and waits for the window to pass for at most the time left.
        let now = Instant::now();
        let mut policy = policy(Deadline::At(now + 300 * MS));
        policy.queue = true;
        let mut state = LoopState::default();
        let window = || refused("-----", Split::No, &[]);
        assert!(matches!(
            fail(&mut state, &policy, window(), now),
            Step::JoinQueue
        ));
        state.begin_attempt();
        let step = state.after_failure(&policy, window(), Duration::ZERO, now + 100 * MS);
        assert!(
            matches!(step, Step::AwaitHandover { fallback, longest }
                if fallback == 200 * MS && longest == 200 * MS),
            "{step:?}"
        );
        // Without a deadline, a window is waited for at most the longest wait.
        policy.deadline = Deadline::Never;
        let step = fail(&mut state, &policy, window(), now + 500 * MS);
        assert!(
            matches!(step, Step::AwaitHandover { longest, .. } if longest == MAX_RETRY_WAIT),
            "{step:?}"
        );
    }

    #[test]
    fn only_a_busy_resource_is_queued_for() {
        let mut policy = policy(Deadline::Retries(5));
        policy.queue = true;
        let now = Instant::now();
        let mut state = LoopState::default();
        // Too few answered for a quorum (one refusal, two down): unavailability.
        let step = fail(&mut state, &policy, refused("+-xx?", Split::No, &[]), now);
        assert!(matches!(step, Step::Retry { .. }), "{step:?}");
        // Nobody refused.
        let step = fail(&mut state, &policy, refused("++xxx", Split::No, &[]), now);
        assert!(matches!(step, Step::Retry { .. }), "{step:?}");
        // Granted, but no validity left, or too few confirmed the fencing token.
        let step = fail(&mut state, &policy, AttemptFailure::NoValidity(MS), now);
        assert!(matches!(step, Step::Retry { .. }), "{step:?}");
        let step = fail(
            &mut state,
            &policy,
            AttemptFailure::Fence(outcomes("+++xx")),
            now,
        );
        assert!(matches!(step, Step::Retry { .. }), "{step:?}");
        assert!(!state.listening());
        // Hand-over off: a busy resource is retried on the timer.
        policy.queue = false;
        let step = fail(&mut state, &policy, busy(), now);
        assert!(matches!(step, Step::Retry { .. }), "{step:?}");
    }

    #[test]
    fn a_mode_request_refused_keeps_its_waiter_entry() {
        let mut policy = policy(Deadline::Retries(3));
        policy.mode = true;
        let mut state = LoopState::default();
        let now = Instant::now();
        fail(&mut state, &policy, refused("++xxx", Split::No, &[]), now);
        assert!(!state.queued());
        let step = fail(&mut state, &policy, busy(), now);
        assert!(state.queued() && !state.listening());
        assert!(matches!(step, Step::Retry { .. }), "{step:?}");
        // A plain request's refusal leaves no entry.
        policy.mode = false;
        let mut state = LoopState::default();
        fail(&mut state, &policy, busy(), now);
        assert!(!state.queued());
    }

    #[test]
    fn a_grant_leaves_the_queue_only_where_it_was_not_granted() {
        let mut policy = policy(Deadline::Never);
        assert!(policy.leaves_queue_after_grant(false));
        assert!(!policy.leaves_queue_after_grant(true));
        policy.mode = true;
        assert!(!policy.leaves_queue_after_grant(false));
    }

    /// Runs split attempts past the retries until the decision gives up, returning the
    /// spreads of the split attempts and the error.
    fn splits_until_given_up(
        policy: &Policy<'_>,
        mut failure: impl FnMut(usize) -> AttemptFailure,
        now: Instant,
    ) -> (Vec<Duration>, LockError) {
        let mut state = LoopState::default();
        let mut spreads = Vec::new();
        let mut i = 0;
        loop {
            match fail(&mut state, policy, failure(i), now) {
                Step::SplitRetry { spread } => spreads.push(spread),
                Step::GiveUp(error) => return (spreads, error),
                step => panic!("unexpected {step:?}"),
            }
            i += 1;
        }
    }

    /// The refusing holders of the `i`-th attempt: two new contenders each time.
    fn new_contenders(i: usize) -> Vec<String> {
        vec![format!("a{i}"), format!("b{i}")]
    }

    fn as_strs(holders: &[String]) -> Vec<&str> {
        holders.iter().map(String::as_str).collect()
    }

    #[test]
    fn a_split_is_attempted_again_past_the_retries_with_doubling_spreads() {
        let policy = policy(Deadline::Retries(0));
        let doubling: Vec<Duration> = [20, 40, 80, 160, 320, 640].map(|ms| ms * MS).to_vec();
        // Certain: nobody can have a quorum; given up as a split vote.
        let (spreads, error) = splits_until_given_up(
            &policy,
            |i| certain(&as_strs(&new_contenders(i))),
            Instant::now(),
        );
        assert_eq!(spreads, doubling);
        assert!(
            matches!(
                error,
                LockError::SplitVote {
                    attempts: 7,
                    quorum: 3,
                    ..
                }
            ),
            "{error:?}"
        );
        // Possible: a node that did not answer could complete a holder's quorum; given up as
        // busy.
        let (spreads, error) = splits_until_given_up(
            &policy,
            |i| possible(&as_strs(&new_contenders(i))),
            Instant::now(),
        );
        assert_eq!(spreads, doubling);
        assert!(
            matches!(error, LockError::Busy { attempts: 7, .. }),
            "{error:?}"
        );
    }

    #[test]
    fn scattered_permits_are_attempted_again_soon_then_reported_as_a_split() {
        let policy = policy(Deadline::Retries(1));
        let (mut state, now) = (LoopState::default(), Instant::now());
        let scattered = || AttemptFailure::Scattered(outcomes("+++++"));
        // Within the retries: a short random delay, not the retry delay.
        let step = fail(&mut state, &policy, scattered(), now);
        assert!(
            matches!(step, Step::SplitRetry { spread } if spread == 20 * MS),
            "{step:?}"
        );
        // Past them: the split's attempts (those within the retries counted), then the split
        // reported.
        for _ in 1..SPLIT_RETRIES {
            let step = fail(&mut state, &policy, scattered(), now);
            assert!(matches!(step, Step::SplitRetry { .. }), "{step:?}");
        }
        let step = fail(&mut state, &policy, scattered(), now);
        assert!(
            matches!(step, Step::GiveUp(LockError::SplitVote { .. })),
            "{step:?}"
        );
    }

    #[test]
    fn scattered_permits_that_keep_splitting_wait_as_a_busy_semaphore_does() {
        // Waiting without end: the short delays at most SPLIT_RETRIES times, then the queue
        // and the retry delay (slots held on too few nodes by keys that outlive their holders
        // split every round until they expire: no polling every 20 ms until then).
        let policy = policy(Deadline::At(Instant::now() + 3600 * 1000 * MS));
        let (mut state, now) = (LoopState::default(), Instant::now());
        let scattered = || AttemptFailure::Scattered(outcomes("+++++"));
        for _ in 0..SPLIT_RETRIES {
            let step = fail(&mut state, &policy, scattered(), now);
            assert!(matches!(step, Step::SplitRetry { .. }), "{step:?}");
        }
        let step = fail(&mut state, &policy, scattered(), now);
        assert!(
            !matches!(step, Step::SplitRetry { .. } | Step::GiveUp(_)),
            "{step:?}"
        );
    }

    #[test]
    fn a_split_is_attempted_again_past_the_wait_deadline() {
        let now = Instant::now();
        let policy = policy(Deadline::At(now));
        let mut state = LoopState::default();
        let step = fail(&mut state, &policy, certain(&["a", "b"]), now);
        assert!(
            matches!(step, Step::SplitRetry { spread } if spread == 20 * MS),
            "{step:?}"
        );
        // Not a split: the deadline has passed.
        let step = fail(&mut state, &policy, busy(), now + MS);
        assert!(
            matches!(step, Step::GiveUp(LockError::Busy { attempts: 2, .. })),
            "{step:?}"
        );
    }

    #[test]
    fn a_split_within_the_retries_is_retried_as_usual() {
        let policy = policy(Deadline::Retries(1));
        let mut state = LoopState::default();
        let now = Instant::now();
        let step = fail(&mut state, &policy, certain(&["a", "b"]), now);
        assert!(matches!(step, Step::Retry { .. }), "{step:?}");
        assert_eq!(state.split_retries, 0);
        // Its holders are remembered all the same: the same two again is not a split to
        // resolve.
        let step = fail(&mut state, &policy, certain(&["a", "b"]), now);
        assert!(
            matches!(step, Step::GiveUp(LockError::SplitVote { attempts: 2, .. })),
            "{step:?}"
        );
    }

    #[test]
    fn a_possible_split_naming_a_holder_again_is_not_attempted_again() {
        let policy = policy(Deadline::Retries(0));
        let now = Instant::now();
        let mut state = LoopState::default();
        assert!(matches!(
            fail(&mut state, &policy, possible(&["a", "b"]), now),
            Step::SplitRetry { .. }
        ));
        // "a" again: it may have a quorum with the node that did not answer.
        let step = fail(&mut state, &policy, possible(&["a", "c"]), now);
        assert!(
            matches!(step, Step::GiveUp(LockError::Busy { attempts: 2, .. })),
            "{step:?}"
        );
    }

    #[test]
    fn a_certain_split_is_attempted_again_while_someone_new_refused() {
        let policy = policy(Deadline::Retries(0));
        let now = Instant::now();
        let mut state = LoopState::default();
        assert!(matches!(
            fail(&mut state, &policy, certain(&["a", "b"]), now),
            Step::SplitRetry { .. }
        ));
        // "c" is new: worth another attempt.
        assert!(matches!(
            fail(&mut state, &policy, certain(&["a", "c"]), now),
            Step::SplitRetry { .. }
        ));
        // Nobody new: the same contenders keep the nodes.
        let step = fail(&mut state, &policy, certain(&["a", "c"]), now);
        assert!(
            matches!(step, Step::GiveUp(LockError::SplitVote { attempts: 3, .. })),
            "{step:?}"
        );
    }

    #[test]
    fn too_few_answers_is_not_a_split_but_unavailability() {
        // Two nodes answered: the attempt judged it no split (too few for any quorum).
        let policy = policy(Deadline::Retries(0));
        let mut state = LoopState::default();
        let step = fail(
            &mut state,
            &policy,
            refused("+-xxx", Split::No, &[]),
            Instant::now(),
        );
        assert!(
            matches!(
                step,
                Step::GiveUp(LockError::Unavailable {
                    attempts: 1,
                    quorum: 3,
                    ..
                })
            ),
            "{step:?}"
        );
    }

    #[test]
    fn the_wait_deadline_bounds_the_delay_and_ends_the_attempts() {
        let now = Instant::now();
        let policy = policy(Deadline::At(now + 250 * MS));
        let mut state = LoopState::default();
        let step = fail(&mut state, &policy, busy(), now);
        assert!(
            matches!(step, Step::Retry { delay } if delay == 200 * MS),
            "{step:?}"
        );
        // 50 ms left: the delay is cut to it.
        let step = fail(&mut state, &policy, busy(), now + 200 * MS);
        assert!(
            matches!(step, Step::Retry { delay } if delay == 50 * MS),
            "{step:?}"
        );
        // The deadline reached: given up, however many retries that was.
        let step = fail(&mut state, &policy, busy(), now + 250 * MS);
        assert!(
            matches!(step, Step::GiveUp(LockError::Busy { attempts: 3, .. })),
            "{step:?}"
        );
        let step = fail(&mut state, &policy, busy(), now + 300 * MS);
        assert!(matches!(step, Step::GiveUp(_)), "{step:?}");
    }

    #[test]
    fn without_a_deadline_attempts_go_on() {
        let policy = policy(Deadline::Never);
        let mut state = LoopState::default();
        let now = Instant::now();
        for _ in 0..1000 {
            let step = fail(&mut state, &policy, busy(), now);
            assert!(matches!(step, Step::Retry { .. }), "{step:?}");
        }
    }

    #[test]
    fn the_error_given_up_with_follows_the_last_failure() {
        let policy = policy(Deadline::Retries(0));
        let give_up =
            |failure| match fail(&mut LoopState::default(), &policy, failure, Instant::now()) {
                Step::GiveUp(error) => error,
                step => panic!("unexpected {step:?}"),
            };
        let error = give_up(AttemptFailure::NoValidity(12 * MS));
        assert!(
            matches!(error, LockError::NoValidity { elapsed, ttl, .. }
                if elapsed == 12 * MS && ttl == 10_000 * MS),
            "{error:?}"
        );
        // Too few confirmed the fencing token: the fencing quorum is named.
        let error = give_up(AttemptFailure::Fence(outcomes("+++xx")));
        assert!(
            matches!(error, LockError::Unavailable { quorum: 4, .. }),
            "{error:?}"
        );
        // Data we did not write at the key, and no holder with a quorum.
        let error = give_up(refused("++f--", Split::No, &[]));
        assert!(matches!(error, LockError::ForeignKey { .. }), "{error:?}");
        // A holder with a quorum stands in the way, not the foreign data.
        let error = give_up(refused("f---+", Split::No, &[]));
        assert!(matches!(error, LockError::Busy { .. }), "{error:?}");
        // Two down, three refused: the three could have made a quorum, busy.
        let error = give_up(refused("xx---", Split::No, &[]));
        assert!(matches!(error, LockError::Busy { .. }), "{error:?}");
        // Nodes left unawaited did not fail: busy.
        let error = give_up(refused("--???", Split::No, &[]));
        assert!(matches!(error, LockError::Busy { .. }), "{error:?}");
        // Three down: too few answered to decide.
        let error = give_up(refused("+-xxx", Split::No, &[]));
        assert!(
            matches!(error, LockError::Unavailable { quorum: 3, .. }),
            "{error:?}"
        );
        // A certain split nobody won.
        let error = give_up(certain(&[]));
        assert!(matches!(error, LockError::SplitVote { .. }), "{error:?}");
    }

    #[test]
    fn refusals_that_rule_out_a_quorum_are_busy_however_few_answered() {
        // Four nodes, quorum three: two down leave too few for a quorum, but the two that
        // refused rule one out already.
        let policy = Policy {
            nodes: 4,
            ..policy(Deadline::Retries(0))
        };
        let mut state = LoopState::default();
        let step = fail(
            &mut state,
            &policy,
            refused("xx--", Split::No, &[]),
            Instant::now(),
        );
        assert!(
            matches!(step, Step::GiveUp(LockError::Busy { .. })),
            "{step:?}"
        );
        let mut state = LoopState::default();
        let step = fail(
            &mut state,
            &policy,
            refused("xx-+", Split::No, &[]),
            Instant::now(),
        );
        assert!(
            matches!(step, Step::GiveUp(LockError::Unavailable { .. })),
            "{step:?}"
        );
    }

    #[test]
    fn shutdown_ends_a_wait_and_refuses_a_grant() {
        assert!(matches!(
            after_wait(Wake::Shutdown),
            Err(LockError::ShuttingDown)
        ));
        assert!(after_wait(Wake::Named).is_ok());
        assert!(after_wait(Wake::Timer).is_ok());
        assert!(matches!(keep_grant(true), Err(LockError::ShuttingDown)));
        assert!(keep_grant(false).is_ok());
    }
}
