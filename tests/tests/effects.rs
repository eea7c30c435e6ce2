//! Every script's [`Effect`], held on a real server: the structural rule that the textual
//! check in `redlock-core/src/node/scripts.rs` (`Effect::check`) reads from the scripts' text,
//! here run through the dispatch script the lock sends (by the SHA-1 the code sends it by).
//!
//! - A script that deletes, converts, extends or swaps a holder's entry (Compares, Swaps),
//!   called with another token than the holder's (for force_release.lua, digests that do not
//!   include the holder's), leaves the whole keyspace as it was, byte for byte (`DUMP` and
//!   `PEXPIRETIME` of every key), and answers "not held" as its header says; called with the
//!   holder's token, it changes the keyspace (the positive control).
//! - A script that can grant a lock (Grants, Swaps), on a node in quarantine (its data witness
//!   written by another server's `run_id`, then its quarantine marker), answers -1 and leaves
//!   every key but the quarantine's own as it was; the same call on the node out of quarantine
//!   grants (the positive control).
//! - A script that touches no holder (Neither) leaves the holders' keys as they were.
//!
//! The scripts are not listed by the lock's public API, so the test keeps its own table of id,
//! file, effect and call layout ([`TABLE`]) and holds it to what the code builds: the ids are
//! exactly those the dispatch script knows (`if id == <n>` in its text, and id n answers the
//! error marker), each id's body is its file's text, and each effect is the one redlock-core
//! declares for it (each script's `Script::new` is beside the code that sends it).

#![allow(clippy::unwrap_used)] // tests unwrap: a failure is the assertion

use std::collections::{BTreeMap, BTreeSet};

use fred::clients::Client;
use fred::interfaces::ClientLike;
use fred::types::{ClusterHash, CustomCommand, Value};
use redlock_core::__private::sent_scripts;
use redlock_core::Mode;
use redlock_tests::{RedisServer, plain_client, within};

/// The holder's token (40 lowercase hex digits, as a mode entry's field must be).
const T: &str = "0123456789abcdef0123456789abcdef01234567";
/// Another holder's token: the one the scripts are given when they must refuse.
const U: &str = "a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0";
/// The token a resumption swaps in.
const V: &str = "fedcba9876543210fedcba9876543210fedcba98";

/// The lock key, and a second one (the second resource of a set, the second slot of a
/// semaphore).
const KEY: &str = "fx:r";
const KEY2: &str = "fx:s";
/// Bookkeeping keys.
const QUEUE: &str = "fx:r:waiters";
const WINDOW: &str = "fx:r:window";
const BUSY: &str = "fx:r:busy";
const LISTEN: &str = "fx:r:listen";
const OWNER: &str = "fx:r:owner";
const PERMIT_QUEUE: &str = "fx:r:permit-waiters";
const PERMIT_ALIVE: &str = "fx:r:permit-alive";
const PERMIT_CAPACITY: &str = "fx:r:permit-capacity";
const PERMIT_LISTEN: &str = "fx:r:permit-listen";
const WITNESS: &str = "fx:witness";
const QUARANTINE_MARKER: &str = "fx:quarantine";

/// A waiter's marker, queued in [`QUEUE`] by every setup.
const MARKER: &str = "~00000000000000a1";
/// A wait start, far from the clock.
const SINCE: &str = "1600000000000";
/// The holder's ttl, and the longer one an extension asks for.
const TTL_MS: i64 = 10_000;
const LONGER_MS: &str = "60000";
/// The quarantine, when on.
const QUARANTINE_MS: u64 = 300_000;

/// What a script may do to a holder's entry, as scripts.rs declares it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Effect {
    Grants,
    Compares,
    Swaps,
    Neither,
}

/// The state a call is made on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// No lock key exists.
    Free,
    /// [`KEY`] and [`KEY2`] are plain holders' strings of [`T`].
    Plain,
    /// [`KEY`] is a hash holding [`T`]'s entry in EX; [`KEY2`] a plain holder's string of it.
    Mode,
    /// [`KEY`] is reserved for the waiter [`MARKER`] (a hand-over's reservation: the string of
    /// its marker), [`KEY2`] held by [`U`]: a grant takes the reservation.
    Reserved,
}

/// One call of a script: what the dispatch script is sent for it.
#[derive(Debug)]
struct Call {
    id: usize,
    keys: Vec<String>,
    args: Vec<String>,
}

/// A script as this test knows it: its id, its file, its effect, and its call layout.
struct Script {
    id: usize,
    file: &'static str,
    source: &'static str,
    effect: Effect,
    /// The call by `token` (the one a holder's script compares, or the one a grant grants) on
    /// `state`, with a quarantine of `q` ms (0: off).
    call: fn(State, &str, u64) -> Call,
    /// The states its call with the holder's token writes (Compares, Swaps: the positive
    /// control), or the states its grant is tried on (Grants: a free key, and a reservation
    /// for the scripts that take one).
    writes: &'static [State],
    /// What it answers when the holder is not the one it was given (Compares, Swaps): an
    /// integer, or an array of integers.
    not_held: &'static [i64],
}

fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| (*s).to_owned()).collect()
}

/// The quarantine's keys, or the lock key for both when it is off (as the client passes them).
fn quarantine_keys(q: u64) -> Vec<String> {
    if q == 0 {
        strings(&[KEY, KEY])
    } else {
        strings(&[WITNESS, QUARANTINE_MARKER])
    }
}

fn mode_flag(state: State) -> String {
    if state == State::Mode { "1" } else { "0" }.to_owned()
}

fn sha1(text: &str) -> String {
    fred::util::sha1_hash(text)
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

macro_rules! lua {
    ($file:literal) => {
        include_str!(concat!("../../redlock-core/src/", $file))
    };
}

/// Every script of the dispatch script, by id, with the layout of its `KEYS` and `ARGV` from
/// its header (and `tests/tests/model_scripts.rs` for the ids it covers).
const TABLE: &[Script] = &[
    Script {
        id: 0,
        file: "release.lua",
        source: lua!("kernel/scripts/release.lua"),
        effect: Effect::Compares,
        call: |_, token, _| Call {
            id: 0,
            keys: strings(&[KEY]),
            args: strings(&[token]),
        },
        writes: &[State::Plain],
        not_held: &[0],
    },
    Script {
        id: 1,
        file: "release_handover.lua",
        source: lua!("kernel/scripts/release_handover.lua"),
        effect: Effect::Compares,
        call: |_, token, _| Call {
            id: 1,
            keys: strings(&[KEY, QUEUE, BUSY, WINDOW, LISTEN]),
            // grace_ms, channel, window_ms, window_due, busy_ms, queue_ttl_ms
            args: strings(&[token, "10000", QUEUE, "0", "0", "0", "600000"]),
        },
        writes: &[State::Plain],
        not_held: &[0],
    },
    Script {
        id: 2,
        file: "extend.lua",
        source: lua!("kernel/scripts/extend.lua"),
        effect: Effect::Compares,
        call: |_, token, _| Call {
            id: 2,
            keys: strings(&[KEY]),
            args: strings(&[token, LONGER_MS]),
        },
        writes: &[State::Plain],
        not_held: &[0],
    },
    Script {
        id: 3,
        file: "acquire.lua",
        source: lua!("kernel/scripts/acquire.lua"),
        effect: Effect::Grants,
        call: |_, token, q| {
            let mut keys = strings(&[KEY, WINDOW, BUSY]);
            keys.extend(quarantine_keys(q));
            // ttl_ms, quarantine_ms, windowed
            let args = vec![
                token.to_owned(),
                TTL_MS.to_string(),
                q.to_string(),
                "0".into(),
            ];
            Call { id: 3, keys, args }
        },
        writes: &[State::Free],
        not_held: &[],
    },
    Script {
        id: 4,
        file: "acquire_queued.lua",
        source: lua!("kernel/scripts/acquire_queued.lua"),
        effect: Effect::Grants,
        call: |_, token, q| {
            let mut keys = strings(&[KEY, QUEUE, WINDOW, BUSY]);
            keys.extend(quarantine_keys(q));
            keys.push(LISTEN.into());
            // ttl_ms, marker, score, queue_ttl_ms, quarantine_ms
            let args = vec![
                token.to_owned(),
                TTL_MS.to_string(),
                MARKER.into(),
                SINCE.into(),
                "600000".into(),
                q.to_string(),
            ];
            Call { id: 4, keys, args }
        },
        writes: &[State::Free, State::Reserved],
        not_held: &[],
    },
    Script {
        id: 5,
        file: "fence.lua",
        source: lua!("kernel/scripts/fence.lua"),
        effect: Effect::Neither,
        call: |_, _, _| Call {
            id: 5,
            keys: strings(&["fx:r:fencing", "fx:fencing-floor", "fx:fencing-window"]),
            // claim, keep_ms
            args: strings(&["7", "600000"]),
        },
        writes: &[],
        not_held: &[],
    },
    Script {
        id: 6,
        file: "acquire_mode.lua",
        source: lua!("kernel/scripts/acquire_mode.lua"),
        effect: Effect::Grants,
        call: |_, token, q| {
            let mut keys = strings(&[KEY, WINDOW]);
            keys.extend(quarantine_keys(q));
            keys.push(LISTEN.into());
            // mode, ttl_ms, marker, intent_ttl_ms, compatible, since, quarantine_ms
            let args = vec![
                token.to_owned(),
                "EX".into(),
                TTL_MS.to_string(),
                "~00000000000000b2".into(),
                TTL_MS.to_string(),
                compatible(Mode::Exclusive),
                SINCE.into(),
                q.to_string(),
            ];
            Call { id: 6, keys, args }
        },
        writes: &[State::Free],
        not_held: &[],
    },
    Script {
        id: 7,
        file: "extend_mode.lua",
        source: lua!("kernel/scripts/extend_mode.lua"),
        effect: Effect::Compares,
        call: |_, token, _| Call {
            id: 7,
            keys: strings(&[KEY]),
            args: strings(&[token, LONGER_MS]),
        },
        writes: &[State::Mode],
        not_held: &[0],
    },
    Script {
        id: 8,
        file: "release_mode.lua",
        source: lua!("kernel/scripts/release_mode.lua"),
        effect: Effect::Compares,
        call: |_, token, _| Call {
            id: 8,
            keys: strings(&[KEY, QUEUE]),
            // channel, marker (none: the waiter's own entry is not a holder's)
            args: strings(&[token, QUEUE, ""]),
        },
        writes: &[State::Mode],
        not_held: &[0],
    },
    Script {
        id: 9,
        file: "leave.lua",
        source: lua!("kernel/scripts/leave.lua"),
        effect: Effect::Neither,
        call: |state, _, _| match state {
            // The waiter's entry in the holders' hash, or its place in the queue.
            State::Mode => Call {
                id: 9,
                keys: strings(&[KEY]),
                args: strings(&["~00000000000000b2", "1"]),
            },
            _ => Call {
                id: 9,
                keys: strings(&[QUEUE, PERMIT_ALIVE]),
                args: strings(&[MARKER, "0"]),
            },
        },
        writes: &[],
        not_held: &[],
    },
    Script {
        id: 10,
        file: "keep.lua",
        source: lua!("kernel/scripts/keep.lua"),
        effect: Effect::Compares,
        call: |_, token, _| {
            // kept: "redlock:kept:" and 16 hex digits of the token's SHA-1.
            let kept = format!("redlock:kept:{}", &sha1(token)[..16]);
            let args = vec![token.to_owned(), LONGER_MS.into(), kept];
            Call {
                id: 10,
                keys: strings(&[KEY]),
                args,
            }
        },
        writes: &[State::Plain],
        not_held: &[0],
    },
    Script {
        id: 11,
        file: "noop.lua",
        source: lua!("node/scripts/noop.lua"),
        effect: Effect::Neither,
        call: |_, _, _| Call {
            id: 11,
            keys: vec![],
            args: vec![],
        },
        writes: &[],
        not_held: &[],
    },
    Script {
        id: 12,
        file: "quarantine.lua",
        source: lua!("kernel/scripts/quarantine.lua"),
        effect: Effect::Neither,
        call: |_, _, _| Call {
            id: 12,
            keys: quarantine_keys(QUARANTINE_MS),
            args: vec![QUARANTINE_MS.to_string()],
        },
        writes: &[],
        not_held: &[],
    },
    Script {
        id: 13,
        file: "acquire_permit.lua",
        source: lua!("semaphore/acquire_permit.lua"),
        effect: Effect::Grants,
        call: |state, token, q| {
            let mut keys = quarantine_keys(q);
            // queue, alive, listen flag, capacity, then the slots: the two lock keys.
            keys.extend(strings(&[
                PERMIT_QUEUE,
                PERMIT_ALIVE,
                PERMIT_LISTEN,
                PERMIT_CAPACITY,
                KEY,
                KEY2,
            ]));
            // ttl_ms, quarantine_ms, marker (the waiter's for a reserved slot, else none yet),
            // score, queue_ttl_ms, alive_ms, permits
            let marker = if state == State::Reserved { MARKER } else { "" };
            let args = vec![
                token.to_owned(),
                TTL_MS.to_string(),
                q.to_string(),
                marker.into(),
                SINCE.into(),
                "600000".into(),
                "600000".into(),
                "2".into(),
            ];
            Call { id: 13, keys, args }
        },
        writes: &[State::Free, State::Reserved],
        not_held: &[],
    },
    Script {
        id: 14,
        file: "release_slots.lua",
        source: lua!("kernel/scripts/release_slots.lua"),
        effect: Effect::Compares,
        call: |_, token, _| Call {
            id: 14,
            keys: strings(&[KEY, KEY2, QUEUE, "fx:s:waiters", LISTEN, "fx:s:listen"]),
            args: strings(&[token]),
        },
        writes: &[State::Plain],
        not_held: &[0],
    },
    Script {
        id: 15,
        file: "resume.lua",
        source: lua!("detach/resume.lua"),
        effect: Effect::Swaps,
        call: |state, token, q| {
            let mut keys = strings(&[KEY]);
            keys.extend(quarantine_keys(q));
            // next, mode, quarantine_ms (and no cap_ms: the 5th is optional)
            let args = vec![token.to_owned(), V.into(), mode_flag(state), q.to_string()];
            Call { id: 15, keys, args }
        },
        writes: &[State::Plain, State::Mode],
        not_held: &[0, 0],
    },
    Script {
        id: 16,
        file: "downgrade.lua",
        source: lua!("kernel/scripts/downgrade.lua"),
        effect: Effect::Compares,
        call: |_, token, _| Call {
            id: 16,
            keys: strings(&[KEY]),
            // mode, channel, marker
            args: strings(&[token, "PR", QUEUE, ""]),
        },
        writes: &[State::Mode],
        not_held: &[0],
    },
    Script {
        id: 17,
        file: "force_release.lua",
        source: lua!("admin/force_release.lua"),
        effect: Effect::Compares,
        call: |_, token, _| Call {
            id: 17,
            keys: strings(&[KEY]),
            // channel, then the digests named: the token's, and one no holder has.
            args: vec![QUEUE.into(), sha1(token), sha1(V)],
        },
        writes: &[State::Plain, State::Mode],
        not_held: &[0],
    },
    Script {
        id: 18,
        file: "owner.lua",
        source: lua!("kernel/scripts/owner.lua"),
        effect: Effect::Compares,
        call: |state, token, _| Call {
            id: 18,
            keys: strings(&[KEY, OWNER]),
            // label, ttl_ms, mode
            args: vec![
                token.to_owned(),
                "host 1 app".into(),
                TTL_MS.to_string(),
                mode_flag(state),
            ],
        },
        writes: &[State::Plain, State::Mode],
        not_held: &[0],
    },
    Script {
        id: 19,
        file: "force_read.lua",
        source: lua!("admin/force_read.lua"),
        effect: Effect::Neither,
        call: |_, _, _| Call {
            id: 19,
            keys: strings(&[KEY]),
            args: vec![],
        },
        writes: &[],
        not_held: &[],
    },
    Script {
        id: 20,
        file: "extend_permit.lua",
        source: lua!("kernel/scripts/extend_permit.lua"),
        effect: Effect::Compares,
        call: |_, token, _| Call {
            id: 20,
            // the slot (a plain lock), the semaphore's stored number of permits
            keys: strings(&[KEY, "fx:s:permit-capacity"]),
            args: strings(&[token, LONGER_MS, "2"]),
        },
        writes: &[State::Plain],
        not_held: &[0],
    },
    Script {
        id: 21,
        file: "set_nx.lua",
        source: lua!("node/scripts/set_nx.lua"),
        effect: Effect::Grants,
        call: |_, token, q| {
            let mut keys = strings(&[KEY]);
            keys.extend(quarantine_keys(q));
            // ttl_ms, quarantine_ms
            let args = vec![token.to_owned(), TTL_MS.to_string(), q.to_string()];
            Call { id: 21, keys, args }
        },
        writes: &[State::Free],
        not_held: &[],
    },
];

/// The scripts with `effect` among `effects`.
fn with(effects: &[Effect]) -> impl Iterator<Item = &'static Script> {
    TABLE.iter().filter(move |s| effects.contains(&s.effect))
}

/// A keyspace, byte for byte: each key's `DUMP` and `PEXPIRETIME`.
type Keyspace = BTreeMap<String, (Vec<u8>, i64)>;

/// Reads every key's serialized value and absolute expiry (ms; -1: none), in one script.
const SNAPSHOT: &str = r#"
local out = {}
for _, k in ipairs(redis.call("keys", "*")) do
  out[#out + 1] = {k, redis.call("dump", k), redis.call("pexpiretime", k)}
end
return out
"#;

/// What a key holds for `token`: 1 if it is a string of it or a hash with its field.
const HOLDS: &str = r#"
local kind = redis.call("type", KEYS[1]).ok
if kind == "string" then
  if redis.call("get", KEYS[1]) == ARGV[1] then return 1 end
elseif kind == "hash" then
  return redis.call("hexists", KEYS[1], ARGV[1])
end
return 0
"#;

/// One server, with the dispatch script loaded.
struct Node {
    client: Client,
    sha1: &'static str,
    run_id: String,
    _server: RedisServer,
}

impl Node {
    async fn start() -> Self {
        let server = RedisServer::start();
        let client = plain_client(&server.url()).await;
        let [dispatch, _] = sent_scripts();
        let sha1 = dispatch.sha1.unwrap();
        let mut node = Self {
            client,
            sha1,
            run_id: String::new(),
            _server: server,
        };
        let loaded = node
            .run("SCRIPT", vec!["LOAD".into(), dispatch.source.into()])
            .await;
        assert_eq!(loaded.as_string().as_deref(), Some(sha1));
        let info = node.run("INFO", vec!["server".into()]).await;
        let info = info.as_string().unwrap();
        let run_id = info
            .lines()
            .find_map(|l| l.strip_prefix("run_id:"))
            .unwrap()
            .trim();
        node.run_id = run_id.to_owned();
        node
    }

    /// `command args...`.
    async fn run(&self, command: &'static str, args: Vec<Value>) -> Value {
        let cmd = CustomCommand::new_static(command, ClusterHash::FirstKey, false);
        within(command, self.client.custom::<Value, Value>(cmd, args))
            .await
            .unwrap_or_else(|e| panic!("{command}: {e}"))
    }

    /// The node's clock, ms.
    async fn now(&self) -> i64 {
        let Value::Array(clock) = self.run("TIME", vec![]).await else {
            panic!("TIME")
        };
        let seconds: i64 = clock[0].as_string().unwrap().parse().unwrap();
        let micros: i64 = clock[1].as_string().unwrap().parse().unwrap();
        seconds * 1000 + micros / 1000
    }

    /// Runs `call` through the dispatch script, alone in its batch: its reply.
    async fn call(&self, call: &Call) -> Value {
        let nkeys = call.keys.len().to_string();
        let mut args: Vec<Value> = vec![self.sha1.into(), nkeys.as_str().into()];
        args.extend(call.keys.iter().map(|k| Value::from(k.as_str())));
        let head = redlock_core::__private::batch_head(call.id, call.keys.len(), call.args.len());
        args.extend(["1".into(), Value::Integer(head.unwrap())]);
        args.extend(call.args.iter().map(|a| Value::from(a.as_str())));
        match self.run("EVALSHA", args).await {
            Value::Array(mut replies) if replies.len() == 1 => replies.remove(0),
            other => panic!("the dispatch script answered {other:?}"),
        }
    }

    async fn keyspace(&self) -> Keyspace {
        let Value::Array(keys) = self.run("EVAL", vec![SNAPSHOT.into(), 0.into()]).await else {
            panic!("the snapshot script")
        };
        keys.into_iter()
            .map(|entry| {
                let Value::Array(entry) = entry else {
                    panic!("{entry:?}")
                };
                let key = entry[0].as_string().unwrap();
                let dump = entry[1].as_bytes().unwrap().to_vec();
                (key, (dump, entry[2].as_i64().unwrap()))
            })
            .collect()
    }

    async fn holds(&self, key: &str, token: &str) -> bool {
        let args = vec![HOLDS.into(), 1.into(), key.into(), token.into()];
        self.run("EVAL", args).await == Value::Integer(1)
    }

    /// An empty node with `state`, and a waiter queued in [`QUEUE`].
    async fn set_up(&self, state: State) {
        self.run("FLUSHALL", vec![]).await;
        let queued = vec![QUEUE.into(), SINCE.into(), MARKER.into()];
        self.run("ZADD", queued).await;
        self.run("PEXPIRE", vec![QUEUE.into(), 600_000.into()])
            .await;
        if state == State::Free {
            return;
        }
        let string = |key: &str, value: &str| -> Vec<Value> {
            vec![key.into(), value.into(), "PX".into(), TTL_MS.into()]
        };
        if state == State::Reserved {
            self.run("SET", string(KEY, MARKER)).await;
            self.run("SET", string(KEY2, U)).await;
            return;
        }
        self.run("SET", string(KEY2, T)).await;
        if state == State::Plain {
            self.run("SET", string(KEY, T)).await;
            return;
        }
        let expiry = self.now().await + TTL_MS;
        let entry = format!("EX {expiry}");
        self.run("HSET", vec![KEY.into(), T.into(), entry.into()])
            .await;
        self.run("PEXPIREAT", vec![KEY.into(), expiry.into()]).await;
    }

    /// The node in quarantine: its witness written by another server.
    async fn quarantine(&self) {
        let other = if self.run_id.starts_with('0') {
            "1".repeat(40)
        } else {
            "0".repeat(40)
        };
        let witness = format!("{other} {QUARANTINE_MS}");
        self.run("SET", vec![WITNESS.into(), witness.into()]).await;
    }

    /// The node out of quarantine: its own witness, and no marker.
    async fn out_of_quarantine(&self) {
        let witness = format!("{} {QUARANTINE_MS}", self.run_id);
        self.run("SET", vec![WITNESS.into(), witness.into()]).await;
        self.run("DEL", vec![QUARANTINE_MARKER.into()]).await;
    }
}

/// The reply `integers` stand for: one integer, or an array of them.
fn reply_of(integers: &[i64]) -> Value {
    match integers {
        [n] => Value::Integer(*n),
        items => Value::Array(items.iter().map(|n| Value::Integer(*n)).collect()),
    }
}

/// The reply's first integer: the integer, or an array's first item.
fn first(reply: &Value) -> Option<i64> {
    match reply {
        Value::Integer(n) => Some(*n),
        Value::Array(items) => items.first().and_then(Value::as_i64),
        _ => None,
    }
}

/// Where two keyspaces differ, for a failure's message.
fn difference(before: &Keyspace, after: &Keyspace) -> String {
    let keys: BTreeSet<&String> = before.keys().chain(after.keys()).collect();
    let differ: Vec<String> = keys
        .into_iter()
        .filter(|k| before.get(*k) != after.get(*k))
        .map(|k| {
            let seen = |ks: &Keyspace| {
                ks.get(k).map_or("absent".to_owned(), |(_, at)| {
                    format!("present (expires at {at})")
                })
            };
            format!("{k:?}: {} -> {}", seen(before), seen(after))
        })
        .collect();
    differ.join(", ")
}

/// Panics with every failure at once.
fn report(failures: &[String]) {
    assert!(
        failures.is_empty(),
        "{} failure(s):\n  {}",
        failures.len(),
        failures.join("\n  ")
    );
}

/// The table is every script the dispatch script knows, each at its id, with its file's body
/// and the effect its declaration in redlock-core's sources (wherever it is) gives it.
#[tokio::test]
async fn the_table_is_every_script_the_dispatch_script_knows() {
    let [dispatch, _] = sent_scripts();
    let known: Vec<usize> = dispatch
        .source
        .match_indices("if id == ")
        .map(|(at, m)| {
            let rest = &dispatch.source[at + m.len()..];
            let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
            digits.parse().unwrap()
        })
        .collect();
    let n = known.len();
    assert_eq!(known, (0..n).collect::<Vec<_>>(), "the dispatch's ids");
    let ids: Vec<usize> = TABLE.iter().map(|s| s.id).collect();
    assert_eq!(ids, (0..n).collect::<Vec<_>>(), "the table's ids");

    // Each id's body is its file's text; each effect the one its declaration gives, read from
    // every source file of redlock-core (a script is declared beside the code that sends it).
    fn sources(dir: &std::path::Path, out: &mut String) {
        let mut paths: Vec<_> = std::fs::read_dir(dir)
            .unwrap()
            .map(|entry| entry.unwrap().path())
            .collect();
        paths.sort();
        for path in paths {
            if path.is_dir() {
                sources(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push_str(&std::fs::read_to_string(&path).unwrap());
            }
        }
    }
    let mut all = String::new();
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../redlock-core/src");
    sources(&root, &mut all);
    let declared: String = all.split_whitespace().collect();
    for script in TABLE {
        let body = format!(
            "if id == {} then return function(KEYS, ARGV)\n{}\nend end\n",
            script.id, script.source
        );
        assert!(
            dispatch.source.contains(&body),
            "id {} is not {}",
            script.id,
            script.file
        );
        // Declared with this id and effect, and the file's text, wherever its slice keeps it.
        let declaration = format!(
            "Script::new({},Effect::{:?},include_str!(\"",
            script.id, script.effect
        );
        let path = declared
            .split(&declaration)
            .nth(1)
            .and_then(|rest| rest.split('"').next());
        assert!(
            path.is_some_and(|path| path.rsplit('/').next() == Some(script.file)),
            "redlock-core does not declare {} as {:?} at id {}",
            script.file,
            script.effect,
            script.id
        );
        let call = (script.call)(State::Plain, T, 0);
        assert_eq!(
            call.id, script.id,
            "{}'s call names another id",
            script.file
        );
    }

    // And the dispatch script knows no id past them: one answers the error marker.
    let node = Node::start().await;
    let past = Call {
        id: n,
        keys: vec![],
        args: vec![],
    };
    let reply = node.call(&past).await;
    let Value::Array(items) = &reply else {
        panic!("id {n}: {reply:?}")
    };
    assert_eq!(
        items[0].as_string().as_deref(),
        Some("redlock:error"),
        "id {n}"
    );
}

/// Compares and Swaps: given another token than the holder's, nothing at all changes and the
/// reply says "not held"; given the holder's, the keyspace changes.
#[tokio::test]
async fn a_holder_is_touched_only_by_its_own_token() {
    let node = Node::start().await;
    let mut failures = Vec::new();
    let mut covered = Vec::new();
    for script in with(&[Effect::Compares, Effect::Swaps]) {
        covered.push(script.file);
        for state in [State::Plain, State::Mode] {
            let name = format!("{} on a {state:?} holder", script.file);
            node.set_up(state).await;
            let before = node.keyspace().await;
            let reply = node.call(&(script.call)(state, U, 0)).await;
            let after = node.keyspace().await;
            if reply != reply_of(script.not_held) {
                failures.push(format!(
                    "{name}, another token: answered {reply:?}, not {:?}",
                    script.not_held
                ));
            }
            if before != after {
                let changed = difference(&before, &after);
                failures.push(format!("{name}, another token: changed {changed}"));
            }
            if !script.writes.contains(&state) {
                continue;
            }
            // The positive control: the holder's own token writes.
            let reply = node.call(&(script.call)(state, T, 0)).await;
            let after = node.keyspace().await;
            if first(&reply).is_none_or(|n| n < 1) {
                failures.push(format!("{name}, its token: answered {reply:?}"));
            }
            if before == after {
                failures.push(format!("{name}, its token: changed nothing"));
            }
        }
    }
    report(&failures);
    assert_eq!(
        covered,
        [
            "release.lua",
            "release_handover.lua",
            "extend.lua",
            "extend_mode.lua",
            "release_mode.lua",
            "keep.lua",
            "release_slots.lua",
            "resume.lua",
            "downgrade.lua",
            "force_release.lua",
            "owner.lua",
            "extend_permit.lua",
        ]
    );
}

/// Grants and Swaps: on a node in quarantine, a call that would grant answers -1 and leaves
/// every key but the quarantine's own as it was (twice: first the witness of another server,
/// then the marker that first call wrote); out of quarantine, the same call grants.
#[tokio::test]
async fn nothing_is_granted_in_quarantine() {
    let node = Node::start().await;
    let mut failures = Vec::new();
    let mut covered = Vec::new();
    let without_quarantine = |mut keys: Keyspace| {
        keys.remove(WITNESS);
        keys.remove(QUARANTINE_MARKER);
        keys
    };
    for script in with(&[Effect::Grants, Effect::Swaps]) {
        covered.push(script.file);
        for &state in script.writes {
            let name = format!("{} on a {state:?} key", script.file);
            // A grant takes a free key with T; a resumption swaps T, which the key holds, for V.
            let granted = if script.effect == Effect::Swaps { V } else { T };
            node.set_up(state).await;
            node.quarantine().await;
            let before = without_quarantine(node.keyspace().await);
            let call = (script.call)(state, T, QUARANTINE_MS);
            for round in ["the witness of another server", "the quarantine marker"] {
                let reply = node.call(&call).await;
                let after = without_quarantine(node.keyspace().await);
                if first(&reply) != Some(-1) {
                    failures.push(format!(
                        "{name}, in quarantine ({round}): answered {reply:?}, not -1"
                    ));
                }
                if before != after {
                    let changed = difference(&before, &after);
                    failures.push(format!(
                        "{name}, in quarantine ({round}): changed {changed}"
                    ));
                }
                if node.holds(KEY, granted).await {
                    failures.push(format!("{name}, in quarantine ({round}): {KEY} granted"));
                }
            }
            // The positive control: the same call, out of quarantine, grants.
            node.out_of_quarantine().await;
            let reply = node.call(&call).await;
            let after = without_quarantine(node.keyspace().await);
            // set_nx.lua answers as `SET NX GET` does: nil for a grant.
            let grant = if script.file == "set_nx.lua" {
                reply == Value::Null
            } else {
                first(&reply) == Some(1)
            };
            if !grant {
                failures.push(format!("{name}, out of quarantine: answered {reply:?}"));
            }
            if before == after || !node.holds(KEY, granted).await {
                failures.push(format!("{name}, out of quarantine: {KEY} not granted"));
            }
        }
    }
    report(&failures);
    assert_eq!(
        covered,
        [
            "acquire.lua",
            "acquire_queued.lua",
            "acquire_mode.lua",
            "acquire_permit.lua",
            "resume.lua",
            "set_nx.lua",
        ]
    );
}

/// Neither: a script that touches no holder leaves the holders' keys as they were.
#[tokio::test]
async fn the_scripts_that_touch_no_holder_leave_holders_alone() {
    let node = Node::start().await;
    let mut failures = Vec::new();
    let mut covered = Vec::new();
    let holders = |keys: Keyspace| -> Keyspace {
        keys.into_iter()
            .filter(|(k, _)| k == KEY || k == KEY2)
            .collect()
    };
    for script in with(&[Effect::Neither]) {
        covered.push(script.file);
        for state in [State::Plain, State::Mode] {
            node.set_up(state).await;
            let before = holders(node.keyspace().await);
            let reply = node.call(&(script.call)(state, T, 0)).await;
            let after = holders(node.keyspace().await);
            if let Value::Array(items) = &reply
                && items.first().and_then(Value::as_string).as_deref() == Some("redlock:error")
            {
                failures.push(format!("{} on {state:?}: {reply:?}", script.file));
            }
            if before != after {
                let changed = difference(&before, &after);
                failures.push(format!("{} on {state:?}: changed {changed}", script.file));
            }
        }
    }
    report(&failures);
    assert_eq!(
        covered,
        [
            "fence.lua",
            "leave.lua",
            "noop.lua",
            "quarantine.lua",
            "force_read.lua"
        ]
    );
}
