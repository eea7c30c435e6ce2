//! The keys of the one resource the model locks, and the calls each client step sends (the
//! argument layouts of the scripts' headers, with the model's key names).

use super::config::Config;
use crate::node::{Call, id};

/// The lock key.
pub(super) const KEY: &str = "r";
/// The waiter queue, also the hand-over channel.
pub(super) const QUEUE: &str = "r:q";
const WINDOW: &str = "r:w";
const STREAK: &str = "r:s";
const WITNESS: &str = "witness";
const MARKER: &str = "quarantined";
const COUNTER: &str = "r:fence";
const LEGACY: &str = "r:fence-legacy";
const FLOOR: &str = "fence-floor";
const FLOOR_WINDOW: &str = "fence-floor-window";

/// A token: 40 hex digits, one per (client, attempt).
pub(super) fn token(client: usize, n: u16) -> String {
    format!("{:032x}{:08x}", client + 1, n)
}

/// A waiter's marker.
pub(super) fn marker(client: usize) -> String {
    format!("~{:016x}", client + 1)
}

/// A plain attempt (acquire.lua); a foreign client's is `SET NX PX` (no window, no
/// quarantine, no fencing).
pub(super) fn acquire(config: &Config, token: &str, fencing: bool, foreign: bool) -> Call {
    let mut keys = vec![KEY, WINDOW, STREAK, WITNESS, MARKER];
    if fencing {
        keys.extend([COUNTER, FLOOR]);
    }
    let (quarantine, windowed) = if foreign {
        ("0".to_owned(), "0")
    } else {
        let windowed = if config.window_every > 0 { "1" } else { "0" };
        (config.quarantine.to_string(), windowed)
    };
    Call::new(id::ACQUIRE, &keys, &[token, &config.ttl.to_string(), &quarantine, windowed])
}

/// A queued waiter's attempt (acquire_queued.lua).
pub(super) fn acquire_queued(
    config: &Config,
    token: &str,
    marker: &str,
    score: u64,
    fencing: bool,
) -> Call {
    let mut keys = vec![KEY, QUEUE, WINDOW, STREAK, WITNESS, MARKER];
    if fencing {
        keys.extend([COUNTER, FLOOR]);
    }
    let queue_ttl = (config.ttl * 4).to_string();
    Call::new(
        id::ACQUIRE_QUEUED,
        &keys,
        &[
            token,
            &config.ttl.to_string(),
            marker,
            &score.to_string(),
            &queue_ttl,
            &config.quarantine.to_string(),
        ],
    )
}

/// Compare-and-delete (release.lua).
pub(super) fn release(token: &str) -> Call {
    Call::new(id::RELEASE, &[KEY], &[token])
}

/// A release with hand-over (release_handover.lua).
pub(super) fn release_handover(config: &Config, token: &str, busy: u64) -> Call {
    let due = config.window_every > 0
        && busy >= config.window_every
        && !config.client_flaws.no_windows;
    let window = if config.client_flaws.no_windows { 0 } else { config.window };
    Call::new(
        id::RELEASE_HANDOVER,
        &[KEY, QUEUE, STREAK, WINDOW],
        &[
            token,
            &config.grace.to_string(),
            QUEUE,
            &window.to_string(),
            if due { "1" } else { "0" },
            &busy.to_string(),
            &(config.window_every * 4).max(1).to_string(),
        ],
    )
}

/// An extension (extend.lua).
pub(super) fn extend(token: &str, ttl: u64) -> Call {
    Call::new(id::EXTEND, &[KEY], &[token, &ttl.to_string()])
}

/// The fencing write-back (fence.lua); counters never expire in the model.
pub(super) fn fence(claim: u64) -> Call {
    Call::new(
        id::FENCE,
        &[COUNTER, LEGACY, FLOOR, FLOOR_WINDOW],
        &[&claim.to_string(), "0"],
    )
}
