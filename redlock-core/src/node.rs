//! One Redis master: the single-instance primitives (`SET NX PX`, compare-and-delete) with a
//! hard per-call time limit.

use std::sync::OnceLock;
use std::time::Duration;

use fred::clients::Client;
use fred::interfaces::ClientLike;
use fred::interfaces::KeysInterface;
use fred::types::config::Options;
use fred::types::{ClusterHash, CustomCommand, Expiration, SetOptions, Value};

use crate::holders;
use crate::keys;
use crate::mode::Mode;
use crate::outcome::{NodeError, NodeVote};

/// A Lua script and its SHA1, sent with `EVALSHA` (falling back to `EVAL` on `NOSCRIPT`).
pub(crate) struct Script {
    source: &'static str,
    sha1: OnceLock<String>,
}

impl Script {
    pub(crate) const fn new(source: &'static str) -> Self {
        Self {
            source,
            sha1: OnceLock::new(),
        }
    }

    /// The SHA1 `EVALSHA` names the script by, computed once.
    fn sha1(&self) -> &str {
        self.sha1.get_or_init(|| fred::util::sha1_hash(self.source))
    }
}

/// Compare-and-delete: delete the key only if it still holds our token (distlock spec, "Correct
/// implementation with a single instance"). Returns 1 if deleted, 0 otherwise.
///
/// The plain scripts read the key with `pcall`: a key taken meanwhile by holders in a
/// [`Mode`](crate::Mode) is a hash, whose `WRONGTYPE` error then compares unequal to any token.
pub(crate) static RELEASE: Script = Script::new(
    r#"if redis.pcall("get", KEYS[1]) == ARGV[1] then return redis.call("del", KEYS[1]) else return 0 end"#,
);

/// Release with a fair hand-over: like [`RELEASE`], but if waiters are queued on this node
/// (`KEYS[2]`, a sorted set scored by wait start), the key is not deleted: it is reserved for
/// the longest waiter (value: its popped member, ttl `ARGV[2]` ms, the grace) and channel
/// `ARGV[3]` is told `"<named> <next>"`, the named waiter and the one after it (empty if
/// none). A reservation blocks every `SET NX`; only the named waiter's [`ACQUIRE_QUEUED`]
/// takes it, so a releasing holder cannot re-grab the lock ahead of the waiters. Returns 1 if
/// our key was there, 0 otherwise. With no waiter queued it is `RELEASE`, and publishes `"*"`
/// ([`WAKE_ALL`](crate::holders::WAKE_ALL)): requests in a [`Mode`](crate::Mode) refused by
/// this key could not queue here (a string has no room for their entries), and are woken to
/// attempt.
///
/// Windows for foreign clients, when `ARGV[4]` (the window, in ms) is above zero: hand-overs
/// would keep the key busy as long as our waiters keep coming, and a foreign client that polls
/// (node-redlock, redis-py, a plain `SET NX`) would never find it free. So when the releasing
/// holder found the streak long enough (`ARGV[5]` is `"1"`, decided by the client so that every
/// node decides alike), a release that finds a waiter deletes the key instead, and sets the
/// window marker `KEYS[4]` for `ARGV[4]` ms, which every acquire script of ours respects: the
/// key is free for foreign clients only. It tells the channel `"<named> <next> <window>"`: the
/// named waiter attempts when the window has passed. The streak's start (`KEYS[3]`, ms on this
/// node's clock: now less `ARGV[6]`, the streak the releasing holder counted, or the start
/// already there if earlier) is written at every hand-over (ttl `ARGV[7]` ms), deleted with a
/// window, and cut to the window's length when the key is freed with nobody queued: a key that
/// stays free that long starts a new streak. A release with nobody queued opens no window:
/// the key is free for anyone at once (a long hold released with nobody waiting costs our
/// next locker nothing). The queue and bookkeeping commands run under `pcall`, so an ACL user without
/// `ZPOPMIN`/`PUBLISH`/`TIME` or without access to our keys still releases (without hand-over
/// or windows).
pub(crate) static RELEASE_HANDOVER: Script = Script::new(
    r#"if redis.pcall("get", KEYS[1]) ~= ARGV[1] then return 0 end
local window = tonumber(ARGV[4]) or 0
local function started(before)
  local clock = redis.pcall("time")
  if type(clock) ~= "table" or not clock[2] then return nil end
  local since = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000) - (tonumber(ARGV[6]) or 0)
  before = tonumber(before)
  if before and before < since then return before end
  return since
end
local head = redis.pcall("zpopmin", KEYS[2])
if type(head) == "table" and head[1] then
  local after = redis.pcall("zrange", KEYS[2], 0, 0)
  local next = (type(after) == "table" and after[1]) or ""
  if window > 0 and ARGV[5] == "1" then
    local opened = redis.pcall("set", KEYS[4], head[1], "PX", window)
    if type(opened) == "table" and opened.ok then
      redis.call("del", KEYS[1])
      redis.pcall("del", KEYS[3])
      redis.pcall("publish", ARGV[3], head[1] .. " " .. next .. " " .. window)
      return 1
    end
  end
  redis.call("set", KEYS[1], head[1], "PX", ARGV[2])
  if window > 0 then
    local since = started(redis.pcall("get", KEYS[3]))
    if since then redis.pcall("set", KEYS[3], since, "PX", ARGV[7]) end
  end
  redis.pcall("publish", ARGV[3], head[1] .. " " .. next)
else
  redis.call("del", KEYS[1])
  if window > 0 then
    local before = redis.pcall("get", KEYS[3])
    local since = type(before) == "string" and started(before)
    if since then redis.pcall("set", KEYS[3], since, "PX", window) end
  end
  redis.pcall("publish", ARGV[3], "*")
end
return 1"#,
);

/// The quarantine check that opens every acquire script: when `ARGV[q]` (a minimum uptime in
/// seconds) is above zero and the node's `uptime_in_seconds` is below it, the node grants
/// nothing and the script returns `{-1, 0}`. This is the distlock spec's "delayed restart"
/// enforced by the node itself, atomically with the `SET`: a node restarted empty less than a
/// max-ttl ago cannot give a second holder a vote that the first holder's key would have
/// refused. `uptime_in_seconds` is a difference of whole-second timestamps, so the caller
/// asks for one second more than the quarantine, and it never ends early.
macro_rules! quarantine_check {
    ($q:literal) => {
        concat!(
            "local q = tonumber(ARGV[",
            $q,
            r#"]) or 0
if q > 0 and (tonumber(string.match(redis.call("info", "server"), "uptime_in_seconds:(%d+)")) or 0) < q then
  return {-1, 0}
end
"#
        )
    };
}
pub(crate) use quarantine_check;

/// How long, in ms of the node's clock, the key has been busy without a window for foreign
/// clients, as `busy` (0 without a streak): read by every plain grant from the streak's start
/// at `KEYS[$k]` ([`RELEASE_HANDOVER`]). Under `pcall`: without `TIME` or access to that key,
/// 0.
macro_rules! busy_read {
    ($k:literal) => {
        concat!(
            r#"local busy = 0
local started = redis.pcall("get", KEYS["#,
            $k,
            r#"])
if type(started) == "string" then
  local clock = redis.pcall("time")
  if type(clock) == "table" and clock[2] then
    busy = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000) - (tonumber(started) or 0)
    if busy < 0 then busy = 0 end
  end
end
"#
        )
    };
}

/// `1` if the window for foreign clients at `KEYS[$k]` is open ([`RELEASE_HANDOVER`]): every
/// acquisition of ours refuses a free key while it is. Under `pcall` (without access to that
/// key: no window).
macro_rules! window_open {
    ($k:literal) => {
        concat!(r#"(redis.pcall("exists", KEYS["#, $k, r#"]) == 1)"#)
    };
}
pub(crate) use window_open;

/// A waiter's attempt: take the key if it is free (and no window for foreign clients is open,
/// `KEYS[3]`) or reserved for this waiter (`ARGV[3]`), and leave the queue; otherwise join the
/// queue (`ZADD NX`, so a waiter keeps its place,
/// scored by its wait start `ARGV[4]`) unless it already holds
/// [`MAX_QUEUED_WAITERS`](crate::options::MAX_QUEUED_WAITERS) entries (a waiter left out is woken by its retry timer), and keep the queue alive for
/// `ARGV[5]` ms. Also reads
/// the fencing counter `KEYS[5]` when given; `ARGV[6]` is the quarantine
/// ([`quarantine_check`]). Returns `{1 | 0 | -1, counter, busy}`, `busy` the streak read from
/// `KEYS[4]` when granted ([`busy_read`]). The queue commands run under
/// `pcall`: without them (ACL) it is a plain attempt.
pub(crate) static ACQUIRE_QUEUED: Script = Script::new(concat!(
    quarantine_check!("6"),
    r#"local cur = redis.pcall("get", KEYS[1])
local fence = 0
if KEYS[5] then fence = redis.call("get", KEYS[5]) or "0" end
if cur == ARGV[3] or (not cur and not "#,
    window_open!("3"),
    r#") then
  redis.call("set", KEYS[1], ARGV[1], "PX", ARGV[2])
  redis.pcall("zrem", KEYS[2], ARGV[3])
"#,
    busy_read!("4"),
    r#"  return {1, fence, busy}
end
if (tonumber(redis.pcall("zcard", KEYS[2])) or 0) < 1024 then
  redis.pcall("zadd", KEYS[2], "NX", ARGV[4], ARGV[3])
end
redis.pcall("pexpire", KEYS[2], ARGV[5])
return {0, fence, 0}"#
));

/// Compare-and-pexpire: give the key a new ttl only if it still holds our token (distlock
/// spec, "Making the algorithm more reliable: Extending the lock"). A key that is gone is never
/// re-created, and a key is never shortened: a ttl below the key's remaining life leaves it
/// as it is, so the validity its holder already counts on stays true. Returns 1 if the key
/// holds our token (and now lives at least `ARGV[2]` ms), 0 otherwise.
pub(crate) static EXTEND: Script = Script::new(
    r#"if redis.pcall("get", KEYS[1]) ~= ARGV[1] then return 0 end
if redis.call("pttl", KEYS[1]) < tonumber(ARGV[2]) then redis.call("pexpire", KEYS[1], ARGV[2]) end
return 1"#,
);

/// `SET key token NX PX ttl` as a script, for what the typed `SET` cannot do: refuse while a
/// window for foreign clients is open (`KEYS[2]`, [`RELEASE_HANDOVER`]), read the streak of
/// hand-overs when granted (`KEYS[3]`, [`busy_read`]), read the resource's fencing counter
/// `KEYS[4]` when given (0 if none), and refuse while quarantined (`ARGV[3]`,
/// [`quarantine_check`]). One round trip: `{1 | 0 | -1, counter, busy}`.
pub(crate) static ACQUIRE: Script = Script::new(concat!(
    quarantine_check!("3"),
    r#"local fence = 0
if KEYS[4] then fence = redis.call("get", KEYS[4]) or "0" end
if "#,
    window_open!("2"),
    r#" then return {0, fence, 0} end
if not redis.call("set", KEYS[1], ARGV[1], "NX", "PX", ARGV[2]) then return {0, fence, 0} end
"#,
    busy_read!("3"),
    r#"return {1, fence, busy}"#
));

/// Raises the fencing counter `KEYS[1]` to `ARGV[1]` if it is lower (a max register: it never
/// goes down), and returns `{1 | 0, before}`: 1 if it was raised (confirmed), and the counter
/// as it was, at least the legacy counter `KEYS[2]` (0.1.0's key, read under `pcall`).
///
/// Counters are compared as decimal strings (length, then digits), never as Lua numbers:
/// those are doubles, exact only below 2^53, and two claims above it would compare equal.
/// Anything that is not a plain decimal (a foreign key of the legacy name holding a token or
/// a hash) reads as 0.
pub(crate) static FENCE: Script = Script::new(
    r#"local function counter(v)
  if type(v) ~= "string" or not string.match(v, "^%d+$") then return "0" end
  local digits = string.match(v, "^0*(%d-)$")
  if digits == "" then return "0" end
  return digits
end
local function below(a, b)
  if #a ~= #b then return #a < #b end
  return a < b
end
local cur = counter(redis.call("get", KEYS[1]))
local legacy = counter(redis.pcall("get", KEYS[2]))
if below(cur, legacy) then cur = legacy end
if below(cur, ARGV[1]) then
  redis.call("set", KEYS[1], ARGV[1])
  return {1, cur}
end
return {0, cur}"#,
);

/// Every script a node runs, preloaded on each (re)connection.
const SCRIPTS: [&Script; 9] = [
    &RELEASE,
    &RELEASE_HANDOVER,
    &EXTEND,
    &ACQUIRE,
    &ACQUIRE_QUEUED,
    &FENCE,
    &holders::ACQUIRE_MODE,
    &holders::EXTEND_MODE,
    &holders::RELEASE_MODE,
];

/// A client for one independent master and its display label (`host:port`, no credentials).
#[derive(Clone)]
pub(crate) struct Node {
    pub(crate) client: Client,
    pub(crate) label: String,
}

/// Per-call options: one attempt (fred must not silently re-send a `SET NX` after a
/// reconnect), fail-fast when the client is not connected, and no fred timer: the time limit
/// is one timer per round over all nodes ([`quorum::decide`](crate::quorum::decide)), not two
/// per command. Sent through `custom()` on `WithOptions`, the one path where fred honours them
/// for scripts too (fred.rs#353: `with_options(..).eval(..)` drops them).
fn call_options() -> &'static Options {
    static OPTIONS: OnceLock<Options> = OnceLock::new();
    OPTIONS.get_or_init(|| Options {
        timeout: Some(Duration::ZERO),
        max_attempts: Some(1),
        fail_fast: true,
        ..Options::default()
    })
}

/// [`Node::eval`] on `client`.
async fn eval_on(
    client: &Client,
    script: &Script,
    keys: &[&str],
    args: &[Value],
) -> Result<Value, NodeError> {
    let with = |head: &str| {
        let mut all = Vec::with_capacity(2 + keys.len() + args.len());
        all.push(Value::from(head));
        all.push(Value::from(keys.len() as i64));
        all.extend(keys.iter().map(|k| Value::from(*k)));
        all.extend(args.iter().cloned());
        all
    };
    match send(client, "EVALSHA", with(script.sha1())).await {
        Err(NodeError::Reply(text)) if text.starts_with("NOSCRIPT") => {
            send(client, "EVAL", with(script.source)).await
        }
        other => other,
    }
}

/// Sends one command on `client` with [`call_options`], unbounded in time by itself.
async fn send(
    client: &Client,
    command: &'static str,
    args: Vec<Value>,
) -> Result<Value, NodeError> {
    let cmd = CustomCommand::new_static(command, ClusterHash::FirstKey, false);
    client
        .with_options(call_options())
        .custom::<Value, Value>(cmd, args)
        .await
        .map_err(|e| NodeError::from_fred(&e))
}

impl Node {
    /// Sends one command. Unbounded in time by itself: every caller bounds it, a round with
    /// [`quorum::decide`](crate::quorum::decide), a single call with [`Node::bounded`].
    pub(crate) async fn call(
        &self,
        command: &'static str,
        args: Vec<Value>,
    ) -> Result<Value, NodeError> {
        send(&self.client, command, args).await
    }

    /// [`call`](Self::call) bounded by `limit`.
    async fn bounded(
        &self,
        command: &'static str,
        args: Vec<Value>,
        limit: Duration,
    ) -> Result<Value, NodeError> {
        tokio::time::timeout(limit, self.call(command, args))
            .await
            .unwrap_or(Err(NodeError::Timeout(limit)))
    }

    /// `SET key token NX PX ttl` (Redlock step 2 on one node).
    ///
    /// Sent as fred's typed `SET`, not a custom command: fred flushes the socket after every
    /// custom command and every `EVAL`/`EVALSHA` (`CommandKind::should_flush`), but lets typed
    /// commands from concurrent lockers share one write.
    pub(crate) async fn try_lock(&self, key: &str, token: &str, ttl_ms: u64) -> NodeVote {
        let expire = Expiration::PX(i64::try_from(ttl_ms).unwrap_or(i64::MAX));
        let reply = self
            .client
            .with_options(call_options())
            .set::<Value, _, _>(key, token, Some(expire), Some(SetOptions::NX), false)
            .await;
        match reply {
            Ok(Value::Null) => NodeVote::Held,
            Ok(_) => NodeVote::Acquired,
            Err(e) => NodeVote::Failed(NodeError::from_fred(&e)),
        }
    }

    /// Runs `script` on `keys` and `args`: `EVALSHA`, then `EVAL` when the node answers
    /// `NOSCRIPT` (script caches are empty after every restart or `SCRIPT FLUSH`).
    pub(crate) async fn eval(
        &self,
        script: &Script,
        keys: &[&str],
        args: &[Value],
    ) -> Result<Value, NodeError> {
        eval_on(&self.client, script, keys, args).await
    }

    /// [`eval`](Self::eval) for releases, run to completion in a task of its own, bounded by
    /// `limit`. A release round returns at quorum and drops the calls still running: a
    /// command already handed to the client lands anyway, but the `EVAL` that answers a
    /// `NOSCRIPT` would never be sent, and that node would keep the key until its ttl. A
    /// release may land late (it deletes only its own token), so it is always finished. An
    /// acquisition is not detached: its clean-up must reach each node after it.
    pub(crate) async fn eval_release(
        &self,
        script: &'static Script,
        keys: &[&str],
        args: &[Value],
        limit: Duration,
    ) -> Result<Value, NodeError> {
        let client = self.client.clone();
        let keys: Vec<String> = keys.iter().map(|k| (*k).to_owned()).collect();
        let args = args.to_vec();
        let release = tokio::spawn(async move {
            let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
            tokio::time::timeout(limit, eval_on(&client, script, &keys, &args))
                .await
                .unwrap_or(Err(NodeError::Timeout(limit)))
        });
        release.await.unwrap_or(Err(NodeError::Timeout(limit)))
    }

    /// [`try_lock`](Self::try_lock) that refuses while the resource's window for foreign clients
    /// is open, and reads the streak of hand-overs as the scripts do ([`busy_read`]): `SET NX
    /// PX`, then `EXISTS window`, `GET busy` and `TIME` on the same connection, all typed, so
    /// fred sends them in one write, in that order, and the node runs them in that order. A
    /// `SET` granted while the window was open finds the window still there (a window opens
    /// only as a holder's key is deleted, so it was there before the `SET`): the vote is
    /// [`NodeVote::Held`], and the key (ours for one round trip) goes with the attempt's
    /// clean-up, or with the lock if a quorum of other nodes granted it. A window or streak
    /// that cannot be read (ACL) counts as closed or absent. Cheaper than a script
    /// ([`ACQUIRE`]): fred flushes the socket after every script, but batches typed commands
    /// across concurrent lockers.
    pub(crate) async fn try_lock_outside_windows(
        &self,
        key: &str,
        windows: &WindowKeys,
        token: &str,
        ttl_ms: u64,
    ) -> AcquireReply {
        let client = self.client.with_options(call_options());
        let expire = Expiration::PX(i64::try_from(ttl_ms).unwrap_or(i64::MAX));
        let set = client.set::<Value, _, _>(key, token, Some(expire), Some(SetOptions::NX), false);
        let open = client.exists::<i64, _>(&windows.window);
        let started = client.get::<Option<i64>, _>(&windows.busy);
        let time = CustomCommand::new_static("TIME", ClusterHash::Random, false);
        let now = client.custom::<Vec<i64>, Value>(time, Vec::new());
        // Polled in this order: the `SET` is queued first.
        let (set, open, started, now) = tokio::join!(set, open, started, now);
        let vote = match set {
            Ok(Value::Null) => NodeVote::Held,
            Ok(_) if matches!(open, Ok(n) if n > 0) => NodeVote::Held,
            Ok(_) => NodeVote::Acquired,
            Err(e) => NodeVote::Failed(NodeError::from_fred(&e)),
        };
        let busy_ms = match (started, now.as_deref()) {
            (Ok(Some(started)), Ok([secs, micros])) => {
                let now_ms = secs.saturating_mul(1000).saturating_add(micros / 1000);
                u64::try_from(now_ms.saturating_sub(started)).unwrap_or(0)
            }
            _ => 0,
        };
        AcquireReply {
            vote,
            counter: 0,
            busy_ms,
        }
    }

    /// The compare-and-delete script on one node. `Ok(true)` if our key was deleted (or
    /// handed over), `Ok(false)` if it was gone or held by someone else. With `handover`, the
    /// key goes to the longest queued waiter, or opens a window for foreign clients
    /// ([`RELEASE_HANDOVER`]).
    pub(crate) async fn unlock(
        &self,
        key: &str,
        token: &str,
        handover: Option<&Handover>,
        limit: Duration,
    ) -> Result<bool, NodeError> {
        let reply = match handover {
            None => {
                self.eval_release(&RELEASE, &[key], &[Value::from(token)], limit)
                    .await?
            }
            Some(h) => {
                let args = [
                    Value::from(token),
                    ttl_arg(h.grace_ms),
                    Value::from(h.channel.as_str()),
                    ttl_arg(h.window_ms),
                    Value::from(if h.window_due { "1" } else { "0" }),
                    ttl_arg(h.busy_ms),
                    ttl_arg(h.busy_ttl_ms),
                ];
                let keys = [
                    key,
                    h.channel.as_str(),
                    h.windows.busy.as_str(),
                    h.windows.window.as_str(),
                ];
                self.eval_release(&RELEASE_HANDOVER, &keys, &args, limit)
                    .await?
            }
        };
        Ok(matches!(reply, Value::Integer(1)))
    }

    /// The compare-and-pexpire script on one node ([`EXTEND`], or
    /// [`EXTEND_MODE`](holders::EXTEND_MODE) for a lock held in a mode):
    /// [`NodeVote::Acquired`] if our key (or entry) got the new ttl, [`NodeVote::Held`] if it
    /// is gone, expired or another holder's.
    pub(crate) async fn extend(
        &self,
        key: &str,
        token: &str,
        ttl_ms: u64,
        mode: Option<Mode>,
    ) -> NodeVote {
        let args = [Value::from(token), ttl_arg(ttl_ms)];
        let script = match mode {
            None => &EXTEND,
            Some(_) => &holders::EXTEND_MODE,
        };
        match self.eval(script, &[key], &args).await {
            Ok(Value::Integer(1)) => NodeVote::Acquired,
            Ok(_) => NodeVote::Held,
            Err(e) => NodeVote::Failed(e),
        }
    }

    /// `SET NX PX` as the [`ACQUIRE`] script: refused while the resource's window for foreign
    /// clients is open, reading the streak of hand-overs when granted, with a read of the
    /// fencing counter when `fence_key` is given, refused by a node up for less than
    /// `quarantine_s` seconds.
    pub(crate) async fn try_lock_scripted(
        &self,
        key: &str,
        windows: &WindowKeys,
        fence_key: Option<&str>,
        token: &str,
        ttl_ms: u64,
        quarantine_s: u64,
    ) -> AcquireReply {
        let args = [Value::from(token), ttl_arg(ttl_ms), ttl_arg(quarantine_s)];
        let keys = [key, windows.window.as_str(), windows.busy.as_str()];
        self.acquire_with(&ACQUIRE, &keys, fence_key, &args).await
    }

    /// Runs an acquire script on `keys`, followed by the fencing counter's key when given, and
    /// reads its `{1 | 0 | -1, counter[, busy]}` reply.
    pub(crate) async fn acquire_with(
        &self,
        script: &Script,
        keys: &[&str],
        fence_key: Option<&str>,
        args: &[Value],
    ) -> AcquireReply {
        let mut all = keys.to_vec();
        all.extend(fence_key);
        acquire_reply(self.eval(script, &all, args).await)
    }

    /// A queued waiter's attempt ([`ACQUIRE_QUEUED`]), refused while the resource's window for
    /// foreign clients is open, reading the fencing counter when `fence_key` is given.
    pub(crate) async fn try_lock_queued(
        &self,
        key: &str,
        fence_key: Option<&str>,
        token: &str,
        ttl_ms: u64,
        place: &QueuePlace,
        quarantine_s: u64,
    ) -> AcquireReply {
        let args = [
            Value::from(token),
            ttl_arg(ttl_ms),
            Value::from(place.marker.as_str()),
            Value::Integer(place.score_ms),
            ttl_arg(place.queue_ttl_ms),
            ttl_arg(quarantine_s),
        ];
        let keys = [
            key,
            place.queue.as_str(),
            place.windows.window.as_str(),
            place.windows.busy.as_str(),
        ];
        self.acquire_with(&ACQUIRE_QUEUED, &keys, fence_key, &args)
            .await
    }

    /// Leaves a resource's waiter queue (a waiter that gave up).
    pub(crate) async fn leave_queue(&self, queue: &str, marker: &str) -> Result<(), NodeError> {
        let args = vec![Value::from(queue), Value::from(marker)];
        self.call("ZREM", args).await.map(drop)
    }

    /// Raises the fencing counter to `value` if lower ([`FENCE`]). [`NodeVote::Acquired`] if
    /// the node raised it (confirmed); otherwise [`NodeVote::Held`]. Either way with the
    /// counter as it was (`u64::MAX` if it is larger).
    pub(crate) async fn fence(
        &self,
        fence_key: &str,
        legacy_key: &str,
        value: u64,
    ) -> (NodeVote, u64) {
        let args = [Value::from(value.to_string())];
        match self.eval(&FENCE, &[fence_key, legacy_key], &args).await {
            Ok(reply) => match fence_reply(&reply) {
                Some((true, before)) => (NodeVote::Acquired, before),
                Some((false, before)) => (NodeVote::Held, before),
                None => (
                    NodeVote::Failed(NodeError::Reply(format!(
                        "unexpected reply to the fence script: {reply:?}"
                    ))),
                    0,
                ),
            },
            Err(e) => (NodeVote::Failed(e), 0),
        }
    }

    /// Loads every script into the node's script cache (`SCRIPT LOAD`).
    ///
    /// A release that timed out is still delivered when a stalled node resumes, as `EVALSHA`
    /// with no chance of the `EVAL` fallback: the script must already be cached there, or a
    /// `SET` that landed late would outlive the failed attempt until its ttl. Best effort: a
    /// user without `+script|load` still gets the `EVAL` fallback on answered calls.
    pub(crate) async fn load_scripts(&self, limit: Duration) {
        for script in SCRIPTS {
            let args = vec![Value::from("LOAD"), Value::from(script.source)];
            if let Err(error) = self.bounded("SCRIPT", args, limit).await {
                tracing::debug!(node = %self.label, %error, "could not preload the lock scripts");
                return;
            }
        }
    }

    /// Keeps the scripts loaded: now if connected, and after every (re)connection,
    /// since a restarted node has an empty script cache.
    pub(crate) fn keep_scripts_loaded(&self, limit: Duration) {
        use fred::interfaces::EventInterface;
        let node = self.clone();
        let _listener = self.client.on_reconnect(move |_server| {
            let node = node.clone();
            async move {
                node.load_scripts(limit).await;
                Ok(())
            }
        });
    }
}

/// A waiter's place in a resource's queue on every node.
#[derive(Debug, Clone)]
pub(crate) struct QueuePlace {
    /// The queue's key (also the channel its hand-overs are published on).
    pub(crate) queue: String,
    /// The resource's window and streak keys.
    pub(crate) windows: WindowKeys,
    /// `~` and the waiter's id: its queue member, and the value of a key reserved for it.
    pub(crate) marker: String,
    /// When the waiter started waiting, in ms since the Unix epoch: its rank in the queue.
    pub(crate) score_ms: i64,
    /// How long the queue outlives its last enqueue, in ms.
    pub(crate) queue_ttl_ms: u64,
}

/// How a release hands the key over to a queued waiter.
#[derive(Debug, Clone)]
pub(crate) struct Handover {
    /// The resource's queue key and hand-over channel.
    pub(crate) channel: String,
    /// How long the key stays reserved for the named waiter, in ms.
    pub(crate) grace_ms: u64,
    /// The resource's window and streak keys.
    pub(crate) windows: WindowKeys,
    /// The window for foreign clients, in ms (0: never open one, and keep no streak).
    pub(crate) window_ms: u64,
    /// The releasing holder found the streak long enough: open a window if a waiter is
    /// queued, instead of handing over.
    pub(crate) window_due: bool,
    /// How long the key has been busy without a window, by the releasing holder's count
    /// (the streak it read when granted, plus its hold), in ms.
    pub(crate) busy_ms: u64,
    /// How long the streak's start outlives the hand-over that wrote it, in ms.
    pub(crate) busy_ttl_ms: u64,
}

/// A resource's keys for windows for foreign clients ([`keys::window`], [`keys::busy`]).
#[derive(Debug, Clone)]
pub(crate) struct WindowKeys {
    /// The window marker: while it exists, no acquisition of ours takes the free key.
    pub(crate) window: String,
    /// The start of the current streak of hand-overs, in ms of the node's clock.
    pub(crate) busy: String,
}

impl WindowKeys {
    /// The keys of the lock key `key`.
    pub(crate) fn of(key: &str) -> Self {
        Self {
            window: keys::window(key),
            busy: keys::busy(key),
        }
    }
}

/// One node's answer to an acquire script.
#[derive(Debug)]
pub(crate) struct AcquireReply {
    pub(crate) vote: NodeVote,
    /// The fencing counter read (0 when not asked for).
    pub(crate) counter: u64,
    /// When granted, how long the key has been busy without a window for foreign clients, in
    /// ms of the node's clock (0 when no streak is running, or for a mode lock).
    pub(crate) busy_ms: u64,
}

impl AcquireReply {
    /// A vote with nothing read.
    pub(crate) fn vote(vote: NodeVote) -> Self {
        Self {
            vote,
            counter: 0,
            busy_ms: 0,
        }
    }
}

/// The `{1 | 0 | -1, counter[, busy]}` reply of the acquire scripts.
fn acquire_reply(reply: Result<Value, NodeError>) -> AcquireReply {
    match reply {
        Ok(Value::Array(reply)) => {
            let counter = reply.get(1).and_then(counter).unwrap_or(0);
            let busy_ms = reply.get(2).and_then(self::counter).unwrap_or(0);
            let vote = match reply.first() {
                Some(Value::Integer(1)) => NodeVote::Acquired,
                Some(Value::Integer(-1)) => {
                    return AcquireReply::vote(NodeVote::Failed(NodeError::Quarantined));
                }
                _ => NodeVote::Held,
            };
            AcquireReply {
                vote,
                counter,
                busy_ms,
            }
        }
        Ok(other) => AcquireReply::vote(NodeVote::Failed(NodeError::Reply(format!(
            "unexpected reply to an acquire script: {other:?}"
        )))),
        Err(e) => AcquireReply::vote(NodeVote::Failed(e)),
    }
}

/// A ttl in milliseconds as a command argument (sent as its decimal digits).
pub(crate) fn ttl_arg(ttl_ms: u64) -> Value {
    Value::Integer(i64::try_from(ttl_ms).unwrap_or(i64::MAX))
}

/// A fencing counter from a script reply (an integer, or its decimal string).
/// Decimal strings above `u64::MAX` (only a foreign legacy key can hold one) saturate.
fn counter(value: &Value) -> Option<u64> {
    let digits = |text: &str| -> Option<u64> {
        if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) {
            Some(text.parse().unwrap_or(u64::MAX))
        } else {
            None
        }
    };
    match value {
        Value::Integer(i) => u64::try_from(*i).ok(),
        Value::String(s) => digits(s),
        Value::Bytes(b) => digits(std::str::from_utf8(b).ok()?),
        _ => None,
    }
}

/// The [`FENCE`] script's `{raised, before}`.
fn fence_reply(reply: &Value) -> Option<(bool, u64)> {
    match reply {
        Value::Array(parts) => match parts.as_slice() {
            [raised, before] => Some((raised.as_i64()? == 1, counter(before)?)),
            _ => None,
        },
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::options::MAX_QUEUED_WAITERS;

    #[test]
    fn the_queue_cap_is_the_one_the_script_enforces() {
        let check = format!("< {MAX_QUEUED_WAITERS} then");
        assert!(
            ACQUIRE_QUEUED.source.contains(&check),
            "{}",
            ACQUIRE_QUEUED.source
        );
    }
}
