//! One Redis node as the lock's scripts see it: a keyspace with expiry on the node's clock,
//! and each script of redlock-core (its `.lua` files, with the slice that sends each) mirrored in Rust, run on it as the
//! dispatch script runs a call (`pcall`: an error is a reply).
//!
//! A [`Call`] is exactly what the dispatch script is sent for one call: the script's id (the
//! one the code declares it with, `Script::id`), its `KEYS` and its `ARGV`, as strings. So
//! the same call can be run here and on a real server (the differential test in `tests/tests/model_scripts.rs`),
//! and their replies and resulting keys compared.

mod admin;
mod args;
mod dispatch;
mod mode;
mod permit;
mod prelude;
mod scripts;
mod store;

pub use store::{Entry, Store, Value, WrongType};

/// The scripts' ids: the ones redlock-core declares them with (`Script::id`, beside the code
/// that sends each; unique and from 0 without a gap), which the dispatch script names them by.
pub mod id {
    /// release.lua
    pub const RELEASE: usize = 0;
    /// release_handover.lua
    pub const RELEASE_HANDOVER: usize = 1;
    /// extend.lua
    pub const EXTEND: usize = 2;
    /// acquire.lua
    pub const ACQUIRE: usize = 3;
    /// acquire_queued.lua
    pub const ACQUIRE_QUEUED: usize = 4;
    /// fence.lua
    pub const FENCE: usize = 5;
    /// acquire_mode.lua
    pub const ACQUIRE_MODE: usize = 6;
    /// extend_mode.lua
    pub const EXTEND_MODE: usize = 7;
    /// release_mode.lua
    pub const RELEASE_MODE: usize = 8;
    /// leave.lua
    pub const LEAVE: usize = 9;
    /// keep.lua
    pub const KEEP: usize = 10;
    /// noop.lua
    pub const NOOP: usize = 11;
    /// quarantine.lua
    pub const QUARANTINE: usize = 12;
    /// acquire_permit.lua
    pub const ACQUIRE_PERMIT: usize = 13;
    /// release_slots.lua
    pub const RELEASE_SLOTS: usize = 14;
    /// owner.lua
    pub const OWNER: usize = 18;
    /// extend_permit.lua
    pub const EXTEND_PERMIT: usize = 20;
    /// set_nx.lua
    pub const SET_NX: usize = 21;
}

/// One call of a script: what the dispatch script is sent for it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Call {
    /// The script's id ([`id`]).
    pub script: usize,
    /// Its `KEYS`.
    pub keys: Vec<String>,
    /// Its `ARGV`.
    pub args: Vec<String>,
}

impl Call {
    /// A call of `script` with `keys` and `args`.
    pub fn new(script: usize, keys: &[&str], args: &[&str]) -> Self {
        Self {
            script,
            keys: keys.iter().map(|k| (*k).to_owned()).collect(),
            args: args.iter().map(|a| (*a).to_owned()).collect(),
        }
    }
}

/// A script's reply, as the dispatch script answers it (Lua's conversions: a number is an
/// integer, truncated; a string a bulk string; a table an array, up to its first nil; `false`
/// and nil a nil; `true` the integer 1; an error `{"redlock:error", text}`, kept here as
/// [`Reply::Error`]).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Reply {
    /// An integer.
    Int(i64),
    /// A bulk string.
    Bulk(String),
    /// A nil.
    Nil,
    /// An array.
    Array(Vec<Reply>),
    /// The call raised an error, with this text.
    Error(String),
}

impl Reply {
    /// The integer at `index` of an array reply (or the reply itself at index 0 when it is an
    /// integer), if it is one.
    pub fn int_at(&self, index: usize) -> Option<i64> {
        match (self, index) {
            (Self::Int(n), 0) => Some(*n),
            (Self::Array(items), i) => match items.get(i) {
                Some(Self::Int(n)) => Some(*n),
                Some(Self::Bulk(s)) => s.parse().ok(),
                _ => None,
            },
            _ => None,
        }
    }
}

/// Deliberate flaws in the scripts, each an earlier or plausible design the model checker
/// must be shown to reject. [`Flaws::default`] is the scripts as they are.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Flaws {
    /// extend.lua sets the key's ttl to the one asked for, shorter or longer than what it had
    /// (`PEXPIRE` without the "never shorten" comparison).
    pub shortening_extend: bool,
    /// acquire_mode.lua treats a hash with fields it cannot parse as its own: it drops those
    /// fields and takes the key (the design before foreign keys were refused).
    pub mode_takes_foreign_hash: bool,
}

/// One node: its keyspace (with expiries on its clock), its server's run id (what the
/// quarantine's witness records) and the messages its scripts published.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Node {
    /// The keyspace.
    pub store: Store,
    /// The server's run id (`INFO server`'s `run_id`, 40 hex digits).
    pub run_id: String,
    /// Messages published by the calls run since the last [`Node::take_published`]:
    /// `(channel, message)`.
    pub published: Vec<(String, String)>,
    /// The flaws its scripts run with.
    pub flaws: Flaws,
}

impl Node {
    /// An empty node whose server has `run_id`, its clock at `now_ms`.
    pub fn new(run_id: &str, now_ms: u64) -> Self {
        Self {
            store: Store::new(now_ms),
            run_id: run_id.to_owned(),
            published: Vec::new(),
            flaws: Flaws::default(),
        }
    }

    /// The node with its scripts running with `flaws`.
    #[must_use]
    pub fn with_flaws(mut self, flaws: Flaws) -> Self {
        self.flaws = flaws;
        self
    }

    /// Sets the node's clock (ms); keys whose expiry has passed are then gone.
    pub fn set_now(&mut self, now_ms: u64) {
        self.store.set_now(now_ms);
    }

    /// The server restarted with nothing (no persistence): an empty keyspace and a new run id.
    pub fn restart(&mut self, run_id: &str) {
        self.store.clear();
        self.run_id = run_id.to_owned();
    }

    /// The keyspace lost without a restart (`FLUSHALL`): the run id stays.
    pub fn lose_data(&mut self) {
        self.store.clear();
    }

    /// Runs `call` as the dispatch script runs one call, and returns its reply.
    pub fn run(&mut self, call: &Call) -> Reply {
        dispatch::run(self, call)
    }

    /// Runs inspect.lua (what `Redlock::inspect` sends on its own with `EVAL`, not through
    /// the dispatch script) on the lock key `key` and its waiter queue `queue_key`. A hash's
    /// entries come in field order, where a server answers in its own `HGETALL` order.
    pub fn inspect(&self, key: &str, queue_key: &str) -> Reply {
        admin::inspect(self, key, queue_key)
    }

    /// The messages published since the last call of this, in order.
    pub fn take_published(&mut self) -> Vec<(String, String)> {
        std::mem::take(&mut self.published)
    }
}
