//! A client: the lease as its public views see it, over the model's ms. The retry and wait
//! decision after each attempt, and the validity arithmetic, are redlock-core's own
//! (`redlock_core::model`: `acquire/decide.rs`, `acquire/attempt.rs`, `timing.rs`), called
//! here rather than copied.

use std::time::Duration;

use redlock_core::model::{Answer, Decision, Failure, Next, Rules};

use super::config::{Config, Program};
use crate::node::Reply;

/// What a node answered a client's request, as the client counts it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Vote {
    /// No answer yet.
    Pending,
    /// Granted (confirmed, for a fencing write-back); with the fencing hint it carried and,
    /// for a grant, the streak it read.
    Granted {
        /// The fencing hint (0 without one).
        hint: u64,
        /// The streak read (ms busy without a window).
        busy: u64,
    },
    /// Refused, naming who refused it when the node said (a holder's digest, "window").
    Refused(Option<String>),
    /// The node refused to vote (quarantined) or the call failed.
    Failed,
}

impl Vote {
    /// How a node's reply to an acquisition counts.
    pub fn of_acquire(reply: &Reply) -> Self {
        match reply.int_at(0) {
            Some(1) => Self::Granted {
                hint: reply
                    .int_at(1)
                    .and_then(|h| u64::try_from(h).ok())
                    .unwrap_or(0),
                busy: reply
                    .int_at(2)
                    .and_then(|b| u64::try_from(b).ok())
                    .unwrap_or(0),
            },
            Some(0) => Self::Refused(match reply {
                Reply::Array(items) => match items.get(4) {
                    Some(Reply::Bulk(holder)) => Some(holder.clone()),
                    _ => None,
                },
                _ => None,
            }),
            _ => Self::Failed,
        }
    }

    /// How a node's reply to an extension or a fencing write-back counts.
    pub fn of_confirmation(reply: &Reply) -> Self {
        match reply.int_at(0) {
            Some(1) => Self::Granted { hint: 0, busy: 0 },
            Some(0) => Self::Refused(None),
            _ => Self::Failed,
        }
    }
}

/// Counts of a round's votes.
#[derive(Debug, Clone, Copy, Default)]
pub struct Tally {
    /// Granted.
    pub granted: usize,
    /// Refused.
    pub refused: usize,
    /// Failed or not answered.
    pub unknown: usize,
}

impl Tally {
    /// The counts of `votes`.
    pub fn of(votes: &[Vote]) -> Self {
        let mut tally = Self::default();
        for vote in votes {
            match vote {
                Vote::Granted { .. } => tally.granted += 1,
                Vote::Refused(_) => tally.refused += 1,
                Vote::Pending | Vote::Failed => tally.unknown += 1,
            }
        }
        tally
    }

    /// Whether the round is decided: a quorum granted, too many refused for one, or
    /// everyone answered.
    pub fn decided(&self, quorum: usize, nodes: usize, pending: usize) -> bool {
        self.granted >= quorum || self.refused > nodes - quorum || pending == 0
    }
}

/// Where a client is.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Phase {
    /// About to attempt, at or after `at` (ms).
    Idle {
        /// When.
        at: u64,
    },
    /// An attempt in flight: it started at `started`; one vote per node.
    Acquiring {
        /// When the attempt started (the client's clock).
        started: u64,
        /// Per node.
        votes: Vec<Vote>,
    },
    /// Waiting for hand-over messages (its listener keeps those published meanwhile, as the
    /// lock's does); attempts once a node named it (the lock waits for a quorum of nodes, or
    /// a short settle time after the first: any time from then on), or at `fallback` if set.
    AwaitingHandover {
        /// The fallback timer.
        fallback: Option<u64>,
        /// Nodes whose release named this waiter (or woke everyone) during this wait.
        named: u8,
    },
    /// Granted; the fencing write-back in flight.
    Fencing {
        /// The lease's validity end.
        valid_until: u64,
        /// The claimed token.
        claim: u64,
        /// Per node, as the client heard them.
        votes: Vec<Vote>,
        /// Nodes that confirmed the claim, heard or not: at the fencing quorum, the token is
        /// confirmed, whenever the client learns it.
        at_nodes: u8,
        /// Every node granted the lock (a queued waiter then left the queue everywhere).
        everywhere: bool,
        /// The highest token confirmed (at a fencing quorum) before this write-back began:
        /// the claim must be confirmed above it.
        floor: u64,
    },
    /// Holding the lock.
    Holding(Lease),
    /// Finished: released, gave up or skipped.
    Done {
        /// A released lease's validity end (what a view that ignores the release claims).
        released_until: Option<u64>,
    },
}

/// A held lock, as the lease keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Lease {
    /// The validity end, on the client's clock (ms).
    pub valid_until: u64,
    /// The lost signal fired (an extension was refused by too many nodes).
    pub lost: bool,
    /// The confirmed fencing token.
    pub fence: Option<u64>,
    /// When the lock was granted, and the streak a quorum's nodes read then.
    pub granted_at: u64,
    /// The longest streak read by a granting node.
    pub busy: u64,
    /// An extension in flight: when it started, and its votes.
    pub extending: Option<(u64, Vec<Vote>)>,
    /// The extension was made (or tried).
    pub extended: bool,
}

/// One client's state.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Client {
    /// Its program.
    pub program: Program,
    /// Where it is.
    pub phase: Phase,
    /// Tag of the requests whose replies it waits for (older replies are ignored).
    pub op: u16,
    /// Tokens drawn so far (each attempt draws one).
    pub tokens: u16,
    /// The acquisition's decision state, as the lock's loop keeps it.
    pub decision: Decision,
    /// The acquisition's wait start (its rank in the queue).
    pub wait_start: u64,
    /// Locks held so far.
    pub holds: u8,
    /// The delays drawn after split votes, in order.
    pub draws: Vec<u8>,
    /// Gave up while queued for a hand-over (its acquisition over, its queue entries to
    /// leave).
    pub gave_up_queued: bool,
}

impl Client {
    /// A client about to run `program` at time 0.
    pub fn new(program: Program) -> Self {
        Self {
            program,
            phase: Phase::Idle { at: 0 },
            op: 0,
            tokens: 0,
            decision: Decision::default(),
            wait_start: 0,
            holds: 0,
            draws: Vec::new(),
            gave_up_queued: false,
        }
    }

    /// Whether its public views (`is_valid`, `remaining_validity`, `LockInfo`) claim a valid
    /// lock at `now`.
    pub fn claims_valid(&self, now: u64, config: &Config) -> bool {
        match &self.phase {
            Phase::Holding(lease) => !lease.lost && now < lease.valid_until,
            Phase::Done {
                released_until: Some(until),
            } => config.client_flaws.views_outlive_release && now < *until,
            _ => false,
        }
    }

    /// The drift the client subtracts.
    pub fn drift(config: &Config) -> u64 {
        if config.client_flaws.no_drift {
            0
        } else {
            config.drift
        }
    }
}

/// Milliseconds of the model's clock as the lock's arithmetic takes them.
pub fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// The model's milliseconds of a duration the lock's decision gave (whole: every input is).
pub fn to_ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// What the lock's decision hears of the model's votes.
pub fn answers(votes: &[Vote]) -> Vec<Answer> {
    votes
        .iter()
        .map(|vote| match vote {
            Vote::Granted { .. } => Answer::Granted,
            Vote::Refused(holder) => Answer::Refused(holder.clone()),
            Vote::Failed => Answer::Failed,
            Vote::Pending => Answer::Pending,
        })
        .collect()
}

impl Client {
    /// Whether it joined the queue and listens for hand-over messages.
    pub fn listening(&self) -> bool {
        self.decision.listening()
    }

    /// The decision's rules for this client's program.
    pub fn rules(&self, config: &Config) -> Rules {
        Rules {
            nodes: config.nodes,
            retries: u32::from(self.program.attempts.saturating_sub(1)),
            retry_delay: ms(config.retry_delay),
            queue: self.program.handover,
            mode: self.program.mode.is_some(),
            split_retries: u32::from(self.program.split_retries),
        }
    }

    /// The lock's step after a failed attempt (`fence`: its fencing write-back failed) with
    /// `votes`, with the client's known-bad variants applied to it.
    pub fn after_failure(&mut self, votes: &[Vote], fence: bool, config: &Config) -> Next {
        let answers = answers(votes);
        let failure = if fence {
            Failure::Fence(&answers)
        } else {
            Failure::Attempt(&answers)
        };
        let rules = self.rules(config);
        let next = self.decision.after_failure(&rules, failure);
        let flaws = &config.client_flaws;
        match next {
            Next::SplitRetry(_) if flaws.split_is_busy => Next::GiveUp,
            Next::JoinQueue | Next::AwaitHandover(_) if flaws.waiter_only_listens => {
                Next::AwaitHandover(Duration::MAX)
            }
            next => next,
        }
    }

    /// Whether the step after a failed attempt with `votes` draws a split vote's delay.
    pub fn draws_after(&self, votes: &[Vote], config: &Config) -> bool {
        let mut probe = self.clone();
        matches!(
            probe.after_failure(votes, false, config),
            Next::SplitRetry(_)
        )
    }
}
