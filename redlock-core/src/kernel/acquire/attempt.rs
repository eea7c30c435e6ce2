//! One attempt: Redlock steps 1–5 (distlock spec, "The Redlock algorithm"), the fencing
//! write-back when asked for, and the clean-up of a failed attempt.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use super::fence::fence;
use crate::kernel::lease::Grant;
use crate::kernel::masters::{Masters, Stop};
use crate::kernel::redlock::Redlock;
use crate::keys::ResourceKeys;
use crate::node::{AcquireKind, AcquireRequest, Releasing};
use crate::options::LockOptions;
use crate::outcome::{NodeVote, Outcomes};
use crate::telemetry::Acquisition;
use crate::timing;
use crate::token::Token;

/// Why one attempt failed.
pub(crate) enum AttemptFailure {
    /// Too few nodes granted it: refused, failed or timed out; `split` says whether the nodes
    /// that refused it named one holder, `refusing` who they named (each once, sorted; empty
    /// unless a split): a contender's next attempt has a new token, a holder keeps its own.
    Votes {
        outcomes: Outcomes,
        split: Split,
        refusing: Vec<String>,
    },
    /// A quorum granted the lock, but fewer than a fencing quorum confirmed its token.
    Fence(Outcomes),
    /// A quorum granted it, but too late: no validity was left after this long.
    NoValidity(Duration),
    /// A semaphore's permit: nodes granted slots, but different ones, none on a quorum,
    /// while some slot was free on enough nodes for one (concurrent requests took the free
    /// slots in different orders). Without such a slot the semaphore is busy: a refusal.
    Scattered(Outcomes),
}

impl AttemptFailure {
    /// Whether some node refused the attempt for a holder (or a window), not only for
    /// failures: what makes a polling request worth a window.
    pub(crate) fn refused_by_a_holder(&self) -> bool {
        match self {
            Self::Votes { outcomes, .. } => outcomes.held() > 0,
            Self::Fence(_) | Self::NoValidity(_) | Self::Scattered(_) => false,
        }
    }

    /// Too few nodes granted it: with a split, who refused it (`holders`, each once, sorted).
    pub(crate) fn votes(outcomes: Outcomes, split: Split, holders: &[Option<&str>]) -> Self {
        let mut refusing: Vec<String> = match split {
            Split::No => Vec::new(),
            // A request in a mode names every entry that blocked it: each name counts alone.
            Split::Possible | Split::Certain => holders
                .iter()
                .flatten()
                .flat_map(|h| h.split(' '))
                .filter(|name| !name.is_empty())
                .map(str::to_owned)
                .collect(),
        };
        refusing.sort_unstable();
        refusing.dedup();
        Self::Votes {
            outcomes,
            split,
            refusing,
        }
    }
}

/// Whether a refused attempt (plain or in a mode) was a split vote: no holder of the resource
/// has a quorum, only several contenders' attempts (or ours) at once, each on too few nodes.
/// Told apart by who refused it on each node (`AcquireReply::holder`: one name, or for a
/// request in a mode the space-separated names of every entry that blocked it): nodes naming
/// the same holder hold one lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Split {
    /// One holder was named by a quorum of nodes: the resource is busy.
    No,
    /// No holder was named by a quorum of the nodes that answered, but the nodes that did not
    /// answer could make one up.
    Possible,
    /// No holder can have a quorum, even counting every node that did not answer as theirs:
    /// nobody holds the resource.
    Certain,
}

impl Split {
    /// The split of `votes`, where `holders` names who refused on each node.
    pub(crate) fn of(votes: &[NodeVote], holders: &[Option<&str>], quorum: usize) -> Self {
        let mut named: Vec<(&str, usize)> = Vec::new();
        let names = holders
            .iter()
            .flatten()
            .flat_map(|holders| holders.split(' '))
            .filter(|name| !name.is_empty());
        for holder in names {
            match named.iter_mut().find(|(name, _)| *name == holder) {
                Some((_, count)) => *count += 1,
                None => named.push((holder, 1)),
            }
        }
        let largest = named.iter().map(|(_, count)| *count).max().unwrap_or(0);
        let unknown = votes
            .iter()
            .filter(|vote| matches!(vote, NodeVote::Failed(_) | NodeVote::Undecided))
            .count();
        // Too few answered for any quorum: unavailability, which attempting again after a
        // split's short delays cannot help.
        if largest == 0 || largest >= quorum || votes.len() - unknown < quorum {
            Self::No
        } else if largest + unknown < quorum {
            Self::Certain
        } else {
            Self::Possible
        }
    }
}

/// The timing of one attempt, written once for every protocol (distlock spec, steps 1, 3
/// and 4): the ttl the nodes get, the drift, and the limit of the round.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Clock {
    ttl: Duration,
    drift: Duration,
    drift_factor: f64,
    /// How long the round may take: the node timeout, and never past the validity.
    pub(crate) limit: Duration,
}

impl Clock {
    /// The clock of an attempt with `options` on `masters`.
    pub(crate) fn new(masters: &Masters, options: &LockOptions) -> Self {
        let ttl = options.sent_ttl();
        let drift = timing::drift(ttl, options.drift_factor);
        Self {
            ttl,
            drift,
            drift_factor: options.drift_factor,
            limit: masters.node_timeout.min(ttl.saturating_sub(drift)),
        }
    }

    /// Steps 3–4 for an attempt that read the monotonic clock at `start` before its first
    /// send (step 1): the end of its validity, `start + ttl − drift`, or, when no validity is
    /// left, the time elapsed.
    pub(crate) fn valid_until(&self, start: Instant) -> Result<Instant, Duration> {
        let elapsed = start.elapsed();
        match timing::validity(self.ttl, elapsed, self.drift_factor) {
            Some(_) => Ok(start + self.ttl - self.drift),
            None => Err(elapsed),
        }
    }
}

/// What a successful attempt produced.
pub(crate) struct Granted {
    pub(crate) grant: Grant,
    /// Every node granted it (so a queued waiter left the queue on all of them).
    pub(crate) everywhere: bool,
    /// A semaphore's permit: the keys of the slot held, which its lease keeps (`None` for a
    /// lock: the lease keeps the resource's keys).
    pub(crate) slot_keys: Option<ResourceKeys>,
}

impl Redlock {
    /// One attempt with `token`: Redlock steps 1–5, plus the fencing write-back when asked
    /// for; refused while a window for foreign clients is open when `windowed`, and reading
    /// the streak of hand-overs when `streak` (a plain attempt; the others always do). A failed
    /// attempt releases what it took on every node before it returns (step 5); dropped
    /// midway, it releases in the background.
    pub(crate) async fn attempt(
        &self,
        keys: &ResourceKeys,
        token: &Token,
        options: &LockOptions,
        (kind, windowed, streak): (AcquireKind<'_>, bool, bool),
        acquisition: &mut Acquisition,
    ) -> Result<Granted, AttemptFailure> {
        let masters = self.masters();
        let clock = Clock::new(masters, options);
        let limit = clock.limit;
        let request = AcquireRequest {
            keys,
            token: token.expose(),
            ttl_ms: options.ttl_millis(),
            kind,
            fencing: options.fencing,
            quarantine: &masters.quarantine_check,
            windowed,
            streak,
        };
        let request = &request;
        // The longest streak of hand-overs a granting node reports.
        let busy_ms = &AtomicU64::new(0);
        let releasing = Releasing::Attempt {
            mode: matches!(kind, AcquireKind::Mode(_)),
        };
        let mut cleanup = Cleanup::new(self, keys, token, releasing);

        // Step 1: the monotonic clock, read before the first SET is sent.
        let start = Instant::now();
        // Step 2: all nodes at once, decided at quorum. An attempt that cannot get a quorum
        // still hears every node out (within the same limit): who refused it on each tells a
        // split vote from a holder ([`Split`]), and a node left unheard would count as a
        // possible holder's, making a held resource look like a possible split.
        let tally = masters
            .round(masters.quorum, limit, Stop::AtQuorum, |node| async move {
                let reply = node.acquire(request).await;
                if reply.vote == NodeVote::Acquired {
                    busy_ms.fetch_max(reply.busy_ms, Ordering::Relaxed);
                }
                (reply.vote, (reply.counter, reply.left_ms, reply.holder))
            })
            .await;
        let granted_by = tally.granted;
        let highest = tally
            .counters
            .iter()
            .flatten()
            .map(|c| c.0)
            .max()
            .unwrap_or(0);
        let holders: Vec<Option<&str>> = tally
            .counters
            .iter()
            .map(|c| c.as_ref().and_then(|(_, _, holder)| holder.as_deref()))
            .collect();
        let split = Split::of(&tally.votes, &holders, masters.quorum);
        let mut outcomes = masters.outcomes(tally.votes);
        outcomes.set_holder_ttls(tally.counters.iter().map(|c| {
            c.as_ref()
                .and_then(|(_, left, _)| *left)
                .map(Duration::from_millis)
        }));
        tracing::debug!(
            granted = outcomes.acquired(),
            held = outcomes.held(),
            failed = outcomes.failed(),
            elapsed_us = start.elapsed().as_micros() as u64,
            %outcomes,
            "attempt decided"
        );
        acquisition.voted(&outcomes);
        if granted_by < masters.quorum {
            // Step 5: failed; unlock every node, even those we believe we did not lock.
            cleanup.run().await;
            return Err(AttemptFailure::votes(outcomes, split, &holders));
        }
        let fencing_token = if options.fencing {
            match fence(masters, keys, highest, limit).await {
                Ok(value) => Some(value),
                Err(outcomes) => {
                    cleanup.run().await;
                    return Err(AttemptFailure::Fence(outcomes));
                }
            }
        } else {
            None
        };
        // Steps 3–4: elapsed time (including the fencing round) and validity = ttl − elapsed
        // − drift.
        let valid_until = match clock.valid_until(start) {
            Ok(valid_until) => valid_until,
            Err(elapsed) => {
                cleanup.run().await;
                return Err(AttemptFailure::NoValidity(elapsed));
            }
        };
        cleanup.disarm();
        Ok(Granted {
            grant: Grant {
                fencing_token,
                mode: match kind {
                    AcquireKind::Mode(request) => Some(request.mode),
                    AcquireKind::Queued(_) | AcquireKind::Plain => None,
                },
                marker: match kind {
                    AcquireKind::Mode(request) => request.waiter.marker.clone(),
                    AcquireKind::Queued(_) | AcquireKind::Plain => String::new(),
                },
                busy: Duration::from_millis(busy_ms.load(Ordering::Relaxed)),
                ..Grant::new(start, valid_until)
            },
            everywhere: granted_by == masters.len(),
            slot_keys: None,
        })
    }
}

/// Releases an attempt's key on every node unless disarmed; if dropped while armed (the
/// acquire future was cancelled), the release is spawned instead.
struct Cleanup<'a> {
    redlock: &'a Redlock,
    keys: &'a ResourceKeys,
    token: &'a Token,
    releasing: Releasing<'static>,
    armed: bool,
}

impl<'a> Cleanup<'a> {
    fn new(
        redlock: &'a Redlock,
        keys: &'a ResourceKeys,
        token: &'a Token,
        releasing: Releasing<'static>,
    ) -> Self {
        Self {
            redlock,
            keys,
            token,
            releasing,
            armed: true,
        }
    }

    fn disarm(&mut self) {
        self.armed = false;
    }

    async fn run(&mut self) {
        self.redlock
            .release_key(self.keys, self.token, self.releasing, Duration::ZERO)
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
        let (keys, token, releasing) = (self.keys.clone(), self.token.clone(), self.releasing);
        self.redlock.spawn_background(async move {
            redlock
                .release_key(&keys, &token, releasing, Duration::ZERO)
                .await;
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::outcome::NodeError;

    const YES: NodeVote = NodeVote::Acquired;
    const NO: NodeVote = NodeVote::Held;

    fn down() -> NodeVote {
        NodeVote::Failed(NodeError::Disconnected)
    }

    #[test]
    fn a_split_is_told_from_a_holder_by_who_refused() {
        let q = 3;
        // One holder named by a quorum: busy, whatever else answered.
        let votes = [YES, YES, NO, NO, NO];
        let one = [None, None, Some("a"), Some("a"), Some("a")];
        assert_eq!(Split::of(&votes, &one, q), Split::No);
        // Two contenders, two nodes each, and ours: nobody can have a quorum.
        let votes = [YES, NO, NO, NO, NO];
        let two = [None, Some("a"), Some("a"), Some("b"), Some("b")];
        assert_eq!(Split::of(&votes, &two, q), Split::Certain);
        // The same with one node down: the down node could complete either's quorum.
        let votes = [down(), NO, NO, NO, NO];
        assert_eq!(Split::of(&votes, &two, q), Split::Possible);
        // A node left unawaited counts as unknown too.
        let votes = [NodeVote::Undecided, NO, NO, NO, NO];
        assert_eq!(Split::of(&votes, &two, q), Split::Possible);
        // Nobody refused (only failures): not a split, unavailability.
        let votes = [YES, YES, down(), down(), down()];
        assert_eq!(Split::of(&votes, &[None; 5], q), Split::No);
        // Two contenders on the two nodes that answered: too few answered for any quorum.
        let votes = [YES, NO, down(), down(), down()];
        let few = [None, Some("a"), None, None, None];
        assert_eq!(Split::of(&votes, &few, q), Split::No);
        // Mode holders seen by a plain request (one `?` per node) count as one holder.
        let votes = [YES, NO, NO, NO, NO];
        let modes = [None, Some("?"), Some("?"), Some("?"), Some("?")];
        assert_eq!(Split::of(&votes, &modes, q), Split::No);
        // A request in a mode names every entry that blocked it: two readers that share a
        // quorum of nodes hold the resource, whoever else each node names.
        let readers = [None, Some("a b"), Some("a b"), Some("b"), Some("a c")];
        assert_eq!(Split::of(&votes, &readers, q), Split::No);
        // Three writers' attempts at once, none on a quorum: a split.
        let writers = [None, Some("a"), Some("b c"), Some("b"), Some("c")];
        assert_eq!(Split::of(&votes, &writers, q), Split::Certain);
    }
}
