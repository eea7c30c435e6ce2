//! Mode holders on one node: the scripts that take, extend and release a lock in a
//! [`Mode`], atomically on that node.
//!
//! A resource held in modes is a hash at the resource's key: one field per holder (its token),
//! valued `"<MODE> <expiry>"`, and one field per waiter that was refused (its marker, `~…`),
//! valued `"<MODE> <expiry> <since>"`. Expiries are absolute milliseconds of the node's clock
//! (`TIME`): Redis 7.0 has no per-field ttl, so each script drops the expired entries it reads,
//! and keeps the key's own expiry at the latest entry's, so the key disappears with its last
//! holder even if nobody comes back. A string at the key is a plain
//! [`lock`](crate::Redlock::lock) holder (or a reservation for one of its waiters): it counts
//! as exclusive, and since a string cannot carry other holders it refuses every mode, NL
//! included.
//!
//! Waiters' entries bound writer starvation: a request is also refused by an incompatible
//! waiter that started waiting before it (scores from the waiters' own clocks, the same on
//! every node, so the order is one across nodes and the first waiter is never refused by
//! another's entry). A stream of readers therefore cannot pass a waiting writer: the writer
//! waits for the holders present when it asked, not for readers that came after it.

use std::time::Duration;

use fred::types::Value;

use crate::mode::Mode;
use crate::node::{AcquireReply, Node, Script, ttl_arg};
use crate::outcome::NodeError;

/// The node's clock in milliseconds, as `now` (the clock the per-holder expiries use).
macro_rules! node_now {
    () => {
        r#"local clock = redis.call("time")
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
"#
    };
}

/// Takes `KEYS[1]` in mode `ARGV[2]` for token `ARGV[1]` and `ARGV[3]` ms, if no live entry
/// is incompatible with it: no holder whose mode is missing from `ARGV[6]` (the modes
/// compatible with ours), and no waiter in such a mode with a score below ours (`ARGV[7]`,
/// ties broken by marker). Refused, it records (or refreshes) this request's waiter entry
/// `ARGV[4]` for `ARGV[5]` ms; granted, it leaves that entry in place, so that a grant by too
/// few nodes, cleaned up, does not lose the request its place: the holder's release removes
/// it. A free key is refused while a window for foreign clients is open (`KEYS[2]`, see
/// [`RELEASE_HANDOVER`](crate::node::RELEASE_HANDOVER)), with no entry (a hash would take the
/// key from them). Reads the fencing counter `KEYS[3]` when given; `ARGV[8]` is
/// the quarantine (see the plain `ACQUIRE`). Returns `{1 | 0 | -1, counter}`.
pub(crate) static ACQUIRE_MODE: Script = Script::new(concat!(
    crate::node::quarantine_check!("8"),
    r#"local key, token, mode, marker = KEYS[1], ARGV[1], ARGV[2], ARGV[4]
local compatible, score = " " .. ARGV[6] .. " ", tonumber(ARGV[7])
local fence = 0
if KEYS[3] then fence = redis.call("get", KEYS[3]) or "0" end
local kind = redis.call("type", key).ok
if kind ~= "none" and kind ~= "hash" then return {0, fence} end
if kind == "none" and "#,
    crate::node::window_open!("2"),
    r#" then return {0, fence} end
"#,
    node_now!(),
    r#"local entries = {}
if kind == "hash" then entries = redis.call("hgetall", key) end
local latest, refused = now, false
for i = 1, #entries, 2 do
  local field = entries[i]
  local held, expiry, since = string.match(entries[i + 1], "^(%a%a) (%d+) ?(%d*)$")
  expiry = tonumber(expiry) or 0
  if expiry <= now then
    redis.call("hdel", key, field)
  else
    if expiry > latest then latest = expiry end
    if field ~= marker and not string.find(compatible, " " .. held .. " ", 1, true) then
      if string.sub(field, 1, 1) ~= "~" then
        refused = true
      else
        since = tonumber(since) or 0
        if since < score or (since == score and field < marker) then refused = true end
      end
    end
  end
end
local expiry, granted = now + tonumber(ARGV[3]), 1
if refused then
  expiry, granted = now + tonumber(ARGV[5]), 0
  redis.call("hset", key, marker, mode .. " " .. expiry .. " " .. ARGV[7])
else
  redis.call("hset", key, token, mode .. " " .. expiry)
end
if expiry > latest then latest = expiry end
redis.call("pexpireat", key, latest)
return {granted, fence}"#
));

/// Gives token `ARGV[1]`'s entry a new expiry `ARGV[2]` ms from now, if it is there and has
/// not expired; never re-creates it and never brings an expiry forward (as
/// [`EXTEND`](crate::node::EXTEND)). Returns 1 if the entry is held, 0 otherwise.
pub(crate) static EXTEND_MODE: Script = Script::new(concat!(
    r#"if redis.call("type", KEYS[1]).ok ~= "hash" then return 0 end
local value = redis.call("hget", KEYS[1], ARGV[1])
if not value then return 0 end
"#,
    node_now!(),
    r#"local mode, expiry = string.match(value, "^(%a%a) (%d+)")
if (tonumber(expiry) or 0) <= now then
  redis.call("hdel", KEYS[1], ARGV[1])
  return 0
end
local ttl = tonumber(ARGV[2])
if tonumber(expiry) < now + ttl then
  redis.call("hset", KEYS[1], ARGV[1], mode .. " " .. (now + ttl))
end
if redis.call("pttl", KEYS[1]) < ttl then redis.call("pexpireat", KEYS[1], now + ttl) end
return 1"#
));

/// Removes token `ARGV[1]`'s entry and, when `ARGV[3]` is not empty, the request's waiter
/// entry `ARGV[3]` (only those: the other holders keep theirs), drops expired entries, brings
/// the key's expiry down to the latest remaining entry's, and — when the token's entry was
/// there and `ARGV[2]` names a channel — publishes `"*"` there if waiters' entries remain, or
/// if the key is gone and plain waiters are queued in `KEYS[2]`: that wakes every waiter of
/// the resource (a holder left, or a failed attempt's grant that may have refused them is
/// gone). Returns 1 if the entry was there and not expired, 0 otherwise.
pub(crate) static RELEASE_MODE: Script = Script::new(concat!(
    r#"if redis.call("type", KEYS[1]).ok ~= "hash" then return 0 end
if ARGV[3] ~= "" then redis.call("hdel", KEYS[1], ARGV[3]) end
local value = redis.call("hget", KEYS[1], ARGV[1])
if not value then return 0 end
redis.call("hdel", KEYS[1], ARGV[1])
"#,
    node_now!(),
    r#"local held = (tonumber(string.match(value, "^%a%a (%d+)")) or 0) > now
local entries = redis.call("hgetall", KEYS[1])
local latest, waiting = 0, false
for i = 1, #entries, 2 do
  local expiry = tonumber(string.match(entries[i + 1], "^%a%a (%d+)")) or 0
  if expiry <= now then
    redis.call("hdel", KEYS[1], entries[i])
  else
    if expiry > latest then latest = expiry end
    if string.sub(entries[i], 1, 1) == "~" then waiting = true end
  end
end
if latest > 0 then redis.call("pexpireat", KEYS[1], latest) end
if latest == 0 and KEYS[2] then
  local queued = redis.pcall("zcard", KEYS[2])
  waiting = type(queued) == "number" and queued > 0
end
if waiting and ARGV[2] ~= "" then redis.pcall("publish", ARGV[2], "*") end
if held then return 1 end
return 0"#
));

/// What a wake-up message published by [`RELEASE_MODE`] says: every waiter may attempt.
pub(crate) const WAKE_ALL: &str = "*";

/// One request in a mode: what every node's [`ACQUIRE_MODE`] needs beyond key and token.
#[derive(Debug, Clone)]
pub(crate) struct ModeRequest {
    pub(crate) mode: Mode,
    /// The resource's window for foreign clients (`keys::window`).
    window: String,
    /// The modes compatible with `mode`, space-separated.
    compatible: String,
    /// The waiter entry's field (`~` and the request's id).
    pub(crate) marker: String,
    /// When the request started, in ms since the Unix epoch: its rank among waiters.
    score_ms: i64,
    /// How long the waiter entry outlives the attempt that wrote it, in ms.
    intent_ttl_ms: u64,
}

impl ModeRequest {
    pub(crate) fn new(
        mode: Mode,
        window: String,
        marker: String,
        score_ms: i64,
        intent_ttl_ms: u64,
    ) -> Self {
        Self {
            mode,
            window,
            compatible: mode.compatible_list(),
            marker,
            score_ms,
            intent_ttl_ms,
        }
    }
}

impl Node {
    /// One node's vote for `request` ([`ACQUIRE_MODE`]), refused on a free key while the
    /// resource's window for foreign clients is open, with the fencing counter when
    /// `fence_key` is given.
    pub(crate) async fn try_lock_mode(
        &self,
        key: &str,
        fence_key: Option<&str>,
        token: &str,
        ttl_ms: u64,
        request: &ModeRequest,
        quarantine_s: u64,
    ) -> AcquireReply {
        let args = [
            Value::from(token),
            Value::from(request.mode.as_str()),
            ttl_arg(ttl_ms),
            Value::from(request.marker.as_str()),
            ttl_arg(request.intent_ttl_ms),
            Value::from(request.compatible.as_str()),
            Value::Integer(request.score_ms),
            ttl_arg(quarantine_s),
        ];
        self.acquire_with(&ACQUIRE_MODE, &[key, &request.window], fence_key, &args)
            .await
    }

    /// [`RELEASE_MODE`] on one node, waking the waiters on `channel` when given (the name of
    /// both the channel and the plain waiters' queue), and removing the waiter entry `marker`
    /// when given (a holder's release; a failed attempt keeps it); run to completion within
    /// `limit` ([`Node::eval_release`]). `Ok(true)` if our entry was there and live.
    pub(crate) async fn unlock_mode(
        &self,
        key: &str,
        token: &str,
        channel: Option<&str>,
        marker: Option<&str>,
        limit: Duration,
    ) -> Result<bool, NodeError> {
        let args = [
            Value::from(token),
            Value::from(channel.unwrap_or("")),
            Value::from(marker.unwrap_or("")),
        ];
        let keys: &[&str] = match channel {
            Some(queue) => &[key, queue],
            None => &[key],
        };
        let reply = self.eval_release(&RELEASE_MODE, keys, &args, limit).await?;
        Ok(matches!(reply, Value::Integer(1)))
    }

    /// Removes a waiter's entry (a request that gave up). A key holding a plain lock answers
    /// `WRONGTYPE`: that request never wrote an entry there.
    pub(crate) async fn withdraw(&self, key: &str, marker: &str) -> Result<(), NodeError> {
        let args = vec![Value::from(key), Value::from(marker)];
        match self.call("HDEL", args).await {
            Err(NodeError::Reply(text)) if text.starts_with("WRONGTYPE") => Ok(()),
            other => other.map(drop),
        }
    }
}
