//! The acquisition's decision and Redlock's timing arithmetic, as the protocol model runs
//! them (feature `model`). The model's clients call this code, not a copy of it: what the
//! checker explores after each attempt is the step the lock itself takes.
//!
//! Times are [`Duration`]s from an origin the caller picks (the model's millisecond clock).
//! This module serves the model crate of this workspace; it is not a stable API.

use std::time::Duration;
use tokio::time::Instant;

use super::attempt::{AttemptFailure, Split};
use super::decide::{Deadline, LoopState, Policy, Step};
use crate::outcome::{NodeError, NodeOutcome, NodeVote, Outcomes};
use crate::timing;

/// A node's answer to an attempt or to a fencing write-back, as the lock counts it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Answer {
    /// Granted (or, for a fencing write-back, confirmed).
    Granted,
    /// Refused, naming who refused it when the node said (a holder's token, the names of
    /// the mode entries that blocked it, `window`).
    Refused(Option<String>),
    /// The call failed, or the node refused to vote (quarantined).
    Failed,
    /// Not awaited: the round was decided without it.
    Pending,
}

/// What an attempt came to, when it did not grant a lock.
#[derive(Debug, Clone, Copy)]
pub enum Failure<'a> {
    /// Redlock step 5: too few nodes granted it, or a quorum did but no validity was left
    /// (told apart here by the count of grants: the caller reports a quorum's grants as a
    /// failure only when the validity check refused them).
    Attempt(&'a [Answer]),
    /// A quorum granted the lock, but fewer than a fencing quorum confirmed its token.
    Fence(&'a [Answer]),
}

/// What the decision knows of an acquisition that does not change between its attempts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Rules {
    /// Nodes in all (N).
    pub nodes: usize,
    /// Retries after the first attempt (`retry_count`; the model has no wait deadline).
    pub retries: u32,
    /// The delay between two attempts (`retry_delay`, no jitter).
    pub retry_delay: Duration,
    /// Hand-over is on: a busy resource is worth joining the waiter queue for.
    pub queue: bool,
    /// A request in a mode.
    pub mode: bool,
    /// Attempts after a split vote beyond the retries: the lock makes 6; the model explores
    /// fewer, to bound its depth.
    pub split_retries: u32,
}

/// The step after a failed attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// Attempt again after this delay.
    Retry(Duration),
    /// Join the waiter queue, then attempt again at once (that attempt is not counted).
    JoinQueue,
    /// Wait for a hand-over message naming this waiter; attempt anyway after this long.
    AwaitHandover(Duration),
    /// A split vote past the retries: attempt again after a random delay from zero to this.
    SplitRetry(Duration),
    /// Give up with an error.
    GiveUp,
}

/// One acquisition's decision state: what the lock's loop remembers between attempts.
#[derive(Debug, Default, Clone, PartialEq, Eq, Hash)]
pub struct Decision(LoopState);

impl Decision {
    /// Counts the attempt about to be made (unless it follows joining the queue); returns
    /// the attempts made with it.
    pub fn begin_attempt(&mut self) -> u32 {
        self.0.begin_attempt()
    }

    /// Attempts made after split votes once the retries had run out.
    pub fn split_retries(&self) -> u32 {
        self.0.split_retries()
    }

    /// Whether the waiter joined the queue and listens for hand-over messages.
    pub fn listening(&self) -> bool {
        self.0.listening()
    }

    /// The lock's next step after `failure` (`LoopState::after_failure`, with no jitter).
    pub fn after_failure(&mut self, rules: &Rules, failure: Failure<'_>) -> Next {
        let quorum = timing::quorum(rules.nodes);
        let failure = match failure {
            Failure::Attempt(answers) => {
                let outcomes = outcomes(answers);
                if outcomes.acquired() >= quorum {
                    AttemptFailure::NoValidity(Duration::ZERO)
                } else {
                    let holders: Vec<Option<&str>> = answers
                        .iter()
                        .map(|answer| match answer {
                            Answer::Refused(holder) => holder.as_deref(),
                            _ => None,
                        })
                        .collect();
                    let votes: Vec<NodeVote> = outcomes.iter().map(|o| o.vote.clone()).collect();
                    let split = Split::of(&votes, &holders, quorum);
                    AttemptFailure::votes(outcomes, split, &holders)
                }
            }
            Failure::Fence(answers) => AttemptFailure::Fence(outcomes(answers)),
        };
        // A deadline of retries never reads the time.
        match self
            .0
            .after_failure(&policy(rules), failure, Duration::ZERO, Instant::now())
        {
            Step::Retry { delay } => Next::Retry(delay),
            Step::JoinQueue => Next::JoinQueue,
            Step::AwaitHandover { fallback, .. } => Next::AwaitHandover(fallback),
            Step::SplitRetry { spread } => Next::SplitRetry(spread),
            Step::GiveUp(_) => Next::GiveUp,
        }
    }
}

impl Decision {
    /// Whether a granted acquisition leaves the waiter queue it joined (a plain waiter
    /// granted by only some nodes): `everywhere` when every node granted it.
    pub fn leaves_queue_after_grant(&self, rules: &Rules, everywhere: bool) -> bool {
        self.listening() && policy(rules).leaves_queue_after_grant(everywhere)
    }
}

/// The lock's policy for `rules`.
fn policy(rules: &Rules) -> Policy<'static> {
    Policy {
        resource: "resource",
        deadline: Deadline::Retries(rules.retries),
        retry_delay: rules.retry_delay,
        quorum: timing::quorum(rules.nodes),
        fencing_quorum: timing::fencing_quorum(rules.nodes),
        nodes: rules.nodes,
        ttl: Duration::ZERO,
        mode: rules.mode,
        queue: rules.queue,
        permits: None,
        split_retries: rules.split_retries,
    }
}

/// The answers as the lock records them.
fn outcomes(answers: &[Answer]) -> Outcomes {
    Outcomes::new(
        answers
            .iter()
            .enumerate()
            .map(|(i, answer)| NodeOutcome {
                node: format!("n{i}"),
                vote: match answer {
                    Answer::Granted => NodeVote::Acquired,
                    Answer::Refused(_) => NodeVote::Held,
                    Answer::Failed => NodeVote::Failed(NodeError::Disconnected),
                    Answer::Pending => NodeVote::Undecided,
                },
                holder_ttl: None,
            })
            .collect(),
    )
}

/// Nodes that must grant a lock: `N / 2 + 1` (Redlock step 3).
pub fn quorum(nodes: usize) -> usize {
    timing::quorum(nodes)
}

/// Nodes that must confirm a fencing token (any two such sets share two nodes).
pub fn fencing_quorum(nodes: usize) -> usize {
    timing::fencing_quorum(nodes)
}

/// Redlock steps 3–4: the validity end of a round that read the clock at `start` and that a
/// quorum granted by `now`, `start + ttl − drift`; `None` when no validity is left.
pub fn valid_until(
    start: Duration,
    now: Duration,
    ttl: Duration,
    drift: Duration,
) -> Option<Duration> {
    timing::valid_until(start, now, ttl, drift).ok()
}

/// The validity end an extension to `ttl`, started at `start`, gives once a quorum
/// confirmed it.
pub fn extended_until(start: Duration, ttl: Duration, drift: Duration) -> Duration {
    timing::extended_until(start, ttl, drift)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    fn rules(retries: u32) -> Rules {
        Rules {
            nodes: 3,
            retries,
            retry_delay: 5 * MS,
            queue: true,
            mode: false,
            split_retries: 1,
        }
    }

    fn by(holder: &str) -> Answer {
        Answer::Refused(Some(holder.to_owned()))
    }

    #[test]
    fn the_lock_s_steps_come_back_as_the_model_reads_them() {
        // Three contenders split three nodes, past the retries: once more after a random
        // delay, then give up.
        let split = [Answer::Granted, by("a"), by("b")];
        let mut decision = Decision::default();
        decision.begin_attempt();
        let next = decision.after_failure(&rules(0), Failure::Attempt(&split));
        assert_eq!(next, Next::SplitRetry(20 * MS));
        assert_eq!(decision.split_retries(), 1);
        decision.begin_attempt();
        let split = [Answer::Granted, by("c"), by("d")];
        let next = decision.after_failure(&rules(0), Failure::Attempt(&split));
        assert_eq!(next, Next::GiveUp);

        // Busy with retries left: join the queue (the next attempt is free), then wait for a
        // hand-over with the retry delay as the fallback.
        let busy = [Answer::Granted, by("a"), by("a")];
        let mut decision = Decision::default();
        decision.begin_attempt();
        let next = decision.after_failure(&rules(2), Failure::Attempt(&busy));
        assert_eq!(next, Next::JoinQueue);
        assert!(decision.listening());
        assert_eq!(decision.begin_attempt(), 1);
        let next = decision.after_failure(&rules(2), Failure::Attempt(&busy));
        assert_eq!(next, Next::AwaitHandover(5 * MS));
        assert!(decision.leaves_queue_after_grant(&rules(2), false));
        assert!(!decision.leaves_queue_after_grant(&rules(2), true));

        // A quorum granted but too late, or a fencing write-back short of its quorum: no
        // queue, a plain retry.
        let late = [Answer::Granted, Answer::Granted, Answer::Pending];
        let mut decision = Decision::default();
        decision.begin_attempt();
        let next = decision.after_failure(&rules(1), Failure::Attempt(&late));
        assert_eq!(next, Next::Retry(5 * MS));
        decision.begin_attempt();
        let next = decision.after_failure(&rules(1), Failure::Fence(&late));
        assert_eq!(next, Next::GiveUp);
    }

    #[test]
    fn the_validity_arithmetic_is_the_lock_s() {
        let (start, ttl, drift) = (10 * MS, 3 * MS, MS);
        assert_eq!(valid_until(start, start, ttl, drift), Some(12 * MS));
        assert_eq!(valid_until(start, 11 * MS, ttl, drift), Some(12 * MS));
        assert_eq!(valid_until(start, 12 * MS, ttl, drift), None);
        assert_eq!(extended_until(start, ttl, drift), 12 * MS);
        assert_eq!((quorum(3), fencing_quorum(3)), (2, 3));
        assert_eq!((quorum(5), fencing_quorum(5)), (3, 4));
    }
}
