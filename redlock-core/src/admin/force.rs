//! Force-release: an operator removes whoever holds a resource, whatever their token: a read
//! of who holds it, then a delete of only those holders.

use futures_util::StreamExt as _;

use crate::error::{InvalidInput, LockError};
use crate::kernel::redlock::Redlock;
use crate::keys::{ResourceKeys, validate_resource};
use crate::options::MAX_PERMITS;
use crate::outcome::NodeVote;
use crate::telemetry;

/// The permits' slots force-released at once ([`Redlock::force_release`]).
const SLOTS_AT_ONCE: usize = 32;

/// What [`Redlock::force_release`] did on the nodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct ForceReleased {
    /// Nodes where a holder was there and was removed.
    pub removed: usize,
    /// Nodes where the key holds data that is not a lock (another application's key of the
    /// same name): it was left as it was.
    pub not_a_lock: usize,
    /// Nodes that answered.
    pub answered: usize,
    /// Nodes in all.
    pub nodes: usize,
    /// Nodes needed for a majority.
    pub quorum: usize,
    /// Permits of the counting semaphore on the resource
    /// ([`Redlock::semaphore`](crate::Redlock::semaphore)) whose holder was removed from at
    /// least one node.
    pub permits_removed: usize,
}

impl ForceReleased {
    /// `true` if a holder was removed from at least one node.
    pub fn removed_any(&self) -> bool {
        self.removed > 0
    }

    /// `true` if a quorum of nodes answered: the report covers enough nodes for no holder to
    /// keep a quorum of them.
    pub fn confirmed(&self) -> bool {
        self.answered >= self.quorum
    }
}

impl Redlock {
    /// **Breaks the lock on `resource`**: removes whoever holds it on every node, whatever
    /// their token, and wakes its waiters. Two rounds: a read of who holds it on every node
    /// (digests of their tokens, never the tokens), then a delete of only those holders on
    /// every node, so that a delete reaching a node late cannot remove the lock of a holder
    /// that took the resource after it. For operators, when a holder is known to be dead
    /// and its ttl is long; also `redlock release --force` on the command line.
    ///
    /// It is not a release: the lock's guarantee does not hold across it. A holder that is
    /// still alive keeps believing it holds the lock until its next extension, which a
    /// majority then refuses (its lost signal fires, [`LostReason::Refused`]); until then it
    /// may work beside the next holder. Fencing tokens (taken with
    /// [`LockOptions::fencing`](crate::LockOptions::fencing)) still order the two at the
    /// protected resource. Every call logs a warning and counts in
    /// `redlock_force_releases_total`, whatever it found.
    ///
    /// On each node: a string at the lock key with an expiry is a plain holder's (ours, a
    /// foreign Redlock client's, a reservation for a waiter, or a key kept for a minimum
    /// hold) and is deleted; for a resource held in modes, every holder's entry is removed
    /// and waiters' entries stay. A key that is not a lock (a string without an expiry,
    /// another type, or a hash with fields we did not write) is left as it is and counted in
    /// [`ForceReleased::not_a_lock`]. The fencing counter, waiter queue and windows stay.
    ///
    /// The permits of a counting semaphore on the resource go too, each as a lock of its own
    /// ([`ForceReleased::permits_removed`]): every permit of the number stored on the nodes
    /// ([`semaphore_permits`](Self::semaphore_permits); the largest any node answers), and
    /// the semaphore's waiters are woken.
    ///
    /// Every node is awaited in each round, each within the node timeout, and the report says
    /// what each count of nodes did (when the read found no holder, what the read found); [`ForceReleased::confirmed`] is `false` when fewer than a quorum
    /// answered (the nodes that answered were cleared, the others keep their holder until
    /// its ttl).
    ///
    /// Holders are told apart by their values: a foreign client that writes the same value
    /// for every holder (a constant, a host name, instead of the spec's random value) gives
    /// every holder one digest, and a delete reaching a node late removes the next such
    /// holder's key there too. Such a client cannot release safely either; its locks are
    /// force-released as safely as it holds them.
    ///
    /// # Cancel safety
    /// Dropped midway, the removals already handed to the nodes still run and the others are
    /// not made (the permits' slots are read and removed side by side, after the lock's).
    /// Calling it again is safe: it removes only the holders its own reads find.
    ///
    /// # Errors
    /// [`LockError::Invalid`]: empty, over-long or reserved resource (nothing is sent).
    ///
    /// [`LostReason::Refused`]: crate::LostReason::Refused
    pub async fn force_release(&self, resource: &str) -> Result<ForceReleased, LockError> {
        validate_resource(resource)?;
        let keys = self.resource_keys(self.key_for(resource));
        if keys.lock.contains('\0') {
            return Err(InvalidInput::ReservedResource.into());
        }
        let mut report = self.force_release_key(&keys, keys.waiters()).await;
        let stored = self.stored_permits(resource).await?;
        // A number no semaphore of ours stores (another application's key) is cut at the
        // largest a semaphore can have.
        if let Some(permits) = stored.into_iter().flatten().max() {
            let permits = permits.min(MAX_PERMITS);
            let (queue, slots) = self.permit_keys(keys.lock.clone(), permits);
            // Side by side, a bounded number at a time: a semaphore of many permits does not
            // send every slot's reads to every node at once.
            let removals: Vec<_> = slots
                .slots
                .iter()
                .map(|slot| self.force_release_key(slot, queue.waiters()))
                .collect();
            let removed: Vec<ForceReleased> = futures_util::stream::iter(removals)
                .buffer_unordered(SLOTS_AT_ONCE)
                .collect()
                .await;
            report.permits_removed = removed.iter().filter(|r| r.removed_any()).count();
        }
        telemetry::force_released(resource, report.removed, report.answered, report.nodes);
        Ok(report)
    }

    /// The two rounds of [`force_release`](Self::force_release) on one lock key (`keys`),
    /// waking the waiters on `channel`.
    async fn force_release_key(&self, keys: &ResourceKeys, channel: &str) -> ForceReleased {
        let masters = self.masters();
        let limit = masters.node_timeout;
        let mut report = ForceReleased {
            removed: 0,
            not_a_lock: 0,
            answered: 0,
            nodes: masters.len(),
            quorum: masters.quorum,
            permits_removed: 0,
        };
        // First who holds it, on every node, each within the node timeout, all awaited.
        let reads = masters
            .nodes
            .iter()
            .map(|node| node.force_read(keys, limit));
        let reads = futures_util::future::join_all(reads).await;
        let mut holders: Vec<String> = Vec::new();
        let mut not_a_lock = 0;
        for read in &reads {
            match read {
                Ok(Some(digests)) => holders.extend(digests.iter().cloned()),
                Ok(None) => not_a_lock += 1,
                Err(_) => {}
            }
        }
        holders.sort_unstable();
        holders.dedup();
        if holders.is_empty() {
            // Nobody to remove: nothing else is sent.
            report.not_a_lock = not_a_lock;
            report.answered = reads.iter().filter(|read| read.is_ok()).count();
        } else {
            // Then only those holders, on every node: a delete that reaches a node late
            // finds the next holder's token there, another digest, and leaves it. Whether or
            // not this handle listens, the applications' waiters are woken.
            let answers = masters
                .nodes
                .iter()
                .map(|node| node.force_release(keys, &holders, channel, limit));
            for (vote, not_a_lock) in futures_util::future::join_all(answers).await {
                match vote {
                    NodeVote::Acquired => report.removed += 1,
                    NodeVote::Held if not_a_lock => report.not_a_lock += 1,
                    _ => {}
                }
                if matches!(vote, NodeVote::Acquired | NodeVote::Held) {
                    report.answered += 1;
                }
            }
        }
        report
    }
}
