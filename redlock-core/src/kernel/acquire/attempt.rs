//! One attempt: Redlock steps 1–5 (distlock spec, "The Redlock algorithm"), the fencing
//! write-back when asked for, and the clean-up of a failed attempt.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::time::Instant;

use super::fence::fence;
use crate::kernel::commands::{AcquireKind, AcquireRequest, Releasing};
use crate::kernel::lease::{Grant, Held};
use crate::kernel::masters::{Masters, Stop};
use crate::kernel::redlock::Redlock;
use crate::keys::ResourceKeys;
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
    /// The split of an attempt at `keys` resources, where `named` says who refused it on each
    /// node (for several keys, `<i>:<name>` for each busy key, comma-separated): a resource
    /// one holder has on a quorum makes the whole set busy ([`Split::No`]); otherwise the set
    /// is split when every busy resource is ([`Split::Certain`] when each certainly is, else
    /// [`Split::Possible`]). Also returns the names, each prefixed with its key's place for
    /// several keys, that [`AttemptFailure::votes`] reports.
    pub(crate) fn of_keys<'n>(
        votes: &[NodeVote],
        named: &[Option<&'n str>],
        keys: usize,
        quorum: usize,
    ) -> (Self, Vec<Option<&'n str>>) {
        if keys <= 1 {
            return (Self::of(votes, named, quorum), named.to_vec());
        }
        let per_node: Vec<Vec<&str>> = named
            .iter()
            .map(|all| all.map_or_else(Vec::new, |all| all.split(',').collect()))
            .collect();
        let mut split = None;
        for key in 1..=keys {
            let prefix = format!("{key}:");
            let holders: Vec<Option<&str>> = per_node
                .iter()
                .map(|on_node| on_node.iter().copied().find(|h| h.starts_with(&prefix)))
                .collect();
            if holders.iter().all(Option::is_none) {
                continue;
            }
            match Self::of(votes, &holders, quorum) {
                Self::No => {
                    split = Some(Self::No);
                    break;
                }
                Self::Possible => split = Some(Self::Possible),
                Self::Certain => {
                    split.get_or_insert(Self::Certain);
                }
            }
        }
        let names = per_node.into_iter().flatten().map(Some).collect();
        (split.unwrap_or(Self::No), names)
    }

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
            limit: masters.node_timeout.min(ttl.saturating_sub(drift)),
        }
    }

    /// Steps 3–4 for an attempt that read the monotonic clock at `start` before its first
    /// send (step 1): the end of its validity, `start + ttl − drift`, or, when no validity is
    /// left, the time elapsed.
    pub(crate) fn valid_until(&self, start: Instant) -> Result<Instant, Duration> {
        timing::valid_until(start, Instant::now(), self.ttl, self.drift)
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
        keys: &[ResourceKeys],
        token: &Token,
        options: &LockOptions,
        (kind, windowed, streak, native): (AcquireKind<'_>, bool, bool, bool),
        acquisition: &mut Acquisition,
    ) -> Result<Granted, AttemptFailure> {
        let masters = self.masters();
        let clock = Clock::new(masters, options);
        let limit = clock.limit;
        let mut request = AcquireRequest {
            keys,
            token: token.expose(),
            ttl_ms: options.ttl_millis(),
            kind,
            fencing: options.fencing,
            quarantine: &masters.quarantine_check,
            windowed,
            streak,
            native,
            owner: None,
        };
        // A handle's owner label goes with a native attempt (the same call), else after the
        // grant (`Redlock::register`).
        let label = self.inner().owner.as_deref();
        let owner_key = match (label, keys.first()) {
            (Some(_), Some(first)) if request.is_native() => {
                Some(crate::keys::owner(&first.lock, token.expose()))
            }
            _ => None,
        };
        if let (Some(label), Some(key)) = (label, &owner_key) {
            request.owner = Some((label, key.as_str()));
        }
        let request = &request;
        // The longest streak of hand-overs a granting node reports.
        let busy_ms = &AtomicU64::new(0);
        let mode = matches!(kind, AcquireKind::Mode(_));
        let mut cleanup = Cleanup::new(self, keys, token, mode);

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
        tracing::debug!(
            resources = keys.len(),
            granted = granted_by,
            held = tally.refused,
            failed = tally
                .votes
                .iter()
                .filter(|v| matches!(v, NodeVote::Failed(_)))
                .count(),
            elapsed_us = start.elapsed().as_micros() as u64,
            votes = ?tally.votes,
            "attempt decided"
        );
        acquisition.voted(masters.nodes.iter().map(|n| &n.label).zip(&tally.votes));
        if granted_by < masters.quorum {
            // Who refused it on each node: one name (or, for a request in a mode, the names
            // of every entry that blocked it), or for several keys `<i>:<name>` per busy key.
            let named: Vec<Option<&str>> = tally
                .counters
                .iter()
                .map(|c| c.as_ref().and_then(|(_, _, holder)| holder.as_deref()))
                .collect();
            let (split, holders) = Split::of_keys(&tally.votes, &named, keys.len(), masters.quorum);
            let outcomes = masters.grant_outcomes(tally.votes, &tally.counters);
            // Step 5: failed; unlock every node, even those we believe we did not lock.
            cleanup.run().await;
            return Err(AttemptFailure::votes(outcomes, split, &holders));
        }
        let fencing_token = if options.fencing
            && let Some(first) = keys.first()
        {
            match fence(masters, first, highest, limit).await {
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
                held: match kind {
                    AcquireKind::Mode(request) => {
                        Held::mode(request.mode, request.waiter.marker.clone())
                    }
                    AcquireKind::Queued(_) | AcquireKind::Plain => Held::ONE,
                },
                busy: Duration::from_millis(busy_ms.load(Ordering::Relaxed)),
                labelled: owner_key,
                ..Grant::new(start, valid_until)
            },
            everywhere: granted_by == masters.len(),
            slot_keys: None,
        })
    }
}

/// Releases an attempt's keys on every node unless disarmed (step 5); if dropped while armed
/// (the acquire future was cancelled), the release is spawned instead.
struct Cleanup<'a> {
    redlock: &'a Redlock,
    keys: &'a [ResourceKeys],
    token: &'a Token,
    /// Made in a lock mode: its release keeps the request's waiter entry.
    mode: bool,
    armed: bool,
}

impl<'a> Cleanup<'a> {
    fn new(redlock: &'a Redlock, keys: &'a [ResourceKeys], token: &'a Token, mode: bool) -> Self {
        Self {
            redlock,
            keys,
            token,
            mode,
            armed: true,
        }
    }

    fn disarm(&mut self) {
        self.armed = false;
    }

    async fn run(&mut self) {
        self.armed = false;
        release_attempt(self.redlock, self.keys, self.token, self.mode).await;
    }
}

/// Step 5: a failed attempt's keys released on every node (nothing is handed over, nobody is
/// woken: nothing was held).
async fn release_attempt(redlock: &Redlock, keys: &[ResourceKeys], token: &Token, mode: bool) {
    match keys {
        [one] => {
            let releasing = Releasing::Attempt { mode };
            redlock
                .release_key(one, token, releasing, Duration::ZERO)
                .await;
        }
        several => {
            redlock.release_keys(several, token, false).await;
        }
    }
}

impl Drop for Cleanup<'_> {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let (redlock, keys, token) = (self.redlock.clone(), self.keys.to_vec(), self.token.clone());
        let mode = self.mode;
        self.redlock.spawn_background(async move {
            release_attempt(&redlock, &keys, &token, mode).await;
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
    fn a_resource_held_on_a_quorum_makes_the_set_busy_whatever_else_is_split() {
        let held = [NO, NO, NO];
        let of = |named: [&'static str; 3]| Split::of_keys(&held, &named.map(Some), 2, 2).0;
        // b held by H everywhere; a briefly taken by two contenders on two nodes.
        assert_eq!(of(["1:c1,2:h", "1:c2,2:h", "2:h"]), Split::No);
        // Nobody has a quorum of either: a split.
        assert_eq!(of(["1:c1", "1:c2", "2:c3"]), Split::Certain);
        // One holder of a on a quorum: busy.
        assert_eq!(of(["1:h", "1:h", "2:c3"]), Split::No);
        // One key: the names as they are.
        let one = Split::of_keys(&held, &[Some("h"), Some("h"), None], 1, 2);
        assert_eq!(one, (Split::No, vec![Some("h"), Some("h"), None]));
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
