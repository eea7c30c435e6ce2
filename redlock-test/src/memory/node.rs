//! One in-memory node: the model's mirror of a server's keyspace and of the lock's scripts
//! (`redlock_model::node`), its clock on tokio's, its faults, and the subscriptions of the
//! handles that listen to it.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use redlock_core::transport::{Deliver, NodeError, Value, dispatch_sha1};
use redlock_model::node::{self as model, Call, Reply};
use tokio::time::Instant;

/// What the dispatch script answers for a call that raised an error (its `pcall`).
const ERROR_MARKER: &str = "redlock:error";

/// One node, shared by its transports and its views.
#[derive(Debug, Clone)]
pub(super) struct Shared(Arc<Inner>);

#[derive(Debug)]
struct Inner {
    state: Mutex<State>,
    /// Held from a script's run to the end of the delivery of what it published, so that
    /// messages reach each listener in the order the node ran the scripts, as on a server.
    delivery: Mutex<()>,
}

/// A node's keyspace, clock, faults and listeners.
pub(super) struct State {
    /// The keyspace and the scripts, as the differential test holds them to the real ones.
    pub(super) model: model::Node,
    /// When the node's clock read `base_ms`, the Unix time (ms) at the node's creation, as
    /// `TIME` reads on a server.
    epoch: Instant,
    base_ms: u64,
    /// How far the node's clock runs ahead of tokio's (ms).
    pub(super) ahead_ms: u64,
    /// The server's run id, renewed by a restart; its replication id, which is not.
    restarts: u64,
    replid: String,
    /// Whether the dispatch script is in the node's script cache (empty after a restart).
    scripts_loaded: bool,
    /// Whether the node answers at all.
    pub(super) up: bool,
    /// How late its replies come.
    pub(super) delay: Duration,
    /// How late commands reach it.
    pub(super) request_delay: Duration,
    /// How many of the next commands sent to it are lost on the way.
    pub(super) lose_requests: u64,
    /// How many of the next replies it sends are lost on the way.
    pub(super) lose_replies: u64,
    /// Each handle's subscriptions on this node, and where their messages go.
    listeners: Vec<Listener>,
}

/// One handle's subscriptions on a node, and where their messages go.
type Listener = (Channels, Arc<Deliver>);

/// The channels one handle subscribed to on a node.
pub(super) type Channels = Arc<Mutex<HashSet<String>>>;

impl std::fmt::Debug for State {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("State")
            .field("up", &self.up)
            .field("delay", &self.delay)
            .finish_non_exhaustive()
    }
}

impl Shared {
    /// Node `index` of a set, empty, its clock at the Unix time now.
    pub(super) fn new(index: usize) -> Self {
        let replid = format!("{:040x}", 0xa11ce + index as u64);
        // The lock's own wall clock: on a seeded thread, the seed's (a replayed run's nodes
        // read the same times).
        #[cfg(feature = "simulation")]
        let base_ms = redlock_core::simulation::wall_clock_ms();
        #[cfg(not(feature = "simulation"))]
        let base_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |since| {
                u64::try_from(since.as_millis()).unwrap_or(u64::MAX)
            });
        Self(Arc::new(Inner {
            delivery: Mutex::new(()),
            state: Mutex::new(State {
                model: model::Node::new(&run_id(index, 0), base_ms),
                epoch: Instant::now(),
                base_ms,
                ahead_ms: 0,
                restarts: 0,
                replid,
                scripts_loaded: false,
                up: true,
                delay: Duration::ZERO,
                request_delay: Duration::ZERO,
                lose_requests: 0,
                lose_replies: 0,
                listeners: Vec::new(),
            }),
        }))
    }

    /// The node's state, its clock moved to now (keys past their expiry are gone).
    pub(super) fn state(&self) -> MutexGuard<'_, State> {
        let mut state = self.0.state.lock().unwrap_or_else(PoisonError::into_inner);
        let now = state.now_ms();
        state.model.set_now(now);
        state
    }

    /// Runs `command` with `args` now, and hands the messages its scripts published to the
    /// listeners. `None` when the node is down.
    pub(super) fn run(&self, command: &str, args: &[Value]) -> Option<Result<Value, NodeError>> {
        let mut state = self.state();
        if !state.up {
            return None;
        }
        let reply = state.command(command, args);
        let published = state.model.take_published();
        if published.is_empty() {
            return Some(reply);
        }
        let listeners = state.listeners.clone();
        // Taken before the node's lock is let go, so that the next script's messages wait for
        // these; let go before that lock is taken again, so the two are never waited for in
        // the other order. A listener must not call the node (redlock-core's only queue a
        // wake-up).
        let in_order = self
            .0
            .delivery
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        drop(state);
        let gone: Vec<Arc<Deliver>> = listeners
            .into_iter()
            .filter(|(channels, deliver)| !deliver_all(channels, deliver, &published))
            .map(|(_, deliver)| deliver)
            .collect();
        drop(in_order);
        if !gone.is_empty() {
            self.state()
                .listeners
                .retain(|(_, deliver)| !gone.iter().any(|g| Arc::ptr_eq(g, deliver)));
        }
        Some(reply)
    }

    /// `SET key token NX PX ttl_ms GET`; `None` when the node is down.
    pub(super) fn set_nx(
        &self,
        key: &str,
        token: &str,
        ttl_ms: i64,
    ) -> Option<Result<Value, NodeError>> {
        let mut state = self.state();
        if !state.up {
            return None;
        }
        if ttl_ms <= 0 {
            return Some(Err(NodeError::error_reply(
                "ERR invalid expire time in 'set' command",
            )));
        }
        Some(match state.model.store.get(key).map(|e| &e.value) {
            Some(model::Value::Str(held)) => Ok(Value::from(held.as_str())),
            Some(_) => Err(wrong_type()),
            None => {
                let now = state.model.store.now();
                let entry = model::Entry {
                    value: model::Value::Str(token.to_owned()),
                    expires_at: Some(now.saturating_add(ttl_ms.unsigned_abs())),
                };
                state.model.store.put(key, entry);
                Ok(Value::Null)
            }
        })
    }

    /// What happens to a command sent now on its way: how late it arrives, and whether it
    /// is lost (counting it against the losses to come).
    pub(super) fn request_faults(&self) -> (Duration, bool) {
        let mut state = self.state();
        let lost = state.lose_requests > 0;
        state.lose_requests = state.lose_requests.saturating_sub(1);
        (state.request_delay, lost)
    }

    /// What happens to a reply sent now on its way back: how late it arrives, and whether it
    /// is lost (counting it against the losses to come).
    pub(super) fn reply_faults(&self) -> (Duration, bool) {
        let mut state = self.state();
        let lost = state.lose_replies > 0;
        state.lose_replies = state.lose_replies.saturating_sub(1);
        (state.delay, lost)
    }

    /// Whether the node is up.
    pub(super) fn is_up(&self) -> bool {
        self.state().up
    }

    /// Hands every message from now on on `channels` to `deliver`, until it returns `false`.
    pub(super) fn listen(&self, channels: Channels, deliver: Deliver) {
        self.state().listeners.push((channels, Arc::new(deliver)));
    }
}

/// Hands `deliver` the messages of `published` on the channels in `channels`; `false` once
/// it no longer listens.
fn deliver_all(channels: &Channels, deliver: &Deliver, published: &[(String, String)]) -> bool {
    let channels = channels
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone();
    published
        .iter()
        .filter(|(channel, _)| channels.contains(channel))
        .all(|(channel, message)| deliver(channel, message))
}

impl State {
    /// The node's clock, ms.
    fn now_ms(&self) -> u64 {
        let elapsed = u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX);
        elapsed
            .saturating_add(self.base_ms)
            .saturating_add(self.ahead_ms)
    }

    /// The server restarted without persistence: no keys, no scripts, a new run id.
    pub(super) fn restart(&mut self, index: usize) {
        self.restarts += 1;
        self.model.restart(&run_id(index, self.restarts));
        self.scripts_loaded = false;
    }

    /// The keyspace lost without a restart (`FLUSHALL`).
    pub(super) fn flush(&mut self) {
        self.model.lose_data();
    }

    fn command(&mut self, command: &str, args: &[Value]) -> Result<Value, NodeError> {
        let text: Vec<String> = args
            .iter()
            .map(|a| a.as_string().unwrap_or_default())
            .collect();
        match command.to_ascii_uppercase().as_str() {
            "EVALSHA" if text.first().map(String::as_str) != Some(dispatch_sha1()) => {
                Err(no_script())
            }
            "EVALSHA" if !self.scripts_loaded => Err(no_script()),
            "EVALSHA" => self.dispatch(&text),
            "EVAL" if text.first().map(|s| sha1(s)).as_deref() == Some(dispatch_sha1()) => {
                self.scripts_loaded = true;
                self.dispatch(&text)
            }
            "EVAL" if text.first().map(String::as_str) == Some(inspect_source()) => {
                match (text.get(1).map(String::as_str), text.get(2), text.get(3)) {
                    (Some("2"), Some(key), Some(queue)) => {
                        Ok(value_of(self.model.inspect(key, queue)))
                    }
                    _ => Err(NodeError::error_reply(
                        "ERR in-memory node: the inspect script takes two keys",
                    )),
                }
            }
            "SCAN" => {
                let pattern = match (text.get(1), text.get(2)) {
                    (Some(word), Some(pattern)) if word.eq_ignore_ascii_case("MATCH") => {
                        pattern.as_str()
                    }
                    _ => "*",
                };
                let keys = self
                    .model
                    .store
                    .entries()
                    .filter(|(key, _)| glob_match(pattern.as_bytes(), key.as_bytes()))
                    .map(|(key, _)| Value::from(key.as_str()))
                    .collect();
                // Every key in one page: the cursor comes back 0.
                Ok(Value::Array(vec![Value::from("0"), Value::Array(keys)]))
            }
            "SCRIPT" if text.first().is_some_and(|s| s.eq_ignore_ascii_case("LOAD")) => {
                let source = text.get(1).map(String::as_str).unwrap_or_default();
                if sha1(source) == dispatch_sha1() {
                    self.scripts_loaded = true;
                }
                Ok(Value::from(sha1(source)))
            }
            "INFO" => Ok(Value::from(self.info())),
            "GET" => match text.first().and_then(|key| self.model.store.get(key)) {
                None => Ok(Value::Null),
                Some(model::Entry {
                    value: model::Value::Str(held),
                    ..
                }) => Ok(Value::from(held.as_str())),
                Some(_) => Err(wrong_type()),
            },
            other => Err(NodeError::error_reply(format!(
                "ERR in-memory nodes do not run '{other}' or this script: they answer the lock's own commands only"
            ))),
        }
    }

    /// The dispatch script on `KEYS` and `ARGV` after its first two arguments (the script and
    /// the number of keys): one call (`ARGV` opens with `=<id>`), or a batch.
    fn dispatch(&mut self, text: &[String]) -> Result<Value, NodeError> {
        let bad =
            || NodeError::error_reply("ERR in-memory node: a batch not in the dispatch layout");
        let numkeys: usize = text.get(1).and_then(|n| n.parse().ok()).ok_or_else(bad)?;
        let rest = text.get(2..).ok_or_else(bad)?;
        let (keys, argv) = (
            rest.get(..numkeys).ok_or_else(bad)?,
            &rest[numkeys.min(rest.len())..],
        );
        let head = argv.first().ok_or_else(bad)?;
        if let Some(id) = head.strip_prefix('=') {
            let script = id.parse().map_err(|_| bad())?;
            let call = Call {
                script,
                keys: keys.to_vec(),
                args: argv[1..].to_vec(),
            };
            return Ok(value_of(self.model.run(&call)));
        }
        let n: usize = head.parse().map_err(|_| bad())?;
        let number = |i: usize| -> Result<usize, NodeError> {
            argv.get(i).and_then(|v| v.parse().ok()).ok_or_else(bad)
        };
        if n >= argv.len() {
            return Err(bad());
        }
        let (mut k, mut a): (usize, usize) = (0, 1 + n);
        let mut replies = Vec::with_capacity(n);
        for i in 0..n {
            // The call's head: id + 64 × (keys + 2²⁰ × args) (dispatch.lua).
            let head = number(1 + i)?;
            let (script, nk, na) = (head % 64, (head / 64) % (1 << 20), head / (64 << 20));
            let (k_end, a_end) = (
                k.checked_add(nk).ok_or_else(bad)?,
                a.checked_add(na).ok_or_else(bad)?,
            );
            let call = Call {
                script,
                keys: keys.get(k..k_end).ok_or_else(bad)?.to_vec(),
                args: argv.get(a..a_end).ok_or_else(bad)?.to_vec(),
            };
            (k, a) = (k_end, a_end);
            replies.push(value_of(self.model.run(&call)));
        }
        Ok(Value::Array(replies))
    }

    /// `INFO server replication memory cluster`, with the fields the lock's build checks.
    fn info(&self) -> String {
        format!(
            "# Server\r\nredis_version:7.2.0\r\nredlock_test_in_memory:1\r\nrun_id:{}\r\n\r\n# Replication\r\nrole:master\r\nconnected_slaves:0\r\nmaster_replid:{}\r\nmaster_replid2:0000000000000000000000000000000000000000\r\n\r\n# Memory\r\nmaxmemory:0\r\nmaxmemory_policy:noeviction\r\n\r\n# Cluster\r\ncluster_enabled:0\r\n",
            self.model.run_id, self.replid
        )
    }
}

/// Whether `text` matches the glob `pattern`, for the patterns the lock's `SCAN MATCH` sends
/// (a prefix with `*`, `?`, `[`, `]` and `\` escaped, then `*`): `*`, `?`, a closed `[...]`
/// (with `^` and ranges) and `\` escaping the next character outside a class.
fn glob_match(pattern: &[u8], text: &[u8]) -> bool {
    match pattern.split_first() {
        None => text.is_empty(),
        Some((b'*', rest)) => (0..=text.len()).any(|skip| glob_match(rest, &text[skip..])),
        Some((b'?', rest)) => !text.is_empty() && glob_match(rest, &text[1..]),
        Some((b'[', rest)) => {
            let Some(end) = rest.iter().position(|&b| b == b']') else {
                return text.first() == Some(&b'[') && glob_match(rest, &text[1..]);
            };
            let (class, after) = (&rest[..end], &rest[end + 1..]);
            let (negated, class) = match class.split_first() {
                Some((b'^', class)) => (true, class),
                _ => (false, class),
            };
            let Some((&c, text_rest)) = text.split_first() else {
                return false;
            };
            let mut hit = false;
            let mut i = 0;
            while i < class.len() {
                if i + 2 < class.len() && class[i + 1] == b'-' {
                    hit |= (class[i].min(class[i + 2])..=class[i].max(class[i + 2])).contains(&c);
                    i += 3;
                } else {
                    hit |= class[i] == c;
                    i += 1;
                }
            }
            hit != negated && glob_match(after, text_rest)
        }
        Some((b'\\', rest)) if !rest.is_empty() => {
            text.first() == Some(&rest[0]) && glob_match(&rest[1..], &text[1..])
        }
        Some((&p, rest)) => text.first() == Some(&p) && glob_match(rest, &text[1..]),
    }
}

/// The run id of node `index` after `restarts` restarts: 40 hex digits, as a server's.
fn run_id(index: usize, restarts: u64) -> String {
    format!("{:020x}{:020x}", index as u64 + 1, restarts)
}

/// The read-only script `Redlock::inspect` sends on its own with `EVAL`.
fn inspect_source() -> &'static str {
    redlock_core::__private::sent_scripts()
        .iter()
        .find(|script| script.name == "inspect")
        .map_or("", |script| script.source)
}

fn sha1(text: &str) -> String {
    fred::util::sha1_hash(text)
}

fn no_script() -> NodeError {
    NodeError::error_reply("NOSCRIPT No matching script. Please use EVAL.")
}

fn wrong_type() -> NodeError {
    NodeError::error_reply("WRONGTYPE Operation against a key holding the wrong kind of value")
}

/// A script's reply as the server sends it (the dispatch script's conversions).
fn value_of(reply: Reply) -> Value {
    match reply {
        Reply::Int(n) => Value::Integer(n),
        Reply::Bulk(text) => Value::from(text),
        Reply::Nil => Value::Null,
        Reply::Array(items) => Value::Array(items.into_iter().map(value_of).collect()),
        Reply::Error(text) => Value::Array(vec![Value::from(ERROR_MARKER), Value::from(text)]),
    }
}

#[cfg(test)]
mod tests {
    use super::glob_match;

    #[test]
    fn globs_match_as_scan_does() {
        let matches = |p: &str, t: &str| glob_match(p.as_bytes(), t.as_bytes());
        assert!(matches("lock:*", "lock:a"));
        assert!(matches("lock:*", "lock:"));
        assert!(!matches("lock:*", "other:lock:a"));
        assert!(matches("a?c", "abc"));
        assert!(!matches("a?c", "ac"));
        assert!(matches("[ab]x", "bx"));
        assert!(!matches("[ab]x", "cx"));
        assert!(matches("[^ab]x", "cx"));
        assert!(matches("[a-c]", "b"));
        assert!(!matches("[a-c]", "d"));
        // Escaped: the characters themselves, never a wildcard.
        assert!(matches(r"a\*b*", "a*bc"));
        assert!(!matches(r"a\*b*", "axbc"));
        assert!(matches(r"\[x\]", "[x]"));
        assert!(!matches(r"\?", "a"));
    }
}
