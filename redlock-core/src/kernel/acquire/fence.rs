//! The fencing write-back: after a quorum granted the lock, its fencing token is claimed as a
//! max register on every node and confirmed by a fencing quorum (crate docs, "Fencing
//! tokens").

use std::time::Duration;
use tokio::time::Instant;

use crate::kernel::masters::{Masters, Stop};
use crate::keys::ResourceKeys;
use crate::outcome::Outcomes;

/// Rounds of the fencing write-back before giving up (each round after the first follows a
/// node that reported a counter at or above the claim). Compatible holders of a mode lock
/// claiming at once are confirmed about one per round (the highest claim wins every node it
/// reaches), so this bounds how many can fence at once without retrying the attempt; each
/// round is one round trip, and the validity check after them counts them all.
const FENCE_ROUNDS: usize = 16;

/// When a claim was split (some nodes confirmed it, others had a counter at or above it: a
/// compatible holder claiming at once), the next claim goes up to this much further above the
/// highest counter seen, at random. Claiming the same value again, both would be confirmed by
/// the nodes each reached first and neither by a fencing quorum, round after round.
const FENCE_SPREAD: u64 = 64;

/// How long a split claim waits before the next round: a random part of the round it lost.
/// Two compatible holders whose claims each reach their own nearest nodes first would
/// otherwise leapfrog: each new claim, sent at the answer, reaches those nodes just as the
/// other's delayed claim does, round after round. Waiting lets the delayed claim land first
/// and be confirmed, and the next claim then goes above it.
fn backoff(round: Duration) -> Duration {
    crate::random::delay_up_to(round)
}

/// The fencing write-back: claims `highest + 1` on every node as a max register, and
/// returns it once a fencing quorum ([`timing::fencing_quorum`], 4 of 5) confirmed their
/// counter was below it. A node reporting a counter at or above the claim (one the read
/// missed, or a compatible holder's claim) starts another round above it (spread out when
/// the claim was split, [`FENCE_SPREAD`], after a [`backoff`]).
/// Where the resource's counter has expired, the node compares the claim with the key
/// prefix's fencing floor, which covers every token the counter held (the fence script,
/// `FENCE` in `kernel::scripts`).
///
/// Why tokens strictly increase, with one node restarted empty and any minority cut off
/// (crate docs, "Fencing tokens"): let P be the previous holder with a token t. P's
/// confirmations came before P's lock was returned, so before its validity ended, so
/// before our lock was granted (Redlock's exclusion), so before this round. Any two
/// fencing quorums share `2F − N` nodes (3 of 5); while fewer than that many lost their
/// data since P's round, one still holds a counter ≥ t (or, once the counter expired, a
/// floor ≥ t) and confirmed our claim only because the claim was above it. (Compatible holders of a mode lock are not ordered by
/// exclusion: their tokens are distinct, in no particular order.)
pub(crate) async fn fence(
    masters: &Masters,
    keys: &ResourceKeys,
    highest: u64,
    limit: Duration,
) -> Result<u64, Outcomes> {
    let needed = masters.fencing_quorum;
    let mut claim = highest.saturating_add(1);
    let mut last = Outcomes::default();
    for round in 1..=FENCE_ROUNDS {
        // `u64::MAX` is never claimed: confirmed, it would leave no token above it for any
        // resource of the key prefix (the floor keeps it).
        if claim == u64::MAX {
            break;
        }
        let sent = Instant::now();
        let tally = masters
            .round(needed, limit, Stop::AtDecision, |node| {
                node.fence(keys, masters.fencing_counter_ttl_ms, claim)
            })
            .await;
        if tally.granted >= needed {
            return Ok(claim);
        }
        let above = tally
            .counters
            .iter()
            .flatten()
            .copied()
            .filter(|&c| c >= claim)
            .max();
        let split = tally.granted > 0;
        last = masters.outcomes(tally.votes);
        match above {
            Some(counter) => {
                let spread = if split {
                    crate::random::in_range(0..=FENCE_SPREAD)
                } else {
                    0
                };
                claim = counter.saturating_add(1).saturating_add(spread);
                // Only before a round that will be sent: a failed write-back returns at once,
                // and its attempt releases what it took.
                if split && round < FENCE_ROUNDS && claim != u64::MAX {
                    tokio::time::sleep(backoff(sent.elapsed())).await;
                }
            }
            None => break,
        }
    }
    tracing::debug!(outcomes = %last, "fencing write-back not confirmed by a fencing quorum");
    Err(last)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_backoff_is_a_part_of_the_round_it_follows() {
        for round in [Duration::ZERO, Duration::from_millis(20), Duration::MAX] {
            for _ in 0..100 {
                assert!(backoff(round) <= round, "{round:?}");
            }
        }
        let waits: Vec<Duration> = (0..100).map(|_| backoff(Duration::from_secs(1))).collect();
        assert!(
            waits.iter().any(|w| *w != waits[0]),
            "a backoff is drawn at random"
        );
    }
}
