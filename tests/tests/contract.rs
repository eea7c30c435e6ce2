//! The validity contract as one seeded property test, against five real redis-server
//! processes and three handles (and two over proxies of their own, whose faults the steps set:
//! an operator's, a slow resumer's).
//!
//! Random sequences of what users do — lock (plain or in a mode, waiting or not, auto-extended,
//! fenced, reentrant), extend (shorter and longer than the time left), release, drop, re-enter
//! from a guard's scope (asking for a longer ttl, fencing, auto-extension or a minimum hold
//! too), join two scopes of one guard that both re-enter, race two sibling futures of one task,
//! delete a held lock's hold on a quorum and extend it (refused), shut a handle down with any
//! timeout (`Duration::ZERO` to `Duration::MAX`) and rebuild it, lock over another
//! application's hash at the key, detach a guard and resume it (twice at once, or dropping the
//! resumption midway: in its swap, its extension round or its fencing round, after which the
//! lock is the detached token's again and resumes again), force-release a resource through
//! an operator whose requests reach some nodes late (its holders broken, the next holder taken
//! while the late delete is on its way), sleep until ttls run out — on three resources, so that they
//! collide (the foreign hashes on a fourth), and permits of a semaphore of two on a fifth, whose
//! slots the checks treat as resources of their own. After every step, checks against what the
//! nodes really hold and what the test saw, each a pure function over plain data with its own
//! unit tests (inputs they must reject and inputs they must accept):
//!
//! 1. [`check_validity`]: no guard that still claims validity claims it (or a lost deadline)
//!    later than its key lives on a quorum of the nodes;
//! 2. [`check_exclusion`]: no two guards with different tokens claim one resource at the same
//!    time in incompatible modes (a plain lock is incompatible with everything);
//! 3. [`check_ended`]: no view of a lock the test saw end — a `LockInfo` kept after its guard
//!    was released or dropped, the guard and its `LockInfo` after a refused extension, a
//!    shutdown, or once its lost signal fired — claims validity: not valid, nothing left, valid
//!    until no later than the instant it was seen ended;
//! 4. [`check_gone`] (after a shutdown, a release by token): a lock whose release a quorum
//!    confirmed is on fewer than a quorum of the nodes;
//! 5. [`check_expiry`]: every lock key on every node has an expiry;
//! 6. [`check_kept`] (after a late force-release): the holder that took the resource after the
//!    force's read keeps its key, through the late delete, on every node where it had it.
//!
//! The operations check their own outcomes too: a refused extension is refused, a re-entry
//! asking for what its lock lacks is refused naming it and leaves no hold, one asking for a
//! longer ttl is valid for it, joined scopes re-enter one at a time, a re-entry whose
//! guard's turn a live re-entry holds is refused as busy, and a lock over a foreign hash on a
//! quorum is refused (`ForeignKey` in a mode, `Busy` plain) while every foreign hash, on
//! every node, stays byte for byte and expiry as it was; a resumed guard holds a fresh token
//! and, for a fenced lock, a larger fencing token; a dropped resumption gives the lock back
//! within a bound (no holder on a node that was not there before, the detached token back
//! wherever its key lives, no longer than it had it), and the detached lock then resumes
//! (refused as lost only once its keys ran out); the holders a force-release broke are
//! refused their next extension and every view of them says ended.
//!
//! `CONTRACT_SEED` (u64) replays a run's sequence of operations (the outcomes depend on timing,
//! so a replay is the same program, not the same interleaving); `CONTRACT_STEPS` sizes it.

#![allow(clippy::unwrap_used)] // tests unwrap: a failure is the assertion

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use tokio::time::Instant;

use fred::clients::Client;
use fred::interfaces::ClientLike;
use fred::types::{ClusterHash, CustomCommand, Value};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use redlock_core::{
    DetachedLock, InvalidInput, LockError, LockGuard, LockInfo, LockOptions, LostReason, Mode,
    Redlock,
};
use redlock_tests::proxy::{Direction, Fault, Proxy};
use redlock_tests::{
    RedisNodes, fencing_key, lock_as, plain_client, proxy_urls, redlock, redlock_with, within,
};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

// ---------------------------------------------------------------------------------------------
// The oracle: plain data and pure checks.
// ---------------------------------------------------------------------------------------------

/// The semaphore among the resources, of [`PERMITS`] permits: each permit is the plain lock of
/// one slot, which the checks treat as a resource of its own ([`checked_resource`]): two valid
/// holders of one slot would be two holders of one lock, and there are [`PERMITS`] slots.
const SEMAPHORE: &str = "contract:sem";
const PERMITS: u32 = 2;

/// The resource the checks know a guard's lock by: its resource, or for a permit its slot's
/// (`contract:sem#1`).
fn checked_resource(guard: &LockGuard) -> String {
    match guard.info().slot() {
        Some(slot) => format!("{}#{slot}", guard.resource()),
        None => guard.resource().to_owned(),
    }
}

/// Nodes, and the majority that must hold a valid lock.
const NODES: usize = 5;
const QUORUM: usize = NODES / 2 + 1;

/// Allowance for Redis's millisecond clock: a `PTTL`, a `TIME` and an entry's expiry are whole
/// milliseconds, each truncated, so the life we compute from them may be up to about a
/// millisecond longer or shorter than the node's real one (see [`check_validity`]).
const ROUNDING: Duration = Duration::from_millis(2);

/// What one live guard claims at one instant: it is valid until `valid_until`, and trusted
/// (its lost signal has not fired) until `lost_deadline`.
#[derive(Debug, Clone)]
struct Claim {
    /// Who claims it, for the messages.
    who: String,
    resource: String,
    token: String,
    /// `None` for the plain lock.
    mode: Option<Mode>,
    valid_until: Instant,
    lost_deadline: Instant,
}

/// What one node holds at one resource's key.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Content {
    Absent,
    /// A plain lock (or a reservation for a waiter): the value.
    Plain(String),
    /// Mode holders and waiters: field → value (`"<MODE> <expiry ms>"` for a holder).
    Modes(HashMap<String, String>),
    /// Any other type (never written by the library).
    Other(String),
}

/// One node's view of one key, read atomically (one script) with the node's clock.
#[derive(Debug, Clone)]
struct NodeView {
    content: Content,
    /// `PTTL key`: -2 when absent, -1 without an expiry.
    pttl_ms: i64,
    /// The node's `TIME` in whole milliseconds (as the library's scripts compute `now`).
    now_ms: i64,
}

/// How long, from the moment it was read, node `view` keeps `claim`'s key: 0 where the token
/// is absent (or held in another mode); `u64::MAX` for a key without an expiry.
fn life_on(view: &NodeView, claim: &Claim) -> u64 {
    let key_life = match view.pttl_ms {
        -1 => u64::MAX,
        pttl => u64::try_from(pttl).unwrap_or(0),
    };
    match (&view.content, claim.mode) {
        (Content::Plain(value), None) if *value == claim.token => key_life,
        (Content::Modes(fields), Some(mode)) => {
            let Some(entry) = fields.get(&claim.token) else {
                return 0;
            };
            let mut parts = entry.split(' ');
            let (Some(held), Some(expiry)) = (parts.next(), parts.next()) else {
                return 0;
            };
            let Ok(expiry) = expiry.parse::<i64>() else {
                return 0;
            };
            if held != mode.as_str() {
                return 0;
            }
            // The entry's own expiry (node clock), bounded by the key's.
            let entry_life = u64::try_from(expiry - view.now_ms).unwrap_or(0);
            entry_life.min(key_life)
        }
        _ => 0,
    }
}

/// The `quorum`-th longest of `lives`: how long a quorum of nodes keeps the key.
fn quorum_life(lives: &[u64], quorum: usize) -> u64 {
    let mut sorted = lives.to_vec();
    sorted.sort_unstable_by(|a, b| b.cmp(a));
    sorted
        .get(quorum.saturating_sub(1))
        .copied()
        .unwrap_or_default()
}

/// Check 1: `claim` claims no validity, nor a lost deadline, beyond the life of its key on a
/// quorum of `views` (one per node), read after `t0`.
///
/// The direction of every error term: `t0` is taken BEFORE the first node is asked, so each
/// node's real expiry is at or after `t0 + life` (the node read its clock at or after `t0`):
/// `t0 + quorum life` is a lower bound of the instant the quorum's keys really expire, and the
/// read latency can only make the check stricter, never hide a claim that outlives its keys.
/// Redis's whole milliseconds err both ways, by under a millisecond each: a plain key lives
/// through the whole millisecond of its expiry while `PTTL` counts from the truncated clock,
/// so the `PTTL` we read is up to 1 ms SHORTER than the real life (strict direction); a mode
/// entry dies as the truncated clock reaches its expiry, so `expiry − TIME` is up to 1 ms
/// LONGER than the real life (loose direction). [`ROUNDING`] is the one deliberate loosening:
/// all told, the check may let a claim outlive its keys by under 3 ms, never more, and every
/// other error only makes it stricter. (Being strict, a read slower than the library's drift
/// margin could flag a correct lock: the live test re-reads before it believes a violation,
/// and convicts at once when even the instant of the last reply, an upper bound of every
/// node's read, shows it; see `Run::check`.)
/// The claims are snapshot before `t0`: a claim moves forward only with an extension, which
/// raises the keys first, so a later read can only find longer lives.
fn check_validity(claim: &Claim, views: &[NodeView], t0: Instant) -> Result<(), String> {
    let lives: Vec<u64> = views.iter().map(|v| life_on(v, claim)).collect();
    let life = quorum_life(&lives, QUORUM);
    let Some(bound) = t0.checked_add(Duration::from_millis(life) + ROUNDING) else {
        return Ok(()); // keys without an expiry outlive every claim
    };
    for (what, at) in [
        ("valid_until", claim.valid_until),
        ("lost deadline", claim.lost_deadline),
    ] {
        if at > bound {
            return Err(format!(
                "{} ({} {}, token {}) claims {what} t0+{:?}, but its key lives only {life} ms on \
                 a quorum of {QUORUM}/{NODES} (per node, ms: {}): {:?} beyond the keys (+{:?} \
                 rounding allowed)",
                claim.who,
                claim.resource,
                claim.mode.map_or("plain", Mode::as_str),
                short(&claim.token),
                at.duration_since(t0),
                describe_lives(&lives),
                at.duration_since(bound),
                ROUNDING,
            ));
        }
    }
    Ok(())
}

/// Two holders may share a resource: both in modes, compatible ones (a plain lock excludes
/// every mode, and another plain lock).
fn compatible(a: Option<Mode>, b: Option<Mode>) -> bool {
    matches!((a, b), (Some(a), Some(b)) if a.compatible(b))
}

/// Check 2: among `claims` still valid at `now`, no two with different tokens on one resource
/// are in incompatible modes. (Two guards sharing a token are one lock re-entered.)
fn check_exclusion(claims: &[Claim], now: Instant) -> Result<(), String> {
    let valid: Vec<&Claim> = claims.iter().filter(|c| c.valid_until > now).collect();
    for (i, a) in valid.iter().enumerate() {
        for b in &valid[i + 1..] {
            if a.resource == b.resource && a.token != b.token && !compatible(a.mode, b.mode) {
                return Err(format!(
                    "{} ({}, valid for {:?} more) and {} ({}, valid for {:?} more) both claim {} \
                     now, with different tokens, in incompatible modes",
                    a.who,
                    a.mode.map_or("plain", Mode::as_str),
                    a.valid_until.duration_since(now),
                    b.who,
                    b.mode.map_or("plain", Mode::as_str),
                    b.valid_until.duration_since(now),
                    a.resource,
                ));
            }
        }
    }
    Ok(())
}

/// What one public view of a lock (a [`LockGuard`] or a [`LockInfo`]) answered, read after the
/// test saw the lock end.
#[derive(Debug, Clone)]
struct Reading {
    /// Whose view, and which, for the messages.
    who: String,
    /// How the test saw it end: released, dropped, shut down, refused, lost.
    how: &'static str,
    /// An instant at or after the end: taken once the release, the drop, the shutdown or the
    /// refused extension returned, or once the lost signal was seen fired; before the read.
    ended_by: Instant,
    /// `lost().is_lost()`.
    lost: bool,
    is_valid: bool,
    remaining: Duration,
    valid_until: Instant,
}

impl Reading {
    fn of_info(info: &LockInfo, who: &str, how: &'static str, ended_by: Instant) -> Self {
        Self {
            who: format!("{who} (a LockInfo)"),
            how,
            ended_by,
            lost: info.lost().is_lost(),
            is_valid: info.is_valid(),
            remaining: info.remaining_validity(),
            valid_until: info.valid_until(),
        }
    }

    fn of_guard(guard: &LockGuard, who: &str, how: &'static str, ended_by: Instant) -> Self {
        Self {
            who: format!("{who} (its LockGuard)"),
            how,
            ended_by,
            lost: guard.lost().is_lost(),
            is_valid: guard.is_valid(),
            remaining: guard.remaining_validity(),
            valid_until: guard.valid_until(),
        }
    }
}

/// Check 3: a view of a lock the test saw end (released by its guard or by a shutdown, its
/// last guard dropped, an extension refused by a majority, its lost signal fired) claims
/// nothing: its lost signal has fired, it is not valid, no validity is left, and it is valid
/// until no later than the instant the lock was seen ended. Every field is exact (no clock
/// allowance): the library records the end when it sees it, before the test's `ended_by`.
fn check_ended(reading: &Reading) -> Result<(), String> {
    let mut wrong = Vec::new();
    if !reading.lost {
        wrong.push("its lost signal has not fired".to_owned());
    }
    if reading.is_valid {
        wrong.push("is_valid() is true".to_owned());
    }
    if !reading.remaining.is_zero() {
        wrong.push(format!("remaining_validity() is {:?}", reading.remaining));
    }
    if reading.valid_until > reading.ended_by {
        wrong.push(format!(
            "valid_until() is {:?} after the lock was seen {}",
            reading.valid_until.duration_since(reading.ended_by),
            reading.how
        ));
    }
    if wrong.is_empty() {
        return Ok(());
    }
    Err(format!(
        "{}, read after its lock was {}, still claims it: {}",
        reading.who,
        reading.how,
        wrong.join("; ")
    ))
}

/// Check 4: a lock whose release a quorum confirmed (`release_all`, a shutdown) is gone from a
/// quorum: its token is on fewer than [`QUORUM`] of `views`. (A node that answered a release
/// no longer holds the token, and nothing re-creates it; the nodes that had not answered yet
/// are fewer than a quorum.)
fn check_gone(claim: &Claim, views: &[NodeView]) -> Result<(), String> {
    let lives: Vec<u64> = views.iter().map(|v| life_on(v, claim)).collect();
    let holding = lives.iter().filter(|&&life| life > 0).count();
    if holding < QUORUM {
        return Ok(());
    }
    Err(format!(
        "{} ({} {}, token {}) was released with a quorum's confirmation, yet {holding} of \
         {NODES} nodes still hold it (per node, ms: {})",
        claim.who,
        claim.resource,
        claim.mode.map_or("plain", Mode::as_str),
        short(&claim.token),
        describe_lives(&lives),
    ))
}

/// Check 5: every lock key the library wrote has an expiry on every node (`PTTL` −1 is a key
/// that outlives every holder: a crashed holder's lock is never freed, and an extension that
/// raises the key's expiry "when it is below the ttl" then sets a SHORTER one than its entry's).
fn check_expiry(resource: &str, views: &[NodeView]) -> Result<(), String> {
    let forever: Vec<usize> = views
        .iter()
        .enumerate()
        .filter(|(_, v)| {
            v.pttl_ms == -1 && matches!(v.content, Content::Plain(_) | Content::Modes(_))
        })
        .map(|(node, _)| node)
        .collect();
    if forever.is_empty() {
        return Ok(());
    }
    Err(format!(
        "{resource}'s key has no expiry on nodes {forever:?} ({:?})",
        views[forever[0]].content
    ))
}

/// Check 6 (after a late force-release): `claim`, a holder that took the resource after the
/// force's read, keeps its key on every node where `mid` (read from `mid_t0`, before the
/// force's late deletes landed) showed it living past `after_by` (an instant at or after every
/// node's answer to the later read `after`): a late delete removes only the holders the force
/// read, never the next one. (Its key could only have grown since: it was neither released
/// nor handed over in between, and an extension only lengthens it.)
fn check_kept(
    claim: &Claim,
    (mid, mid_t0): (&[NodeView], Instant),
    (after, after_by): (&[NodeView], Instant),
) -> Result<(), String> {
    let between = after_by.saturating_duration_since(mid_t0) + ROUNDING;
    let between = u64::try_from(between.as_millis()).unwrap_or(u64::MAX);
    let removed: Vec<usize> = mid
        .iter()
        .zip(after)
        .enumerate()
        .filter(|(_, (m, a))| life_on(m, claim) > between && life_on(a, claim) == 0)
        .map(|(node, _)| node)
        .collect();
    if removed.is_empty() {
        return Ok(());
    }
    let lives = |views: &[NodeView]| {
        describe_lives(&views.iter().map(|v| life_on(v, claim)).collect::<Vec<_>>())
    };
    Err(format!(
        "{} ({} {}, token {}), taken after the force-release's read, lost its key on nodes \
         {removed:?} though it had more than {between} ms left there: per node, ms, {} before \
         the late deletes, {} after",
        claim.who,
        claim.resource,
        claim.mode.map_or("plain", Mode::as_str),
        short(&claim.token),
        lives(mid),
        lives(after),
    ))
}

/// Who holds a key on one node, as a force-release reads it: a plain key's value, or a mode
/// hash's holder fields (its waiters' `~` fields are not holders).
fn holder_ids(view: &NodeView) -> BTreeSet<String> {
    match &view.content {
        Content::Plain(value) => BTreeSet::from([value.clone()]),
        Content::Modes(fields) => fields
            .keys()
            .filter(|field| !field.starts_with('~'))
            .cloned()
            .collect(),
        Content::Absent | Content::Other(_) => BTreeSet::new(),
    }
}

fn short(token: &str) -> &str {
    token.get(..8).unwrap_or(token)
}

fn describe_lives(lives: &[u64]) -> String {
    let each: Vec<String> = lives
        .iter()
        .map(|&l| {
            if l == u64::MAX {
                "∞".to_owned()
            } else {
                l.to_string()
            }
        })
        .collect();
    format!("[{}]", each.join(", "))
}

#[cfg(test)]
mod oracle {
    //! The checks' own negative and positive controls.

    use super::*;

    const TOKEN: &str = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
    const OTHER: &str = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";
    const NOW_MS: i64 = 1_700_000_000_000;

    fn claim(resource: &str, token: &str, mode: Option<Mode>, t0: Instant, valid: u64) -> Claim {
        let valid_until = t0 + ms(valid);
        Claim {
            who: format!("test {token:.4}"),
            resource: resource.to_owned(),
            token: token.to_owned(),
            mode,
            valid_until,
            lost_deadline: valid_until - ms(valid / 10),
        }
    }

    fn plain(value: &str, pttl: i64) -> NodeView {
        NodeView {
            content: Content::Plain(value.to_owned()),
            pttl_ms: pttl,
            now_ms: NOW_MS,
        }
    }

    fn absent() -> NodeView {
        NodeView {
            content: Content::Absent,
            pttl_ms: -2,
            now_ms: NOW_MS,
        }
    }

    /// A hash holding `entries` (field, mode, ms left), with the key living `pttl`.
    fn modes(entries: &[(&str, &str, i64)], pttl: i64) -> NodeView {
        let fields = entries
            .iter()
            .map(|(field, mode, left)| ((*field).to_owned(), format!("{mode} {}", NOW_MS + left)))
            .collect();
        NodeView {
            content: Content::Modes(fields),
            pttl_ms: pttl,
            now_ms: NOW_MS,
        }
    }

    #[test]
    fn a_claim_within_the_quorum_life_is_accepted() {
        let t0 = Instant::now();
        let c = claim("r", TOKEN, None, t0, 900);
        // Lives 1000, 1000, 1000 ms on three nodes, absent on two: the quorum keeps it 1000 ms.
        let views = [
            plain(TOKEN, 1000),
            absent(),
            plain(TOKEN, 1000),
            plain(OTHER, 5000),
            plain(TOKEN, 1000),
        ];
        check_validity(&c, &views, t0).unwrap();
        // Up to the rounding allowance past it is still accepted.
        let edge = claim("r", TOKEN, None, t0, 1001);
        check_validity(&edge, &views, t0).unwrap();
        // A key without an expiry outlives any claim.
        let forever: [NodeView; 5] = std::array::from_fn(|_| plain(TOKEN, -1));
        check_validity(&claim("r", TOKEN, None, t0, 86_400_000), &forever, t0).unwrap();
    }

    #[test]
    fn a_claim_beyond_the_quorum_life_is_rejected() {
        let t0 = Instant::now();
        let c = claim("r", TOKEN, None, t0, 500);
        let views = [
            plain(TOKEN, 400),
            plain(TOKEN, 400),
            plain(TOKEN, 400),
            plain(TOKEN, 400),
            plain(TOKEN, 400),
        ];
        let error = check_validity(&c, &views, t0).unwrap_err();
        assert!(error.contains("lives only 400 ms"), "{error}");
        // The quorum life is the third longest, not the longest.
        let uneven = [
            plain(TOKEN, 9000),
            plain(TOKEN, 9000),
            plain(TOKEN, 300),
            plain(TOKEN, 200),
            plain(TOKEN, 100),
        ];
        assert!(check_validity(&c, &uneven, t0).is_err());
        // A lost deadline beyond the keys is rejected too, whatever the validity says.
        let mut late_signal = claim("r", TOKEN, None, t0, 300);
        late_signal.lost_deadline = t0 + ms(450);
        let error = check_validity(&late_signal, &views, t0).unwrap_err();
        assert!(error.contains("lost deadline"), "{error}");
    }

    #[test]
    fn a_token_on_only_two_of_five_nodes_is_rejected() {
        let t0 = Instant::now();
        let c = claim("r", TOKEN, None, t0, 500);
        let views = [
            plain(TOKEN, 10_000),
            plain(TOKEN, 10_000),
            plain(OTHER, 10_000),
            absent(),
            absent(),
        ];
        let error = check_validity(&c, &views, t0).unwrap_err();
        assert!(error.contains("lives only 0 ms"), "{error}");
    }

    #[test]
    fn mode_entries_are_read_with_their_own_expiry_and_the_keys() {
        let t0 = Instant::now();
        let pr = Some(Mode::ProtectedRead);
        let c = claim("r", TOKEN, pr, t0, 700);
        let good = modes(&[(TOKEN, "PR", 800), (OTHER, "PR", 3000)], 3000);
        check_validity(
            &c,
            &[good.clone(), good.clone(), good, absent(), absent()],
            t0,
        )
        .unwrap();
        // The entry expires before the claim, though the key lives on for another holder.
        let short_entry = modes(&[(TOKEN, "PR", 600), (OTHER, "PR", 3000)], 3000);
        let views = [0; 5].map(|_| short_entry.clone());
        assert!(check_validity(&c, &views, t0).is_err());
        // The key's own ttl bounds a longer entry.
        let short_key = modes(&[(TOKEN, "PR", 5000)], 600);
        let views = [0; 5].map(|_| short_key.clone());
        assert!(check_validity(&c, &views, t0).is_err());
        // The token held in another mode is not this claim's.
        let other_mode = modes(&[(TOKEN, "EX", 5000)], 5000);
        let views = [0; 5].map(|_| other_mode.clone());
        assert!(check_validity(&c, &views, t0).is_err());
        // A plain key holding the token does not back a mode claim, nor the reverse.
        let views = [0; 5].map(|_| plain(TOKEN, 5000));
        assert!(check_validity(&c, &views, t0).is_err());
        let views = [0; 5].map(|_| modes(&[(TOKEN, "EX", 5000)], 5000));
        assert!(check_validity(&claim("r", TOKEN, None, t0, 700), &views, t0).is_err());
    }

    /// A reading of a lock ended at `ended_by` that claims nothing.
    fn ended(ended_by: Instant) -> Reading {
        Reading {
            who: "g1".to_owned(),
            how: "released",
            ended_by,
            lost: true,
            is_valid: false,
            remaining: Duration::ZERO,
            valid_until: ended_by,
        }
    }

    #[test]
    fn a_view_of_an_ended_lock_that_claims_nothing_is_accepted() {
        let at = Instant::now();
        check_ended(&ended(at)).unwrap();
        // Valid until well before the end (it expired, then was released).
        let mut earlier = ended(at + ms(500));
        earlier.valid_until = at;
        check_ended(&earlier).unwrap();
    }

    #[test]
    fn a_view_of_an_ended_lock_that_claims_validity_is_rejected() {
        let at = Instant::now();
        let mut valid = ended(at);
        valid.is_valid = true;
        let error = check_ended(&valid).unwrap_err();
        assert!(error.contains("is_valid() is true"), "{error}");
        let mut time_left = ended(at);
        time_left.remaining = ms(29_696);
        let error = check_ended(&time_left).unwrap_err();
        assert!(error.contains("remaining_validity() is 29.696s"), "{error}");
        // Valid until after the instant it was seen ended, by even a millisecond.
        let mut later = ended(at);
        later.valid_until = at + ms(1);
        let error = check_ended(&later).unwrap_err();
        assert!(error.contains("valid_until() is 1ms after"), "{error}");
        // Its lost signal never fired.
        let mut silent = ended(at);
        silent.lost = false;
        let error = check_ended(&silent).unwrap_err();
        assert!(error.contains("lost signal has not fired"), "{error}");
        // All at once, as a view answering from the validity deadline alone would.
        let stale = Reading {
            lost: false,
            is_valid: true,
            remaining: ms(1965),
            valid_until: at + ms(1965),
            ..ended(at)
        };
        let error = check_ended(&stale).unwrap_err();
        assert_eq!(error.matches("; ").count(), 3, "{error}");
    }

    #[test]
    fn a_released_token_on_a_quorum_is_rejected_and_on_fewer_accepted() {
        let t0 = Instant::now();
        let c = claim("r", TOKEN, None, t0, 500);
        let views = [
            plain(TOKEN, 400),
            plain(TOKEN, 400),
            plain(TOKEN, 400),
            absent(),
            absent(),
        ];
        let error = check_gone(&c, &views).unwrap_err();
        assert!(error.contains("3 of 5 nodes still hold it"), "{error}");
        // Two late nodes, another holder, an expired mode entry: gone from a quorum.
        let views = [
            plain(TOKEN, 400),
            plain(TOKEN, 400),
            plain(OTHER, 400),
            absent(),
            modes(&[(TOKEN, "EX", -5)], 3000),
        ];
        check_gone(&c, &views).unwrap();
        let ex = claim("r", TOKEN, Some(Mode::Exclusive), t0, 500);
        let held = modes(&[(TOKEN, "EX", 800)], 3000);
        assert!(check_gone(&ex, &[0; 5].map(|_| held.clone())).is_err());
        let others = modes(&[(OTHER, "EX", 800)], 3000);
        check_gone(&ex, &[0; 5].map(|_| others.clone())).unwrap();
    }

    #[test]
    fn a_lock_key_without_an_expiry_is_rejected() {
        check_expiry(
            "r",
            &[
                plain(TOKEN, 500),
                absent(),
                modes(&[(TOKEN, "EX", 800)], 900),
            ],
        )
        .unwrap();
        let error =
            check_expiry("r", &[plain(TOKEN, 500), modes(&[(TOKEN, "NL", 800)], -1)]).unwrap_err();
        assert!(error.contains("no expiry on nodes [1]"), "{error}");
        assert!(check_expiry("r", &[plain(TOKEN, -1)]).is_err());
    }

    #[test]
    fn a_next_holder_whose_key_a_late_delete_removed_is_rejected() {
        let t0 = Instant::now();
        let c = claim("r", TOKEN, None, t0, 900);
        let mid = [
            plain(TOKEN, 1000),
            plain(TOKEN, 1000),
            plain(TOKEN, 1000),
            plain(TOKEN, 1000),
            plain(OTHER, 1000),
        ];
        // Kept everywhere (the node holding another token stays another's).
        let kept = [
            plain(TOKEN, 800),
            plain(TOKEN, 800),
            plain(TOKEN, 800),
            plain(TOKEN, 800),
            absent(),
        ];
        check_kept(&c, (&mid, t0), (&kept, t0 + ms(200))).unwrap();
        // Deleted on one node with 800 ms left: a late delete removed the next holder.
        let mut deleted = kept.clone();
        deleted[3] = absent();
        let error = check_kept(&c, (&mid, t0), (&deleted, t0 + ms(200))).unwrap_err();
        assert!(error.contains("nodes [3]"), "{error}");
        // Another holder's key there instead is as bad.
        deleted[3] = plain(OTHER, 5000);
        assert!(check_kept(&c, (&mid, t0), (&deleted, t0 + ms(200))).is_err());
        // Gone where it had expired by the second read: accepted.
        let mut expired = kept.clone();
        expired[0] = absent();
        let short = [
            plain(TOKEN, 150),
            mid[1].clone(),
            mid[2].clone(),
            mid[3].clone(),
            absent(),
        ];
        check_kept(&c, (&short, t0), (&expired, t0 + ms(200))).unwrap();
        // A mode holder's entry removed from the hash, the other holder left: rejected.
        let ex = claim("r", TOKEN, Some(Mode::ProtectedRead), t0, 900);
        let both = modes(&[(TOKEN, "PR", 1000), (OTHER, "PR", 1000)], 1000);
        let one = modes(&[(OTHER, "PR", 800)], 800);
        let mid = [0; 5].map(|_| both.clone());
        let mut after = [0; 5].map(|_| both.clone());
        after[1] = one;
        assert!(check_kept(&ex, (&mid, t0), (&after, t0 + ms(200))).is_err());
    }

    #[test]
    fn holders_are_values_and_holder_fields_not_waiters() {
        assert_eq!(
            holder_ids(&plain(TOKEN, 500)),
            BTreeSet::from([TOKEN.to_owned()])
        );
        assert!(holder_ids(&absent()).is_empty());
        let mut view = modes(&[(TOKEN, "EX", 500)], 500);
        if let Content::Modes(fields) = &mut view.content {
            fields.insert("~0123456789abcdef".to_owned(), "EX 1 0".to_owned());
        }
        assert_eq!(holder_ids(&view), BTreeSet::from([TOKEN.to_owned()]));
    }

    #[test]
    fn two_exclusive_claims_at_once_are_rejected() {
        let now = Instant::now();
        let ex = Some(Mode::Exclusive);
        let claims = [
            claim("r", TOKEN, ex, now, 500),
            claim("r", OTHER, ex, now, 500),
        ];
        assert!(check_exclusion(&claims, now).is_err());
        // Two plain locks, and a plain lock beside any mode, NL included.
        let claims = [
            claim("r", TOKEN, None, now, 500),
            claim("r", OTHER, None, now, 500),
        ];
        assert!(check_exclusion(&claims, now).is_err());
        let claims = [
            claim("r", TOKEN, None, now, 500),
            claim("r", OTHER, Some(Mode::Null), now, 500),
        ];
        assert!(check_exclusion(&claims, now).is_err());
    }

    #[test]
    fn a_reader_beside_a_writer_is_rejected() {
        let now = Instant::now();
        let claims = [
            claim("r", OTHER, Some(Mode::ConcurrentRead), now, 500),
            claim("r", TOKEN, Some(Mode::ProtectedRead), now, 500),
            claim(
                "r",
                OTHER.replace('b', "c").as_str(),
                Some(Mode::Exclusive),
                now,
                500,
            ),
        ];
        let error = check_exclusion(&claims, now).unwrap_err();
        assert!(error.contains("incompatible"), "{error}");
    }

    #[test]
    fn compatible_shared_expired_or_separate_claims_are_accepted() {
        let now = Instant::now();
        let (pr, ex) = (Some(Mode::ProtectedRead), Some(Mode::Exclusive));
        let third = "cccccccccccccccccccccccccccccccccccccccc";
        // Readers together; NL beside EX.
        check_exclusion(
            &[
                claim("r", TOKEN, pr, now, 500),
                claim("r", OTHER, pr, now, 500),
                claim("r", third, Some(Mode::ConcurrentRead), now, 500),
            ],
            now,
        )
        .unwrap();
        check_exclusion(
            &[
                claim("r", TOKEN, ex, now, 500),
                claim("r", OTHER, Some(Mode::Null), now, 500),
            ],
            now,
        )
        .unwrap();
        // One lock re-entered: two guards, one token.
        check_exclusion(
            &[
                claim("r", TOKEN, None, now, 500),
                claim("r", TOKEN, None, now, 500),
            ],
            now,
        )
        .unwrap();
        // Two writers of different resources.
        check_exclusion(
            &[
                claim("r", TOKEN, ex, now, 500),
                claim("s", OTHER, ex, now, 500),
            ],
            now,
        )
        .unwrap();
        // A writer whose validity ended before the next one's.
        let mut expired = claim("r", TOKEN, ex, now, 0);
        expired.lost_deadline = now;
        check_exclusion(&[expired, claim("r", OTHER, ex, now, 500)], now).unwrap();
    }
}

// ---------------------------------------------------------------------------------------------
// Reading the nodes.
// ---------------------------------------------------------------------------------------------

/// Reads every key, its `PTTL`, and the node's `TIME`, atomically on one node. Returns
/// `{sec, usec, {type, pttl, {value} | {field, value, ...} | {}}, ...}`, one triple per key.
const OBSERVE: &str = r#"local t = redis.call("time")
local out = {t[1], t[2]}
for i = 1, #KEYS do
  local kind = redis.call("type", KEYS[i]).ok
  local pttl = redis.call("pttl", KEYS[i])
  local data = {}
  if kind == "string" then data = {redis.call("get", KEYS[i])}
  elseif kind == "hash" then data = redis.call("hgetall", KEYS[i]) end
  out[#out + 1] = {kind, pttl, data}
end
return out"#;

/// Deletes token `ARGV[1]`'s hold of `KEYS[1]`, and nobody else's: the plain key if it holds
/// the token, or the token's entry in a mode hash. Returns 1 if there was one.
const WIPE: &str = r#"local kind = redis.call("type", KEYS[1]).ok
if kind == "string" then
  if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("del", KEYS[1]) end
elseif kind == "hash" then
  return redis.call("hdel", KEYS[1], ARGV[1])
end
return 0"#;

/// Plain clients to every node (cached), and the keys to read.
struct Observer {
    clients: Vec<Client>,
    /// (resource, key), in order.
    keys: Vec<(String, String)>,
}

/// What every node held at every key, read after `t0`.
struct Observation {
    t0: Instant,
    /// How long the reads took (`t0` to the last reply).
    window: Duration,
    /// resource → one view per node, in node order.
    views: HashMap<String, Vec<NodeView>>,
}

impl Observer {
    async fn new(nodes: &RedisNodes, keys: Vec<(String, String)>) -> Self {
        let mut clients = Vec::new();
        for url in nodes.urls() {
            clients.push(within("a plain client", plain_client(&url)).await);
        }
        Self { clients, keys }
    }

    /// Deletes `token`'s hold of `resource` on `nodes` ([`WIPE`]); how many had one.
    async fn wipe(&self, nodes: &[usize], resource: &str, token: &str) -> usize {
        let (_, key) = self
            .keys
            .iter()
            .find(|(r, _)| r == resource)
            .unwrap_or_else(|| panic!("no key for {resource}"));
        let args = vec![
            Value::from(WIPE),
            Value::from(1),
            Value::from(key.as_str()),
            Value::from(token),
        ];
        let replies = within(
            "deleting a lock's hold",
            futures_util::future::join_all(nodes.iter().map(|&node| {
                let cmd = CustomCommand::new_static("EVAL", ClusterHash::FirstKey, false);
                self.clients[node].custom::<Value, Value>(cmd, args.clone())
            })),
        )
        .await;
        replies
            .into_iter()
            .map(|reply| reply.unwrap_or_else(|e| panic!("deleting a hold: {e}")))
            .filter(|reply| reply.as_i64() == Some(1))
            .count()
    }

    /// `command args` on every node, in node order.
    async fn on_each(&self, what: &str, command: &'static str, args: Vec<Value>) -> Vec<Value> {
        let replies = within(
            what,
            futures_util::future::join_all(self.clients.iter().map(|client| {
                let cmd = CustomCommand::new_static(command, ClusterHash::FirstKey, false);
                client.custom::<Value, Value>(cmd, args.clone())
            })),
        )
        .await;
        replies
            .into_iter()
            .map(|reply| reply.unwrap_or_else(|e| panic!("{what}: {e}")))
            .collect()
    }

    /// What each node holds at `key`: its `DUMP` (`None` if absent) and its `PTTL`.
    async fn dumps(&self, key: &str) -> Vec<(Option<Vec<u8>>, i64)> {
        let dumps = self.on_each("DUMP", "DUMP", vec![Value::from(key)]).await;
        let pttls = self.on_each("PTTL", "PTTL", vec![Value::from(key)]).await;
        dumps
            .into_iter()
            .zip(pttls)
            .map(|(dump, pttl)| {
                let bytes = match dump {
                    Value::Bytes(b) => Some(b.to_vec()),
                    Value::String(s) => Some(s.as_bytes().to_vec()),
                    _ => None,
                };
                (bytes, pttl.as_i64().unwrap_or(-3))
            })
            .collect()
    }

    async fn observe(&self) -> Observation {
        let mut args = vec![
            Value::from(OBSERVE),
            Value::from(i64::try_from(self.keys.len()).unwrap()),
        ];
        args.extend(self.keys.iter().map(|(_, key)| Value::from(key.as_str())));
        let t0 = Instant::now();
        let replies = within(
            "reading the nodes",
            futures_util::future::join_all(self.clients.iter().map(|client| {
                let cmd = CustomCommand::new_static("EVAL", ClusterHash::FirstKey, false);
                client.custom::<Value, Value>(cmd, args.clone())
            })),
        )
        .await;
        let window = t0.elapsed();
        let mut views: HashMap<String, Vec<NodeView>> = HashMap::new();
        for (node, reply) in replies.into_iter().enumerate() {
            let reply = reply.unwrap_or_else(|e| panic!("reading node {node}: {e}"));
            let parsed = parse_observation(reply, self.keys.len())
                .unwrap_or_else(|e| panic!("reading node {node}: {e}"));
            for ((resource, _), view) in self.keys.iter().zip(parsed) {
                views.entry(resource.clone()).or_default().push(view);
            }
        }
        Observation { t0, window, views }
    }
}

/// One node's reply to [`OBSERVE`], one view per key.
fn parse_observation(reply: Value, keys: usize) -> Result<Vec<NodeView>, String> {
    let mut items = reply.into_array().into_iter();
    let int = |v: Option<Value>, what: &str| {
        v.as_ref()
            .and_then(Value::as_i64)
            .ok_or_else(|| format!("no {what} in the reply"))
    };
    let sec = int(items.next(), "TIME seconds")?;
    let usec = int(items.next(), "TIME microseconds")?;
    let now_ms = sec * 1000 + usec / 1000;
    let mut views = Vec::with_capacity(keys);
    for item in items {
        let mut triple = item.into_array().into_iter();
        let kind = triple
            .next()
            .and_then(|v| v.as_string())
            .ok_or("no type in the reply")?;
        let pttl_ms = int(triple.next(), "PTTL")?;
        let data: Vec<String> = triple
            .next()
            .map(Value::into_array)
            .unwrap_or_default()
            .iter()
            .filter_map(Value::as_string)
            .collect();
        let content = match kind.as_str() {
            "none" => Content::Absent,
            "string" => Content::Plain(data.into_iter().next().unwrap_or_default()),
            "hash" => Content::Modes(
                data.chunks(2)
                    .filter_map(|pair| match pair {
                        [field, value] => Some((field.clone(), value.clone())),
                        _ => None,
                    })
                    .collect(),
            ),
            other => Content::Other(other.to_owned()),
        };
        views.push(NodeView {
            content,
            pttl_ms,
            now_ms,
        });
    }
    if views.len() != keys {
        return Err(format!("{} views for {keys} keys", views.len()));
    }
    Ok(views)
}

// ---------------------------------------------------------------------------------------------
// The randomized run.
// ---------------------------------------------------------------------------------------------

/// One step's operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Lock,
    Extend,
    Release,
    Drop,
    Nest,
    Siblings,
    /// A held lock's hold deleted on a quorum, then an extension: refused ([`refuse`]).
    Refuse,
    /// A re-entry asking for more than the lock it re-enters has ([`ask_more`]).
    AskMore,
    /// Two scopes of one guard joined, each re-entering ([`joined`]).
    Joined,
    /// A handle shut down with any timeout, then rebuilt ([`shutdown`]).
    Shutdown,
    /// A lock over another application's hash at the resource's key ([`foreign`]).
    Foreign,
    /// A lock of several resources at once ([`lock_many`]).
    Many,
    /// A guard detached, then resumed (now and then by two handles at once) or released
    /// by its token ([`detach`]).
    Detach,
    /// A guard in a mode moved to a weaker one ([`downgrade`]).
    Downgrade,
    /// A guard detached, its resumption dropped midway, then resumed ([`drop_resume`]).
    DropResume,
    /// A force-release whose delete reaches some nodes late, and the next holder ([`force`]).
    Force,
    Sleep,
}

/// The mix of operations, in thousandths of the steps (they sum to 1000). The five added with
/// the views' contract (refuse, ask more, joined, shutdown, foreign: 18.5%) took their share
/// from the others, so the run keeps its pace and its collisions; so did the three added with
/// the primitives (many, detach, downgrade: 14%): from the lock step (a lock of several and a
/// resumption are locks too), the sleeps, and a little from extend, nest, siblings, ask more
/// and release; so did the two added with the edges of handing on (a dropped resumption, a
/// late force-release: 5%), from the sleeps and the lock step (each takes a lock, or two).
///
/// An operation is a variant of [`Op`], a row here and an arm in the run's `match`.
const MIX: [(Op, u32); 17] = [
    (Op::Lock, 175),
    (Op::Extend, 112),
    (Op::Release, 58),
    (Op::Drop, 60),
    (Op::Nest, 70),
    (Op::Siblings, 50),
    (Op::Refuse, 40),
    (Op::AskMore, 50),
    (Op::Joined, 40),
    (Op::Shutdown, 15),
    (Op::Foreign, 30),
    (Op::Many, 60),
    (Op::Detach, 40),
    (Op::Downgrade, 40),
    (Op::DropResume, 30),
    (Op::Force, 20),
    (Op::Sleep, 110),
];

impl Op {
    fn pick(rng: &mut StdRng) -> Op {
        let mut roll = rng.random_range(0..MIX.iter().map(|(_, share)| share).sum::<u32>());
        for (op, share) in MIX {
            if roll < share {
                return op;
            }
            roll -= share;
        }
        unreachable!("the roll is below the sum of the shares")
    }
}

/// Handle `index` of the run, new: handles 0 and 1 with the defaults, handle 2 with defaults
/// that retry quickly (the options passed override them).
async fn handle(nodes: &RedisNodes, index: usize) -> Redlock {
    if index == 2 {
        redlock_with(nodes, LockOptions::default().retry_delay(ms(20))).await
    } else {
        redlock(nodes).await
    }
}

/// Default size: about 30–60 s on the 2-core machine under load (see the end-of-run print).
const DEFAULT_STEPS: u64 = 550;

/// Most live guards kept: beyond it, one is dropped (so that locks keep colliding rather than
/// everything being held).
const MAX_LIVE: usize = 8;

/// How many consecutive reads must all show a claim beyond its keys, counted from before the
/// read (`t0`), before it is a violation. [`check_validity`] from `t0` is strict: a read slower
/// than the library's drift margin (tens of ms when the machine is busy) can flag a correct
/// lock, and reading again clears it; a real violation stays visible on every read as long as
/// the guard claims validity. A claim beyond its keys even counted from the last reply fails
/// at once.
const READS_TO_CONVICT: usize = 5;

/// One live guard and how it was taken.
struct Live {
    /// Unique in the run.
    id: u64,
    guard: LockGuard,
    /// The handle it was taken through.
    handle: usize,
    /// Taken with `reentrant(true)`.
    reentrant: bool,
    /// Its lock is auto-extended (taken with `auto_extend(true)`, or re-entered one that is).
    auto: bool,
    /// For a guard that re-entered the scope of another: that guard's id. It holds that
    /// guard's turn until it goes, so every other re-entry of that guard's scopes waits.
    turn_of: Option<u64>,
    label: String,
    /// A view taken when it was acquired, kept as work keeps one, and checked after it ends.
    info: LockInfo,
    /// The mode it was taken in (a downgrade may since have moved it).
    taken: Option<Mode>,
}

/// A view of a lock kept after the test saw the lock end, checked after every step (the
/// latest [`MAX_ENDED`]).
struct Ended {
    info: LockInfo,
    label: String,
    how: &'static str,
    /// Taken once the end was seen (see [`Reading::ended_by`]).
    ended_by: Instant,
}

/// How many views of ended locks are kept and checked.
const MAX_ENDED: usize = 32;

impl Live {
    fn new(
        id: u64,
        guard: LockGuard,
        handle: usize,
        (reentrant, auto): (bool, bool),
        turn_of: Option<u64>,
        label: String,
    ) -> Self {
        let info = guard.info();
        let taken = guard.mode();
        Self {
            taken,
            id,
            guard,
            handle,
            reentrant,
            auto,
            turn_of,
            label,
            info,
        }
    }

    /// The live guard holding `id`'s turn (a re-entry of its scope that outlived the scope).
    fn turn_holder(live: &[Live], id: u64) -> Option<&Live> {
        live.iter().find(|l| l.turn_of == Some(id))
    }

    /// Its claim now on its (first) resource, if it claims validity (valid, and its lost
    /// signal has not fired).
    fn claim(&self, now: Instant) -> Option<Claim> {
        self.claims(now).into_iter().next()
    }

    /// Its claims now, one per resource it holds (a lock of several claims each of its
    /// resources, with one token and one validity), if it claims validity; none otherwise.
    fn claims(&self, now: Instant) -> Vec<Claim> {
        let valid_until = self.guard.valid_until();
        let lost = self.guard.lost();
        let lost_deadline = lost.deadline();
        if valid_until <= now || lost.is_lost() {
            return Vec::new();
        }
        let resources = if self.guard.permits().is_some() {
            vec![checked_resource(&self.guard)]
        } else {
            self.guard
                .resources()
                .into_iter()
                .map(str::to_owned)
                .collect()
        };
        let token = self.guard.token().expose().to_owned();
        let mode = self.guard.mode();
        resources
            .into_iter()
            .map(|resource| Claim {
                who: self.label.clone(),
                resource,
                token: token.clone(),
                mode,
                valid_until,
                lost_deadline,
            })
            .collect()
    }
}

/// Counts of what happened, printed at the end.
#[derive(Debug, Default)]
struct Stats {
    locked: u64,
    /// Permits of the semaphore taken.
    permits: u64,
    /// Plain locks taken by the lock step (the others are in modes).
    locked_plain: u64,
    busy: u64,
    split: u64,
    unavailable: u64,
    extended: u64,
    /// Extensions shorter than the time left (the validity stays), of plain and mode locks.
    extend_kept_plain: u64,
    extend_kept_mode: u64,
    extend_lost: u64,
    released: u64,
    released_late: u64,
    dropped: u64,
    /// Views of ended locks kept (released, dropped, refused, shut down), and readings of
    /// kept views checked; readings of live guards whose lost signal fired.
    ended_views: u64,
    ended_views_checked: u64,
    lost_views_checked: u64,
    reentered: u64,
    /// Re-entries refused as busy because an earlier re-entry of the scope holds its turn.
    turn_busy: u64,
    siblings_both: u64,
    /// Extensions a majority refused after the test deleted the lock's hold.
    refused: u64,
    /// Re-entries asking for more: refused with `ReentryAsksMore` (or `AtLeastWithMode`),
    /// given (re-entered), given a longer ttl by an extension round.
    asked_refused: u64,
    asked_given: u64,
    ttl_raised: u64,
    /// Two joined scopes of one guard that both re-entered, one after the other.
    joined_both: u64,
    shutdowns: u64,
    /// Of them, with `Duration::MAX` and with `Duration::ZERO`.
    shutdowns_max: u64,
    shutdowns_zero: u64,
    /// Claims checked after the steps (each against both checks).
    claims_checked: u64,
    /// Locks over a foreign hash refused, and granted (the hash on fewer than a quorum).
    foreign_refused: u64,
    foreign_granted: u64,
    /// Locks of several resources taken, and lock_many calls with an option it refuses
    /// (refused with `ManyWith`).
    many: u64,
    many_refused: u64,
    /// Guards detached; detaches refused (a permit, a lock of several, a shared lock);
    /// resumptions that held the lock; races of two resumptions (and of them, those where
    /// the other got `Lost`); detached locks released by their token.
    detached: u64,
    detach_refused: u64,
    resumed: u64,
    resume_races: u64,
    resume_race_lost: u64,
    /// Races of two resumptions where neither held it (they split the lock's nodes).
    resume_race_split: u64,
    released_detached: u64,
    /// Guards moved to a weaker mode; downgrades refused (not weaker, plain, shared).
    downgraded: u64,
    downgrade_refused: u64,
    /// Resumptions dropped midway: returned before the drop (held, or an error), dropped at a
    /// random instant, once their extension was seen on the nodes, once their fencing round
    /// was; resumed again after the drop, refused as lost since (the keys ran out).
    drops: u64,
    drops_too_late: u64,
    drops_timed: u64,
    drops_extended: u64,
    drops_fenced: u64,
    drops_resumed: u64,
    drops_expired: u64,
    /// Late force-releases; of them, a next holder that took the resource while the late
    /// delete was in flight; the late nodes where the next holder's key lived through the
    /// late delete; broken holders whose extension was refused.
    forces: u64,
    forces_next_held: u64,
    forces_kept: u64,
    forces_refused: u64,
    rereads: u64,
    max_live: usize,
    slowest_read: Duration,
}

struct Run {
    seed: u64,
    steps: u64,
    step: u64,
    history: Vec<String>,
    stats: Stats,
    next_id: u64,
    next_live: u64,
    ended: Vec<Ended>,
}

impl Run {
    fn note(&mut self, line: String) {
        self.history.push(format!("step {}: {line}", self.step));
    }

    /// Fails with the seed, the step and the last steps.
    fn fail(&self, message: &str) -> ! {
        let from = self.history.len().saturating_sub(40);
        panic!(
            "CONTRACT_SEED={seed} violated at step {step}/{steps}: {message}\n\
             last steps:\n  {history}\n\
             replay: CONTRACT_SEED={seed} CONTRACT_STEPS={steps} cargo nextest run -p \
             redlock-tests --test contract",
            seed = self.seed,
            step = self.step,
            steps = self.steps,
            history = self.history[from..].join("\n  "),
        );
    }

    /// Keeps `info`, a view of a lock seen ended, to check after every step.
    fn ended(&mut self, info: LockInfo, label: &str, how: &'static str, ended_by: Instant) {
        if self.ended.len() == MAX_ENDED {
            self.ended.remove(0);
        }
        self.stats.ended_views += 1;
        self.ended.push(Ended {
            info,
            label: label.to_owned(),
            how,
            ended_by,
        });
    }

    /// Drops a live guard; if it was its lock's last, keeps a view of the lock to check.
    fn drop_live(&mut self, gone: Live, why: &str) {
        self.note(format!("drop {}{why}", gone.label));
        self.stats.dropped += 1;
        let last = gone.guard.hold_count() == 1;
        let (info, label) = (gone.info.clone(), gone.label.clone());
        drop(gone);
        if last {
            self.ended(info, &label, "dropped", Instant::now());
        }
    }

    /// Check 3 on every kept view of an ended lock, and on both views of every live guard
    /// whose lost signal has fired (read first: once fired it stays fired).
    fn check_views(&mut self, live: &[Live]) {
        for ended in &self.ended {
            let reading = Reading::of_info(&ended.info, &ended.label, ended.how, ended.ended_by);
            if let Err(message) = check_ended(&reading) {
                self.fail(&message);
            }
        }
        let mut lost = 0;
        for held in live {
            if !held.guard.lost().is_lost() {
                continue;
            }
            let seen = Instant::now();
            lost += 1;
            for reading in [
                Reading::of_guard(&held.guard, &held.label, "lost", seen),
                Reading::of_info(&held.info, &held.label, "lost", seen),
            ] {
                if let Err(message) = check_ended(&reading) {
                    self.fail(&message);
                }
            }
        }
        self.stats.lost_views_checked += lost;
        self.stats.ended_views_checked += self.ended.len() as u64;
    }

    fn live_id(&mut self) -> u64 {
        self.next_live += 1;
        self.next_live
    }

    fn label(
        &mut self,
        handle: usize,
        resource: &str,
        mode: Option<Mode>,
        options: &LockOptions,
    ) -> String {
        self.next_id += 1;
        let mut label = format!(
            "g{}(h{handle} {resource} {} ttl {}ms",
            self.next_id,
            mode.map_or("plain", Mode::as_str),
            options.ttl.as_millis(),
        );
        if options.auto_extend {
            label.push_str(" auto");
            if let Some(max) = options.max_hold {
                label.push_str(&format!(" max_hold {}ms", max.as_millis()));
            }
        }
        if options.fencing {
            label.push_str(" fenced");
        }
        if options.reentrant {
            label.push_str(" re");
        }
        label.push(')');
        label
    }

    /// Both checks, against the guards in `live` and what the nodes hold now.
    async fn check(&mut self, live: &[Live], observer: &Observer) {
        self.check_views(live);
        let mut last = Vec::new();
        for read in 1..=READS_TO_CONVICT {
            // The claims first, then the nodes (see `check_validity`).
            let now = Instant::now();
            let claims: Vec<Claim> = live.iter().flat_map(|l| l.claims(now)).collect();
            if read == 1 {
                self.stats.claims_checked += claims.len() as u64;
            }
            if let Err(message) = check_exclusion(&claims, now) {
                self.fail(&message);
            }
            if claims.is_empty() {
                return;
            }
            let seen = observer.observe().await;
            self.stats.slowest_read = self.stats.slowest_read.max(seen.window);
            for (resource, views) in &seen.views {
                if let Err(message) = check_expiry(resource, views) {
                    self.fail(&message);
                }
            }
            let mut failures = Vec::new();
            for claim in &claims {
                let Some(views) = seen.views.get(&claim.resource) else {
                    continue;
                };
                let Err(message) = check_validity(claim, views, seen.t0) else {
                    continue;
                };
                // Measured from the last reply instead (an upper bound of every node's read),
                // the same check can only fail for a claim that really outlives its keys: no
                // need to read again.
                if let Err(certain) = check_validity(claim, views, seen.t0 + seen.window) {
                    self.fail(&format!(
                        "a guard claims validity beyond its keys on a quorum, even counted from \
                         the last reply ({:?} after t0): {certain}",
                        seen.window
                    ));
                }
                failures.push(message);
            }
            if failures.is_empty() {
                return;
            }
            last.push(format!(
                "read {read} (took {:?}): {}",
                seen.window,
                failures.join("; ")
            ));
            self.stats.rereads += 1;
            tokio::time::sleep(ms(2)).await;
        }
        self.fail(&format!(
            "a guard claims validity beyond its keys on a quorum, on {READS_TO_CONVICT} reads \
             in a row:\n    {}",
            last.join("\n    ")
        ));
    }
}

/// Names the seed again when the test panics anywhere (a timeout in `within`, a node that does
/// not answer), not only in the contract's own assertions, which name it themselves.
struct SeedOnPanic {
    seed: u64,
    steps: u64,
}

impl Drop for SeedOnPanic {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "replay: CONTRACT_SEED={} CONTRACT_STEPS={} cargo nextest run -p redlock-tests \
                 --test contract",
                self.seed, self.steps
            );
        }
    }
}

fn env_u64(name: &str) -> Option<u64> {
    let value = std::env::var(name).ok()?;
    Some(
        value
            .trim()
            .parse()
            .unwrap_or_else(|e| panic!("{name}={value:?} is not a u64: {e}")),
    )
}

fn random_mode(rng: &mut StdRng) -> Mode {
    // The read/write pair most often; the other four now and then.
    match rng.random_range(0..10) {
        0..=2 => Mode::ProtectedRead,
        3..=5 => Mode::Exclusive,
        6 => Mode::Null,
        7 => Mode::ConcurrentRead,
        8 => Mode::ConcurrentWrite,
        _ => Mode::ProtectedWrite,
    }
}

/// One attempt, or a short wait.
fn random_wait(rng: &mut StdRng, options: LockOptions) -> LockOptions {
    if rng.random_bool(0.5) {
        options.retry_count(0)
    } else {
        options
            .retry_delay(ms(rng.random_range(10..40)))
            .retry_jitter(ms(10))
            .wait_timeout(ms(rng.random_range(20..300)))
    }
}

/// Random options for a new lock.
fn random_options(rng: &mut StdRng) -> (LockOptions, Option<Mode>) {
    let mut options = LockOptions::default().ttl(ms(rng.random_range(200..=3000)));
    options = random_wait(rng, options);
    let mode = rng.random_bool(0.5).then(|| random_mode(rng));
    if rng.random_bool(0.5) {
        options = options.reentrant(true);
    }
    if rng.random_bool(0.1) {
        options = options.fencing(true);
    }
    if rng.random_bool(0.25) {
        options = options.auto_extend(true);
        if rng.random_bool(0.5) {
            options = options.max_hold(ms(rng.random_range(300..2500)));
        }
    }
    (options, mode)
}

/// The outcome of an acquisition, for the history; `None` for an error the contract allows
/// (busy, a split vote, unavailable under load, too slow to be valid).
fn acquired(run: &mut Run, result: Result<LockGuard, LockError>, what: &str) -> Option<LockGuard> {
    match result {
        Ok(guard) => {
            run.stats.locked += 1;
            Some(guard)
        }
        Err(error) if error.is_busy() => {
            run.stats.busy += 1;
            None
        }
        // Nobody had a quorum, contenders split the nodes (a lock lost by a refused extension
        // leaves its hold on the nodes that were not asked to drop it until it expires).
        Err(error @ LockError::SplitVote { .. }) => {
            run.stats.split += 1;
            run.note(format!("{what}: {error}"));
            None
        }
        Err(error @ (LockError::Unavailable { .. } | LockError::NoValidity { .. })) => {
            run.stats.unavailable += 1;
            run.note(format!("{what}: {error}"));
            None
        }
        Err(error) => run.fail(&format!("{what}: unexpected error {error}")),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_valid_guard_is_backed_by_a_quorum_and_excludes_its_conflicts() {
    let seed = env_u64("CONTRACT_SEED").unwrap_or_else(rand::random);
    let steps = env_u64("CONTRACT_STEPS").unwrap_or(DEFAULT_STEPS);
    println!("CONTRACT_SEED={seed} CONTRACT_STEPS={steps}");
    let _seed_on_panic = SeedOnPanic { seed, steps };
    let started = Instant::now();

    let nodes = RedisNodes::start(NODES);
    let mut handles: Vec<Redlock> = Vec::new();
    for h in 0..3 {
        handles.push(handle(&nodes, h).await);
    }
    let resources: Vec<String> = (0..3).map(|i| format!("contract:{i}")).collect();
    let semaphore_key = handles[0].key_for(SEMAPHORE);
    let keys = resources
        .iter()
        .map(|r| (r.clone(), handles[0].key_for(r)))
        .chain((0..PERMITS).map(|slot| {
            let key = format!("{semaphore_key}\0redlock:permit:{slot}");
            (format!("{SEMAPHORE}#{slot}"), key)
        }))
        .collect();
    let observer = Observer::new(&nodes, keys).await;
    let proxied = Proxied::new(&nodes).await;
    assert_eq!(
        proxied.operator.key_for(&resources[0]),
        handles[0].key_for(&resources[0])
    );
    let mut rng = StdRng::seed_from_u64(seed);
    let mut run = Run {
        seed,
        steps,
        step: 0,
        history: Vec::new(),
        stats: Stats::default(),
        next_id: 0,
        next_live: 0,
        ended: Vec::new(),
    };
    let mut live: Vec<Live> = Vec::new();

    for step in 0..steps {
        run.step = step;
        if live.len() > MAX_LIVE {
            let gone = live.swap_remove(rng.random_range(0..live.len()));
            run.drop_live(gone, " (too many live)");
        }
        let op = match Op::pick(&mut rng) {
            // Nothing to extend, release, drop or re-enter: lock instead.
            Op::Extend
            | Op::Release
            | Op::Drop
            | Op::Nest
            | Op::Refuse
            | Op::Detach
            | Op::DropResume
            | Op::Downgrade
                if live.is_empty() =>
            {
                Op::Lock
            }
            Op::AskMore | Op::Joined if !live.iter().any(|l| l.reentrant) => Op::Lock,
            // No lock in a mode to move down: mostly lock instead (else a refused downgrade).
            Op::Downgrade
                if !live
                    .iter()
                    .any(|l| l.guard.mode().is_some_and(|m| m != Mode::Null))
                    && rng.random_bool(0.7) =>
            {
                Op::Lock
            }
            op => op,
        };
        match op {
            Op::Lock if rng.random_bool(0.2) => {
                lock_permit(&mut run, &mut rng, &handles, &mut live).await;
            }
            Op::Lock => lock(&mut run, &mut rng, &handles, &resources, &mut live).await,
            Op::Extend => extend(&mut run, &mut rng, &mut live).await,
            Op::Release => release(&mut run, &mut rng, &mut live).await,
            Op::Drop => {
                let gone = live.swap_remove(rng.random_range(0..live.len()));
                run.drop_live(gone, "");
            }
            Op::Nest => nest(&mut run, &mut rng, &handles, &mut live).await,
            Op::Siblings => siblings(&mut run, &mut rng, &handles, &resources, &mut live).await,
            Op::Refuse => refuse(&mut run, &mut rng, &mut live, &observer).await,
            Op::AskMore => ask_more(&mut run, &mut rng, &handles, &mut live).await,
            Op::Joined => joined(&mut run, &mut rng, &handles, &live).await,
            Op::Foreign => foreign(&mut run, &mut rng, &handles, &observer).await,
            Op::Many => lock_many(&mut run, &mut rng, &handles, &resources, &mut live).await,
            Op::Detach => detach(&mut run, &mut rng, &handles, &mut live, &observer).await,
            Op::Downgrade => downgrade(&mut run, &mut rng, &mut live).await,
            Op::DropResume => {
                let with = (handles.as_slice(), resources.as_slice(), &proxied);
                drop_resume(&mut run, &mut rng, with, &mut live, &observer).await;
            }
            Op::Force => {
                let with = (handles.as_slice(), resources.as_slice());
                force(&mut run, &mut rng, with, &mut live, &observer, &proxied).await;
            }
            Op::Shutdown => {
                let world = (&nodes, &observer);
                shutdown(&mut run, &mut rng, world, &mut handles, &mut live).await;
            }
            Op::Sleep => {
                let nap = ms(rng.random_range(0..350));
                run.note(format!("sleep {nap:?}"));
                tokio::time::sleep(nap).await;
            }
        }
        run.stats.max_live = run.stats.max_live.max(live.len());
        run.check(&live, &observer).await;
    }

    run.step = steps;
    for held in live.drain(..) {
        let label = held.label.clone();
        if let Err(error) = within("the final releases", held.guard.release()).await
            && !matches!(
                error,
                LockError::ReleaseUnconfirmed { .. }
                    | LockError::Lost {
                        reason: LostReason::Expired | LostReason::Refused(_),
                        ..
                    }
            )
        {
            run.fail(&format!("final release of {label}: {error}"));
        }
    }
    println!(
        "CONTRACT_SEED={seed}: {steps} steps in {:?}; {:?}",
        started.elapsed(),
        run.stats
    );
}

/// Locks a random resource through a random handle with random options.
async fn lock(
    run: &mut Run,
    rng: &mut StdRng,
    handles: &[Redlock],
    resources: &[String],
    live: &mut Vec<Live>,
) {
    let handle = rng.random_range(0..handles.len());
    let resource = &resources[rng.random_range(0..resources.len())];
    let (options, mode) = random_options(rng);
    let label = run.label(handle, resource, mode, &options);
    let result = within("lock", lock_as(&handles[handle], resource, mode, &options)).await;
    let outcome = match &result {
        Ok(_) => "held".to_owned(),
        Err(e) => e.to_string(),
    };
    run.note(format!("lock {label}: {outcome}"));
    if let Some(guard) = acquired(run, result, &label) {
        if guard.mode().is_none() {
            run.stats.locked_plain += 1;
        }
        if guard.hold_count() != 1 {
            run.fail(&format!(
                "{label} was taken outside any scope, yet shares a lock (hold count {})",
                guard.hold_count()
            ));
        }
        let kind = (options.reentrant, options.auto_extend);
        live.push(Live::new(run.live_id(), guard, handle, kind, None, label));
    }
}

/// Takes a permit of the semaphore through a random handle, with a random ttl and wait, and
/// auto-extension now and then (a permit takes no mode, fencing or re-entry).
async fn lock_permit(run: &mut Run, rng: &mut StdRng, handles: &[Redlock], live: &mut Vec<Live>) {
    let handle = rng.random_range(0..handles.len());
    let mut options = LockOptions::default().ttl(ms(rng.random_range(200..=3000)));
    options = random_wait(rng, options);
    if rng.random_bool(0.25) {
        options = options.auto_extend(true);
    }
    let label = run.label(handle, SEMAPHORE, None, &options);
    let semaphore = handles[handle].semaphore(SEMAPHORE, PERMITS);
    let result = within("a permit", semaphore.acquire_with(&options)).await;
    let outcome = match &result {
        Ok(guard) => format!("held, slot {:?}", guard.info().slot()),
        Err(e) => e.to_string(),
    };
    run.note(format!("permit {label}: {outcome}"));
    if let Some(guard) = acquired(run, result, &label) {
        run.stats.permits += 1;
        let kind = (false, options.auto_extend);
        live.push(Live::new(run.live_id(), guard, handle, kind, None, label));
    }
}

/// Extends a random live guard to a random ttl, shorter or longer than the time it has left.
async fn extend(run: &mut Run, rng: &mut StdRng, live: &mut [Live]) {
    // Mostly a guard still trusted (the interesting case), now and then any.
    let now = Instant::now();
    let trusted: Vec<usize> = (0..live.len())
        .filter(|&i| live[i].claim(now).is_some())
        .collect();
    let index = if !trusted.is_empty() && rng.random_bool(0.8) {
        trusted[rng.random_range(0..trusted.len())]
    } else {
        rng.random_range(0..live.len())
    };
    let held = &live[index];
    let before = held.guard.valid_until();
    let now = Instant::now();
    // Half the time shorter than the time left (which must change nothing), else anything.
    let (shorter, share, any) = (
        rng.random_bool(0.5),
        rng.random_range(0.1..0.9),
        ms(rng.random_range(50..3500)),
    );
    let left_now = before.saturating_duration_since(now);
    let ttl = if shorter && left_now > ms(100) {
        Duration::from_millis(left_now.mul_f64(share).as_millis() as u64)
    } else {
        any
    };
    let lost = held.guard.lost();
    // The lock's lost margin, from its ttl (every lock of the run has the default margin);
    // not `valid_until − lost deadline`, which is no longer the margin once the lock is lost
    // (its views' validity then ends where it was seen lost).
    let margin = LockOptions::default()
        .ttl(held.guard.ttl())
        .lost_margin_in_effect();
    let trusted_for = lost.deadline().saturating_duration_since(now);
    let was_lost = lost.is_lost();
    let left = before.saturating_duration_since(now);
    let result = within("extend", held.guard.extend(ttl)).await;
    let after = held.guard.valid_until();
    let label = held.label.clone();
    let outcome = match &result {
        Ok(until) => format!("until now+{:?}", until.saturating_duration_since(now)),
        Err(e) => e.to_string(),
    };
    run.note(format!(
        "extend {label} to {ttl:?} (had {left:?} left): {outcome}"
    ));
    match result {
        Ok(until) => {
            run.stats.extended += 1;
            if until < before || after < before {
                run.fail(&format!(
                    "extending {label} to {ttl:?} moved its validity back: before now+{:?}, \
                     returned now+{:?}, now now+{:?}",
                    before.saturating_duration_since(now),
                    until.saturating_duration_since(now),
                    after.saturating_duration_since(now),
                ));
            }
            if until == before {
                match held.guard.mode() {
                    None => run.stats.extend_kept_plain += 1,
                    Some(_) => run.stats.extend_kept_mode += 1,
                }
            }
        }
        Err(LockError::Lost { reason, .. }) => {
            run.stats.extend_lost += 1;
            // A guard trusted well past this call had its keys on a quorum (the previous
            // step's check): nothing may refuse it but an expiry the check would have seen.
            if let LostReason::Refused(outcomes) = &reason
                && !was_lost
                && trusted_for > ms(100)
            {
                run.fail(&format!(
                    "extending {label}, trusted for {trusted_for:?} more, was refused by a \
                     majority: {outcomes}"
                ));
            }
        }
        Err(LockError::Invalid(input)) => {
            // Only a ttl that leaves no validity beyond the lost margin is refused.
            let drift = LockOptions::default().ttl(ttl).drift_factor(0.01).drift();
            if ttl > drift + margin {
                run.fail(&format!(
                    "extending {label} to {ttl:?} was refused: {input}"
                ));
            }
        }
        Err(LockError::Unavailable { .. }) => run.stats.unavailable += 1,
        Err(error) => run.fail(&format!("extending {label}: unexpected error {error}")),
    }
}

/// Releases a random live guard.
async fn release(run: &mut Run, rng: &mut StdRng, live: &mut Vec<Live>) {
    let held = live.swap_remove(rng.random_range(0..live.len()));
    let now = Instant::now();
    let lost = held.guard.lost();
    let trusted_for = lost.deadline().saturating_duration_since(now);
    let was_lost = lost.is_lost();
    let shared = held.guard.hold_count() > 1;
    let label = held.label.clone();
    let info = held.info.clone();
    let result = within("release", held.guard.release()).await;
    if !shared {
        // Its lock's last guard: whatever the nodes answered, the lock is released.
        run.ended(info, &label, "released", Instant::now());
    }
    run.note(format!("release {label}: {result:?}"));
    match result {
        Ok(released) => {
            run.stats.released += 1;
            if released.kept != shared {
                run.fail(&format!(
                    "releasing {label} (shared with another guard: {shared}) reported kept = {}",
                    released.kept
                ));
            }
            if !released.was_held() {
                run.stats.released_late += 1;
                // A guard trusted well past the release must have found its keys on a quorum.
                if !was_lost && trusted_for > ms(100) {
                    run.fail(&format!(
                        "releasing {label}, trusted for {trusted_for:?} more, found its key on \
                         only {} nodes",
                        released.deleted
                    ));
                }
            }
        }
        Err(LockError::ReleaseUnconfirmed { .. }) => run.stats.unavailable += 1,
        // A guard sharing its lock with another sends nothing, and reports a lock that can no
        // longer be trusted as lost rather than as held.
        Err(LockError::Lost { reason, .. })
            if shared && !matches!(reason, LostReason::Released) =>
        {
            run.stats.released_late += 1;
            if !was_lost && trusted_for > ms(100) {
                run.fail(&format!(
                    "releasing {label}, shared and trusted for {trusted_for:?} more, reported \
                     the lock lost: {reason}"
                ));
            }
        }
        Err(error) => run.fail(&format!("releasing {label}: unexpected error {error}")),
    }
}

/// Re-enters a random live guard from its scope (or, now and then, through another handle,
/// which must not re-enter), once or twice nested. A re-entry holds the turn of the guard whose
/// scope it entered until it goes, and these outlive their scope (they join the live guards):
/// while one does, another re-entry of that guard's scopes, asking for a single attempt, is
/// refused as busy at once.
async fn nest(run: &mut Run, rng: &mut StdRng, handles: &[Redlock], live: &mut Vec<Live>) {
    let index = rng.random_range(0..live.len());
    let outer = &live[index];
    if outer.guard.permits().is_some() {
        // A permit has no scope to re-enter (its lock is its slot's).
        run.note(format!("nest in {}: a permit, skipped", outer.label));
        return;
    }
    let (outer_reentrant, outer_auto) = (outer.reentrant, outer.auto);
    let via = if rng.random_bool(0.8) {
        outer.handle
    } else {
        (outer.handle + rng.random_range(1..handles.len())) % handles.len()
    };
    let options = LockOptions::default()
        .ttl(ms(rng.random_range(200..=3000)))
        .retry_count(0)
        .reentrant(true);
    let mode = outer.guard.mode();
    let deeper = rng.random_bool(0.3);
    let holds = outer.guard.hold_count();
    let trusted = !outer.guard.lost().is_lost();
    let expect_reentry = via == outer.handle && outer.reentrant;
    let turn_held = Live::turn_holder(live, outer.id).map(|l| l.label.clone());
    let (resource, outer_token, outer_id) = (
        outer.guard.resource().to_owned(),
        outer.guard.token().expose().to_owned(),
        outer.id,
    );
    let redlock = &handles[via];
    let (first, second) = within(
        "re-entering",
        outer.guard.scope(async {
            let first = lock_as(redlock, &resource, mode, &options).await;
            let second = match (&first, deeper) {
                (Ok(inner), true) => Some(
                    inner
                        .scope(lock_as(redlock, &resource, mode, &options))
                        .await,
                ),
                _ => None,
            };
            (first, second)
        }),
    )
    .await;
    let outer_label = outer.label.clone();
    let holds_now = outer.guard.hold_count();
    let still_trusted = !outer.guard.lost().is_lost();
    let base = run.label(via, &resource, mode, &options);
    let describe = |r: &Result<LockGuard, LockError>| match r {
        Ok(g) if g.token().expose() == outer_token => {
            format!("re-entered (holds {})", g.hold_count())
        }
        Ok(_) => "a lock of its own".to_owned(),
        Err(e) => e.to_string(),
    };
    run.note(format!(
        "nest {base} in the scope of {outer_label}{}{}: {}{}",
        if deeper { ", twice" } else { "" },
        turn_held
            .as_ref()
            .map(|holder| format!(" (turn held by {holder})"))
            .unwrap_or_default(),
        describe(&first),
        second
            .as_ref()
            .map(|s| format!(", then {}", describe(s)))
            .unwrap_or_default(),
    ));
    if expect_reentry && let Some(holder) = &turn_held {
        run.stats.turn_busy += 1;
        if !matches!(&first, Err(e) if e.is_busy()) && !refused_for_a_cap(&first) {
            run.fail(&format!(
                "{base}, a single attempt in the scope of reentrant {outer_label} whose turn \
                 {holder} holds, was not refused as busy: {}",
                describe(&first)
            ));
        }
    }
    let mut added = 0;
    // The guard whose scope the next re-entry entered: the outer one, then the first inner.
    let (mut parent_id, mut parent_token) = (outer_id, outer_token.clone());
    // Whether the parent's lock is auto-extended: a re-entry shares it, a lock of its own
    // (these options ask for none) is not. (The second re-entry's parent is the first, which
    // may be a lock of its own: in a mode the outer one, downgraded, now admits.)
    let mut parent_auto = outer_auto;
    for (depth, result) in std::iter::once(first).chain(second).enumerate() {
        let label = format!("{base}#{}", depth + 1);
        match result {
            Ok(guard) => {
                let same = guard.token().expose() == outer_token;
                if depth == 0 && expect_reentry && !same {
                    run.fail(&format!(
                        "{label}, in the scope of reentrant {outer_label} through its handle, \
                         took a lock of its own instead of re-entering"
                    ));
                }
                if depth == 0 && !expect_reentry && same {
                    run.fail(&format!(
                        "{label} re-entered {outer_label} though it is {}",
                        if outer_reentrant {
                            "another handle's"
                        } else {
                            "not reentrant"
                        }
                    ));
                }
                if same {
                    added += 1;
                    run.stats.reentered += 1;
                } else {
                    run.stats.locked += 1;
                }
                let id = run.live_id();
                let token = guard.token().expose().to_owned();
                let turn_of = (token == parent_token).then_some(parent_id);
                (parent_id, parent_token) = (id, token);
                let auto = turn_of.is_some() && parent_auto;
                parent_auto = auto;
                let kind = (true, auto);
                live.push(Live::new(id, guard, via, kind, turn_of, label));
            }
            Err(error) if expect_reentry && depth == 0 && turn_held.is_some() => {
                let _none = acquired(run, Err(error), &label);
            }
            Err(LockError::Lost { .. }) if expect_reentry && !still_trusted => {}
            // A ttl longer than the validity left is an extension round, which too few nodes
            // may answer in time under load.
            Err(error @ LockError::Unavailable { .. }) if expect_reentry => {
                let _none = acquired(run, Err(error), &label);
            }
            // Asking for auto-extension past the outer lock's cap (see `refused_for_a_cap`).
            Err(LockError::Invalid(InvalidInput::ReentryAsksMore {
                option: "max_hold" | "max_extensions",
            })) if options.auto_extend => {}
            Err(error) if expect_reentry && depth == 0 && trusted && still_trusted => {
                run.fail(&format!(
                    "{label}, in the scope of trusted reentrant {outer_label}, failed: {error}"
                ));
            }
            Err(error) => {
                let _none = acquired(run, Err(error), &label);
            }
        }
    }
    if holds_now != holds + added {
        run.fail(&format!(
            "{outer_label} was re-entered {added} times but its hold count went from {holds} to \
             {holds_now}"
        ));
    }
}

/// Two sibling futures of one task take one resource with reentrant options, outside any
/// scope: two holders, never one lock re-entered.
async fn siblings(
    run: &mut Run,
    rng: &mut StdRng,
    handles: &[Redlock],
    resources: &[String],
    live: &mut Vec<Live>,
) {
    let handle = rng.random_range(0..handles.len());
    let resource = &resources[rng.random_range(0..resources.len())];
    let mut options = LockOptions::default()
        .ttl(ms(rng.random_range(200..=3000)))
        .reentrant(true);
    options = random_wait(rng, options);
    let mode = rng.random_bool(0.5).then(|| random_mode(rng));
    let redlock = &handles[handle];
    let (a, b) = within("sibling futures", async {
        tokio::join!(
            lock_as(redlock, resource, mode, &options),
            lock_as(redlock, resource, mode, &options)
        )
    })
    .await;
    let base = run.label(handle, resource, mode, &options);
    let show = |r: &Result<LockGuard, LockError>| match r {
        Ok(g) => format!("held (holds {})", g.hold_count()),
        Err(e) => e.to_string(),
    };
    run.note(format!("siblings {base}: {} | {}", show(&a), show(&b)));
    if let (Ok(x), Ok(y)) = (&a, &b) {
        run.stats.siblings_both += 1;
        if x.token() == y.token() || x.hold_count() != 1 || y.hold_count() != 1 {
            run.fail(&format!(
                "sibling futures {base} shared one lock (holds {} and {}): they are two holders",
                x.hold_count(),
                y.hold_count()
            ));
        }
    }
    for (i, result) in [a, b].into_iter().enumerate() {
        let label = format!("{base}/{}", i + 1);
        if let Some(guard) = acquired(run, result, &label) {
            let kind = (true, false);
            live.push(Live::new(run.live_id(), guard, handle, kind, None, label));
        }
    }
}

/// Picks a live guard: mostly one still trusted (the interesting case), now and then any.
fn pick_trusted(rng: &mut StdRng, live: &[Live], share: f64) -> usize {
    let now = Instant::now();
    let trusted: Vec<usize> = (0..live.len())
        .filter(|&i| live[i].claim(now).is_some())
        .collect();
    if !trusted.is_empty() && rng.random_bool(share) {
        trusted[rng.random_range(0..trusted.len())]
    } else {
        rng.random_range(0..live.len())
    }
}

/// Deletes a live guard's hold (its plain key, or its entry in the mode hash: nobody else's) on
/// a quorum of the nodes or more, then extends it: a majority refuses, its lost signal fires,
/// and every view of it (the guard, the `LockInfo` kept since it was taken) says it is not
/// valid, now and after every later step.
async fn refuse(run: &mut Run, rng: &mut StdRng, live: &mut Vec<Live>, observer: &Observer) {
    let index = pick_trusted(rng, live, 0.9);
    let count = rng.random_range(QUORUM..=NODES);
    let mut wiped = rand::seq::index::sample(rng, NODES, count).into_vec();
    wiped.sort_unstable();
    let ttl = ms(rng.random_range(500..=3000));
    let held = &live[index];
    // A lock of several: the hold of one of its resources (an extension counts a node only
    // where every key still holds the token).
    let resources = held.guard.resources();
    let resource = if held.guard.permits().is_none() && resources.len() > 1 {
        resources[rng.random_range(0..resources.len())].to_owned()
    } else {
        checked_resource(&held.guard)
    };
    let (label, token) = (held.label.clone(), held.guard.token().expose().to_owned());
    let lost = held.guard.lost();
    let was_lost = lost.is_lost();
    let trusted_for = lost.deadline().saturating_duration_since(Instant::now());
    let had = observer.wipe(&wiped, &resource, &token).await;
    // Too few answers decide nothing: ask again (the hold stays deleted).
    let mut tries = 0;
    let result = loop {
        tries += 1;
        let result = within(
            "extending a lock whose hold was deleted",
            held.guard.extend(ttl),
        )
        .await;
        if tries < 3 && matches!(result, Err(LockError::Unavailable { .. })) {
            continue;
        }
        break result;
    };
    let ended_by = Instant::now();
    let outcome = match &result {
        Ok(until) => format!("until now+{:?}", until.saturating_duration_since(ended_by)),
        Err(e) => e.to_string(),
    };
    run.note(format!(
        "refuse {label}: its hold deleted on nodes {wiped:?} ({had} had one), then extend to \
         {ttl:?} (try {tries}): {outcome}"
    ));
    let refused = matches!(
        result,
        Err(LockError::Lost {
            reason: LostReason::Refused(_),
            ..
        })
    );
    match &result {
        Ok(_) => run.fail(&format!(
            "extending {label} succeeded though its hold was deleted on {} of {NODES} nodes",
            wiped.len()
        )),
        Err(LockError::Lost { .. }) if refused => run.stats.refused += 1,
        // Lost before the round was decided.
        Err(LockError::Lost { .. }) if was_lost || trusted_for <= ms(100) => {}
        Err(LockError::Unavailable { .. }) => run.stats.unavailable += 1,
        Err(error) => run.fail(&format!(
            "extending {label}, trusted for {trusted_for:?} more, after its hold was deleted on \
             {} of {NODES} nodes: expected a refusal, got {error}",
            wiped.len()
        )),
    }
    if held.guard.lost().is_lost() {
        let how = if refused { "refused" } else { "lost" };
        let info = held.info.clone();
        for reading in [
            Reading::of_guard(&held.guard, &label, how, ended_by),
            Reading::of_info(&info, &label, how, ended_by),
        ] {
            if let Err(message) = check_ended(&reading) {
                run.fail(&message);
            }
        }
        run.ended(info, &label, how, ended_by);
    } else {
        // Nothing decided: the lock still claims validity, its hold deleted by the test's
        // hand. Its guards go (the last one's drop releases what is left).
        let mut i = 0;
        while i < live.len() {
            if live[i].guard.token().expose() == token {
                let gone = live.swap_remove(i);
                run.drop_live(gone, " (its hold was deleted, its extension undecided)");
            } else {
                i += 1;
            }
        }
    }
}

/// What a re-entry asks for beyond sharing the lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ask {
    /// A ttl longer than the validity left.
    LongerTtl,
    Fencing,
    AutoExtend,
    /// `lock_at_least_for` (no lock of the run has one).
    AtLeast,
}

/// Re-enters a reentrant live guard through its handle, asking for more than a plain re-entry:
/// a ttl longer than the validity left is given by an extension round (the validity then
/// reaches start + ttl − drift, and check 1 holds it to the keys); fencing, auto-extension or a
/// minimum hold is given when the outer lock has it (the same fencing token), and otherwise
/// refused with `ReentryAsksMore` (`AtLeastWithMode` for a minimum hold in a mode), leaving no
/// hold behind. As any re-entry, it is refused as busy while its guard's turn is held.
/// A re-entry refused because the lock it re-enters is auto-extended with a cap (`max_hold`,
/// `max_extensions`) shorter than the request's: the run does not track the caps of every
/// lock, so this refusal is accepted wherever a re-entry asks for auto-extension.
fn refused_for_a_cap(result: &Result<LockGuard, LockError>) -> bool {
    matches!(
        result,
        Err(LockError::Invalid(InvalidInput::ReentryAsksMore {
            option: "max_hold" | "max_extensions"
        }))
    )
}

async fn ask_more(run: &mut Run, rng: &mut StdRng, handles: &[Redlock], live: &mut Vec<Live>) {
    let candidates: Vec<usize> = (0..live.len()).filter(|&i| live[i].reentrant).collect();
    let index = candidates[rng.random_range(0..candidates.len())];
    let ask = match rng.random_range(0..5) {
        0 | 1 => Ask::LongerTtl,
        2 => Ask::Fencing,
        3 => Ask::AutoExtend,
        _ => Ask::AtLeast,
    };
    let outer = &live[index];
    let mode = outer.guard.mode();
    let mut options = LockOptions::default().retry_count(0).reentrant(true);
    let outer_ttl = outer.guard.ttl();
    options = match ask {
        Ask::LongerTtl => {
            let left = outer.guard.remaining_validity();
            options.ttl(left.max(outer_ttl) + ms(rng.random_range(300..2500)))
        }
        Ask::Fencing => options.ttl(outer_ttl).fencing(true),
        Ask::AutoExtend => options.ttl(outer_ttl).auto_extend(true),
        Ask::AtLeast => options
            .ttl(ms(rng.random_range(500..=3000)))
            .lock_at_least_for(ms(rng.random_range(1..500))),
    };
    let refusal = match ask {
        Ask::Fencing if outer.guard.fencing_token().is_none() => Some("fencing"),
        Ask::AutoExtend if !outer.auto => Some("auto_extend"),
        Ask::AtLeast if mode.is_some() => Some("a mode"),
        Ask::AtLeast => Some("lock_at_least_for"),
        _ => None,
    };
    let (resource, outer_token, outer_fence) = (
        outer.guard.resource().to_owned(),
        outer.guard.token().expose().to_owned(),
        outer.guard.fencing_token(),
    );
    let (outer_id, outer_auto, outer_handle) = (outer.id, outer.auto, outer.handle);
    let outer_label = outer.label.clone();
    let holds = outer.guard.hold_count();
    let turn_held = Live::turn_holder(live, outer_id).map(|l| l.label.clone());
    let redlock = &handles[outer_handle];
    let before = Instant::now();
    let result = within(
        "a re-entry asking for more",
        outer
            .guard
            .scope(lock_as(redlock, &resource, mode, &options)),
    )
    .await;
    let holds_now = outer.guard.hold_count();
    let still_trusted = !outer.guard.lost().is_lost();
    let base = run.label(outer_handle, &resource, mode, &options);
    let outcome = match &result {
        Ok(g) if g.token().expose() == outer_token => format!(
            "re-entered (holds {}, valid for {:?}, fencing {:?})",
            g.hold_count(),
            g.remaining_validity(),
            g.fencing_token()
        ),
        Ok(_) => "a lock of its own".to_owned(),
        Err(e) => e.to_string(),
    };
    run.note(format!(
        "ask {ask:?} of {outer_label} (fencing {outer_fence:?}{}{}): {base}: {outcome}",
        if outer_auto { ", auto" } else { "" },
        turn_held
            .as_ref()
            .map(|holder| format!(", turn held by {holder}"))
            .unwrap_or_default(),
    ));
    if let Some(option) = refusal {
        let as_expected = match &result {
            Err(LockError::Invalid(InvalidInput::AtLeastWithMode)) => option == "a mode",
            Err(LockError::Invalid(InvalidInput::ReentryAsksMore { option: got })) => {
                *got == option
            }
            _ => false,
        };
        if !as_expected {
            run.fail(&format!(
                "{base}, re-entering {outer_label}, asked for {option}, which that lock was \
                 taken without: expected a refusal naming it, got {outcome}"
            ));
        }
        if holds_now != holds {
            run.fail(&format!(
                "the refused re-entry {base} left a hold behind: {outer_label}'s hold count went \
                 from {holds} to {holds_now}"
            ));
        }
        run.stats.asked_refused += 1;
        return;
    }
    if options.auto_extend && refused_for_a_cap(&result) {
        if holds_now != holds {
            run.fail(&format!(
                "the refused re-entry {base} left a hold behind: {outer_label}'s hold count went \
                 from {holds} to {holds_now}"
            ));
        }
        run.stats.asked_refused += 1;
        return;
    }
    if let Some(holder) = &turn_held {
        if !matches!(&result, Err(e) if e.is_busy()) {
            run.fail(&format!(
                "{base}, a single attempt in the scope of {outer_label} whose turn {holder} \
                 holds, was not refused as busy: {outcome}"
            ));
        }
        run.stats.turn_busy += 1;
    } else {
        match result {
            Ok(guard) => {
                if guard.token().expose() != outer_token {
                    run.fail(&format!(
                        "{base}, in the scope of reentrant {outer_label} through its handle, \
                         took a lock of its own instead of re-entering"
                    ));
                }
                if guard.fencing_token() != outer_fence {
                    run.fail(&format!(
                        "{base} re-entered {outer_label} (fencing token {outer_fence:?}) but has \
                         fencing token {:?}",
                        guard.fencing_token()
                    ));
                }
                // The validity asked for: the extension round started after `before`.
                let until = guard.valid_until();
                if ask == Ask::LongerTtl && !outer_auto && !guard.lost().is_lost() {
                    let sent = ms(options.ttl.as_millis() as u64);
                    let want = before + sent - options.drift();
                    if until < want {
                        run.fail(&format!(
                            "{base} re-entered {outer_label} asking for a ttl of {sent:?}, but \
                             is valid only until before+{:?}, short of before + ttl − drift = \
                             before+{:?}",
                            until.saturating_duration_since(before),
                            want.duration_since(before),
                        ));
                    }
                    run.stats.ttl_raised += 1;
                }
                if holds_now != holds + 1 {
                    run.fail(&format!(
                        "{outer_label} was re-entered once but its hold count went from \
                         {holds} to {holds_now}"
                    ));
                }
                run.stats.asked_given += 1;
                run.stats.reentered += 1;
                let id = run.live_id();
                let kind = (true, outer_auto);
                live.push(Live::new(
                    id,
                    guard,
                    outer_handle,
                    kind,
                    Some(outer_id),
                    format!("{base}#1"),
                ));
                return;
            }
            Err(LockError::Lost { .. }) if !still_trusted => {}
            // An extension round, which too few nodes may answer in time under load.
            Err(error @ LockError::Unavailable { .. }) if !outer_auto => {
                let _none = acquired(run, Err(error), &base);
            }
            Err(error) => run.fail(&format!(
                "{base}, in the scope of reentrant {outer_label} (trusted now: {still_trusted}), \
                 failed: {error}"
            )),
        }
    }
    if holds_now != holds {
        run.fail(&format!(
            "the failed re-entry {base} left a hold behind: {outer_label}'s hold count went from \
             {holds} to {holds_now}"
        ));
    }
}

/// Two scopes of one reentrant guard, joined in one task, each re-entering its lock: the
/// re-entered bodies run one at a time (a counter of the bodies inside never passes 1, and each
/// finds only its own hold added), both get in within their wait while the turn is free, and
/// both are refused as busy while a live re-entry holds it.
async fn joined(run: &mut Run, rng: &mut StdRng, handles: &[Redlock], live: &[Live]) {
    let candidates: Vec<usize> = (0..live.len()).filter(|&i| live[i].reentrant).collect();
    let outer = &live[candidates[rng.random_range(0..candidates.len())]];
    let turn_held = Live::turn_holder(live, outer.id).map(|l| l.label.clone());
    // Each body waits its turn up to its wait; with the turn held elsewhere, a short one.
    let wait = if turn_held.is_some() { ms(50) } else { ms(500) };
    let options = LockOptions::default()
        .ttl(ms(200))
        .reentrant(true)
        .wait_timeout(wait);
    let mode = outer.guard.mode();
    let pauses = [ms(rng.random_range(3..15)), ms(rng.random_range(3..15))];
    let holds = outer.guard.hold_count();
    let (resource, token) = (
        outer.guard.resource().to_owned(),
        outer.guard.token().expose().to_owned(),
    );
    let redlock = &handles[outer.handle];
    let (inside, most) = (AtomicUsize::new(0), AtomicUsize::new(0));
    let body = |pause: Duration| {
        let (options, resource, token, inside, most) =
            (&options, &resource, &token, &inside, &most);
        async move {
            let guard = lock_as(redlock, resource, mode, options).await?;
            let same = guard.token().expose() == token;
            let held = guard.hold_count();
            if same {
                let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                tokio::time::sleep(pause).await;
                inside.fetch_sub(1, Ordering::SeqCst);
            }
            drop(guard);
            Ok::<_, LockError>((same, held))
        }
    };
    let (a, b) = within("two joined scopes of one guard", async {
        tokio::join!(
            outer.guard.scope(body(pauses[0])),
            outer.guard.scope(body(pauses[1]))
        )
    })
    .await;
    let holds_now = outer.guard.hold_count();
    let still_trusted = !outer.guard.lost().is_lost();
    let most = most.load(Ordering::SeqCst);
    let show = |r: &Result<(bool, usize), LockError>| match r {
        Ok((true, held)) => format!("re-entered (holds {held})"),
        Ok((false, _)) => "a lock of its own".to_owned(),
        Err(e) => e.to_string(),
    };
    run.note(format!(
        "join two scopes of {}{}: {} | {} (at most {most} inside at once)",
        outer.label,
        turn_held
            .as_ref()
            .map(|holder| format!(" (turn held by {holder})"))
            .unwrap_or_default(),
        show(&a),
        show(&b),
    ));
    if most > 1 {
        run.fail(&format!(
            "two scopes of {} joined ran their re-entered bodies at once ({most} inside)",
            outer.label
        ));
    }
    for result in [&a, &b] {
        match result {
            Ok((false, _)) => run.fail(&format!(
                "a scope of reentrant {} took a lock of its own instead of re-entering",
                outer.label
            )),
            Ok((true, held)) if *held != holds + 1 => run.fail(&format!(
                "a re-entered body of {} found hold count {held}, not {}: the other body's \
                 hold was there too",
                outer.label,
                holds + 1
            )),
            Ok(_) if turn_held.is_some() => run.fail(&format!(
                "a scope of {} re-entered while {} holds its turn",
                outer.label,
                turn_held.as_deref().unwrap_or_default()
            )),
            Ok(_) => {}
            Err(e) if e.is_busy() && turn_held.is_some() => run.stats.turn_busy += 1,
            Err(LockError::Lost { .. }) if !still_trusted => {}
            // An extension round (a validity left under the 200 ms asked), which too few
            // nodes may answer in time under load, and which the other body waits for.
            Err(LockError::Unavailable { .. }) if !outer.auto => run.stats.unavailable += 1,
            Err(e) if e.is_busy() && !outer.auto && outer.guard.remaining_validity() < ms(400) => {
                run.stats.busy += 1;
            }
            Err(error) => run.fail(&format!(
                "a scope of reentrant {} (trusted now: {still_trusted}) failed to re-enter: \
                 {error}",
                outer.label
            )),
        }
    }
    if a.is_ok() && b.is_ok() {
        run.stats.joined_both += 1;
    }
    if holds_now != holds {
        run.fail(&format!(
            "{}'s hold count went from {holds} to {holds_now} over two joined scopes whose \
             re-entries were dropped",
            outer.label
        ));
    }
}

/// Shuts one handle down with a timeout (`Duration::MAX`, zero, a nanosecond, a few ms, in turn):
/// it returns, reports every lock the handle held, every view of them then says released, a
/// quorum no longer holds the ones it confirmed, and the handle refuses new locks. The handle is
/// then rebuilt (its guards go: they are inert).
async fn shutdown(
    run: &mut Run,
    rng: &mut StdRng,
    (nodes, observer): (&RedisNodes, &Observer),
    handles: &mut [Redlock],
    live: &mut Vec<Live>,
) {
    let h = rng.random_range(0..handles.len());
    // In turn, so that every run (about 8 shutdowns) has the extremes.
    let timeout = match run.stats.shutdowns % 4 {
        0 => Duration::MAX,
        1 => Duration::ZERO,
        2 => Duration::from_nanos(1),
        _ => ms(rng.random_range(1..300)),
    };
    let (mine, others): (Vec<Live>, Vec<Live>) = live.drain(..).partition(|l| l.handle == h);
    *live = others;
    let mut tokens: Vec<&str> = mine.iter().map(|l| l.guard.token().expose()).collect();
    tokens.sort_unstable();
    tokens.dedup();
    let locks = tokens.len();
    let report = within("a shutdown", handles[h].shutdown(timeout)).await;
    let ended_by = Instant::now();
    run.stats.shutdowns += 1;
    if timeout == Duration::MAX {
        run.stats.shutdowns_max += 1;
    } else if timeout.is_zero() {
        run.stats.shutdowns_zero += 1;
    }
    let labels: Vec<&str> = mine.iter().map(|l| l.label.as_str()).collect();
    run.note(format!(
        "shutdown h{h} ({timeout:?}) holding {locks} locks ({}): {report:?}",
        labels.join(", ")
    ));
    if report.released.len() + report.unconfirmed.len() != locks {
        run.fail(&format!(
            "shutting h{h} down ({timeout:?}) reported {} locks released and {} unconfirmed, \
             but it held {locks}",
            report.released.len(),
            report.unconfirmed.len()
        ));
    }
    let mut seen = Vec::new();
    for held in &mine {
        for reading in [
            Reading::of_guard(&held.guard, &held.label, "shut down", ended_by),
            Reading::of_info(&held.info, &held.label, "shut down", ended_by),
        ] {
            if let Err(message) = check_ended(&reading) {
                run.fail(&message);
            }
        }
        let token = held.guard.token().expose();
        if !seen.contains(&token) {
            seen.push(token);
            run.ended(held.info.clone(), &held.label, "shut down", ended_by);
        }
    }
    // The confirmed releases (a resource none of whose locks was unconfirmed) are gone.
    let nodes_now = observer.observe().await;
    for held in &mine {
        let resource = held.guard.resource();
        if !report.released.iter().any(|r| r == resource)
            || report.unconfirmed.iter().any(|r| r == resource)
        {
            continue;
        }
        // A lock of several is reported by its first resource, and released on every one.
        let checked: Vec<String> = if held.guard.permits().is_some() {
            vec![checked_resource(&held.guard)]
        } else {
            held.guard
                .resources()
                .into_iter()
                .map(str::to_owned)
                .collect()
        };
        for checked in checked {
            let claim = Claim {
                who: held.label.clone(),
                resource: checked.clone(),
                token: held.guard.token().expose().to_owned(),
                mode: held.guard.mode(),
                valid_until: ended_by,
                lost_deadline: ended_by,
            };
            if let Some(views) = nodes_now.views.get(&checked)
                && let Err(message) = check_gone(&claim, views)
            {
                run.fail(&format!(
                    "after shutting h{h} down ({timeout:?}): {message}"
                ));
            }
        }
    }
    match handles[h]
        .lock_with("contract:after-shutdown", &LockOptions::default())
        .await
    {
        Err(LockError::ShuttingDown) => {}
        other => run.fail(&format!(
            "h{h}, shut down, did not refuse a new lock: {:?}",
            other.map(|_| "a lock")
        )),
    }
    drop(mine);
    handles[h] = handle(nodes, h).await;
}

/// Another application's hashes at a lock key, as found in the wild: its own fields; fields
/// that look almost like ours (a token-shaped field with a mode-shaped value that is not an
/// entry of ours, a waiter-shaped field); a live-looking entry of an unknown mode; and one
/// field of ours beside one of theirs.
const FOREIGN_HASHES: [&[(&str, &str)]; 4] = [
    &[("owner", "billing"), ("count", "3")],
    &[
        (
            "0123456789abcdef0123456789abcdef01234567",
            "PR 17000000000000 x",
        ),
        ("~0123456789abcdef", "EX 1"),
    ],
    &[(
        "0123456789abcdef0123456789abcdef01234567",
        "ZZ 99999999999999",
    )],
    &[
        (
            "0123456789abcdef0123456789abcdef01234567",
            "PR 99999999999999",
        ),
        ("f", "v"),
    ],
];

/// Locks over another application's hash: writes one of [`FOREIGN_HASHES`] at the key of a
/// resource of its own (outside the three the observer reads: a foreign hash is nobody's
/// claim) on a random set of nodes, with or without an expiry, then locks it through a random
/// handle in a random mode or plain, and releases what it got. The mode scripts must leave
/// the hash exactly as it was on every node (`DUMP` and expiry: no field added, dropped or
/// rewritten, no expiry set or moved), and with the hash on a quorum the lock is refused:
/// `ForeignKey` naming the key in a mode, `Busy` plain (a string `SET NX` refuses any key).
async fn foreign(run: &mut Run, rng: &mut StdRng, handles: &[Redlock], observer: &Observer) {
    let resource = "contract:foreign";
    let handle = rng.random_range(0..handles.len());
    let key = handles[handle].key_for(resource);
    let count = rng.random_range(1..=NODES);
    let mut on = rand::seq::index::sample(rng, NODES, count).into_vec();
    on.sort_unstable();
    let fields = FOREIGN_HASHES[rng.random_range(0..FOREIGN_HASHES.len())];
    let expiry = rng
        .random_bool(0.5)
        .then(|| rng.random_range(60_000..120_000_i64));
    for &node in &on {
        let mut args = vec![Value::from(key.as_str())];
        for (field, value) in fields {
            args.extend([Value::from(*field), Value::from(*value)]);
        }
        let client = &observer.clients[node];
        let cmd = CustomCommand::new_static("HSET", ClusterHash::FirstKey, false);
        let _: Value = within("writing a foreign hash", client.custom(cmd, args))
            .await
            .unwrap();
        if let Some(ms) = expiry {
            let cmd = CustomCommand::new_static("PEXPIRE", ClusterHash::FirstKey, false);
            let args = vec![Value::from(key.as_str()), Value::from(ms)];
            let _: Value = within("expiring a foreign hash", client.custom(cmd, args))
                .await
                .unwrap();
        }
    }
    let before = observer.dumps(&key).await;
    let ttl = ms(rng.random_range(200..=3000));
    let mut options = random_wait(rng, LockOptions::default().ttl(ttl));
    let mode = rng.random_bool(0.75).then(|| random_mode(rng));
    if rng.random_bool(0.2) {
        options = options.fencing(true);
    }
    let label = run.label(handle, resource, mode, &options);
    let started = Instant::now();
    let result = within(
        "a lock over a foreign hash",
        lock_as(&handles[handle], resource, mode, &options),
    )
    .await;
    let outcome = match &result {
        Ok(_) => "held".to_owned(),
        Err(e) => e.to_string(),
    };
    run.note(format!(
        "foreign {label}: hash {fields:?} (expiry {expiry:?}) on nodes {on:?}: {outcome}"
    ));
    let released = match result {
        Ok(guard) => {
            run.stats.foreign_granted += 1;
            if count >= QUORUM {
                run.fail(&format!(
                    "{label} was granted though {count} of {NODES} nodes hold a foreign hash at its key"
                ));
            }
            within("releasing a lock beside foreign hashes", guard.release())
                .await
                .map(|_| ())
        }
        Err(error) => {
            let expected = match (&error, mode) {
                (LockError::ForeignKey { key: named, .. }, Some(_)) => *named == key,
                (error, None) if count >= QUORUM => error.is_busy(),
                // Too few foreign nodes to refuse it alone: only a slow node can (no other
                // lock of the run is on this resource).
                (LockError::Unavailable { .. } | LockError::NoValidity { .. }, _) => count < QUORUM,
                _ => false,
            };
            if !expected {
                run.fail(&format!(
                    "{label} over a foreign hash on {count} of {NODES} nodes: unexpected {error}"
                ));
            }
            run.stats.foreign_refused += 1;
            Ok(())
        }
    };
    if let Err(error) = released {
        run.fail(&format!("{label}: release beside foreign hashes: {error}"));
    }
    let elapsed = i64::try_from(started.elapsed().as_millis()).unwrap();
    let after = observer.dumps(&key).await;
    for &node in &on {
        let ((dump_before, pttl_before), (dump_after, pttl_after)) = (&before[node], &after[node]);
        // An expiry only runs down (by the time the lock took, plus the reads'); none stays none.
        let pttl_kept = if *pttl_before < 0 {
            pttl_after == pttl_before
        } else {
            *pttl_after <= *pttl_before && *pttl_after >= pttl_before - elapsed - 1_000
        };
        if dump_before != dump_after || !pttl_kept {
            run.fail(&format!(
                "{label} changed the foreign hash on node {node}: PTTL {pttl_before} -> \
                 {pttl_after}, DUMP {} -> {} bytes",
                dump_before.as_ref().map_or(0, Vec::len),
                dump_after.as_ref().map_or(0, Vec::len),
            ));
        }
    }
    let _ = observer
        .on_each(
            "clearing the foreign hashes",
            "DEL",
            vec![Value::from(key.as_str())],
        )
        .await;
}

/// Locks two or three of the three resources at once through a random handle, with a random
/// ttl and wait, auto-extended now and then, a resource repeated now and then (it counts
/// once): one guard holding every key with one token, plain (it collides with every lock of
/// those resources), which the checks read as one claim per resource. Now and then with an
/// option a lock of several cannot give: refused with `ManyWith` naming it, nothing sent.
async fn lock_many(
    run: &mut Run,
    rng: &mut StdRng,
    handles: &[Redlock],
    resources: &[String],
    live: &mut Vec<Live>,
) {
    let handle = rng.random_range(0..handles.len());
    // Mostly two of them (three collide with every other lock of the run).
    let count = if rng.random_bool(0.75) {
        2
    } else {
        resources.len()
    };
    let mut chosen: Vec<&str> = rand::seq::index::sample(rng, resources.len(), count)
        .into_iter()
        .map(|i| resources[i].as_str())
        .collect();
    if rng.random_bool(0.1) {
        chosen.push(chosen[0]);
    }
    let mut expected: Vec<&str> = chosen.clone();
    expected.sort_unstable();
    expected.dedup();
    let mut options = LockOptions::default().ttl(ms(rng.random_range(200..=3000)));
    options = random_wait(rng, options);
    if rng.random_bool(0.25) {
        options = options.auto_extend(true);
        if rng.random_bool(0.5) {
            options = options.max_hold(ms(rng.random_range(300..2500)));
        }
    }
    let mut refused = None;
    if rng.random_bool(0.05) {
        let (option, with) = match rng.random_range(0..3) {
            0 => ("fencing", options.clone().fencing(true)),
            1 => ("reentrant", options.clone().reentrant(true)),
            _ => (
                "lock_at_least_for",
                options
                    .clone()
                    .lock_at_least_for(ms(rng.random_range(1..200))),
            ),
        };
        refused = Some(option);
        options = with;
    }
    let label = run.label(handle, &expected.join("+"), None, &options);
    let result = within(
        "a lock of several",
        handles[handle].lock_many_with(&chosen, &options),
    )
    .await;
    let outcome = match &result {
        Ok(guard) => format!("held {:?}", guard.resources()),
        Err(e) => e.to_string(),
    };
    run.note(format!("many {label} (asked {chosen:?}): {outcome}"));
    if let Some(option) = refused {
        match result {
            Err(LockError::Invalid(InvalidInput::ManyWith { option: named }))
                if named == option =>
            {
                run.stats.many_refused += 1;
            }
            _ => run.fail(&format!(
                "{label}, a lock of several with {option}, was not refused naming it: {outcome}"
            )),
        }
        return;
    }
    if let Some(guard) = acquired(run, result, &label) {
        run.stats.many += 1;
        if guard.resources() != expected
            || guard.resource() != expected[0]
            || guard.mode().is_some()
            || guard.hold_count() != 1
        {
            run.fail(&format!(
                "{label} holds {:?} (resource {}, mode {:?}, hold count {}), asked for {chosen:?}: \
                 expected the plain lock of {expected:?}, sorted, held once",
                guard.resources(),
                guard.resource(),
                guard.mode(),
                guard.hold_count(),
            ));
        }
        let kind = (false, options.auto_extend);
        live.push(Live::new(run.live_id(), guard, handle, kind, None, label));
    }
}

/// A resumer is a new holder: a fenced lock resumed has a larger fencing token than the one it
/// was detached with (storage then refuses a late write of the holder that detached it), an
/// unfenced one none.
fn fenced_again(detached: Option<u64>, resumed: Option<u64>) -> bool {
    match (detached, resumed) {
        (None, None) => true,
        (Some(before), Some(after)) => after > before,
        _ => false,
    }
}

/// Resumes `detached` through `redlock`: with its defaults and the detached ttl, or with
/// `options`.
async fn resume_via(
    redlock: &Redlock,
    detached: &DetachedLock,
    options: Option<&LockOptions>,
) -> Result<LockGuard, LockError> {
    match options {
        Some(options) => redlock.resume_with(detached, options).await,
        None => redlock.resume(detached).await,
    }
}

/// Detaches a live guard (held once, neither a permit nor a lock of several; mostly one still
/// trusted): every view of it then says ended (lost reason `Detached`). Then, through random
/// handles: resumes it once; or twice at once (`tokio::join!`), of which at most one holds it
/// (both may fail, splitting the nodes of a lock held by only a quorum); or releases it by its token, after which a
/// quorum no longer holds the token and a resumption gets `Lost`. A resumption holds a fresh
/// token, the detached lock's resource and mode, a larger fencing token if it had one, and joins the live guards, its
/// validity checked against the nodes as any. Now and then instead a guard that cannot be
/// detached (a permit, a lock of several, a lock re-entries share) is refused naming why, and
/// its hold is given back as a drop would.
async fn detach(
    run: &mut Run,
    rng: &mut StdRng,
    handles: &[Redlock],
    live: &mut Vec<Live>,
    observer: &Observer,
) {
    // A permit's hand-over is checked in semaphore.rs, where the checker counts permits.
    let (can, cannot): (Vec<usize>, Vec<usize>) = (0..live.len())
        .filter(|&i| live[i].guard.permits().is_none())
        .partition(|&i| {
            let guard = &live[i].guard;
            guard.resources().len() == 1 && guard.hold_count() == 1
        });
    if can.is_empty() || (!cannot.is_empty() && rng.random_bool(0.15)) {
        if cannot.is_empty() {
            run.note("detach: nothing to detach, skipped".to_owned());
            return;
        }
        detach_refused(run, live, cannot[rng.random_range(0..cannot.len())]);
        return;
    }
    let Some(handed) = detach_one(run, rng, live, &can) else {
        return;
    };
    let Handed {
        detached,
        label,
        short_label,
        resource,
        token,
        mode,
        fence,
        was_lost,
        trusted_for,
        ended_by,
    } = handed;
    let roll = rng.random_range(0..20);
    if roll < 3 {
        // Released by its token, then resumed: refused.
        let h = rng.random_range(0..handles.len());
        let copy = detached.clone();
        let released = within(
            "releasing a detached lock",
            handles[h].release_detached(detached),
        )
        .await;
        let again = within("resuming a released lock", handles[h].resume(&copy)).await;
        run.note(format!(
            "detach {label}, release it by its token via h{h}: {released:?}; resume it again: {}",
            again
                .as_ref()
                .map_or_else(ToString::to_string, |_| "held".to_owned())
        ));
        match released {
            Ok(_) => {
                run.stats.released_detached += 1;
                let claim = Claim {
                    who: label.clone(),
                    resource: resource.clone(),
                    token: token.clone(),
                    mode,
                    valid_until: ended_by,
                    lost_deadline: ended_by,
                };
                let seen = observer.observe().await;
                if let Some(views) = seen.views.get(&resource)
                    && let Err(message) = check_gone(&claim, views)
                {
                    run.fail(&format!("after release_detached: {message}"));
                }
                match again {
                    Err(LockError::Lost { .. } | LockError::Unavailable { .. }) => {}
                    Ok(_) => run.fail(&format!(
                        "{label}, detached and released by its token with a quorum's \
                         confirmation, was resumed"
                    )),
                    Err(error) => run.fail(&format!(
                        "resuming {label} after its release: unexpected error {error}"
                    )),
                }
            }
            Err(LockError::ReleaseUnconfirmed { .. }) => run.stats.unavailable += 1,
            Err(error) => run.fail(&format!(
                "releasing detached {label}: unexpected error {error}"
            )),
        }
        return;
    }
    let race = roll < 9;
    let mut tries = Vec::new();
    for _ in 0..if race { 2 } else { 1 } {
        let h = rng.random_range(0..handles.len());
        let options = rng.random_bool(0.5).then(|| {
            let mut options = LockOptions::default().ttl(ms(rng.random_range(200..=3000)));
            if rng.random_bool(0.25) {
                options = options.auto_extend(true);
            }
            options
        });
        tries.push((h, options));
    }
    let results: Vec<Result<LockGuard, LockError>> = if race {
        let (a, b) = within("two resumptions at once", async {
            tokio::join!(
                resume_via(&handles[tries[0].0], &detached, tries[0].1.as_ref()),
                resume_via(&handles[tries[1].0], &detached, tries[1].1.as_ref()),
            )
        })
        .await;
        vec![a, b]
    } else {
        let one = within(
            "a resumption",
            resume_via(&handles[tries[0].0], &detached, tries[0].1.as_ref()),
        )
        .await;
        vec![one]
    };
    let shown: Vec<String> = results
        .iter()
        .zip(&tries)
        .map(|(r, (h, o))| {
            let how = o.as_ref().map_or_else(
                || "defaults".to_owned(),
                |o| {
                    format!(
                        "ttl {}ms{}",
                        o.ttl.as_millis(),
                        if o.auto_extend { " auto" } else { "" }
                    )
                },
            );
            match r {
                Ok(g) => format!("h{h} ({how}): held, valid for {:?}", g.remaining_validity()),
                Err(e) => format!("h{h} ({how}): {e}"),
            }
        })
        .collect();
    run.note(format!(
        "detach {label} (trusted for {trusted_for:?} more), resume{}: {}",
        if race { " twice at once" } else { "" },
        shown.join(" | ")
    ));
    let held_by = results.iter().filter(|r| r.is_ok()).count();
    if held_by > 1 {
        run.fail(&format!(
            "two resumptions of detached {label} both hold it: {}",
            shown.join(" | ")
        ));
    }
    let lost_count = results
        .iter()
        .filter(|r| matches!(r, Err(LockError::Lost { .. })))
        .count();
    if race {
        run.stats.resume_races += 1;
        if held_by == 1 && lost_count == 1 {
            run.stats.resume_race_lost += 1;
        }
    }
    // A lock trusted well past the detach is still on a quorum: a resumption alone cannot
    // be refused. Two at once may both be: on a lock held by only a quorum they split its
    // nodes, each refused by the other's and those it never held (each swaps back).
    if race && held_by == 0 {
        run.stats.resume_race_split += 1;
    }
    if !race && !was_lost && trusted_for > ms(300) && held_by == 0 && lost_count == 1 {
        run.fail(&format!(
            "detached {label}, trusted for {trusted_for:?} more when detached, was refused to \
             every resumption: {}",
            shown.join(" | ")
        ));
    }
    for (result, (h, options)) in results.into_iter().zip(tries) {
        match result {
            Ok(guard) => {
                run.stats.resumed += 1;
                run.stats.locked += 1;
                if guard.token().expose() == token
                    || guard.resource() != resource
                    || guard.mode() != mode
                    || !fenced_again(fence, guard.fencing_token())
                    || guard.hold_count() != 1
                {
                    run.fail(&format!(
                        "{label}, resumed via h{h}, holds {} in {:?} with fencing token {:?}, \
                         hold count {}, {}: expected a fresh token, {resource}, {mode:?}, a \
                         fencing token above {fence:?} (none if none), 1",
                        guard.resource(),
                        guard.mode(),
                        guard.fencing_token(),
                        guard.hold_count(),
                        if guard.token().expose() == token {
                            "the detached token"
                        } else {
                            "a fresh token"
                        },
                    ));
                }
                run.next_id += 1;
                let new_label = format!(
                    "g{}(h{h} {resource} {} resumed from {short_label})",
                    run.next_id,
                    mode.map_or("plain", Mode::as_str)
                );
                let auto = options.is_some_and(|o| o.auto_extend);
                live.push(Live::new(
                    run.live_id(),
                    guard,
                    h,
                    (false, auto),
                    None,
                    new_label,
                ));
            }
            Err(LockError::Lost { .. }) => {}
            Err(error @ (LockError::Unavailable { .. } | LockError::NoValidity { .. })) => {
                let _none = acquired(run, Err(error), &label);
            }
            Err(error) => run.fail(&format!(
                "resuming {label} via h{h}: unexpected error {error}"
            )),
        }
    }
    if held_by == 0 {
        // Nobody resumed it: released by its token (what is left expires anyway).
        let released = within(
            "releasing an unresumed lock",
            handles[0].release_detached(detached),
        )
        .await;
        if let Err(error @ LockError::Invalid(_)) = released {
            run.fail(&format!("releasing detached {label}: {error}"));
        }
    }
}

/// A live guard detached ([`detach_one`]): what the steps that hand it on know of it.
struct Handed {
    detached: DetachedLock,
    label: String,
    /// Its label's first word (`g12`), for the labels of its resumptions.
    short_label: String,
    resource: String,
    token: String,
    mode: Option<Mode>,
    fence: Option<u64>,
    /// Its lost signal had fired before it was detached.
    was_lost: bool,
    /// How much longer it was trusted when it was detached.
    trusted_for: Duration,
    /// Taken once the detach returned.
    ended_by: Instant,
}

/// Detaches one of the live guards at `can` (held once, neither a permit nor a lock of
/// several), mostly one still trusted: the detached lock carries its resource, token, mode,
/// fencing token and ttl, and its views say ended (lost reason `Detached`), now and after every
/// later step. `None` when it was lost before (refused; its views kept as ended).
fn detach_one(
    run: &mut Run,
    rng: &mut StdRng,
    live: &mut Vec<Live>,
    can: &[usize],
) -> Option<Handed> {
    let now = Instant::now();
    let trusted: Vec<usize> = can
        .iter()
        .copied()
        .filter(|&i| live[i].claim(now).is_some())
        .collect();
    let index = if !trusted.is_empty() && rng.random_bool(0.9) {
        trusted[rng.random_range(0..trusted.len())]
    } else {
        can[rng.random_range(0..can.len())]
    };
    let held = live.swap_remove(index);
    let Live {
        guard, label, info, ..
    } = held;
    let lost = guard.lost();
    let was_lost = lost.is_lost();
    let trusted_for = lost.deadline().saturating_duration_since(Instant::now());
    let (resource, token, mode, fence, ttl) = (
        guard.resource().to_owned(),
        guard.token().expose().to_owned(),
        guard.mode(),
        guard.fencing_token(),
        guard.ttl(),
    );
    let result = guard.detach();
    let ended_by = Instant::now();
    let detached = match result {
        Ok(detached) => detached,
        Err(LockError::Lost { .. }) if was_lost || trusted_for <= ms(100) => {
            run.note(format!("detach {label}: lost before"));
            run.ended(info, &label, "lost", ended_by);
            return None;
        }
        Err(error) => run.fail(&format!(
            "detaching {label} (trusted for {trusted_for:?} more): unexpected error {error}"
        )),
    };
    run.stats.detached += 1;
    if detached.resource() != resource
        || detached.token().expose() != token
        || detached.mode() != mode
        || detached.fencing_token() != fence
        || detached.ttl() != ttl
    {
        run.fail(&format!(
            "{label} detached as {detached:?}: not its resource {resource}, token, mode {mode:?}, \
             fencing token {fence:?} and ttl {ttl:?}"
        ));
    }
    if let Err(message) = check_ended(&Reading::of_info(&info, &label, "detached", ended_by)) {
        run.fail(&message);
    }
    let reason = info.lost().reason();
    if !matches!(reason, Some(LostReason::Detached)) {
        run.fail(&format!(
            "{label}, detached, has lost reason {reason:?}, not Detached"
        ));
    }
    run.ended(info, &label, "detached", ended_by);
    let short_label = label.split('(').next().unwrap_or_default().to_owned();
    Some(Handed {
        detached,
        label,
        short_label,
        resource,
        token,
        mode,
        fence,
        was_lost,
        trusted_for,
        ended_by,
    })
}

/// A detach refused: a lock of several (`ManyWith`), a lock re-entries share (`Shared`);
/// `Lost` for a guard no longer trusted. The guard is consumed,
/// its hold given back as a drop would (the lock ends if it was its last).
fn detach_refused(run: &mut Run, live: &mut Vec<Live>, index: usize) {
    let held = live.swap_remove(index);
    let Live {
        guard, label, info, ..
    } = held;
    let shared = guard.hold_count() > 1;
    let was_lost = guard.lost().is_lost();
    let expected = if shared { "Shared" } else { "ManyWith" };
    let result = guard.detach();
    let ended_by = Instant::now();
    let outcome = match &result {
        Ok(_) => "detached".to_owned(),
        Err(e) => e.to_string(),
    };
    run.note(format!("detach {label} (refused: {expected}): {outcome}"));
    let as_expected = match &result {
        Err(LockError::Invalid(InvalidInput::Shared { action: "detached" })) => shared,
        Err(LockError::Invalid(InvalidInput::ManyWith { option: "detach" })) => {
            expected == "ManyWith"
        }
        Err(LockError::Lost { .. }) => was_lost,
        _ => false,
    };
    if !as_expected {
        run.fail(&format!(
            "detaching {label}: expected a refusal ({expected}), got {outcome}"
        ));
    }
    run.stats.detach_refused += 1;
    run.stats.dropped += 1;
    if !shared {
        run.ended(info, &label, "dropped", ended_by);
    }
}

/// Moves a live guard held once in a mode to a random weaker one (mostly one still trusted):
/// once it returns, both its views say the new mode and its validity did not move back; the
/// checks then judge its claim, and its exclusion of others, in the new mode. Refused when the
/// guard is lost; too few answers leave the nodes split between the modes (each in the new
/// mode or stronger), which the check of one mode per claim cannot judge: the guard goes. Now
/// and then instead a downgrade that is none (to a mode not weaker, of a plain lock, of a
/// lock re-entries share) is refused naming why, changing nothing.
async fn downgrade(run: &mut Run, rng: &mut StdRng, live: &mut Vec<Live>) {
    let now = Instant::now();
    let weaker =
        |m: Mode| -> Vec<Mode> { Mode::ALL.into_iter().filter(|w| w.weaker_than(m)).collect() };
    let candidates: Vec<usize> = (0..live.len())
        .filter(|&i| {
            let guard = &live[i].guard;
            guard.hold_count() == 1 && guard.mode().is_some_and(|m| !weaker(m).is_empty())
        })
        .collect();
    if candidates.is_empty() || rng.random_bool(0.1) {
        let held = &live[rng.random_range(0..live.len())];
        let (from, holds) = (held.guard.mode(), held.guard.hold_count());
        let to = Mode::ALL[rng.random_range(0..Mode::ALL.len())];
        let shared = holds > 1;
        // A downgrade to the mode it was already moved to is sent again (a retry).
        let again = from == Some(to) && held.taken.is_some_and(|t| to.weaker_than(t));
        if !shared && (again || from.is_some_and(|m| to.weaker_than(m))) {
            run.note(format!(
                "downgrade {} to {}: a real downgrade, skipped",
                held.label,
                to.as_str()
            ));
            return;
        }
        let result = within("a refused downgrade", held.guard.downgrade(to)).await;
        let label = held.label.clone();
        let after = held.guard.mode();
        run.note(format!(
            "downgrade {label} ({from:?}, holds {holds}) to {}: {result:?}",
            to.as_str()
        ));
        let as_expected = match &result {
            Err(LockError::Invalid(InvalidInput::Shared {
                action: "downgraded",
            })) => shared,
            Err(LockError::Invalid(InvalidInput::NotADowngrade { from: f, to: t })) => {
                !shared && *f == from && *t == to
            }
            _ => false,
        };
        if !as_expected || after != from {
            run.fail(&format!(
                "downgrading {label} (held in {from:?}, hold count {holds}) to {}: expected a \
                 refusal ({}), got {result:?}, and the mode went from {from:?} to {after:?}",
                to.as_str(),
                if shared { "Shared" } else { "NotADowngrade" },
            ));
        }
        run.stats.downgrade_refused += 1;
        return;
    }
    let trusted: Vec<usize> = candidates
        .iter()
        .copied()
        .filter(|&i| live[i].claim(now).is_some())
        .collect();
    let index = if !trusted.is_empty() && rng.random_bool(0.9) {
        trusted[rng.random_range(0..trusted.len())]
    } else {
        candidates[rng.random_range(0..candidates.len())]
    };
    let held = &live[index];
    let from = held.guard.mode().unwrap();
    let choices = weaker(from);
    let to = choices[rng.random_range(0..choices.len())];
    let lost = held.guard.lost();
    let was_lost = lost.is_lost();
    let trusted_for = lost.deadline().saturating_duration_since(Instant::now());
    let before = held.guard.valid_until();
    let result = within("a downgrade", held.guard.downgrade(to)).await;
    let label = held.label.clone();
    let (guard_mode, info_mode) = (held.guard.mode(), held.info.mode());
    let after = held.guard.valid_until();
    run.note(format!(
        "downgrade {label} from {} to {} (trusted for {trusted_for:?} more): {result:?}",
        from.as_str(),
        to.as_str()
    ));
    let says_new = guard_mode == Some(to) && info_mode == Some(to);
    if says_new {
        // The messages name the lock's mode as it is now.
        live[index].label = format!("{label}↓{}", to.as_str());
    }
    match result {
        Ok(()) => {
            run.stats.downgraded += 1;
            if !says_new {
                run.fail(&format!(
                    "{label}, downgraded from {} to {}, says {guard_mode:?} (guard) and \
                     {info_mode:?} (its LockInfo)",
                    from.as_str(),
                    to.as_str()
                ));
            }
            if after < before {
                run.fail(&format!(
                    "downgrading {label} moved its validity back by {:?}",
                    before.duration_since(after)
                ));
            }
        }
        Err(LockError::Lost { .. }) if was_lost || trusted_for <= ms(100) => {}
        Err(LockError::Unavailable { .. }) => {
            run.stats.unavailable += 1;
            if !says_new {
                run.fail(&format!(
                    "{label}, whose downgrade to {} was sent (too few answered), says \
                     {guard_mode:?} (guard) and {info_mode:?} (its LockInfo)",
                    to.as_str()
                ));
            }
            let gone = live.swap_remove(index);
            run.drop_live(gone, " (its downgrade undecided)");
        }
        Err(error) => run.fail(&format!(
            "downgrading {label} (trusted for {trusted_for:?} more) from {} to {}: unexpected \
             error {error}",
            from.as_str(),
            to.as_str()
        )),
    }
}

/// The latest a resumption started by [`drop_resume`] is dropped, in µs: on these nodes its
/// swap, extension and fencing rounds take a few ms together, so the drop lands in each of
/// them now and then, and now and then after the resumption returned.
const DROP_WITHIN_US: u64 = 6_000;

/// How much sooner than the detached token's key a given-back key may end: the give-back
/// restores the expiry the key had at the swap as the resumer counts it, from the swap
/// round's start, a little before the swap.
const GIVEN_BACK_SLACK: u64 = 50;

fn ms_of(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// How long a dropped resumption's give-back may take to reach every node (it is sent at
/// once, in order behind the swap, and takes a round trip).
const GIVE_BACK_WITHIN: Duration = Duration::from_secs(2);

/// A resumption that finds its keys living on a quorum this much longer is not refused as
/// lost.
const STILL_HELD: Duration = Duration::from_millis(300);

/// When [`drop_resume`] drops the resumption it started.
#[derive(Debug, Clone, Copy)]
enum DropAt {
    /// This long after it started.
    After(Duration),
    /// Once a node holds a holder it did not hold before (the fresh token) with a longer life
    /// than the detached token had anywhere: its extension round has begun.
    Extended,
    /// Once a node's fencing counter rose: its fencing round has begun.
    Fenced,
}

/// The longest life on `view` of a holder not among `before` (0 if none): a fresh token's.
fn fresh_life(view: &NodeView, before: &BTreeSet<String>) -> u64 {
    holder_ids(view)
        .difference(before)
        .map(|id| {
            let mode = match &view.content {
                Content::Modes(fields) => fields
                    .get(id)
                    .and_then(|entry| entry.split(' ').next())
                    .and_then(|m| m.parse::<Mode>().ok()),
                _ => None,
            };
            let claim = Claim {
                who: String::new(),
                resource: String::new(),
                token: id.clone(),
                mode,
                valid_until: Instant::now(),
                lost_deadline: Instant::now(),
            };
            life_on(view, &claim)
        })
        .max()
        .unwrap_or_default()
}

/// The fencing counter of `key` on every node (0 where there is none).
async fn fences(observer: &Observer, key: &str) -> Vec<i64> {
    let counters = observer
        .on_each(
            "reading the fencing counters",
            "GET",
            vec![Value::from(fencing_key(key).as_str())],
        )
        .await;
    counters
        .iter()
        .map(|v| v.as_string().and_then(|s| s.parse().ok()).unwrap_or(0))
        .collect()
}

/// A resumption of `handed` that held the lock joins the live guards, checked first: a fresh
/// token, the detached lock's resource and mode, a larger fencing token if it had one, held
/// once.
fn push_resumed(
    run: &mut Run,
    live: &mut Vec<Live>,
    handed: &Handed,
    guard: LockGuard,
    (h, auto): (usize, bool),
) {
    run.stats.resumed += 1;
    run.stats.locked += 1;
    let Handed {
        label,
        short_label,
        resource,
        token,
        mode,
        fence,
        ..
    } = handed;
    if guard.token().expose() == token
        || guard.resource() != resource
        || guard.mode() != *mode
        || !fenced_again(*fence, guard.fencing_token())
        || guard.hold_count() != 1
    {
        run.fail(&format!(
            "{label}, resumed via h{h}, holds {} in {:?} with fencing token {:?}, hold count \
             {}, {}: expected a fresh token, {resource}, {mode:?}, a fencing token above \
             {fence:?} (none if none), 1",
            guard.resource(),
            guard.mode(),
            guard.fencing_token(),
            guard.hold_count(),
            if guard.token().expose() == token {
                "the detached token"
            } else {
                "a fresh token"
            },
        ));
    }
    run.next_id += 1;
    let new_label = format!(
        "g{}(h{h} {resource} {} resumed from {short_label})",
        run.next_id,
        mode.map_or("plain", Mode::as_str)
    );
    live.push(Live::new(
        run.live_id(),
        guard,
        h,
        (false, auto),
        None,
        new_label,
    ));
}

/// Random options for a resumption: the handle's defaults and the detached ttl (`None`), or
/// a ttl longer than the `left` its keys have (so that it runs an extension round after its
/// swap), auto-extended now and then.
fn resume_options(rng: &mut StdRng, left: Duration) -> Option<LockOptions> {
    if rng.random_bool(0.3) {
        return None;
    }
    let ttl = (left + ms(rng.random_range(300..2500))).min(ms(5000));
    let mut options = LockOptions::default().ttl(ttl);
    if rng.random_bool(0.25) {
        options = options.auto_extend(true);
    }
    Some(options)
}

/// A resumption dropped midway: a live guard is detached, its resumption through a random
/// handle (mostly with a ttl longer than its keys have left, so that an extension round
/// follows the swap; a fenced lock's fencing round after that) is spawned and aborted after a
/// random 0–[`DROP_WITHIN_US`] µs. Unless it returned first (a guard that joins the live ones,
/// or an error the contract allows), the lock goes back to the detached token: within
/// [`GIVE_BACK_WITHIN`], no node holds a holder it did not hold before the resumption, and the
/// detached token holds the key again wherever its key still lives, no longer than it had it
/// (an extension that landed is cut back). The drop lands at a random instant, or, through a
/// resumer whose replies are a few ms late, once the nodes show its extension or its fencing
/// round landed (it then awaits that round's replies). The detached lock then
/// stays resumable: a resumption through a random handle holds it (and joins the live guards),
/// or fails as lost only once its keys no longer live on a quorum ([`STILL_HELD`]); one that
/// completed before the drop leaves nothing for it to hold.
async fn drop_resume(
    run: &mut Run,
    rng: &mut StdRng,
    (handles, resources, proxied): (&[Redlock], &[String], &Proxied),
    live: &mut Vec<Live>,
    observer: &Observer,
) {
    let mut can: Vec<usize> = (0..live.len())
        .filter(|&i| {
            let guard = &live[i].guard;
            guard.permits().is_none() && guard.resources().len() == 1 && guard.hold_count() == 1
        })
        .collect();
    // Half the time a fenced lock (its resumption has a fencing round too): one of the live
    // guards, or one taken now (few locks of the run are fenced).
    let mut fenced: Vec<usize> = can
        .iter()
        .copied()
        .filter(|&i| live[i].guard.fencing_token().is_some())
        .collect();
    if fenced.is_empty() && rng.random_bool(0.4) {
        let h = rng.random_range(0..handles.len());
        let options = LockOptions::default()
            .ttl(ms(rng.random_range(1000..=3000)))
            .fencing(true)
            .retry_count(0);
        let mode = rng.random_bool(0.5).then(|| random_mode(rng));
        let resource = &resources[rng.random_range(0..resources.len())];
        let label = run.label(h, resource, mode, &options);
        let result = within(
            "a fenced lock to hand on",
            lock_as(&handles[h], resource, mode, &options),
        )
        .await;
        run.note(format!(
            "drop a resumption: a fenced lock to hand on, {label}: {}",
            result
                .as_ref()
                .map_or_else(ToString::to_string, |_| "held".to_owned())
        ));
        if let Some(guard) = acquired(run, result, &label) {
            live.push(Live::new(
                run.live_id(),
                guard,
                h,
                (false, false),
                None,
                label,
            ));
            fenced = vec![live.len() - 1];
            can.push(live.len() - 1);
        }
    }
    if !fenced.is_empty() && rng.random_bool(0.5) {
        can = fenced;
    }
    if can.is_empty() {
        run.note("drop a resumption: nothing to detach, skipped".to_owned());
        return;
    }
    let Some(handed) = detach_one(run, rng, live, &can) else {
        return;
    };
    let (resource, label) = (handed.resource.clone(), handed.label.clone());
    let key = handed.detached.key().to_owned();
    let detached_claim = Claim {
        who: label.clone(),
        resource: resource.clone(),
        token: handed.token.clone(),
        mode: handed.mode,
        valid_until: handed.ended_by,
        lost_deadline: handed.ended_by,
    };
    let before = observer.observe().await;
    let views = &before.views[&resource];
    let ids_before: Vec<BTreeSet<String>> = views.iter().map(holder_ids).collect();
    let lives_before: Vec<u64> = views.iter().map(|v| life_on(v, &detached_claim)).collect();
    // Until then a quorum surely keeps the detached token's keys (a lower bound: the nodes
    // read their clocks after `t0`; an extension that lands and is given back only adds).
    let quorum_left = ms(quorum_life(&lives_before, QUORUM));
    let kept_until = before.t0 + quorum_left;
    let fences_before = match handed.fence {
        Some(_) => fences(observer, &key).await,
        None => Vec::new(),
    };

    // Mostly through the slow resumer (every reply a few ms late: its rounds take that long
    // each), now and then through a handle of the run, as fast as the nodes answer.
    let slow = rng
        .random_bool(0.7)
        .then(|| Duration::from_micros(rng.random_range(1_500..=6_000)));
    let (h, redlock, within_us) = match slow {
        Some(delay) => {
            for proxy in &proxied.resumer_proxies {
                proxy.set(Direction::Reply, Fault::Delay(delay));
            }
            // The swap, the extension and the fencing round, and a little after.
            let rounds = u64::try_from(delay.as_micros()).unwrap_or(u64::MAX);
            (3, &proxied.resumer, rounds * 7 / 2)
        }
        None => {
            let h = rng.random_range(0..handles.len());
            (h, &handles[h], DROP_WITHIN_US)
        }
    };
    let options = resume_options(rng, quorum_left);
    let auto = options.as_ref().is_some_and(|o| o.auto_extend);
    // When to drop it: at a random instant, or (through the slow resumer, which then awaits
    // that round's late replies) once the nodes show its extension, or its new fencing
    // token, landed.
    let at = match rng.random_range(0..10) {
        0..=2 if slow.is_some() => DropAt::Extended,
        3..=5 if slow.is_some() && handed.fence.is_some() => DropAt::Fenced,
        _ => DropAt::After(Duration::from_micros(rng.random_range(0..=within_us))),
    };
    let resuming = {
        let (redlock, detached, options) =
            (redlock.clone(), handed.detached.clone(), options.clone());
        tokio::spawn(async move { resume_via(&redlock, &detached, options.as_ref()).await })
    };
    let started = Instant::now();
    let waited = async {
        match at {
            // A random point of the resumption, finer than the timer's millisecond.
            DropAt::After(after) => {
                while started.elapsed() < after {
                    tokio::task::yield_now().await;
                }
            }
            DropAt::Extended => {
                let longest = lives_before.iter().copied().max().unwrap_or_default();
                while !resuming.is_finished() {
                    let seen = observer.observe().await;
                    let views = &seen.views[&resource];
                    let fresh = (0..NODES)
                        .map(|n| fresh_life(&views[n], &ids_before[n]))
                        .max()
                        .unwrap_or_default();
                    if fresh > longest + 50 {
                        break;
                    }
                }
            }
            DropAt::Fenced => {
                while !resuming.is_finished()
                    && fences(observer, &key)
                        .await
                        .iter()
                        .zip(&fences_before)
                        .all(|(now, was)| now <= was)
                {}
            }
        }
    };
    within("the instant to drop a resumption at", waited).await;
    let after = started.elapsed();
    resuming.abort();
    let finished = match within("a dropped resumption", resuming).await {
        Ok(result) => Some(result),
        Err(error) if error.is_cancelled() => None,
        Err(error) => run.fail(&format!("the resumption of {label} panicked: {error}")),
    };
    let how = options.as_ref().map_or_else(
        || "defaults".to_owned(),
        |o| {
            format!(
                "ttl {}ms{}",
                o.ttl.as_millis(),
                if o.auto_extend { " auto" } else { "" }
            )
        },
    );
    if slow.is_some() {
        // The give-back's replies need no delay; its requests never had one.
        for proxy in &proxied.resumer_proxies {
            proxy.set(Direction::Reply, Fault::Pass);
        }
    }
    let outcome = match &finished {
        None => "dropped".to_owned(),
        Some(Ok(g)) => format!(
            "returned first, held, valid for {:?}",
            g.remaining_validity()
        ),
        Some(Err(e)) => format!("returned first: {e}"),
    };
    let via = match slow {
        Some(delay) => format!("the slow resumer ({delay:?} per reply)"),
        None => format!("h{h}"),
    };
    run.note(format!(
        "detach {label} (its keys on a quorum for {quorum_left:?}), resume via {via} ({how}), \
         drop it {at:?}, after {after:?}: {outcome}"
    ));
    run.stats.drops += 1;
    let completed = matches!(finished, Some(Ok(_)));
    let dropped = finished.is_none();
    match finished {
        None => {}
        Some(Ok(guard)) => {
            run.stats.drops_too_late += 1;
            // (Through the slow resumer, last in `live` until the step ends: see below.)
            push_resumed(run, live, &handed, guard, (h, auto));
        }
        Some(Err(error @ LockError::Lost { .. })) if quorum_left > STILL_HELD => {
            run.fail(&format!(
                "resuming {label}, whose keys live on a quorum for {quorum_left:?} more, was \
                 refused: {error}"
            ));
        }
        Some(Err(LockError::Lost { .. })) => run.stats.drops_too_late += 1,
        Some(Err(error @ (LockError::Unavailable { .. } | LockError::NoValidity { .. }))) => {
            run.stats.drops_too_late += 1;
            let _none = acquired(run, Err(error), &label);
        }
        Some(Err(error)) => run.fail(&format!(
            "resuming {label} via h{h}: unexpected error {error}"
        )),
    }

    if !completed {
        // The give-back: nobody's token but those there before, the detached one back where
        // its key still lives.
        let mut reads = 0;
        loop {
            let seen = observer.observe().await;
            reads += 1;
            let views = &seen.views[&resource];
            let gone_by = seen.t0.saturating_duration_since(before.t0) + ROUNDING;
            let gone_by = u64::try_from(gone_by.as_millis()).unwrap_or(u64::MAX);
            let strays: Vec<usize> = (0..NODES)
                .filter(|&n| {
                    !holder_ids(&views[n]).is_subset(&ids_before[n])
                        || (lives_before[n] > gone_by + GIVEN_BACK_SLACK
                            && life_on(&views[n], &detached_claim) == 0)
                })
                .collect();
            if strays.is_empty() {
                let lives: Vec<u64> = views.iter().map(|v| life_on(v, &detached_claim)).collect();
                // Given back with the expiry it had at the swap, even after the extension
                // round lengthened it: no key outlives the longest the detached token had
                // (counted from the first read's last reply, with the rounding allowance and
                // the spread of each read's replies: a lengthening is an extension's, seconds,
                // never a few ms).
                let since = seen.t0.saturating_duration_since(before.t0 + before.window);
                let longest = lives_before.iter().copied().max().unwrap_or_default();
                let allowed =
                    (longest + ms_of(ROUNDING) + ms_of(before.window) + ms_of(seen.window) + 5)
                        .saturating_sub(ms_of(since));
                if let Some(n) = (0..NODES).find(|&n| lives[n] > allowed) {
                    run.fail(&format!(
                        "the resumption of {label} dropped {at:?} gave the lock back with a \
                         longer life than it had: node {n} keeps it {} ms, {allowed} ms at \
                         most (per node, ms: {} before, {} now)",
                        lives[n],
                        describe_lives(&lives_before),
                        describe_lives(&lives),
                    ));
                }
                let fenced = match handed.fence {
                    Some(_) => fences(observer, &key)
                        .await
                        .iter()
                        .zip(&fences_before)
                        .any(|(now, was)| now > was),
                    None => false,
                };
                match at {
                    DropAt::Fenced if dropped => run.stats.drops_fenced += 1,
                    DropAt::Extended if dropped => run.stats.drops_extended += 1,
                    DropAt::After(_) if dropped => run.stats.drops_timed += 1,
                    _ => {}
                }
                run.note(format!(
                    "  given back to {label} after {reads} reads (its fencing counter raised: \
                     {fenced}), per node, ms: {} before, {} now",
                    describe_lives(&lives_before),
                    describe_lives(&lives),
                ));
                break;
            }
            if started.elapsed() > GIVE_BACK_WITHIN {
                let now: Vec<String> = strays
                    .iter()
                    .map(|&n| format!("node {n}: {:?}", views[n].content))
                    .collect();
                run.fail(&format!(
                    "the resumption of {label} dropped after {after:?} did not give the lock \
                     back within {GIVE_BACK_WITHIN:?}: the detached token {} held it on nodes \
                     with lives {} ms, now {}",
                    short(&handed.token),
                    describe_lives(&lives_before),
                    now.join("; ")
                ));
            }
            tokio::time::sleep(ms(2)).await;
        }
    }

    // Still resumable (unless a resumption already holds it, or its keys ran out).
    let h = rng.random_range(0..handles.len());
    let options = resume_options(rng, kept_until.saturating_duration_since(Instant::now()));
    let auto = options.as_ref().is_some_and(|o| o.auto_extend);
    let asked = Instant::now();
    let again = within(
        "resuming a lock whose resumption was dropped",
        resume_via(&handles[h], &handed.detached, options.as_ref()),
    )
    .await;
    let left = kept_until.saturating_duration_since(asked);
    run.note(format!(
        "  resume {label} again via h{h} (its keys on a quorum for {left:?} more): {}",
        again.as_ref().map_or_else(ToString::to_string, |g| format!(
            "held, valid for {:?}",
            g.remaining_validity()
        ))
    ));
    let held = again.is_ok();
    match again {
        Ok(guard) if completed => run.fail(&format!(
            "{label} was resumed twice: by the resumption that returned before its drop, and \
             again via h{h} (token {})",
            short(guard.token().expose())
        )),
        Ok(guard) => {
            run.stats.drops_resumed += 1;
            push_resumed(run, live, &handed, guard, (h, auto));
        }
        Err(LockError::Lost { .. }) if completed => {}
        Err(error @ LockError::Lost { .. }) => {
            if left > STILL_HELD {
                run.fail(&format!(
                    "{label}, whose resumption was dropped, could not be resumed again though \
                     its keys live on a quorum for {left:?} more: {error}"
                ));
            }
            run.stats.drops_expired += 1;
        }
        Err(error @ (LockError::Unavailable { .. } | LockError::NoValidity { .. })) => {
            let _none = acquired(run, Err(error), &label);
        }
        Err(error) => run.fail(&format!(
            "resuming {label} again via h{h}: unexpected error {error}"
        )),
    }
    if !held && !completed {
        let released = within(
            "releasing an unresumed lock",
            handles[0].release_detached(handed.detached),
        )
        .await;
        if let Err(error @ LockError::Invalid(_)) = released {
            run.fail(&format!("releasing detached {label}: {error}"));
        }
    }
    if completed && slow.is_some() {
        // Held through the slow resumer, which is none of the run's handles (the steps that
        // re-enter or shut down a guard's handle know only those): checked as any, then
        // released here.
        run.check(live, observer).await;
        let resumed = live.pop().unwrap();
        let (info, label) = (resumed.info.clone(), resumed.label.clone());
        let released = within("releasing a resumed lock", resumed.guard.release()).await;
        run.ended(info, &label, "released", Instant::now());
        run.note(format!("  release {label}: {released:?}"));
        if let Err(error) = released
            && !matches!(error, LockError::ReleaseUnconfirmed { .. })
        {
            run.fail(&format!("releasing {label}: {error}"));
        }
    }
}

/// Two handles, each over proxies of its own, whose faults the steps set and clear: the
/// operator of [`force`], with a node timeout past every delay that step gives the proxies, so
/// that its force-release returns once every node answered both of its rounds (its late delete
/// has landed); and the resumer of [`drop_resume`], whose every round the step slows down by
/// a few ms (the replies delayed), so that a drop at a random instant lands in each of them.
struct Proxied {
    operator: Redlock,
    /// The operator's proxies; nothing else goes through them (their reply counts are its).
    proxies: Vec<Proxy>,
    resumer: Redlock,
    resumer_proxies: Vec<Proxy>,
}

const FORCE_NODE_TIMEOUT: Duration = Duration::from_secs(3);

impl Proxied {
    async fn new(nodes: &RedisNodes) -> Self {
        let (proxies, resumer_proxies) = (nodes.proxies(), nodes.proxies());
        let build = |proxies: &[Proxy], node_timeout| {
            Redlock::builder()
                .nodes(proxy_urls(proxies))
                .node_timeout(node_timeout)
                .build()
        };
        let operator = within("the operator's handle", build(&proxies, FORCE_NODE_TIMEOUT))
            .await
            .unwrap();
        let resumer = within(
            "the slow resumer's handle",
            build(&resumer_proxies, redlock_core::DEFAULT_NODE_TIMEOUT),
        )
        .await
        .unwrap();
        Self {
            operator,
            proxies,
            resumer,
            resumer_proxies,
        }
    }
}

/// The longest [`force`] waits for a stage of the force-release it runs.
const FORCE_STAGE_WITHIN: Duration = Duration::from_secs(5);

/// A late force-release: an operator force-releases one of the three resources through
/// proxies of which one (now and then two, or three: a majority) delays every request by a
/// random 50–500 ms, so that its read, then its delete, reach those nodes late. Whoever held
/// the resource is broken by force: the live guards holding it (or, if none, one taken now)
/// leave the live guards; their extension is then refused (their keys are gone from every
/// node) and their views say ended. Mostly their keys are first gone from the late nodes too,
/// as their expiry would have done there. Once every node has answered the read (the reply
/// counts of the operator's proxies) and the prompt nodes no longer hold what they held, the
/// next holder takes the resource, while the late delete is still on its way: it joins the
/// live guards, and check 6 ([`check_kept`]) holds its key, on every node where it had it,
/// through the late delete (which returns before the force-release does); the checks after
/// the step then hold its validity to a quorum as any.
async fn force(
    run: &mut Run,
    rng: &mut StdRng,
    (handles, resources): (&[Redlock], &[String]),
    live: &mut Vec<Live>,
    observer: &Observer,
    proxied: &Proxied,
) {
    let resource = resources[rng.random_range(0..resources.len())].clone();
    let mut victims = Vec::new();
    let mut i = 0;
    while i < live.len() {
        let guard = &live[i].guard;
        if guard.permits().is_none() && guard.resources().contains(&resource.as_str()) {
            victims.push(live.swap_remove(i));
        } else {
            i += 1;
        }
    }
    if victims.is_empty() {
        // Someone to break: a holder taken now (a stand-in for a dead one).
        let h = rng.random_range(0..handles.len());
        let options = LockOptions::default()
            .ttl(ms(rng.random_range(1000..=3000)))
            .retry_count(0);
        let mode = rng.random_bool(0.4).then(|| random_mode(rng));
        let label = run.label(h, &resource, mode, &options);
        let result = within(
            "a holder to break",
            lock_as(&handles[h], &resource, mode, &options),
        )
        .await;
        run.note(format!(
            "force: a holder to break, {label}: {}",
            result
                .as_ref()
                .map_or_else(ToString::to_string, |_| "held".to_owned())
        ));
        if let Some(guard) = acquired(run, result, &label) {
            let kind = (false, false);
            victims.push(Live::new(run.live_id(), guard, h, kind, None, label));
        }
    }
    let seen = observer.observe().await;
    let ids: Vec<BTreeSet<String>> = seen.views[&resource].iter().map(holder_ids).collect();
    let held_on: Vec<usize> = (0..NODES).filter(|&n| !ids[n].is_empty()).collect();
    if held_on.is_empty() {
        run.note(format!(
            "force {resource}: nobody holds it on any node, skipped"
        ));
        live.extend(victims);
        return;
    }
    // The late nodes, and at least one prompt node that holds it.
    let prompt = held_on[rng.random_range(0..held_on.len())];
    let count = match rng.random_range(0..20) {
        0..=11 => 1,
        12..=16 => 2,
        _ => 3,
    };
    let others: Vec<usize> = (0..NODES).filter(|&n| n != prompt).collect();
    let mut late: Vec<usize> = rand::seq::index::sample(rng, others.len(), count)
        .into_iter()
        .map(|i| others[i])
        .collect();
    late.sort_unstable();
    let delay = ms(rng.random_range(50..=500));
    let expired_late = rng.random_bool(0.7);
    if expired_late {
        for &n in &late {
            for id in &ids[n] {
                observer.wipe(&[n], &resource, id).await;
            }
        }
    }
    let labels: Vec<&str> = victims.iter().map(|v| v.label.as_str()).collect();
    run.note(format!(
        "force {resource} (held by {}; holders on nodes {held_on:?}) with nodes {late:?} \
         {delay:?} late{}",
        if labels.is_empty() {
            "none of the live guards".to_owned()
        } else {
            labels.join(", ")
        },
        if expired_late {
            ", its holders there gone first as their expiry would"
        } else {
            ""
        }
    ));
    let replies_before: Vec<u64> = proxied
        .proxies
        .iter()
        .map(|p| p.received(Direction::Reply))
        .collect();
    for &n in &late {
        proxied.proxies[n].set(Direction::Request, Fault::Delay(delay));
    }
    let forcing = {
        let (redlock, resource) = (proxied.operator.clone(), resource.clone());
        tokio::spawn(async move { redlock.force_release(&resource).await })
    };
    let started = Instant::now();
    // Every node answered the read (the operator's connections carry nothing else), the late
    // ones no sooner than their delay: the next holder's token cannot be among those it read.
    // Then the prompt nodes' deletes land.
    let stage = |what: &str, elapsed: Duration| {
        if elapsed > FORCE_STAGE_WITHIN {
            run.fail(&format!(
                "force-releasing {resource}: {what} took over {FORCE_STAGE_WITHIN:?}"
            ));
        }
    };
    while !forcing.is_finished()
        && (started.elapsed() < delay
            || proxied
                .proxies
                .iter()
                .zip(&replies_before)
                .any(|(p, before)| p.received(Direction::Reply) <= *before))
    {
        stage("every node's answer to the read", started.elapsed());
        tokio::time::sleep(ms(1)).await;
    }
    let read_by = started.elapsed();
    let prompt_nodes: Vec<usize> = (0..NODES).filter(|n| !late.contains(n)).collect();
    while !forcing.is_finished() {
        let seen = observer.observe().await;
        let views = &seen.views[&resource];
        if prompt_nodes
            .iter()
            .all(|&n| holder_ids(&views[n]).is_disjoint(&ids[n]))
        {
            break;
        }
        stage("the delete on the prompt nodes", started.elapsed());
        tokio::time::sleep(ms(1)).await;
    }
    let in_flight = !forcing.is_finished();
    // The next holder.
    let h = rng.random_range(0..handles.len());
    let (options, mode) = random_options(rng);
    let options = options.retry_count(0);
    let label = format!("{} after a force", run.label(h, &resource, mode, &options));
    let result = within(
        "the next holder",
        lock_as(&handles[h], &resource, mode, &options),
    )
    .await;
    let mid = observer.observe().await;
    let report = within("a late force-release", forcing).await.unwrap();
    let forced_by = Instant::now();
    let after = observer.observe().await;
    for &n in &late {
        proxied.proxies[n].set(Direction::Request, Fault::Pass);
    }
    run.note(format!(
        "  read by all after {read_by:?}; next holder {label}{}: {}; the force-release, after \
         {:?}: {report:?}",
        if in_flight {
            " (the late delete in flight)"
        } else {
            ""
        },
        result
            .as_ref()
            .map_or_else(ToString::to_string, |_| "held".to_owned()),
        started.elapsed(),
    ));
    run.stats.forces += 1;
    // A holder living past the force-release's return was removed somewhere (the prompt
    // node's, unless they had all expired by then).
    let longest = seen.views[&resource]
        .iter()
        .map(|view| fresh_life(view, &BTreeSet::new()))
        .max()
        .unwrap_or_default();
    let outlived = longest > ms_of(forced_by.duration_since(seen.t0) + ROUNDING);
    match &report {
        Ok(report) if report.confirmed() && (report.removed_any() || !outlived) => {}
        other => run.fail(&format!(
            "force-releasing {resource}, held on nodes {held_on:?} (node {prompt} answering at \
             once, its holders living up to {longest} ms): {other:?}"
        )),
    }
    if let Some(guard) = acquired(run, result, &label) {
        if in_flight {
            run.stats.forces_next_held += 1;
        }
        let claim = Claim {
            who: label.clone(),
            resource: resource.clone(),
            token: guard.token().expose().to_owned(),
            mode: guard.mode(),
            valid_until: guard.valid_until(),
            lost_deadline: guard.lost().deadline(),
        };
        let (mid_views, after_views) = (&mid.views[&resource], &after.views[&resource]);
        if let Err(message) = check_kept(
            &claim,
            (mid_views, mid.t0),
            (after_views, after.t0 + after.window),
        ) {
            run.fail(&message);
        }
        run.stats.forces_kept += late
            .iter()
            .filter(|&&n| life_on(&mid_views[n], &claim) > 0)
            .count() as u64;
        let kind = (options.reentrant, options.auto_extend);
        live.push(Live::new(run.live_id(), guard, h, kind, None, label));
    }
    broken_by_force(run, &resource, victims).await;
}

/// The holders a force-release removed: their extension is refused (their keys are gone from
/// every node), and every view of them says ended, now and after every later step. They are
/// dropped (the drop's release finds nothing of theirs).
async fn broken_by_force(run: &mut Run, resource: &str, victims: Vec<Live>) {
    let mut seen: Vec<String> = Vec::new();
    for victim in &victims {
        let token = victim.guard.token().expose().to_owned();
        if seen.contains(&token) {
            continue;
        }
        seen.push(token.clone());
        let result = within("extending a broken lock", victim.guard.extend(ms(1000))).await;
        let ended_by = Instant::now();
        run.note(format!(
            "  extend {}, broken by the force: {}",
            victim.label,
            result
                .as_ref()
                .map_or_else(ToString::to_string, |until| format!(
                    "until now+{:?}",
                    until.saturating_duration_since(ended_by)
                ))
        ));
        match result {
            Ok(_) => run.fail(&format!(
                "{}, whose holder the force-release of {resource} removed from every node, was \
                 extended",
                victim.label
            )),
            Err(LockError::Lost { .. }) => run.stats.forces_refused += 1,
            Err(LockError::Unavailable { .. }) => {
                run.stats.unavailable += 1;
                continue;
            }
            Err(error) => run.fail(&format!(
                "extending {}, broken by a force-release: unexpected error {error}",
                victim.label
            )),
        }
        let mut last = None;
        for same in victims.iter().filter(|v| v.guard.token().expose() == token) {
            for reading in [
                Reading::of_guard(&same.guard, &same.label, "broken by force", ended_by),
                Reading::of_info(&same.info, &same.label, "broken by force", ended_by),
            ] {
                if let Err(message) = check_ended(&reading) {
                    run.fail(&message);
                }
            }
            last = Some((same.info.clone(), same.label.clone()));
        }
        if let Some((info, label)) = last {
            run.ended(info, &label, "broken by force", ended_by);
        }
    }
    run.stats.dropped += victims.len() as u64;
    drop(victims);
}
