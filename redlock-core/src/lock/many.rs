//! One attempt at a lock of several resources ([`Redlock::lock_many`]): Redlock steps 1–5
//! with every resource's key taken on each node by one script, all or none, and the quorum
//! counted over nodes.
//!
//! No deadlock: an attempt never keeps part of a set. On each node it takes every key or none
//! (`ACQUIRE_MANY` checks them all before writing any), and a failed attempt releases what it
//! took on every node before the next one (step 5): nobody holds some resources while waiting
//! for others, so two requests for overlapping sets never wait for each other. No livelock
//! beyond the lock's own: two requests that meet split the nodes between them and both fail,
//! then attempt again after random delays (the retry jitter, and a split's short random
//! delays), which tell them apart as they do contenders for one resource (distlock spec,
//! "Retry on failure").

use std::time::{Duration, Instant};

use crate::kernel::acquire::attempt::{AttemptFailure, Clock, Granted, Split};
use crate::kernel::acquire::{Ask, Protocol};
use crate::kernel::lease::Grant;
use crate::kernel::masters::Stop;
use crate::kernel::redlock::Redlock;
use crate::keys::ResourceKeys;
use crate::options::LockOptions;
use crate::telemetry::Acquisition;
use crate::token::Token;

/// The resources of a lock of several, in the order their keys are sent: sorted, without
/// repeats. The first is the lease's own; the others ride along ([`Grant::also`]).
#[derive(Debug, Clone)]
pub(crate) struct ManyKeys {
    pub(crate) resources: Vec<(String, ResourceKeys)>,
}

impl ManyKeys {
    /// Every resource's keys, in order.
    fn keys(&self) -> Vec<ResourceKeys> {
        self.resources
            .iter()
            .map(|(_, keys)| keys.clone())
            .collect()
    }
}

impl Protocol for ManyKeys {
    /// No queue for a lock of several resources: it attempts again after its retry delays (a
    /// waiter of one resource's queue would hold a place there while it waits for the
    /// others).
    fn queues(&self) -> bool {
        false
    }

    fn attempt<'a>(
        &'a self,
        redlock: &'a Redlock,
        ask: Ask<'a>,
        acquisition: &'a mut Acquisition,
    ) -> impl Future<Output = Result<Granted, AttemptFailure>> + Send + 'a {
        redlock.attempt_many(self, ask.windowed, ask.token, ask.options, acquisition)
    }
}

impl Redlock {
    /// One attempt at every resource of `many` with `token`, refused while a window for
    /// foreign clients is open on one of them when `windowed`. A failed attempt releases what
    /// it took on every node before it returns (step 5); dropped midway, it releases in the
    /// background.
    async fn attempt_many(
        &self,
        many: &ManyKeys,
        windowed: bool,
        token: &Token,
        options: &LockOptions,
        acquisition: &mut Acquisition,
    ) -> Result<Granted, AttemptFailure> {
        let masters = self.masters();
        let clock = Clock::new(masters, options);
        let limit = clock.limit;
        let keys = many.keys();
        let (keys_ref, quarantine) = (&keys, &masters.quarantine_check);
        let ttl_ms = options.ttl_millis();
        let mut cleanup = ManyCleanup {
            redlock: self,
            keys: keys_ref,
            token,
            armed: true,
        };

        // Step 1: the monotonic clock, read before the first SET is sent.
        let start = Instant::now();
        // Step 2: every node at once, each taking every key or none; heard out when refused
        // (within the same limit), so that a split is told from a holder as for one key.
        let tally = masters
            .round(masters.quorum, limit, Stop::AtQuorum, |node| async move {
                let reply = node
                    .acquire_many(keys_ref, token.expose(), ttl_ms, quarantine, windowed)
                    .await;
                (reply.vote, (reply.left_ms, reply.holder))
            })
            .await;
        let granted_by = tally.granted;
        // Who refused it on each node, key by key (`<i>:<holder>`, comma-separated).
        let named: Vec<Vec<&str>> = tally
            .counters
            .iter()
            .map(|c| {
                c.as_ref()
                    .and_then(|(_, holder)| holder.as_deref())
                    .map_or_else(Vec::new, |all| all.split(',').collect())
            })
            .collect();
        let split = split_of_many(&tally.votes, &named, many.resources.len(), masters.quorum);
        let holders: Vec<Option<&str>> = named.iter().flatten().map(|h| Some(*h)).collect();
        let mut outcomes = masters.outcomes(tally.votes);
        outcomes.set_holder_ttls(tally.counters.iter().map(|c| {
            c.as_ref()
                .and_then(|(left, _)| *left)
                .map(Duration::from_millis)
        }));
        tracing::debug!(
            resources = many.resources.len(),
            granted = outcomes.acquired(),
            held = outcomes.held(),
            failed = outcomes.failed(),
            elapsed_us = start.elapsed().as_micros() as u64,
            %outcomes,
            "attempt at several resources decided"
        );
        acquisition.voted(&outcomes);
        if granted_by < masters.quorum {
            cleanup.run().await;
            return Err(AttemptFailure::votes(outcomes, split, &holders));
        }
        // Steps 3–4.
        let valid_until = match clock.valid_until(start) {
            Ok(valid_until) => valid_until,
            Err(elapsed) => {
                cleanup.run().await;
                return Err(AttemptFailure::NoValidity(elapsed));
            }
        };
        cleanup.armed = false;
        Ok(Granted {
            grant: Grant {
                also: many.resources.iter().skip(1).cloned().collect(),
                ..Grant::new(start, valid_until)
            },
            everywhere: granted_by == masters.len(),
            slot_keys: None,
        })
    }
}

/// The split of an attempt at `keys` resources, where `named` lists, per node, who refused it
/// on each busy key (`<i>:<holder>`): a resource one holder has on a quorum makes the whole
/// set busy ([`Split::No`]); otherwise the set is split when every busy resource is
/// ([`Split::Certain`] when each is certainly split, else [`Split::Possible`]).
fn split_of_many(
    votes: &[crate::outcome::NodeVote],
    named: &[Vec<&str>],
    keys: usize,
    quorum: usize,
) -> Split {
    let mut split = None;
    for key in 1..=keys {
        let prefix = format!("{key}:");
        let holders: Vec<Option<&str>> = named
            .iter()
            .map(|on_node| on_node.iter().copied().find(|h| h.starts_with(&prefix)))
            .collect();
        if holders.iter().all(Option::is_none) {
            continue;
        }
        match Split::of(votes, &holders, quorum) {
            Split::No => return Split::No,
            Split::Possible => split = Some(Split::Possible),
            Split::Certain => {
                split.get_or_insert(Split::Certain);
            }
        }
    }
    split.unwrap_or(Split::No)
}

/// Releases an attempt's keys on every node unless disarmed (step 5); if dropped while armed
/// (the acquire future was cancelled), the release is spawned instead.
struct ManyCleanup<'a> {
    redlock: &'a Redlock,
    keys: &'a [ResourceKeys],
    token: &'a Token,
    armed: bool,
}

impl ManyCleanup<'_> {
    /// Releases now, on every node (nobody is woken: nothing was held).
    async fn run(&mut self) {
        self.armed = false;
        self.redlock
            .release_keys(self.keys, self.token, false)
            .await;
    }
}

impl Drop for ManyCleanup<'_> {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let (redlock, keys, token) = (self.redlock.clone(), self.keys.to_vec(), self.token.clone());
        self.redlock.spawn_background(async move {
            redlock.release_keys(&keys, &token, false).await;
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::outcome::NodeVote;

    #[test]
    fn a_resource_held_on_a_quorum_makes_the_set_busy_whatever_else_is_split() {
        let held = [NodeVote::Held, NodeVote::Held, NodeVote::Held];
        // b held by H everywhere; a briefly taken by two contenders on two nodes.
        let named = [vec!["1:c1", "2:h"], vec!["1:c2", "2:h"], vec!["2:h"]];
        assert_eq!(split_of_many(&held, &named, 2, 2), Split::No);
        // Nobody has a quorum of either: a split.
        let named = [vec!["1:c1"], vec!["1:c2"], vec!["2:c3"]];
        assert_eq!(split_of_many(&held, &named, 2, 2), Split::Certain);
        // One holder of a on a quorum: busy.
        let named = [vec!["1:h"], vec!["1:h"], vec!["2:c3"]];
        assert_eq!(split_of_many(&held, &named, 2, 2), Split::No);
    }
}
