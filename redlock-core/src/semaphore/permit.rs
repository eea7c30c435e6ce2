//! One attempt at a permit of a counting semaphore ([`Redlock::semaphore`](crate::Redlock::semaphore)): Redlock steps
//! 1–5 on the semaphore's slots, in one round.
//!
//! A semaphore of K permits is K plain locks, one per slot. Every node takes, for the attempt,
//! the first free slot in the order the request gives (`ACQUIRE_PERMIT`), and answers which,
//! with who held each slot; the attempt holds a permit when one slot was granted by a quorum
//! within the validity, and releases every other slot it took, on every node (step 5). With no
//! slot on a quorum, the semaphore is busy when every permit may be held (each slot by one
//! holder named on a quorum), and the round is a split otherwise ([`SlotTally`]). The order is ascending slot
//! order for every request, so that concurrent requests race for the lowest free slot as they
//! would for one lock: two requests that meet with two slots free each get one (every node
//! gives slot 0 to one and slot 1 to the other, so the request that has slot 0 on a majority
//! has it there, and the other has slot 1 on that same majority).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use tokio::time::Instant;

use super::node::PermitRequest;
use crate::kernel::acquire::attempt::{AttemptFailure, Clock, Granted, Split};
use crate::kernel::commands::Waiter;
use crate::kernel::lease::{Grant, Held, Permit};
use crate::kernel::masters::Stop;
use crate::kernel::redlock::Redlock;
use crate::keys::{PermitSlots, ResourceKeys};
use crate::options::LockOptions;
use crate::outcome::NodeVote;
use crate::telemetry::Acquisition;
use crate::token::Token;

/// Who asks for a permit, as a waiter.
#[derive(Debug, Clone, Copy)]
pub(super) struct PermitAsk<'a> {
    /// The acquisition's waiter identity (its rank is its wait start).
    pub(super) waiter: &'a Waiter,
    /// It has joined the semaphore's queue: a refusal keeps its place, and renews its entry.
    pub(super) queued: bool,
    /// How long its entry counts after this attempt, in ms.
    pub(super) alive_ms: u64,
    /// The slot to try first, learnt from the acquisition's last split round (the slot free
    /// on the most nodes then); [`NO_PREFERENCE`]: ascending order. Set by each split round.
    pub(super) prefer: &'a AtomicUsize,
}

/// [`PermitAsk::prefer`] without a preferred slot.
pub(super) const NO_PREFERENCE: usize = usize::MAX;

/// What one round's answers come to, slot by slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum SlotTally {
    /// This slot (from 0) was granted by a quorum: the permit is held.
    Won(usize),
    /// No slot has a quorum, and the semaphore is busy: every permit may be held, each slot by
    /// one holder that the nodes name on a quorum (counting those that did not answer); or
    /// every node refused the request (no slot free, or earlier waiters first); or too few
    /// answered (the nodes are unavailable).
    Refused,
    /// No slot has a quorum, yet some permit has no holder on a quorum: concurrent requests
    /// took the free slots in different orders on different nodes (each holding a slot on too
    /// few). Attempting again after a short random delay resolves it.
    Scattered,
}

impl SlotTally {
    /// The tally of `granted` (per node, the slot it granted, if any) and `holders` (per node,
    /// who held each slot before the request took one: a digest, or `None` when free; empty
    /// where no answer came), `refused` nodes having granted no slot, with `quorum` nodes
    /// needed. Each node grants one slot per attempt, so at most one slot has a quorum.
    pub(super) fn of(
        granted: &[Option<usize>],
        holders: &[Vec<Option<String>>],
        refused: usize,
        quorum: usize,
    ) -> Self {
        let mut counts: BTreeMap<usize, usize> = BTreeMap::new();
        for slot in granted.iter().flatten() {
            *counts.entry(*slot).or_default() += 1;
        }
        if let Some((&slot, _)) = counts.iter().find(|(_, count)| **count >= quorum) {
            return Self::Won(slot);
        }
        let answered = granted.iter().flatten().count() + refused;
        let silent = granted.len().saturating_sub(answered);
        // A slot is held when one holder is named for it by a quorum, those that did not
        // answer counted as naming it.
        let slots = holders.iter().map(Vec::len).max().unwrap_or(0);
        let held = (0..slots)
            .filter(|&slot| {
                let mut named: BTreeMap<&str, usize> = BTreeMap::new();
                for on_node in holders {
                    if let Some(Some(holder)) = on_node.get(slot) {
                        *named.entry(holder.as_str()).or_default() += 1;
                    }
                }
                named.values().any(|count| count + silent >= quorum)
            })
            .count();
        if counts.is_empty() || answered < quorum || held >= slots {
            Self::Refused
        } else {
            Self::Scattered
        }
    }
}

impl Redlock {
    /// One attempt at a permit with `token`: every node takes the first free slot of
    /// `slots` (ascending), or the one a release reserved for the waiter, unless as many
    /// earlier waiters as free slots are queued there; a slot granted by a
    /// quorum within the validity is held, and every other slot taken is released on every
    /// node (in the background once granted; before returning otherwise). Dropped midway,
    /// it releases every slot in the background.
    pub(super) async fn attempt_permit(
        &self,
        queue: &ResourceKeys,
        slots: &PermitSlots,
        token: &Token,
        options: &LockOptions,
        asking: PermitAsk<'_>,
        acquisition: &mut Acquisition,
    ) -> Result<Granted, AttemptFailure> {
        let PermitSlots {
            alive,
            capacity,
            slots,
        } = slots;
        let masters = self.masters();
        let clock = Clock::new(masters, options);
        let limit = clock.limit;
        // The order the nodes try the slots in: ascending, or the preferred slot first after a
        // split (the lowest free slot can differ from node to node, and the same ascending
        // order would then split the same way every time); `order[i]` is the slot at `i`.
        let preferred = asking.prefer.load(Ordering::Relaxed);
        let order: Vec<usize> = match Some(preferred).filter(|&p| p < slots.len()) {
            Some(first) => std::iter::once(first)
                .chain((0..slots.len()).filter(|&s| s != first))
                .collect(),
            None => (0..slots.len()).collect(),
        };
        let ordered: Vec<ResourceKeys> = order.iter().map(|&s| slots[s].clone()).collect();
        let request = PermitRequest {
            queue,
            alive,
            capacity,
            slots: &ordered,
            token: token.expose(),
            ttl_ms: options.ttl_millis(),
            waiter: asking.waiter,
            queued: asking.queued,
            alive_ms: asking.alive_ms,
            quarantine: &masters.quarantine_check,
        };
        let request = &request;
        let mut cleanup = SlotCleanup::new(self, slots, token);

        // Step 1: the monotonic clock, read before the first SET is sent.
        let start = Instant::now();
        // Step 2: every node at once; every node is heard out (within the limit), since
        // which slot each granted decides the attempt.
        let tally = masters
            .round(masters.len(), limit, Stop::AtQuorum, |node| async move {
                let reply = node.acquire_permit(request).await;
                (reply.vote, (reply.slot, reply.left_ms, reply.holders))
            })
            .await;
        // Back from the request's order to slot numbers.
        let granted: Vec<Option<usize>> = tally
            .counters
            .iter()
            .map(|c| {
                c.as_ref()
                    .and_then(|(slot, _, _)| *slot)
                    .map(|at| order[at])
            })
            .collect();
        let holders: Vec<Vec<Option<String>>> = tally
            .counters
            .iter()
            .map(|c| {
                let mut by_slot = vec![None; slots.len()];
                let in_order = c
                    .as_ref()
                    .map_or(&[][..], |(_, _, holders)| holders.as_slice());
                if in_order.len() != slots.len() {
                    return Vec::new();
                }
                for (at, holder) in in_order.iter().enumerate() {
                    by_slot[order[at]] = holder.clone();
                }
                by_slot
            })
            .collect();
        let unknown = tally
            .votes
            .iter()
            .any(|vote| !matches!(vote, NodeVote::Acquired | NodeVote::Held));
        let decided = SlotTally::of(&granted, &holders, tally.refused, masters.quorum);
        let everywhere = granted.iter().all(Option::is_some);
        // Step 5's set: every slot some node granted, and every slot when some node did not
        // answer (its SET may still land); the slot won is kept.
        let won = match decided {
            SlotTally::Won(slot) => Some(slot),
            SlotTally::Refused | SlotTally::Scattered => None,
        };
        cleanup.keep_only(&granted, unknown, won);
        acquisition.voted(masters.nodes.iter().map(|n| &n.label).zip(&tally.votes));
        let outcomes = masters.grant_outcomes(tally.votes, &tally.counters);
        tracing::debug!(
            granted = outcomes.acquired(),
            held = outcomes.held(),
            failed = outcomes.failed(),
            slot = won,
            elapsed_us = start.elapsed().as_micros() as u64,
            %outcomes,
            "permit attempt decided"
        );
        let Some(slot) = won else {
            cleanup.run().await;
            // After a split, the slot free on the most nodes first; after a refusal, the
            // lowest free slot again (the race of one lock).
            let next = match decided {
                SlotTally::Scattered => most_free(&holders, slots.len()).unwrap_or(NO_PREFERENCE),
                SlotTally::Won(_) | SlotTally::Refused => NO_PREFERENCE,
            };
            asking.prefer.store(next, Ordering::Relaxed);
            return Err(match decided {
                SlotTally::Scattered => AttemptFailure::Scattered(outcomes),
                SlotTally::Won(_) | SlotTally::Refused => AttemptFailure::Votes {
                    outcomes,
                    split: Split::No,
                    refusing: Vec::new(),
                },
            });
        };
        // Steps 3–4: elapsed time and validity = ttl − elapsed − drift.
        let valid_until = match clock.valid_until(start) {
            Ok(valid_until) => valid_until,
            Err(elapsed) => {
                cleanup.release_all_slots();
                cleanup.run().await;
                return Err(AttemptFailure::NoValidity(elapsed));
            }
        };
        // The other slots taken go in the background: the permit is held already.
        drop(cleanup);
        Ok(Granted {
            grant: Grant {
                held: Held::Permit(Permit {
                    permits: u32::try_from(slots.len()).unwrap_or(u32::MAX),
                    slot: u32::try_from(slot).unwrap_or(u32::MAX),
                }),
                ..Grant::new(start, valid_until)
            },
            everywhere,
            slot_keys: slots.get(slot).cloned(),
        })
    }
}

/// The slot free on the most nodes by `holders` (per node, who held each slot; nodes without
/// an answer left out), the lowest of those tied; `None` without any answer.
fn most_free(holders: &[Vec<Option<String>>], slots: usize) -> Option<usize> {
    let answered: Vec<&Vec<Option<String>>> = holders.iter().filter(|h| h.len() == slots).collect();
    if answered.is_empty() {
        return None;
    }
    (0..slots).max_by_key(|&slot| {
        let free = answered.iter().filter(|h| h[slot].is_none()).count();
        (free, std::cmp::Reverse(slot))
    })
}

/// Releases an attempt's slots on every node (step 5): on [`run`](Self::run), or in the
/// background when dropped with slots left to release. Until
/// [`keep_only`](Self::keep_only) narrows it, every slot.
struct SlotCleanup<'a> {
    redlock: &'a Redlock,
    slots: &'a [ResourceKeys],
    token: &'a Token,
    /// The slots (indices into `slots`) still to release.
    pending: BTreeSet<usize>,
}

impl<'a> SlotCleanup<'a> {
    fn new(redlock: &'a Redlock, slots: &'a [ResourceKeys], token: &'a Token) -> Self {
        Self {
            redlock,
            slots,
            token,
            pending: (0..slots.len()).collect(),
        }
    }

    /// Narrows the release to the slots some node `granted`, or every slot when some node's
    /// answer is `unknown`, less the slot `won`.
    fn keep_only(&mut self, granted: &[Option<usize>], unknown: bool, won: Option<usize>) {
        if !unknown {
            self.pending = granted.iter().flatten().copied().collect();
        }
        if let Some(won) = won {
            self.pending.remove(&won);
        }
    }

    /// Widens the release to every slot (the slot won included).
    fn release_all_slots(&mut self) {
        self.pending = (0..self.slots.len()).collect();
    }

    /// Releases the pending slots on every node, in one round ([`release_slots`]).
    async fn run(&mut self) {
        let pending = self.take_keys();
        release_slots(self.redlock, &pending, self.token).await;
    }

    /// The lock keys of the pending slots, which are no longer pending.
    fn take_keys(&mut self) -> Vec<String> {
        std::mem::take(&mut self.pending)
            .into_iter()
            .map(|slot| self.slots[slot].lock.clone())
            .collect()
    }
}

impl Drop for SlotCleanup<'_> {
    fn drop(&mut self) {
        if self.pending.is_empty() {
            return;
        }
        let (redlock, token, pending) =
            (self.redlock.clone(), self.token.clone(), self.take_keys());
        self.redlock.spawn_background(async move {
            release_slots(&redlock, &pending, &token).await;
        });
    }
}

/// Releases `token` from each of the slot keys `slots` that holds it, on every node at once
/// (`RELEASE` over them: one call per node, however many slots), decided at quorum like a
/// release; every node's call is made before the round is polled, and runs to completion.
async fn release_slots(redlock: &Redlock, slots: &[String], token: &Token) {
    if slots.is_empty() {
        return;
    }
    let keys: Vec<&str> = slots.iter().map(String::as_str).collect();
    let (keys, token) = (&keys, token.expose());
    redlock
        .release_round(|node| node.release_slots(keys, token))
        .await;
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each node's holders of each slot, as the script reports them ("" for a free slot;
    /// no entries where the node gave no such answer).
    fn holders(nodes: &[&[&str]]) -> Vec<Vec<Option<String>>> {
        nodes
            .iter()
            .map(|slots| {
                slots
                    .iter()
                    .map(|h| (!h.is_empty()).then(|| (*h).to_owned()))
                    .collect()
            })
            .collect()
    }

    #[test]
    fn a_slot_is_won_on_a_quorum_and_only_then() {
        let q = 3;
        // Two requests met on five nodes with two slots free: each node gave slot 0 to one.
        let first = [Some(0), Some(0), Some(0), Some(1), Some(1)];
        let seen = holders(&[&["", ""], &["", ""], &["", ""], &["b", ""], &["b", ""]]);
        assert_eq!(SlotTally::of(&first, &seen, 0, q), SlotTally::Won(0));
        // Nothing granted (refusals, failures): refused.
        assert_eq!(
            SlotTally::of(&[None; 5], &vec![Vec::new(); 5], 2, q),
            SlotTally::Refused
        );
        // Two grants of one slot, the other nodes down: too few answered.
        let short = [Some(2), Some(2), None, None, None];
        let seen = holders(&[&["h", "i", ""], &["h", "i", ""]]);
        assert_eq!(SlotTally::of(&short, &seen, 0, q), SlotTally::Refused);
    }

    #[test]
    fn requests_that_met_with_slots_free_are_a_split() {
        let q = 3;
        // Three requests took three free slots in different orders on five nodes; the others'
        // grants are named by fewer than a quorum each.
        let scattered = [Some(0), Some(1), Some(2), Some(0), Some(1)];
        let seen = holders(&[
            &["", "", ""],
            &["x", "", ""],
            &["x", "y", ""],
            &["", "", ""],
            &["y", "", ""],
        ]);
        assert_eq!(SlotTally::of(&scattered, &seen, 0, q), SlotTally::Scattered);
        // Three nodes, two permits: a holder has slot 1 on two nodes (a quorum), slot 0 is
        // free, and three requests at once each took it on one node only: a split, not busy
        // (one permit is free).
        let granted = [Some(0), None, Some(1)];
        let seen = holders(&[&["", "h"], &["b", "h"], &["c", ""]]);
        assert_eq!(SlotTally::of(&granted, &seen, 1, 2), SlotTally::Scattered);
    }

    #[test]
    fn a_full_semaphore_whose_holders_missed_nodes_is_busy_not_a_split() {
        // Three nodes, two permits, both held: slot 0 by g on {A, B}, slot 1 by h on {B, C}.
        // A grants slot 1, B refuses, C grants slot 0: each holder is on a quorum.
        let granted = [Some(1), None, Some(0)];
        let seen = holders(&[&["g", ""], &["g", "h"], &["", "h"]]);
        assert_eq!(SlotTally::of(&granted, &seen, 1, 2), SlotTally::Refused);
        // Five nodes: slot 0's holder on two, slot 1's on two, the fifth silent: either may
        // be on a quorum with it, so both permits may be held: busy.
        let granted = [Some(1), Some(0), Some(1), Some(0), None];
        let seen = holders(&[&["g", ""], &["", "h"], &["g", ""], &["", "h"]]);
        assert_eq!(SlotTally::of(&granted, &seen, 0, 3), SlotTally::Refused);
        // The fifth answered and named neither: a permit is free somewhere: a split.
        let seen = holders(&[&["g", ""], &["", "h"], &["g", ""], &["", "h"], &["", ""]]);
        assert_eq!(SlotTally::of(&granted, &seen, 1, 3), SlotTally::Scattered);
        // Three nodes, one permit: two nodes keep the free slot for an earlier waiter (a
        // refusal by rank names it "ahead"), the third grants it: busy, so the newcomer
        // queues behind the waiter instead of splitting.
        let ranked = [None, None, Some(0)];
        let seen = holders(&[&["ahead"], &["ahead"], &[""]]);
        assert_eq!(SlotTally::of(&ranked, &seen, 2, 2), SlotTally::Refused);
    }
}
