//! The keys of the one resource the model locks, and the calls each client step sends (the
//! argument layouts of the scripts' headers, with the model's key names).

use redlock_core::Mode;

use super::config::{Config, Program};
use crate::node::{Call, Node, id};

/// The lock key.
pub(super) const KEY: &str = "r";
/// The waiter queue, also the hand-over channel.
pub(super) const QUEUE: &str = "r:q";
const WINDOW: &str = "r:w";
const STREAK: &str = "r:s";
/// The listen flag (`keys::listen`): set by refused waiters, deleted with the key.
const LISTEN: &str = "r:l";
const WITNESS: &str = "witness";
const MARKER: &str = "quarantined";
const COUNTER: &str = "r:fence";
const FLOOR: &str = "fence-floor";
const FLOOR_WINDOW: &str = "fence-floor-window";

/// A request a client sends, as small as the state needs it; its `call` makes the
/// script call a node runs for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Req {
    /// An attempt with the client's `token`-th token (a queued one with the wait start
    /// `score` when `queued`).
    Acquire {
        /// The token's number.
        token: u16,
        /// A queued waiter's attempt, with its wait start.
        queued: Option<u64>,
    },
    /// Compare-and-delete.
    Release {
        /// The token's number.
        token: u16,
    },
    /// A release with hand-over, the holder having counted the streak `busy`.
    ReleaseHandover {
        /// The token's number.
        token: u16,
        /// The streak the holder counted, ms.
        busy: u64,
    },
    /// An extension to `ttl`.
    Extend {
        /// The token's number.
        token: u16,
        /// The ttl asked for, ms.
        ttl: u64,
    },
    /// The fencing write-back of `claim`.
    Fence {
        /// The claimed token.
        claim: u64,
    },
    /// An attempt in the program's mode.
    AcquireMode {
        /// The token's number.
        token: u16,
        /// The request's wait start (its rank among waiters).
        since: u64,
    },
    /// A plain waiter leaves the queue (leave.lua): granted by only some nodes, or given up.
    Leave,
    /// The release of a mode holder (or of a failed attempt), its waiter's entry removed too
    /// when `leave`.
    ReleaseMode {
        /// The token's number.
        token: u16,
        /// The request is over: its waiter's entry goes too.
        leave: bool,
    },
}

impl Req {
    /// The call client `client` (running `program`) sends for it.
    pub(super) fn call(self, config: &Config, client: usize, program: &Program) -> Call {
        match self {
            Self::Acquire {
                token: n,
                queued: None,
            } => acquire(config, &token(client, n), program.fencing, program.foreign),
            Self::Acquire {
                token: n,
                queued: Some(score),
            } => acquire_queued(
                config,
                &token(client, n),
                &marker(client),
                score,
                program.fencing,
            ),
            Self::Release { token: n } => release(&token(client, n)),
            Self::ReleaseHandover { token: n, busy } => {
                release_handover(config, &token(client, n), busy)
            }
            Self::Extend { token: n, ttl } => extend(&token(client, n), ttl),
            Self::Fence { claim } => fence(claim),
            Self::AcquireMode { token: n, since } => {
                let mode = program.mode.unwrap_or(Mode::Exclusive);
                let compatible: Vec<&str> = Mode::ALL
                    .into_iter()
                    .filter(|m| config.client_flaws.wrong_compatibility || mode.compatible(*m))
                    .map(Mode::as_str)
                    .collect();
                let mut keys = vec![KEY, WINDOW, WITNESS, MARKER, LISTEN];
                if program.fencing {
                    keys.extend([COUNTER, FLOOR]);
                }
                Call::new(
                    id::ACQUIRE_MODE,
                    &keys,
                    &[
                        &token(client, n),
                        mode.as_str(),
                        &config.ttl.to_string(),
                        &marker(client),
                        &(config.ttl * 4).to_string(),
                        &compatible.join(" "),
                        &since.to_string(),
                        &config.quarantine.to_string(),
                    ],
                )
            }
            Self::Leave => Call::new(id::LEAVE, &[QUEUE], &[&marker(client), "0"]),
            Self::ReleaseMode { token: n, leave } => {
                let marker = if leave { marker(client) } else { String::new() };
                Call::new(id::RELEASE_MODE, &[KEY], &[&token(client, n), "", &marker])
            }
        }
    }
}

/// A token: 40 hex digits, one per (client, attempt).
pub(super) fn token(client: usize, n: u16) -> String {
    format!("{:032x}{:08x}", client + 1, n)
}

/// Whether `node` holds a client's token at the lock key (a plain lock granted there).
pub(super) fn holds_a_token(node: &Node) -> bool {
    matches!(node.store.get_str(KEY), Ok(Some(v)) if v.len() == 40 && !v.starts_with('~'))
}

/// A waiter's marker.
pub(super) fn marker(client: usize) -> String {
    format!("~{:016x}", client + 1)
}

/// A plain attempt (acquire.lua); a foreign client's is `SET NX PX` (no window, no
/// quarantine, no fencing).
fn acquire(config: &Config, token: &str, fencing: bool, foreign: bool) -> Call {
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
    Call::new(
        id::ACQUIRE,
        &keys,
        &[token, &config.ttl.to_string(), &quarantine, windowed],
    )
}

/// A queued waiter's attempt (acquire_queued.lua).
fn acquire_queued(config: &Config, token: &str, marker: &str, score: u64, fencing: bool) -> Call {
    let mut keys = vec![KEY, QUEUE, WINDOW, STREAK, WITNESS, MARKER, LISTEN];
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
fn release(token: &str) -> Call {
    Call::new(id::RELEASE, &[KEY], &[token])
}

/// A release with hand-over (release_handover.lua).
fn release_handover(config: &Config, token: &str, busy: u64) -> Call {
    let due =
        config.window_every > 0 && busy >= config.window_every && !config.client_flaws.no_windows;
    let window = if config.client_flaws.no_windows {
        0
    } else {
        config.window
    };
    Call::new(
        id::RELEASE_HANDOVER,
        &[KEY, QUEUE, STREAK, WINDOW, LISTEN],
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
fn extend(token: &str, ttl: u64) -> Call {
    Call::new(id::EXTEND, &[KEY], &[token, &ttl.to_string()])
}

/// The fencing write-back (fence.lua); counters never expire in the model.
fn fence(claim: u64) -> Call {
    Call::new(
        id::FENCE,
        &[COUNTER, FLOOR, FLOOR_WINDOW],
        &[&claim.to_string(), "0"],
    )
}

/// The hash another application keeps at the resource's key, when the configuration has one.
pub(super) fn foreign_hash(node: &mut Node, config: &Config) {
    if config.foreign_hash {
        let _ = node.store.hset(KEY, "name", "catalog");
    }
}

/// Whether `node` still has the foreign hash as it was written.
pub(super) fn foreign_hash_intact(node: &Node) -> bool {
    match node.store.get(KEY) {
        Some(crate::node::Entry {
            value: crate::node::Value::Hash(fields),
            expires_at: None,
        }) => fields.len() == 1 && fields.get("name").map(String::as_str) == Some("catalog"),
        _ => false,
    }
}

/// The node as a handle with the quarantine on leaves it once its quarantine has passed
/// (quarantine.lua, run when the handle is built): its data witness written, no marker.
pub(super) fn witnessed(node: &mut Node, config: &Config) {
    if config.quarantine > 0 {
        let witness = format!("{} {}", node.run_id, config.quarantine);
        node.store.set(WITNESS, &witness, None);
    }
}
