//! The model's scripts (`redlock-model`) against the real ones: random sequences of node
//! operations, each run on a real server through the dispatch script the lock sends (by the
//! SHA-1 the code sends it by, in turns alone and in a batch, the two layouts a call goes in;
//! a script operation at the second of every three places that is followed by another shares
//! its batch with it, as concurrent lockers' calls do) and on the model's `Node`, comparing after every operation
//! (or batch) the replies, the whole keyspace (each key's type, value and expiry) and the
//! messages published.
//!
//! The universe is small so that operations meet: two resources under the key prefix `lock:`
//! (named as the lock names its keys, with its bookkeeping keys, its semaphore's slots, queue
//! and liveness set, the prefix's fencing floor and quarantine keys), three tokens, two
//! waiter markers, the six modes, ttls of 100 to 900 s (nothing expires on its own during a
//! case: expiry is an operation, "lapse", which deletes a key with a ttl on both sides), data
//! loss (`FLUSHALL` and `Node::lose_data`), and a foreign client's writes at a resource's key.
//!
//! Each case has a focus (the plain lock's operations, the modes', the semaphore's, or all
//! of them mixed) so that its operations meet on the same keys, and a holder's operations
//! (extend, release, hand-over, ...) are mostly by whoever holds the key when they run.
//!
//! The model's clock is set before each operation from the server's `TIME`, read just before
//! it: values derived from the clock (the ms left or busy in a reply, an expiry, a streak's
//! start or an entry's expiry inside a value, a liveness score) may differ by up to
//! [`TOLERANCE_MS`] (1 ms) plus the most ms any operation of the case spanned (from that
//! `TIME` to another read right after it, which brackets every clock reading of the server's
//! during the operation: 0 or 1 ms unless the machine stalled); everything else must be
//! equal. Expiries are read with `PEXPIRETIME` (Redis 7.0). A mirror 3 ms off in a ttl fails
//! it. Values that expire at the very ms a script reads the clock are compared at that ms, by
//! a test of their own that keeps only runs within one ms of the server's clock.
//!
//! Bound: [`CASES`] cases (`MODEL_DIFF_CASES` overrides it) of 20 to 40 operations, each
//! operation five round trips to one local server started for the test: about 5 s on a
//! 2-core machine (about 20 ms a case). A failure is shrunk (at most [`SHRINK_ITERS`] runs)
//! and reported with the operations up to the one where model and server differ, both
//! replies, both keyspaces and both sets of published messages.

#![allow(clippy::unwrap_used)] // tests unwrap: a failure is the assertion

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::fmt::Write as _;

use fred::clients::Client;
use fred::interfaces::{ClientLike, EventInterface, PubsubInterface};
use fred::types::{ClusterHash, CustomCommand, Message, Value};
use proptest::prelude::*;
use proptest::strategy::Union;
use proptest::test_runner::{Config, TestCaseError, TestError, TestRunner};
use redlock_core::__private::sent_scripts;
use redlock_core::{BOOKKEEPING_SEPARATOR as SEP, Mode};
use redlock_model::node::{Call, Node, Reply, Value as ModelValue, id};
use redlock_tests::{RedisServer, plain_client, within};
use tokio::sync::Mutex;
use tokio::sync::broadcast::Receiver;

/// How many random sequences are run.
const CASES: u32 = 256;

/// At most this many runs to shrink a failing sequence.
const SHRINK_ITERS: u32 = 1000;

/// How far apart two clock-derived values may be beyond the ms an operation spanned: one
/// script's own readings of the server's clock (the time a `PTTL` counts from, and the time a
/// `SET PX` counts from) may be a ms apart.
const TOLERANCE_MS: i64 = 1;

/// A value in a key or a reply is taken for one read from the clock when it is this close
/// to the server's clock (ranks and fencing claims are chosen far from it).
const CLOCK_NEAR_MS: i64 = 100_000_000;

/// The key prefix.
const PREFIX: &str = "lock:";

/// The owner labels a holder writes.
const LABELS: [&str; 2] = ["host-a/1/app", "host-b/2/app"];

/// The tokens (40 lowercase hex digits, as the lock's).
const TOKENS: [&str; 3] = [
    "0123456789abcdef0123456789abcdef01234567",
    "a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0",
    "fedcba9876543210fedcba9876543210fedcba98",
];

/// The waiter markers (`~` and 16 hex digits).
const MARKERS: [&str; 2] = ["~00000000000000a1", "~fffffffffffffff2"];

/// The waiters' wait starts (their ranks) are this plus 0 to 3 ms: far from the clock.
const SINCE_BASE: i64 = 1_600_000_000_000;

/// How long a queue (and a streak) outlives the call that writes it.
const QUEUE_TTL_MS: u64 = 600_000;

/// The channel the test publishes on to know that every message before it has arrived.
const SYNC: &str = "model-diff:sync";

/// Which lock key a plain operation is on: a resource's, or a slot of its semaphore.
#[derive(Debug, Clone, Copy)]
struct Target {
    r: usize,
    slot: Option<usize>,
}

/// One operation.
#[derive(Debug, Clone)]
enum Op {
    Acquire {
        at: Target,
        t: usize,
        ttl: u64,
        /// acquire.lua's `windowed`: 0, 1 or 2.
        windowed: u8,
        fencing: bool,
        q: u64,
        /// A lock of several resources: the other resource's key too (`n` = 2).
        set: bool,
    },
    AcquireQueued {
        at: Target,
        t: usize,
        ttl: u64,
        w: usize,
        since: i64,
        fencing: bool,
        q: u64,
    },
    Extend {
        at: Target,
        t: usize,
        ttl: u64,
    },
    Release {
        at: Target,
        t: usize,
    },
    /// set_nx.lua: the node's own `SET NX PX GET`, in a batch, or with an owner label.
    SetNx {
        at: Target,
        t: usize,
        ttl: u64,
        q: u64,
        label: Option<usize>,
    },
    Handover {
        at: Target,
        t: usize,
        grace: u64,
        window_ms: u64,
        due: bool,
        busy_ms: u64,
    },
    Keep {
        at: Target,
        t: usize,
        keep_ms: u64,
    },
    Leave {
        r: usize,
        w: usize,
        from: Waiting,
    },
    Fence {
        r: usize,
        claim: String,
        keep: u64,
    },
    Quarantine {
        q: u64,
    },
    AcquireMode {
        r: usize,
        t: usize,
        mode: Mode,
        ttl: u64,
        w: usize,
        since: i64,
        intent: u64,
        fencing: bool,
        q: u64,
    },
    ExtendMode {
        r: usize,
        t: usize,
        ttl: u64,
    },
    ReleaseMode {
        r: usize,
        t: usize,
        w: Option<usize>,
        handover: bool,
    },
    AcquirePermit {
        r: usize,
        t: usize,
        k: usize,
        rotate: usize,
        ttl: u64,
        q: u64,
        queued: Option<usize>,
        since: i64,
        alive_ms: u64,
    },
    ReleaseSlots {
        r: usize,
        t: usize,
        k: usize,
    },
    /// A permit's extension: slot `slot` of resource `r`'s semaphore, asked as a holder of a
    /// semaphore of `k`.
    ExtendPermit {
        r: usize,
        t: usize,
        slot: usize,
        ttl: u64,
        k: usize,
    },
    ReleaseMany {
        t: usize,
        wake: bool,
    },
    /// A holder's label written beside its lock (owner.lua): `label` of [`LABELS`], for a
    /// plain lock or (`mode`) a lock in modes.
    Owner {
        r: usize,
        t: usize,
        label: usize,
        ttl: u64,
        mode: bool,
    },
    /// What the node holds for resource `r`, read by inspect.lua, which is sent on its own
    /// with `EVAL` (not through the dispatch script).
    Inspect {
        r: usize,
    },
    /// The `pick`-th key with a ttl (in key order, modulo their number) expires.
    Lapse {
        pick: usize,
    },
    /// The node loses its keyspace (`FLUSHALL`).
    DataLoss,
    /// A foreign client writes at a resource's key: a field of its own hash, or a string.
    Foreign {
        r: usize,
        hash: bool,
    },
    /// Only in the fixed cases: `key` set to a string, or to a hash of `fields`, on both sides
    /// (with a ttl of 500 s).
    Put {
        key: String,
        value: Result<String, Vec<(String, String)>>,
    },
    /// Only in the fixed cases: a call as it is.
    Raw(Call),
}

/// Which waiters a waiter leaves.
#[derive(Debug, Clone, Copy)]
enum Waiting {
    Queue,
    Mode,
    Permit,
}

/// A resource's lock key.
fn lock(r: usize) -> String {
    format!("{PREFIX}r{r}")
}

/// A bookkeeping key of `key`.
fn book(key: &str, kind: &str) -> String {
    format!("{key}{SEP}{kind}")
}

/// A prefix-wide key (witness, quarantine marker, fencing floor and window).
fn prefixed(kind: &str) -> String {
    format!("{PREFIX}{SEP}{kind}")
}

impl Target {
    /// The lock key.
    fn key(self) -> String {
        match self.slot {
            None => lock(self.r),
            Some(i) => book(&lock(self.r), &format!("permit:{i}")),
        }
    }

    /// Its waiter queue (a slot's is its semaphore's).
    fn waiters(self) -> String {
        match self.slot {
            None => book(&lock(self.r), "waiters"),
            Some(_) => book(&lock(self.r), "permit-waiters"),
        }
    }

    /// Its listen flag (a slot's is its semaphore's).
    fn listen(self) -> String {
        match self.slot {
            None => book(&lock(self.r), "listen"),
            Some(_) => book(&lock(self.r), "permit-listen"),
        }
    }
}

/// The quarantine's keys, or `stand_in` for both when it is off (as the client passes them).
fn quarantine_keys(q: u64, stand_in: &str) -> [String; 2] {
    if q == 0 {
        [stand_in.to_owned(), stand_in.to_owned()]
    } else {
        [prefixed("witness"), prefixed("quarantine")]
    }
}

/// The fencing counter's and floor's keys of `key`.
fn fencing_keys(key: &str) -> [String; 2] {
    [book(key, "fencing"), prefixed("fencing-floor")]
}

/// The modes compatible with `mode`, as the client sends them.
fn compatible(mode: Mode) -> String {
    let names: Vec<&str> = Mode::ALL
        .into_iter()
        .filter(|&other| mode.compatible(other))
        .map(Mode::as_str)
        .collect();
    names.join(" ")
}

/// A token index that stands for whoever holds the key when the operation runs.
const HOLDER: usize = TOKENS.len();

impl Op {
    /// The script call this operation is, if it is one, on the keyspace `last` (where
    /// [`HOLDER`] finds its token).
    fn call(&self, last: &Keyspace) -> Option<Call> {
        let held = |key: &str| -> Option<String> {
            match last.get(key) {
                Some((Held::Str(v), _)) => TOKENS.contains(&v.as_str()).then(|| v.clone()),
                Some((Held::Hash(h), _)) => {
                    h.keys().find(|f| TOKENS.contains(&f.as_str())).cloned()
                }
                _ => None,
            }
        };
        let token = |t: usize, key: &str| -> String {
            match TOKENS.get(t) {
                Some(token) => (*token).to_owned(),
                None => held(key).unwrap_or_else(|| TOKENS[0].to_owned()),
            }
        };
        let slot_token = |t: usize, k: usize| -> String {
            let r = match self {
                Self::ReleaseSlots { r, .. } => *r,
                _ => 0,
            };
            let holder = (0..k).find_map(|i| held(&book(&lock(r), &format!("permit:{i}"))));
            TOKENS
                .get(t)
                .map(|t| (*t).to_owned())
                .or(holder)
                .unwrap_or_else(|| TOKENS[0].to_owned())
        };
        let (script, keys, args): (usize, Vec<String>, Vec<String>) = match self {
            Self::Acquire {
                at,
                t,
                ttl,
                windowed,
                fencing,
                q,
                set,
            } => {
                let key = at.key();
                let mut keys = vec![key.clone()];
                let other = lock(1 - at.r.min(1));
                if *set {
                    keys.extend([other.clone(), book(&key, "window"), book(&other, "window")]);
                } else {
                    keys.push(book(&key, "window"));
                }
                keys.push(book(&key, "busy"));
                keys.extend(quarantine_keys(*q, &key));
                if *fencing {
                    keys.extend(fencing_keys(&key));
                }
                let windowed = windowed.to_string();
                let mut args = vec![token(*t, &key), ttl.to_string(), q.to_string(), windowed];
                if *set {
                    args.push("2".into());
                }
                (id::ACQUIRE, keys, args)
            }
            Self::AcquireQueued {
                at,
                t,
                ttl,
                w,
                since,
                fencing,
                q,
            } => {
                let key = at.key();
                let mut keys = vec![
                    key.clone(),
                    at.waiters(),
                    book(&key, "window"),
                    book(&key, "busy"),
                ];
                keys.extend(quarantine_keys(*q, &key));
                keys.push(book(&key, "listen"));
                if *fencing {
                    keys.extend(fencing_keys(&key));
                }
                let args = vec![
                    token(*t, &key),
                    ttl.to_string(),
                    MARKERS[*w].into(),
                    since.to_string(),
                    QUEUE_TTL_MS.to_string(),
                    q.to_string(),
                ];
                (id::ACQUIRE_QUEUED, keys, args)
            }
            Self::Extend { at, t, ttl } => (
                id::EXTEND,
                vec![at.key()],
                vec![token(*t, &at.key()), ttl.to_string()],
            ),
            Self::Release { at, t } => (id::RELEASE, vec![at.key()], vec![token(*t, &at.key())]),
            Self::SetNx {
                at,
                t,
                ttl,
                q,
                label,
            } => {
                let key = at.key();
                let token = token(*t, &key);
                // With the quarantine off and no label, the lock key alone with the token and
                // the ttl, as the pipeline batches it (which the dispatch script runs inline).
                let (mut keys, mut args) =
                    (vec![key.clone()], vec![token.clone(), ttl.to_string()]);
                if *q != 0 || label.is_some() {
                    keys.extend(quarantine_keys(*q, &key));
                    args.push(q.to_string());
                }
                if let Some(label) = label {
                    let digest = &fred::util::sha1_hash(&token)[..16];
                    keys.push(book(&key, &format!("owner:{digest}")));
                    args.push(LABELS[*label].to_owned());
                }
                (id::SET_NX, keys, args)
            }
            Self::Handover {
                at,
                t,
                grace,
                window_ms,
                due,
                busy_ms,
            } => {
                let key = at.key();
                let keys = vec![
                    key.clone(),
                    at.waiters(),
                    book(&key, "busy"),
                    book(&key, "window"),
                    at.listen(),
                ];
                let args = vec![
                    token(*t, &key),
                    grace.to_string(),
                    at.waiters(),
                    window_ms.to_string(),
                    if *due { "1" } else { "0" }.into(),
                    busy_ms.to_string(),
                    QUEUE_TTL_MS.to_string(),
                ];
                (id::RELEASE_HANDOVER, keys, args)
            }
            Self::Keep { at, t, keep_ms } => (
                id::KEEP,
                vec![at.key()],
                vec![
                    token(*t, &at.key()),
                    keep_ms.to_string(),
                    "redlock:kept".into(),
                ],
            ),
            Self::Leave { r, w, from } => {
                let (keys, in_hash) = match from {
                    Waiting::Queue => (vec![book(&lock(*r), "waiters")], "0"),
                    Waiting::Mode => (vec![lock(*r)], "1"),
                    Waiting::Permit => (
                        vec![
                            book(&lock(*r), "permit-waiters"),
                            book(&lock(*r), "permit-alive"),
                        ],
                        "0",
                    ),
                };
                (id::LEAVE, keys, vec![MARKERS[*w].into(), in_hash.into()])
            }
            Self::Fence { r, claim, keep } => {
                let key = lock(*r);
                let keys = vec![
                    book(&key, "fencing"),
                    prefixed("fencing-floor"),
                    prefixed("fencing-window"),
                ];
                (id::FENCE, keys, vec![claim.clone(), keep.to_string()])
            }
            Self::Quarantine { q } => (
                id::QUARANTINE,
                quarantine_keys(*q, &lock(0)).to_vec(),
                vec![q.to_string()],
            ),
            Self::AcquireMode {
                r,
                t,
                mode,
                ttl,
                w,
                since,
                intent,
                fencing,
                q,
            } => {
                let key = lock(*r);
                let mut keys = vec![key.clone(), book(&key, "window")];
                keys.extend(quarantine_keys(*q, &key));
                keys.push(book(&key, "listen"));
                if *fencing {
                    keys.extend(fencing_keys(&key));
                }
                let args = vec![
                    token(*t, &key),
                    mode.as_str().into(),
                    ttl.to_string(),
                    MARKERS[*w].into(),
                    intent.to_string(),
                    compatible(*mode),
                    since.to_string(),
                    q.to_string(),
                ];
                (id::ACQUIRE_MODE, keys, args)
            }
            Self::ExtendMode { r, t, ttl } => (
                id::EXTEND_MODE,
                vec![lock(*r)],
                vec![token(*t, &lock(*r)), ttl.to_string()],
            ),
            Self::ReleaseMode { r, t, w, handover } => {
                let key = lock(*r);
                let waiters = book(&key, "waiters");
                let (keys, channel) = if *handover {
                    (vec![key, waiters.clone()], waiters)
                } else {
                    (vec![key], String::new())
                };
                let marker = w.map_or("", |w| MARKERS[w]);
                let args = vec![token(*t, &lock(*r)), channel, marker.into()];
                (id::RELEASE_MODE, keys, args)
            }
            Self::AcquirePermit {
                r,
                t,
                k,
                rotate,
                ttl,
                q,
                queued,
                since,
                alive_ms,
            } => {
                let key = lock(*r);
                let queue = book(&key, "permit-waiters");
                let mut keys = quarantine_keys(*q, &queue).to_vec();
                keys.extend([
                    queue,
                    book(&key, "permit-alive"),
                    book(&key, "permit-listen"),
                    book(&key, "permit-capacity"),
                ]);
                keys.extend((0..*k).map(|i| {
                    let slot = (i + rotate) % k;
                    book(&key, &format!("permit:{slot}"))
                }));
                let args = vec![
                    token(*t, &book(&key, "permit:0")),
                    ttl.to_string(),
                    q.to_string(),
                    queued.map_or("", |w| MARKERS[w]).into(),
                    since.to_string(),
                    QUEUE_TTL_MS.to_string(),
                    alive_ms.to_string(),
                    k.to_string(),
                ];
                (id::ACQUIRE_PERMIT, keys, args)
            }
            Self::ReleaseSlots { r, t, k } => {
                let keys = (0..*k)
                    .map(|i| book(&lock(*r), &format!("permit:{i}")))
                    .collect();
                (id::RELEASE, keys, vec![slot_token(*t, *k)])
            }
            Self::ExtendPermit { r, t, slot, ttl, k } => {
                let key = lock(*r);
                let slot_key = book(&key, &format!("permit:{slot}"));
                let args = vec![token(*t, &slot_key), ttl.to_string(), k.to_string()];
                let keys = vec![slot_key, book(&key, "permit-capacity")];
                (id::EXTEND_PERMIT, keys, args)
            }
            Self::ReleaseMany { t, wake } => {
                let mut keys = vec![lock(0), lock(1)];
                let script = if *wake {
                    keys.extend([book(&lock(0), "waiters"), book(&lock(1), "waiters")]);
                    keys.extend([book(&lock(0), "listen"), book(&lock(1), "listen")]);
                    id::RELEASE_SLOTS
                } else {
                    id::RELEASE
                };
                (script, keys, vec![token(*t, &lock(0))])
            }
            Self::Owner {
                r,
                t,
                label,
                ttl,
                mode,
            } => {
                let key = lock(*r);
                let token = token(*t, &key);
                let digest = &fred::util::sha1_hash(&token)[..16];
                let owner_key = book(&key, &format!("owner:{digest}"));
                let mode = if *mode { "1" } else { "0" };
                let args = vec![
                    token,
                    LABELS[*label].to_owned(),
                    ttl.to_string(),
                    mode.to_owned(),
                ];
                (id::OWNER, vec![key, owner_key], args)
            }
            Self::Raw(call) => return Some(call.clone()),
            Self::Lapse { .. }
            | Self::DataLoss
            | Self::Foreign { .. }
            | Self::Put { .. }
            | Self::Inspect { .. } => {
                return None;
            }
        };
        Some(Call { script, keys, args })
    }
}

/// What an operation did: its name and its call (or what it stands for).
fn describe(op: &Op, call: Option<&Call>) -> String {
    let name = format!("{op:?}");
    let name = name.split([' ', '{']).next().unwrap_or_default();
    match (op, call) {
        (Op::Lapse { .. }, _) => "Lapse (a key with a ttl deleted)".to_owned(),
        (Op::DataLoss, _) => "DataLoss (FLUSHALL)".to_owned(),
        (Op::Foreign { r, hash: true }, _) => format!("Foreign HSET r{r} owner app, PEXPIRE"),
        (Op::Foreign { r, hash: false }, _) => format!("Foreign SET r{r} theirs PX"),
        (Op::Put { key, value }, _) => format!("Put {key:?} = {value:?}"),
        (_, Some(call)) => format!("{name}: keys {:?} args {:?}", call.keys, call.args),
        (_, None) => name.to_owned(),
    }
}

/// A resource: mostly the first, so that operations meet.
fn res() -> impl Strategy<Value = usize> {
    prop_oneof![3 => Just(0usize), 1 => Just(1usize)]
}

/// A plain operation's lock key: a slot `slots` times in 5.
fn target(slots: u32) -> impl Strategy<Value = Target> {
    let slot = prop_oneof![5 - slots => Just(None), slots => (0..3usize).prop_map(Some)];
    (res(), slot).prop_map(|(r, slot)| Target { r, slot })
}

fn ttl() -> impl Strategy<Value = u64> {
    (1..=9u64).prop_map(|k| k * 100_000)
}

fn quarantine() -> impl Strategy<Value = u64> {
    prop_oneof![10 => Just(0u64), 1 => Just(300_000u64), 1 => Just(450_000u64)]
}

fn since() -> impl Strategy<Value = i64> {
    (0..4i64).prop_map(|d| SINCE_BASE + d)
}

fn mode() -> impl Strategy<Value = Mode> {
    proptest::sample::select(Mode::ALL.to_vec())
}

fn claim() -> impl Strategy<Value = String> {
    prop_oneof![
        (1..12u64).prop_map(|c| c.to_string()),
        // Above 2^53, where a double would round them.
        (0..4u64).prop_map(|d| (9_007_199_254_740_993 + d).to_string()),
    ]
}

/// What a case mostly does, so that its operations meet on the same keys.
#[derive(Debug, Clone, Copy)]
enum Focus {
    /// Every kind of operation.
    Mixed,
    /// The plain lock's.
    Plain,
    /// The mode lock's.
    Modes,
    /// The semaphore's.
    Permits,
}

/// The operations of a case with `focus`.
fn op(focus: Focus) -> impl Strategy<Value = Op> {
    // The weights of: acquire, queued, extend, release, handover, keep, leave, fence, check,
    // acquire_mode, extend_mode, release_mode, acquire_permit, release_slots, extend_permit,
    // release_many, lapse, data loss, foreign, owner, inspect, set_nx; and how often (in 5) a
    // plain operation is on a slot.
    let (weights, slots): ([u32; 22], u32) = match focus {
        Focus::Mixed => (
            [
                4, 4, 3, 2, 4, 1, 2, 2, 1, 6, 3, 3, 5, 2, 2, 1, 3, 1, 1, 2, 2, 2,
            ],
            1,
        ),
        Focus::Plain => (
            [
                5, 6, 3, 2, 6, 1, 2, 2, 1, 1, 0, 0, 0, 0, 0, 1, 3, 1, 1, 2, 2, 3,
            ],
            0,
        ),
        Focus::Modes => (
            [
                1, 0, 0, 0, 0, 0, 2, 1, 1, 10, 5, 6, 0, 0, 0, 0, 3, 1, 1, 2, 2, 1,
            ],
            0,
        ),
        Focus::Permits => (
            [
                0, 1, 2, 2, 4, 1, 2, 0, 1, 0, 0, 0, 10, 3, 4, 0, 3, 1, 0, 0, 1, 1,
            ],
            4,
        ),
    };
    let target = || target(slots);
    let t = || 0..3usize;
    // A holder's operations: mostly by whoever holds the key.
    let h = || prop_oneof![1 => 0..3usize, 2 => Just(HOLDER)];
    let w = || 0..2usize;
    let set = prop_oneof![3 => Just(false), 1 => Just(true)];
    let acquire = (
        target(),
        t(),
        ttl(),
        0..3u8,
        any::<bool>(),
        quarantine(),
        set,
    )
        .prop_map(|(at, t, ttl, windowed, fencing, q, set)| Op::Acquire {
            at,
            t,
            ttl,
            windowed,
            fencing,
            q,
            set,
        });
    let queued = (
        target(),
        t(),
        ttl(),
        w(),
        since(),
        any::<bool>(),
        quarantine(),
    )
        .prop_map(|(at, t, ttl, w, since, fencing, q)| Op::AcquireQueued {
            at,
            t,
            ttl,
            w,
            since,
            fencing,
            q,
        });
    let extend = (target(), h(), ttl()).prop_map(|(at, t, ttl)| Op::Extend { at, t, ttl });
    let release = (target(), h()).prop_map(|(at, t)| Op::Release { at, t });
    let window = prop_oneof![1 => Just(0u64), 2 => Just(200_000u64)];
    let busy = prop_oneof![Just(0u64), Just(5_000u64), Just(50_000u64)];
    let handover = (target(), h(), ttl(), window, any::<bool>(), busy).prop_map(
        |(at, t, grace, window_ms, due, busy_ms)| Op::Handover {
            at,
            t,
            grace,
            window_ms,
            due,
            busy_ms,
        },
    );
    let keep = (target(), h(), ttl()).prop_map(|(at, t, keep_ms)| Op::Keep { at, t, keep_ms });
    let from = prop_oneof![
        Just(Waiting::Queue),
        Just(Waiting::Mode),
        Just(Waiting::Permit)
    ];
    let leave = (res(), w(), from).prop_map(|(r, w, from)| Op::Leave { r, w, from });
    let keep_counter = prop_oneof![Just(0u64), ttl()];
    let fence =
        (res(), claim(), keep_counter).prop_map(|(r, claim, keep)| Op::Fence { r, claim, keep });
    let check = quarantine().prop_map(|q| Op::Quarantine { q });
    let acquire_mode = (
        (res(), t(), mode(), ttl(), w()),
        (since(), ttl(), any::<bool>(), quarantine()),
    )
        .prop_map(
            |((r, t, mode, ttl, w), (since, intent, fencing, q))| Op::AcquireMode {
                r,
                t,
                mode,
                ttl,
                w,
                since,
                intent,
                fencing,
                q,
            },
        );
    let extend_mode = (res(), h(), ttl()).prop_map(|(r, t, ttl)| Op::ExtendMode { r, t, ttl });
    let release_mode = (res(), h(), proptest::option::of(w()), any::<bool>())
        .prop_map(|(r, t, w, handover)| Op::ReleaseMode { r, t, w, handover });
    let acquire_permit = (
        (res(), t(), 2..=3usize, 0..3usize, ttl()),
        (quarantine(), proptest::option::of(w()), since(), ttl()),
    )
        .prop_map(
            |((r, t, k, rotate, ttl), (q, queued, since, alive_ms))| Op::AcquirePermit {
                r,
                t,
                k,
                rotate,
                ttl,
                q,
                queued,
                since,
                alive_ms,
            },
        );
    let release_slots = (res(), h(), 2..=3usize).prop_map(|(r, t, k)| Op::ReleaseSlots { r, t, k });
    let extend_permit = (res(), h(), 0..3usize, ttl(), 2..=3usize)
        .prop_map(|(r, t, slot, ttl, k)| Op::ExtendPermit { r, t, slot, ttl, k });
    let release_many = (h(), any::<bool>()).prop_map(|(t, wake)| Op::ReleaseMany { t, wake });
    let lapse = any::<usize>().prop_map(|pick| Op::Lapse { pick });
    let foreign = (res(), any::<bool>()).prop_map(|(r, hash)| Op::Foreign { r, hash });
    let owner =
        (res(), h(), 0..2usize, ttl(), any::<bool>()).prop_map(|(r, t, label, ttl, mode)| {
            Op::Owner {
                r,
                t,
                label,
                ttl,
                mode,
            }
        });
    let inspect = res().prop_map(|r| Op::Inspect { r });
    let label = proptest::option::of(0..LABELS.len());
    let set_nx =
        (target(), t(), ttl(), quarantine(), label).prop_map(|(at, t, ttl, q, label)| Op::SetNx {
            at,
            t,
            ttl,
            q,
            label,
        });
    let all = [
        acquire.boxed(),
        queued.boxed(),
        extend.boxed(),
        release.boxed(),
        handover.boxed(),
        keep.boxed(),
        leave.boxed(),
        fence.boxed(),
        check.boxed(),
        acquire_mode.boxed(),
        extend_mode.boxed(),
        release_mode.boxed(),
        acquire_permit.boxed(),
        release_slots.boxed(),
        extend_permit.boxed(),
        release_many.boxed(),
        lapse.boxed(),
        Just(Op::DataLoss).boxed(),
        foreign.boxed(),
        owner.boxed(),
        inspect.boxed(),
        set_nx.boxed(),
    ];
    let weighted = weights.into_iter().zip(all).filter(|(w, _)| *w > 0);
    Union::new_weighted(weighted.collect())
}

/// A case: 20 to 40 operations, with one focus.
fn case_ops() -> impl Strategy<Value = Vec<Op>> {
    let ops = |focus| proptest::collection::vec(op(focus), 20..=40);
    prop_oneof![
        ops(Focus::Mixed),
        ops(Focus::Plain),
        ops(Focus::Modes),
        ops(Focus::Permits),
    ]
}

/// A key's value, as both sides are read.
#[derive(Debug, Clone, PartialEq)]
enum Held {
    Str(String),
    Hash(BTreeMap<String, String>),
    ZSet(BTreeMap<String, i64>),
    Other(String),
}

/// A keyspace: each key's value and its expiry (ms of the clock; `None`: none).
type Keyspace = BTreeMap<String, (Held, Option<i64>)>;

/// The model's keyspace.
fn model_keys(node: &Node) -> Keyspace {
    node.store
        .entries()
        .map(|(key, entry)| {
            let held = match &entry.value {
                ModelValue::Str(s) => Held::Str(s.clone()),
                ModelValue::Hash(h) => Held::Hash(h.clone()),
                ModelValue::ZSet(z) => Held::ZSet(z.clone()),
            };
            let at = entry.expires_at.map(|at| i64::try_from(at).unwrap());
            (key.clone(), (held, at))
        })
        .collect()
}

/// Reads the server's whole keyspace (each key's expiry as `PEXPIRETIME`, not to depend on
/// when within the script `PTTL` would run), and its clock, in one script.
const DUMP: &str = r#"
local t = redis.call("time")
local out = {t[1], t[2]}
for _, k in ipairs(redis.call("keys", "*")) do
  local kind = redis.call("type", k).ok
  local v = {}
  if kind == "string" then v = {redis.call("get", k)}
  elseif kind == "hash" then v = redis.call("hgetall", k)
  elseif kind == "zset" then v = redis.call("zrange", k, 0, -1, "withscores")
  end
  out[#out + 1] = {k, kind, redis.call("pexpiretime", k), v}
end
return out
"#;

fn text(value: &Value) -> String {
    match value {
        Value::String(s) => s.to_string(),
        Value::Bytes(b) => String::from_utf8_lossy(b).into_owned(),
        Value::Integer(n) => n.to_string(),
        other => format!("{other:?}"),
    }
}

fn integer(value: &Value) -> i64 {
    match value {
        Value::Integer(n) => *n,
        other => text(other).parse().unwrap(),
    }
}

/// A server's reply as the model's [`Reply`]: `{"redlock:error", text}` is an error.
fn reply(value: &Value) -> Reply {
    match value {
        Value::Integer(n) => Reply::Int(*n),
        Value::Null => Reply::Nil,
        Value::Array(items) => {
            if let [first, error] = items.as_slice()
                && text(first) == "redlock:error"
            {
                return Reply::Error(text(error));
            }
            Reply::Array(items.iter().map(reply).collect())
        }
        other => Reply::Bulk(text(other)),
    }
}

/// An error's text without the position Lua prefixes a raised string with.
fn error_text(text: &str) -> &str {
    if let Some(rest) = text.strip_prefix("user_script:")
        && let Some((line, message)) = rest.split_once(": ")
        && line.bytes().all(|b| b.is_ascii_digit())
    {
        return message;
    }
    text
}

/// The server's clock when the keys were read, and how far apart values read from the
/// clock may be.
#[derive(Debug, Clone, Copy)]
struct Clock {
    now: i64,
    tolerance: i64,
}

/// Whether two integers are equal, or both clock-derived (near the clock) and within the
/// tolerance.
fn near(a: i64, b: i64, clock: Clock) -> bool {
    a == b
        || ((a - clock.now).abs() < CLOCK_NEAR_MS
            && (b - clock.now).abs() < CLOCK_NEAR_MS
            && (a - b).abs() <= clock.tolerance)
}

/// Two strings alike: equal, or equal but for clock-derived numbers between their spaces.
fn alike(a: &str, b: &str, clock: Clock) -> bool {
    if a == b {
        return true;
    }
    let (xs, ys): (Vec<&str>, Vec<&str>) = (a.split(' ').collect(), b.split(' ').collect());
    xs.len() == ys.len() && xs.iter().zip(&ys).all(|(x, y)| {
        x == y
            || matches!((x.parse::<i64>(), y.parse::<i64>()), (Ok(x), Ok(y)) if near(x, y, clock))
    })
}

/// The reply positions of `script` that are durations read from the clock.
fn durations(script: usize) -> &'static [usize] {
    match script {
        id::ACQUIRE | id::ACQUIRE_QUEUED => &[2, 3],
        id::ACQUIRE_MODE | id::ACQUIRE_PERMIT => &[3],
        _ => &[],
    }
}

/// Whether the replies agree (durations within the tolerance).
fn same_reply(script: usize, server: &Reply, model: &Reply, clock: Clock) -> bool {
    match (server, model) {
        (Reply::Array(xs), Reply::Array(ys)) => {
            xs.len() == ys.len()
                && xs.iter().zip(ys).enumerate().all(|(i, pair)| match pair {
                    (Reply::Int(x), Reply::Int(y)) if durations(script).contains(&i) => {
                        x == y || (*x >= 0 && *y >= 0 && (x - y).abs() <= clock.tolerance)
                    }
                    (x, y) => x == y,
                })
        }
        (Reply::Error(x), Reply::Error(y)) => error_text(x) == error_text(y),
        (x, y) => x == y,
    }
}

/// inspect.lua's text, as `Redlock::inspect` sends it.
fn inspect_source() -> &'static str {
    let scripts = sent_scripts();
    let inspect = scripts.iter().find(|s| s.name == "inspect").unwrap();
    inspect.source
}

/// Whether two replies of inspect.lua agree: the key's ttl and each entry's ms left within
/// the tolerance, and a hash's entries in any order (a server answers `HGETALL` in its own).
fn same_inspection(server: &Reply, model: &Reply, clock: Clock) -> bool {
    let ms = |x: &Reply, y: &Reply| match (x, y) {
        (Reply::Int(x), Reply::Int(y)) => {
            x == y || (*x >= 0 && *y >= 0 && (x - y).abs() <= clock.tolerance)
        }
        _ => false,
    };
    let (Reply::Array(xs), Reply::Array(ys)) = (server, model) else {
        return server == model;
    };
    if xs.len() != ys.len() || xs.len() < 5 {
        return false;
    }
    let head = xs[0] == ys[0] && ms(&xs[1], &ys[1]) && xs[2..5] == ys[2..5];
    let (xs, ys) = (&xs[5..], &ys[5..]);
    if xs.len() % 4 != 0 {
        // A string's holder digest.
        return head && xs == ys;
    }
    let sorted = |entries: &[Reply]| {
        let mut chunks: Vec<Vec<Reply>> = entries.chunks(4).map(<[Reply]>::to_vec).collect();
        chunks.sort_by(|a, b| (&a[0], &a[2], &a[3], &a[1]).cmp(&(&b[0], &b[2], &b[3], &b[1])));
        chunks
    };
    let (xs, ys) = (sorted(xs), sorted(ys));
    head && xs
        .iter()
        .zip(&ys)
        .all(|(x, y)| x[0] == y[0] && ms(&x[1], &y[1]) && x[2] == y[2] && x[3] == y[3])
}

/// Where two keyspaces differ, if they do.
fn keyspace_difference(server: &Keyspace, model: &Keyspace, clock: Clock) -> Option<String> {
    let server_keys: Vec<&String> = server.keys().collect();
    let model_keys: Vec<&String> = model.keys().collect();
    if server_keys != model_keys {
        return Some(format!(
            "the keys differ: server {server_keys:?}, model {model_keys:?}"
        ));
    }
    for (key, (held, at)) in server {
        let (model_held, model_at) = &model[key];
        let values = match (held, model_held) {
            (Held::Str(a), Held::Str(b)) => alike(a, b, clock),
            (Held::Hash(a), Held::Hash(b)) => {
                a.keys().eq(b.keys()) && a.iter().all(|(f, v)| alike(v, &b[f], clock))
            }
            (Held::ZSet(a), Held::ZSet(b)) => {
                a.keys().eq(b.keys()) && a.iter().all(|(m, s)| near(*s, b[m], clock))
            }
            _ => false,
        };
        if !values {
            return Some(format!("{key:?} holds another value"));
        }
        let expiry = match (at, model_at) {
            (None, None) => true,
            (Some(a), Some(b)) => (a - b).abs() <= clock.tolerance,
            _ => false,
        };
        if !expiry {
            return Some(format!("{key:?} expires at another time"));
        }
    }
    None
}

fn show_keys(keys: &Keyspace, now: i64) -> String {
    let mut out = String::new();
    for (key, (held, at)) in keys {
        let ttl = at.map_or("no ttl".to_owned(), |at| format!("ttl {} ms", at - now));
        let _ = writeln!(out, "    {key:?} ({ttl}): {held:?}");
    }
    if keys.is_empty() {
        out.push_str("    (none)\n");
    }
    out
}

/// One server and the connections to it, shared by every case.
struct Server {
    client: Client,
    messages: Mutex<Receiver<Message>>,
    sha1: String,
    /// Calls run so far: every other one runs as a call sent alone.
    calls: std::sync::atomic::AtomicUsize,
    run_id: String,
    /// `_server` keeps the process alive.
    _server: RedisServer,
    _subscriber: Client,
}

impl Server {
    async fn run(&self, command: &'static str, args: Vec<Value>) -> Result<Value, String> {
        let cmd = CustomCommand::new_static(command, ClusterHash::FirstKey, false);
        within(command, self.client.custom::<Value, Value>(cmd, args))
            .await
            .map_err(|e| format!("{command}: {e}"))
    }

    async fn must(&self, command: &'static str, args: Vec<Value>) -> Value {
        self.run(command, args)
            .await
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// The server's clock, ms (as the scripts' `node_now` reads it).
    async fn now(&self) -> u64 {
        let Value::Array(clock) = self.must("TIME", vec![]).await else {
            panic!("TIME")
        };
        let seconds: u64 = text(&clock[0]).parse().unwrap();
        let micros: u64 = text(&clock[1]).parse().unwrap();
        seconds * 1000 + micros / 1000
    }

    /// Runs `call` in one of the two layouts the lock sends a call in, taking turns: alone
    /// (`ARGV` opening with `=<id>`, as every call of a client in sequence goes), or alone in
    /// a batch.
    async fn call(&self, call: &Call) -> Reply {
        let n = self
            .calls
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if n % 2 == 1 {
            self.call_alone(call).await
        } else {
            self.call_batched(call).await
        }
    }

    /// Runs `call` through the dispatch script, alone: its reply as it is.
    async fn call_alone(&self, call: &Call) -> Reply {
        match self.run("EVALSHA", self.alone(call)).await {
            Ok(value) => reply(&value),
            other => panic!("the dispatch script answered {other:?}"),
        }
    }

    /// The `EVALSHA` arguments of `call` sent alone (`ARGV` opening with `=<id>`).
    fn alone(&self, call: &Call) -> Vec<Value> {
        let mut args: Vec<Value> =
            vec![self.sha1.clone().into(), call.keys.len().to_string().into()];
        args.extend(call.keys.iter().map(|k| Value::from(k.clone())));
        args.push(format!("={}", call.script).into());
        args.extend(call.args.iter().map(|a| Value::from(a.clone())));
        args
    }

    /// Runs `first` then `then` through the dispatch script, in one batch of two.
    async fn call_pair(&self, first: &Call, then: &Call) -> [Reply; 2] {
        let calls = [first, then];
        let keys: usize = calls.iter().map(|c| c.keys.len()).sum();
        let mut args: Vec<Value> = vec![self.sha1.clone().into(), keys.to_string().into()];
        for call in calls {
            args.extend(call.keys.iter().map(|k| Value::from(k.clone())));
        }
        args.push("2".into());
        for call in calls {
            args.push(head(call).into());
        }
        for call in calls {
            args.extend(call.args.iter().map(|a| Value::from(a.clone())));
        }
        match self.run("EVALSHA", args).await {
            Ok(Value::Array(replies)) if replies.len() == 2 => {
                [reply(&replies[0]), reply(&replies[1])]
            }
            other => panic!("the dispatch script answered {other:?}"),
        }
    }

    /// Runs `call` through the dispatch script, alone in its batch.
    async fn call_batched(&self, call: &Call) -> Reply {
        let mut args: Vec<Value> =
            vec![self.sha1.clone().into(), call.keys.len().to_string().into()];
        args.extend(call.keys.iter().map(|k| Value::from(k.clone())));
        args.extend(["1".into(), head(call).into()]);
        args.extend(call.args.iter().map(|a| Value::from(a.clone())));
        match self.run("EVALSHA", args).await {
            Ok(Value::Array(replies)) if replies.len() == 1 => reply(&replies[0]),
            other => panic!("the dispatch script answered {other:?}"),
        }
    }

    /// The keyspace and the clock it was read at.
    async fn keys(&self) -> (Keyspace, i64) {
        let Value::Array(out) = self.must("EVAL", vec![DUMP.into(), 0.into()]).await else {
            panic!("the dump script")
        };
        let now = integer(&out[0]) * 1000 + integer(&out[1]) / 1000;
        let mut keys = Keyspace::new();
        for entry in &out[2..] {
            let Value::Array(entry) = entry else {
                panic!("{entry:?}")
            };
            let (key, kind, at) = (text(&entry[0]), text(&entry[1]), integer(&entry[2]));
            let Value::Array(items) = &entry[3] else {
                panic!("{entry:?}")
            };
            let items: Vec<String> = items.iter().map(text).collect();
            let pairs = || items.chunks(2).map(|p| (p[0].clone(), p[1].clone()));
            let held = match kind.as_str() {
                "string" => Held::Str(items[0].clone()),
                "hash" => Held::Hash(pairs().collect()),
                "zset" => Held::ZSet(pairs().map(|(m, s)| (m, s.parse().unwrap())).collect()),
                other => Held::Other(other.to_owned()),
            };
            let at = (at >= 0).then_some(at);
            keys.insert(key, (held, at));
        }
        (keys, now)
    }

    /// The messages published since the last call of this.
    async fn published(&self, sync: u64) -> Vec<(String, String)> {
        self.must("PUBLISH", vec![SYNC.into(), sync.to_string().into()])
            .await;
        let mut messages = self.messages.lock().await;
        let mut out = Vec::new();
        loop {
            let message = within("a published message", messages.recv())
                .await
                .unwrap();
            let (channel, value) = (message.channel.to_string(), text(&message.value));
            if channel == SYNC {
                if value == sync.to_string() {
                    return out;
                }
                continue;
            }
            out.push((channel, value));
        }
    }
}

/// Runs `ops` on both sides; the trace of the first difference.
async fn case(server: &Server, ops: &[Op], sync: &mut u64) -> Result<(), String> {
    server.must("FLUSHALL", vec![]).await;
    *sync += 1;
    server.published(*sync).await;
    let mut node = Node::new(&server.run_id, server.now().await);
    let mut last = Keyspace::new();
    let mut done = Vec::new();
    // The most ms an operation spanned, from the clock read before it to the clock read right
    // after it (0 when both fell in one ms): every reading of the server's clock during the
    // operation fell between the two, the model's at the first, so clock-derived values may
    // be this far apart (more on a loaded machine).
    let mut slack = 0;
    let mut i = 0;
    while let Some(op) = ops.get(i) {
        let now = server.now().await;
        node.set_now(now);
        let call = op.call(&last);
        let mut what = describe(op, call.as_ref());
        // Some script calls share a batch with the next op's (as the calls of concurrent
        // lockers do), chosen by place so that a case shrinks and replays alike: both are made
        // from the keys before the first, run in order in one
        // dispatch script call on the server and one after the other in the model, and
        // compared after both.
        let paired = match ops.get(i + 1) {
            Some(next) if call.is_some() && is_script(op) && is_script(next) && i % 3 == 1 => {
                next.call(&last)
            }
            _ => None,
        };
        let mut second = None;
        let (server_reply, model_reply) = match op {
            Op::Lapse { pick } => {
                let lapsing: Vec<&String> = last
                    .iter()
                    .filter(|(_, (_, at))| at.is_some())
                    .map(|(k, _)| k)
                    .collect();
                match lapsing.get(pick % lapsing.len().max(1)) {
                    Some(key) => {
                        let _ = write!(what, ": {key:?}");
                        let deleted = server.must("DEL", vec![(*key).clone().into()]).await;
                        (
                            reply(&deleted),
                            Reply::Int(i64::from(node.store.delete(key))),
                        )
                    }
                    None => (Reply::Nil, Reply::Nil),
                }
            }
            Op::DataLoss => {
                server.must("FLUSHALL", vec![]).await;
                node.lose_data();
                (Reply::Nil, Reply::Nil)
            }
            Op::Foreign { r, hash: true } => {
                let key = lock(*r);
                let args = vec![key.clone().into(), "owner".into(), "app".into()];
                let server_reply = match server.run("HSET", args).await {
                    Ok(v) => {
                        server
                            .must("PEXPIRE", vec![key.clone().into(), "500000".into()])
                            .await;
                        reply(&v)
                    }
                    Err(e) => Reply::Error(e),
                };
                let model_reply = match node.store.hset(&key, "owner", "app") {
                    Ok(new) => {
                        node.store.pexpire(&key, 500_000);
                        Reply::Int(i64::from(new))
                    }
                    Err(_) => Reply::Error("WRONGTYPE".into()),
                };
                // Only whether it was refused is compared.
                let refused = |r: &Reply| matches!(r, Reply::Error(_));
                if refused(&server_reply) == refused(&model_reply) {
                    (model_reply.clone(), model_reply)
                } else {
                    (server_reply, model_reply)
                }
            }
            Op::Foreign { r, hash: false } => {
                let key = lock(*r);
                let args = vec![
                    key.clone().into(),
                    "theirs".into(),
                    "PX".into(),
                    "500000".into(),
                ];
                server.must("SET", args).await;
                node.store.set(&key, "theirs", Some(500_000));
                (Reply::Nil, Reply::Nil)
            }
            Op::Put { key, value } => {
                server.must("DEL", vec![key.clone().into()]).await;
                node.store.delete(key);
                match value {
                    Ok(string) => {
                        server
                            .must("SET", vec![key.clone().into(), string.clone().into()])
                            .await;
                        node.store.set(key, string, None);
                    }
                    Err(fields) => {
                        for (field, value) in fields {
                            let args = vec![
                                key.clone().into(),
                                field.clone().into(),
                                value.clone().into(),
                            ];
                            server.must("HSET", args).await;
                            node.store.hset(key, field, value).unwrap();
                        }
                    }
                }
                server
                    .must("PEXPIRE", vec![key.clone().into(), "500000".into()])
                    .await;
                node.store.pexpire(key, 500_000);
                (Reply::Nil, Reply::Nil)
            }
            Op::Inspect { r } => {
                let (key, queue) = (lock(*r), book(&lock(*r), "waiters"));
                let args = vec![
                    inspect_source().into(),
                    2.into(),
                    key.clone().into(),
                    queue.clone().into(),
                ];
                let server_reply = match server.run("EVAL", args).await {
                    Ok(value) => reply(&value),
                    Err(error) => Reply::Error(error),
                };
                (server_reply, node.inspect(&key, &queue))
            }
            _ => {
                let call = call.as_ref().unwrap();
                match &paired {
                    Some(next) => {
                        let [first, then] = server.call_pair(call, next).await;
                        let _ = write!(
                            what,
                            "\n  in the same batch: {}",
                            describe(&ops[i + 1], Some(next))
                        );
                        let model_first = node.run(call);
                        second = Some((next.script, then, node.run(next)));
                        (first, model_first)
                    }
                    None => (server.call(call).await, node.run(call)),
                }
            }
        };
        // The op ran on the server at some ms between `now` and this reading.
        let after = server.now().await;
        slack = slack.max(i64::try_from(after.saturating_sub(now)).unwrap_or(i64::MAX));
        *sync += 1;
        let server_published = server.published(*sync).await;
        let model_published = node.take_published();
        let (server_keys, server_now) = server.keys().await;
        let clock = Clock {
            now: server_now,
            tolerance: TOLERANCE_MS + slack,
        };
        let model_keys = model_keys(&node);
        let script = call.as_ref().map_or(usize::MAX, |c| c.script);
        let mut difference = Vec::new();
        let same = match op {
            Op::Inspect { .. } => same_inspection(&server_reply, &model_reply, clock),
            _ => same_reply(script, &server_reply, &model_reply, clock),
        };
        if !same {
            difference.push("the replies differ".to_owned());
        }
        if let Some((script, server_then, model_then)) = &second
            && !same_reply(*script, server_then, model_then, clock)
        {
            difference.push("the replies to the second call of the batch differ".to_owned());
        }
        if let Some(keys) = keyspace_difference(&server_keys, &model_keys, clock) {
            difference.push(keys);
        }
        if server_published != model_published {
            difference.push("the published messages differ".to_owned());
        }
        if !difference.is_empty() {
            let mut trace = format!(
                "model and scripts differ at op #{i} ({}):\n  {what}\n",
                difference.join("; ")
            );
            trace.push_str("ops before it:\n");
            for (j, done) in done.iter().enumerate() {
                let _ = writeln!(trace, "  #{j} {done}");
            }
            if let Some(call) = &call {
                let _ = writeln!(trace, "script id {}", call.script);
            }
            let _ = writeln!(
                trace,
                "(clock values compared within {} ms)",
                clock.tolerance
            );
            let _ = writeln!(trace, "server reply: {server_reply:?}");
            let _ = writeln!(trace, "model reply:  {model_reply:?}");
            if let Some((_, server_then, model_then)) = &second {
                let _ = writeln!(trace, "server reply to the second call: {server_then:?}");
                let _ = writeln!(trace, "model reply to the second call:  {model_then:?}");
            }
            let _ = writeln!(trace, "server published: {server_published:?}");
            let _ = writeln!(trace, "model published:  {model_published:?}");
            let _ = write!(
                trace,
                "server keys:\n{}",
                show_keys(&server_keys, server_now)
            );
            let _ = write!(
                trace,
                "model keys (model clock {}):\n{}",
                node.store.now(),
                show_keys(&model_keys, server_now)
            );
            return Err(trace);
        }
        last = server_keys;
        done.push(what);
        i += if second.is_some() { 2 } else { 1 };
    }
    Ok(())
}

/// Whether `op` runs one script call through the dispatch script (the others are plain
/// commands, or the inspect script sent on its own).
fn is_script(op: &Op) -> bool {
    !matches!(
        op,
        Op::Lapse { .. } | Op::DataLoss | Op::Foreign { .. } | Op::Put { .. } | Op::Inspect { .. }
    )
}

/// A runtime, and a server started on it with the dispatch script loaded.
fn start() -> (tokio::runtime::Runtime, Server) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let server = runtime.block_on(async {
        let process = RedisServer::start();
        let client = plain_client(&process.url()).await;
        let subscriber = plain_client(&process.url()).await;
        let messages = subscriber.message_rx();
        within("PSUBSCRIBE", subscriber.psubscribe("*"))
            .await
            .unwrap();
        let [dispatch, _] = sent_scripts();
        let sha1 = dispatch.sha1.unwrap().to_owned();
        let mut server = Server {
            client,
            messages: Mutex::new(messages),
            sha1,
            calls: std::sync::atomic::AtomicUsize::new(0),
            run_id: String::new(),
            _server: process,
            _subscriber: subscriber,
        };
        // Loaded by an EVAL of it (an empty batch), then run by its SHA-1 only.
        let empty = server
            .must("EVAL", vec![dispatch.source.into(), 0.into(), "0".into()])
            .await;
        assert_eq!(empty, Value::Array(vec![]));
        let exists = server
            .must("SCRIPT", vec!["EXISTS".into(), server.sha1.clone().into()])
            .await;
        assert_eq!(exists, Value::Array(vec![Value::Integer(1)]));
        let info = text(&server.must("INFO", vec!["server".into()]).await);
        let run_id = info
            .lines()
            .find_map(|l| l.strip_prefix("run_id:"))
            .unwrap()
            .trim()
            .to_owned();
        server.run_id = run_id;
        server
    });
    (runtime, server)
}

#[test]
fn the_model_runs_the_scripts_as_a_server_does() {
    let (runtime, server) = start();
    let cases = std::env::var("MODEL_DIFF_CASES")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(CASES);
    let config = Config {
        cases,
        max_shrink_iters: SHRINK_ITERS,
        failure_persistence: None,
        ..Config::default()
    };
    let mut runner = TestRunner::new(config);
    let sync = RefCell::new(0);
    let ops = case_ops();
    let result = runner.run(&ops, |ops| {
        let mut sync = sync.borrow_mut();
        runtime
            .block_on(case(&server, &ops, &mut sync))
            .map_err(TestCaseError::fail)
    });
    match result {
        Ok(()) => {}
        Err(TestError::Fail(why, _)) => panic!("{why}"),
        Err(e) => panic!("{e}"),
    }
}

/// A call as it is.
fn raw(script: usize, keys: &[String], args: &[&str]) -> Op {
    let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
    Op::Raw(Call::new(script, &keys, args))
}

/// `key` set to the string `value`.
fn put(key: &str, value: &str) -> Op {
    Op::Put {
        key: key.to_owned(),
        value: Ok(value.to_owned()),
    }
}

/// `key` set to a hash of `fields`.
fn put_hash(key: &str, fields: &[(&str, &str)]) -> Op {
    let fields = fields
        .iter()
        .map(|(f, v)| ((*f).to_owned(), (*v).to_owned()))
        .collect();
    Op::Put {
        key: key.to_owned(),
        value: Err(fields),
    }
}

/// What the random cases never write: values the scripts did not write themselves (an
/// unreadable fencing floor, a counter or a queue of another type, mode entries with leading
/// zeros, expired or of no mode, a holder's field in upper case, a non-numeric streak), and
/// arguments the client never sends (a nil rank, a ttl of 0, a window beyond 10^14 ms, an odd
/// number of keys to wake): each agrees too, errors included (their texts without the
/// position Lua prefixes a raised string with).
#[test]
fn odd_values_and_errors_agree() {
    let (runtime, server) = start();
    let r0 = Target { r: 0, slot: None };
    let (key, waiters) = (lock(0), book(&lock(0), "waiters"));
    // One plain attempt at a permit of a semaphore of `k` on resource 0, as holder `t`.
    let permit = |t: usize, k: usize| Op::AcquirePermit {
        r: 0,
        t,
        k,
        rotate: 0,
        ttl: 500_000,
        q: 0,
        queued: None,
        since: SINCE_BASE,
        alive_ms: 500_000,
    };
    let acquire = |t: usize, fencing: bool| Op::Acquire {
        at: r0,
        t,
        ttl: 500_000,
        windowed: 0,
        fencing,
        q: 0,
        set: false,
    };
    let queued = |t: usize, w: usize| Op::AcquireQueued {
        at: r0,
        t,
        ttl: 500_000,
        w,
        since: SINCE_BASE,
        fencing: false,
        q: 0,
    };
    let mode = |t: usize, mode: Mode, w: usize, since: &str| {
        let args = [
            TOKENS[t],
            mode.as_str(),
            "500000",
            MARKERS[w],
            "500000",
            &compatible(mode),
            since,
            "0",
        ]
        .map(str::to_owned);
        Op::Raw(Call {
            script: id::ACQUIRE_MODE,
            keys: vec![key.clone(), book(&key, "window"), key.clone(), key.clone()],
            args: args.to_vec(),
        })
    };
    let release_mode = |token: &str, handover: bool| {
        let (keys, channel) = if handover {
            (vec![key.clone(), waiters.clone()], waiters.as_str())
        } else {
            (vec![key.clone()], "")
        };
        raw(id::RELEASE_MODE, &keys, &[token, channel, ""])
    };
    let fence = |claim: &str| Op::Fence {
        r: 0,
        claim: claim.to_owned(),
        keep: 0,
    };
    let later = "PR 2000000000000";
    let upper = "A".repeat(40);
    let cases: Vec<(&str, Vec<Op>)> = vec![
        (
            "an unreadable fencing floor",
            vec![put(&prefixed("fencing-floor"), "garbage"), fence("5")],
        ),
        (
            "a fencing floor with leading zeros",
            vec![
                put(&prefixed("fencing-floor"), "007 0010"),
                acquire(0, true),
                fence("9"),
            ],
        ),
        (
            "a fencing counter of another type",
            vec![
                put_hash(&book(&key, "fencing"), &[("a", "b")]),
                acquire(0, true),
            ],
        ),
        (
            "a fencing counter that is not a number",
            vec![put(&book(&key, "fencing"), "abc"), fence("3")],
        ),
        (
            "a rank compared with a nil since",
            vec![
                mode(0, Mode::Exclusive, 0, "1600000000000"),
                mode(1, Mode::Exclusive, 0, "1600000000000"),
                mode(2, Mode::ProtectedRead, 1, ""),
            ],
        ),
        (
            "mode entries with leading zeros, expired, of no mode",
            vec![
                put_hash(
                    &key,
                    &[(TOKENS[0], "PR 0002000000000000"), (TOKENS[1], "PR 1")],
                ),
                mode(2, Mode::ProtectedRead, 0, "1600000000000"),
                put_hash(&key, &[(TOKENS[0], "XX 2000000000000")]),
                mode(2, Mode::ProtectedRead, 0, "1600000000000"),
            ],
        ),
        (
            "a holder's field in upper case",
            vec![
                put_hash(&key, &[(upper.as_str(), later)]),
                mode(0, Mode::ProtectedRead, 0, "1600000000000"),
                release_mode(&upper, true),
                raw(
                    id::EXTEND_MODE,
                    std::slice::from_ref(&key),
                    &[&upper, "600000"],
                ),
            ],
        ),
        (
            "a release beside an expired entry, and beside a foreign field",
            vec![
                put_hash(&key, &[(TOKENS[0], "PR 1"), (TOKENS[1], later)]),
                release_mode(TOKENS[0], true),
                put_hash(&key, &[(TOKENS[0], later), ("owner", "app")]),
                release_mode(TOKENS[0], true),
            ],
        ),
        (
            "a waiter's field extended as a holder's",
            vec![
                mode(0, Mode::Exclusive, 0, "1600000000000"),
                mode(1, Mode::Exclusive, 1, "1600000000001"),
                raw(
                    id::EXTEND_MODE,
                    std::slice::from_ref(&key),
                    &[MARKERS[1], "600000"],
                ),
            ],
        ),
        (
            "a queue of another type",
            vec![
                put(&waiters, "x"),
                acquire(0, false),
                queued(1, 0),
                Op::Handover {
                    at: r0,
                    t: 0,
                    grace: 500_000,
                    window_ms: 200_000,
                    due: true,
                    busy_ms: 0,
                },
            ],
        ),
        (
            "a streak that is not a number",
            vec![
                put(&book(&key, "busy"), "abc"),
                acquire(0, false),
                queued(1, 0),
                Op::Handover {
                    at: r0,
                    t: 0,
                    grace: 500_000,
                    window_ms: 200_000,
                    due: false,
                    busy_ms: 5_000,
                },
                queued(1, 0),
            ],
        ),
        (
            "a permit's slot of another type",
            vec![
                put_hash(&book(&key, "permit:0"), &[("a", "b")]),
                permit(0, 2),
            ],
        ),
        (
            "a permit asked with another number of permits, then with the stored one",
            vec![permit(0, 2), permit(1, 3), permit(1, 2)],
        ),
        (
            "a semaphore's capacity key of another type",
            vec![
                put_hash(&book(&key, "permit-capacity"), &[("a", "b")]),
                permit(0, 2),
            ],
        ),
        (
            "a permit's extension keeps its number of permits, gone or its own, not another's",
            vec![
                permit(0, 2),
                Op::ExtendPermit {
                    r: 0,
                    t: 0,
                    slot: 0,
                    ttl: 900_000,
                    k: 2,
                },
                Op::Lapse { pick: 0 },
                Op::ExtendPermit {
                    r: 0,
                    t: 0,
                    slot: 0,
                    ttl: 900_000,
                    k: 2,
                },
                put(&book(&key, "permit-capacity"), "3"),
                Op::ExtendPermit {
                    r: 0,
                    t: 0,
                    slot: 0,
                    ttl: 900_000,
                    k: 2,
                },
                Op::ExtendPermit {
                    r: 0,
                    t: 1,
                    slot: 0,
                    ttl: 900_000,
                    k: 2,
                },
            ],
        ),
        (
            "owner labels and the inspect read on stale, waiting and foreign entries",
            {
                let label_key = |token: &str| {
                    book(
                        &key,
                        &format!("owner:{}", &fred::util::sha1_hash(token)[..16]),
                    )
                };
                let owner = |token: &str, ttl: &str, mode: &str| {
                    raw(
                        id::OWNER,
                        &[key.clone(), label_key(token)],
                        &[token, "host-a/1/app", ttl, mode],
                    )
                };
                vec![
                    put_hash(
                        &key,
                        &[
                            (TOKENS[0], later),
                            (TOKENS[1], "PR 1"),
                            (MARKERS[0], "EX 2000000000000 1600000000000"),
                            (MARKERS[1], "EX 1 1600000000000"),
                        ],
                    ),
                    Op::Inspect { r: 0 },
                    owner(TOKENS[0], "500000", "1"),
                    owner(TOKENS[1], "500000", "1"),
                    owner(MARKERS[0], "500000", "1"),
                    owner(TOKENS[0], "500000", "0"),
                    Op::Inspect { r: 0 },
                    put_hash(&label_key(TOKENS[0]), &[("a", "b")]),
                    Op::Inspect { r: 0 },
                    put(&lock(1), TOKENS[2]),
                    raw(
                        id::OWNER,
                        &[lock(1), book(&lock(1), "owner:0")],
                        &[TOKENS[2], "x", "0", "0"],
                    ),
                    put(&lock(1), MARKERS[0]),
                    Op::Inspect { r: 1 },
                    put_hash(&lock(1), &[("owner", "app")]),
                    Op::Inspect { r: 1 },
                ]
            },
        ),
        (
            "a number of keys to wake that is not a multiple of three",
            vec![
                acquire(0, false),
                raw(
                    id::RELEASE_SLOTS,
                    &[key.clone(), lock(1), waiters.clone(), book(&key, "listen")],
                    &[TOKENS[0]],
                ),
            ],
        ),
        (
            "a ttl of 0",
            vec![raw(
                id::ACQUIRE,
                &[
                    key.clone(),
                    book(&key, "window"),
                    book(&key, "busy"),
                    key.clone(),
                    key.clone(),
                ],
                &[TOKENS[0], "0", "0", "0"],
            )],
        ),
        (
            "a window beyond 10^14 ms",
            vec![
                acquire(0, false),
                queued(1, 0),
                raw(
                    id::RELEASE_HANDOVER,
                    &[
                        key.clone(),
                        waiters.clone(),
                        book(&key, "busy"),
                        book(&key, "window"),
                    ],
                    &[
                        TOKENS[0],
                        "500000",
                        &waiters,
                        "100000000000001",
                        "1",
                        "0",
                        "600000",
                    ],
                ),
            ],
        ),
        (
            "a witness that is not one",
            vec![
                put(&prefixed("witness"), "not a witness"),
                Op::Quarantine { q: 300_000 },
            ],
        ),
    ];
    let mut sync = 0;
    let mut failures = Vec::new();
    for (name, ops) in &cases {
        if let Err(trace) = runtime.block_on(case(&server, ops, &mut sync)) {
            failures.push(format!("{name}: {trace}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Writes keys relative to the server's clock in one script call and returns that clock's
/// ms: for each key, its kind (`hash`: a field set to `prefix .. now + offset .. suffix`;
/// `zset`: a member scored `now + offset`; `zabs`: scored `offset`), its field or member,
/// prefix, offset and suffix (5 arguments per key); each key then lives 500 s.
const AT_NOW: &str = r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
for i = 1, #KEYS do
  local kind, member, prefix = ARGV[5 * i - 4], ARGV[5 * i - 3], ARGV[5 * i - 2]
  local at, suffix = now + tonumber(ARGV[5 * i - 1]), ARGV[5 * i]
  if kind == 'zabs' then
    at = tonumber(ARGV[5 * i - 1])
  end
  if kind == 'hash' then
    redis.call('HSET', KEYS[i], member, prefix .. at .. suffix)
  else
    redis.call('ZADD', KEYS[i], at, member)
  end
  redis.call('PEXPIRE', KEYS[i], 500000)
end
return now
";

/// One key written relative to the clock by [`AT_NOW`].
struct AtNow {
    key: String,
    /// `hash`, `zset` or `zabs`.
    kind: &'static str,
    member: String,
    prefix: &'static str,
    offset: i64,
    suffix: String,
}

/// Writes `setup` at the server's current ms (and the same at that ms in a fresh model),
/// then runs `op` on both. Only a run in which the server's clock read the same ms before
/// and after the operation counts (the model's clock is then the server's: no tolerance
/// hides an off-by-one at the boundary); up to 200 runs are tried. Returns the
/// server's reply, after checking that it, the keyspace and the messages agree.
async fn at_boundary(server: &Server, sync: &mut u64, setup: &[AtNow], op: &Op) -> Reply {
    let call = op.call(&Keyspace::new()).unwrap();
    for _ in 0..200 {
        server.must("FLUSHALL", vec![]).await;
        *sync += 1;
        server.published(*sync).await;
        let mut args: Vec<Value> = vec![AT_NOW.into(), setup.len().to_string().into()];
        args.extend(setup.iter().map(|s| s.key.clone().into()));
        for s in setup {
            args.extend([
                s.kind.into(),
                s.member.clone().into(),
                s.prefix.into(),
                s.offset.to_string().into(),
                s.suffix.clone().into(),
            ]);
        }
        // The set-up, the operation and a clock reading in one pipeline: the server runs them
        // back to back, so most runs fall within one ms.
        let pipeline = server.client.pipeline();
        let command = |name| CustomCommand::new_static(name, ClusterHash::FirstKey, false);
        let sent: [(&'static str, Vec<Value>); 3] = [
            ("EVAL", args),
            ("EVALSHA", server.alone(&call)),
            ("TIME", Vec::new()),
        ];
        for (name, args) in sent {
            let () = pipeline.custom(command(name), args).await.unwrap();
        }
        let replies: Vec<Value> = within("the boundary pipeline", pipeline.all())
            .await
            .unwrap();
        let now = integer(&replies[0]);
        let server_reply = reply(&replies[1]);
        let Value::Array(clock) = &replies[2] else {
            panic!("TIME answered {:?}", replies[2])
        };
        let seconds: i64 = text(&clock[0]).parse().unwrap();
        let micros: i64 = text(&clock[1]).parse().unwrap();
        if seconds * 1000 + micros / 1000 != now {
            continue;
        }
        let mut node = Node::new(&server.run_id, u64::try_from(now).unwrap());
        for s in setup {
            let at = if s.kind == "zabs" {
                s.offset
            } else {
                now + s.offset
            };
            if s.kind == "hash" {
                let value = format!("{}{at}{}", s.prefix, s.suffix);
                node.store.hset(&s.key, &s.member, &value).unwrap();
            } else {
                node.store.zadd(&s.key, at, &s.member).unwrap();
            }
            node.store.pexpire(&s.key, 500_000);
        }
        let model_reply = node.run(&call);
        *sync += 1;
        let server_published = server.published(*sync).await;
        let model_published = node.take_published();
        let (server_keys, server_now) = server.keys().await;
        let clock = Clock {
            now: server_now,
            tolerance: TOLERANCE_MS,
        };
        let what = describe(op, Some(&call));
        assert!(
            same_reply(call.script, &server_reply, &model_reply, clock),
            "{what}: server {server_reply:?}, model {model_reply:?}"
        );
        let difference = keyspace_difference(&server_keys, &model_keys(&node), clock);
        assert!(difference.is_none(), "{what}: {difference:?}");
        assert_eq!(server_published, model_published, "{what}");
        return server_reply;
    }
    panic!("no run of the operation fell within one ms of the server's clock");
}

/// The keys a boundary case writes, for an offset from the clock's ms.
type Setup<'a> = Box<dyn Fn(i64) -> Vec<AtNow> + 'a>;

/// Values that expire at the very ms a script reads the clock: a mode holder's entry, a
/// mode waiter's, and a permit waiter's liveness. Each is run one ms before its expiry, at
/// it and one ms after it, and the server and the model must agree (the outcome exactly,
/// the ms left within 1 ms). A mirror that counted an entry live at its expiry (`<` for
/// `<=`) fails it; the attempt must be granted when the entry expires at or before the
/// script's ms and refused when it expires one ms later, so each case reaches the boundary
/// it is for.
#[test]
fn values_expiring_at_the_ms_a_script_runs_agree() {
    let (runtime, server) = start();
    let mut sync = 0;
    let key = lock(0);
    let rival = TOKENS[1].to_owned();
    let exclusive = Op::AcquireMode {
        r: 0,
        t: 0,
        mode: Mode::Exclusive,
        ttl: 500_000,
        w: 0,
        since: SINCE_BASE,
        intent: 500_000,
        fencing: false,
        q: 0,
    };
    let permit = Op::AcquirePermit {
        r: 0,
        t: 0,
        k: 1,
        rotate: 0,
        ttl: 500_000,
        q: 0,
        queued: Some(0),
        since: SINCE_BASE,
        alive_ms: 500_000,
    };
    let cases: Vec<(&str, Setup<'_>, &Op)> = vec![
        (
            "a mode holder's entry",
            Box::new(|offset| {
                vec![AtNow {
                    key: key.clone(),
                    kind: "hash",
                    member: rival.clone(),
                    prefix: "PW ",
                    offset,
                    suffix: String::new(),
                }]
            }),
            &exclusive,
        ),
        (
            "a mode waiter's entry, ranked ahead",
            Box::new(|offset| {
                vec![AtNow {
                    key: key.clone(),
                    kind: "hash",
                    member: MARKERS[1].to_owned(),
                    prefix: "PW ",
                    offset,
                    suffix: format!(" {}", SINCE_BASE - 1),
                }]
            }),
            &exclusive,
        ),
        (
            "a permit waiter's liveness, queued ahead",
            Box::new(|offset| {
                let queue = book(&key, "permit-waiters");
                vec![
                    AtNow {
                        key: queue,
                        kind: "zabs",
                        member: MARKERS[1].to_owned(),
                        prefix: "",
                        offset: SINCE_BASE - 1,
                        suffix: String::new(),
                    },
                    AtNow {
                        key: book(&key, "permit-alive"),
                        kind: "zset",
                        member: MARKERS[1].to_owned(),
                        prefix: "",
                        offset,
                        suffix: String::new(),
                    },
                ]
            }),
            &permit,
        ),
    ];
    runtime.block_on(async {
        for (name, setup, op) in &cases {
            let replies: Vec<Reply> = {
                let mut replies = Vec::new();
                for offset in [-1, 0, 1] {
                    replies.push(at_boundary(&server, &mut sync, &setup(offset), op).await);
                }
                replies
            };
            // Expired at its ms (and before): granted; live one ms later: refused.
            let granted: Vec<Option<i64>> = replies.iter().map(|r| r.int_at(0)).collect();
            assert_eq!(granted, [Some(1), Some(1), Some(0)], "{name}: {replies:?}");
        }
    });
}

/// `call`'s head in a batch (its script, keys and arguments in one number, as the lock sends
/// it).
fn head(call: &Call) -> i64 {
    redlock_core::__private::batch_head(call.script, call.keys.len(), call.args.len()).unwrap()
}
