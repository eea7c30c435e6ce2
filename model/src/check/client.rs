//! A client: the lease as its public views see it, and the retry/wait decision of an
//! acquisition, as redlock-core makes them (`acquire/decide.rs`, `acquire/attempt.rs`,
//! `lease/extend.rs`), over the model's ms.

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

/// A split vote, as `Split::of` (acquire/attempt.rs) tells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Split {
    /// One holder named by a quorum, or too few answered: busy or unavailable.
    No,
    /// No holder named by a quorum of those that answered; the others could make one.
    Possible,
    /// No holder can have a quorum.
    Certain,
}

impl Split {
    /// The split of `votes`.
    pub fn of(votes: &[Vote], quorum: usize) -> Self {
        let mut named: Vec<(&str, usize)> = Vec::new();
        for vote in votes {
            if let Vote::Refused(Some(holder)) = vote {
                match named.iter_mut().find(|(name, _)| name == holder) {
                    Some((_, count)) => *count += 1,
                    None => named.push((holder, 1)),
                }
            }
        }
        let largest = named.iter().map(|(_, count)| *count).max().unwrap_or(0);
        let unknown = votes
            .iter()
            .filter(|v| matches!(v, Vote::Pending | Vote::Failed))
            .count();
        if largest == 0 || largest >= quorum || votes.len() - unknown < quorum {
            Self::No
        } else if largest + unknown < quorum {
            Self::Certain
        } else {
            Self::Possible
        }
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
    /// Attempts counted in this acquisition.
    pub attempts: u8,
    /// The next attempt follows joining the queue: not counted.
    pub free_attempt: bool,
    /// Split retries made in this acquisition.
    pub split_retries: u8,
    /// Holders named by the last refused split (sorted).
    pub last_refusing: Vec<String>,
    /// Joined the waiter queue, listening for hand-over messages.
    pub listening: bool,
    /// The acquisition's wait start (its rank in the queue).
    pub wait_start: u64,
    /// Locks held so far.
    pub holds: u8,
    /// The delays drawn after split votes, in order.
    pub draws: Vec<u8>,
}

impl Client {
    /// A client about to run `program` at time 0.
    pub fn new(program: Program) -> Self {
        Self {
            program,
            phase: Phase::Idle { at: 0 },
            op: 0,
            tokens: 0,
            attempts: 0,
            free_attempt: false,
            split_retries: 0,
            last_refusing: Vec::new(),
            listening: false,
            wait_start: 0,
            holds: 0,
            draws: Vec::new(),
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

/// The step after a failed attempt (`LoopState::after_failure`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AfterFailure {
    /// Attempt again at this time.
    Retry(u64),
    /// Joined the queue: attempt again at once (not counted).
    JoinQueue,
    /// Wait for a hand-over message, with a fallback timer (or none).
    AwaitHandover(Option<u64>),
    /// A split vote past the retries: attempt again after a random delay (the caller draws
    /// it).
    SplitRetry,
    /// Give up (skip, or an error).
    GiveUp,
}

impl Client {
    /// Decides what follows a failed attempt with `votes` at `now`.
    pub fn after_failure(&mut self, votes: &[Vote], now: u64, config: &Config) -> AfterFailure {
        let quorum = config.quorum();
        let retry = self.attempts < self.program.attempts;
        // A quorum granted without validity left (`AttemptFailure::NoValidity`): no split,
        // nothing to queue for, and the refusing holders remembered stay as they were.
        let no_validity = Tally::of(votes).granted >= quorum;
        if no_validity {
            return if retry {
                AfterFailure::Retry(now + config.retry_delay)
            } else {
                AfterFailure::GiveUp
            };
        }
        let split = self.resolvable_split(votes, quorum);
        if !retry {
            return if split
                && self.split_retries < self.program.split_retries
                && !config.client_flaws.split_is_busy
            {
                self.split_retries += 1;
                AfterFailure::SplitRetry
            } else {
                AfterFailure::GiveUp
            };
        }
        let tally = Tally::of(votes);
        let worth_queueing = tally.refused > 0 && tally.granted + tally.refused >= quorum;
        if !self.listening && self.program.handover && worth_queueing {
            self.listening = true;
            if config.client_flaws.waiter_only_listens {
                return AfterFailure::AwaitHandover(None);
            }
            self.free_attempt = true;
            return AfterFailure::JoinQueue;
        }
        if self.listening {
            let fallback =
                (!config.client_flaws.waiter_only_listens).then_some(now + config.retry_delay);
            AfterFailure::AwaitHandover(fallback)
        } else {
            AfterFailure::Retry(now + config.retry_delay)
        }
    }

    /// `LoopState::resolvable_split`.
    fn resolvable_split(&mut self, votes: &[Vote], quorum: usize) -> bool {
        let mut refusing: Vec<String> = votes
            .iter()
            .filter_map(|v| match v {
                Vote::Refused(Some(holder)) => Some(holder.clone()),
                _ => None,
            })
            .collect();
        refusing.sort();
        refusing.dedup();
        let seen = |holder: &String| self.last_refusing.contains(holder);
        let resolvable = match Split::of(votes, quorum) {
            Split::No => false,
            Split::Possible => !refusing.iter().any(seen),
            Split::Certain => !refusing.iter().all(seen),
        };
        self.last_refusing = refusing;
        resolvable
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn granted() -> Vote {
        Vote::Granted { hint: 0, busy: 0 }
    }

    fn by(holder: &str) -> Vote {
        Vote::Refused(Some(holder.to_owned()))
    }

    /// The port against the lock's own cases (`a_split_is_told_from_a_holder_by_who_refused`
    /// in redlock-core's acquire/attempt.rs).
    #[test]
    fn a_split_is_told_as_the_lock_tells_it() {
        let q = 3;
        let one = [granted(), granted(), by("a"), by("a"), by("a")];
        assert_eq!(Split::of(&one, q), Split::No);
        let two = [granted(), by("a"), by("a"), by("b"), by("b")];
        assert_eq!(Split::of(&two, q), Split::Certain);
        let down = [Vote::Failed, by("a"), by("a"), by("b"), by("b")];
        assert_eq!(Split::of(&down, q), Split::Possible);
        let unawaited = [Vote::Pending, by("a"), by("a"), by("b"), by("b")];
        assert_eq!(Split::of(&unawaited, q), Split::Possible);
        let failures = [
            granted(),
            granted(),
            Vote::Failed,
            Vote::Failed,
            Vote::Failed,
        ];
        assert_eq!(Split::of(&failures, q), Split::No);
        let few = [granted(), by("a"), Vote::Failed, Vote::Failed, Vote::Failed];
        assert_eq!(Split::of(&few, q), Split::No);
        let modes = [granted(), by("?"), by("?"), by("?"), by("?")];
        assert_eq!(Split::of(&modes, q), Split::No);
    }
}
