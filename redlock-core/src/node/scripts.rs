//! Every Lua script the lock runs on a node, in one place, and the layouts they keep.
//!
//! A plain lock is a string at the lock key holding its holder's token (`SET NX PX`). Its
//! bookkeeping keys follow it ([`keys`](crate::keys)): the waiter queue (a sorted set scored by
//! wait start, also the hand-over channel), the fencing counter, the streak start and the
//! window for foreign clients.
//!
//! A resource held in modes is a hash at the resource's key: one field per holder (its token),
//! valued `"<MODE> <expiry>"`, and one field per waiter that was refused (its marker, `~…`),
//! valued `"<MODE> <expiry> <since>"`. Expiries are absolute milliseconds of the node's clock
//! (`TIME`): Redis 7.0 has no per-field ttl, so each script drops the expired entries it reads,
//! and keeps the key's own expiry at the latest entry's, so the key disappears with its last
//! holder even if nobody comes back. A string at the key is a plain holder (or a reservation
//! for one of its waiters): it counts as exclusive, and since a string cannot carry other
//! holders it refuses every mode, NL included.
//!
//! A hash at the key is ours only while every field in it is one of our entries: a holder's
//! field is a token (40 lowercase hex digits) valued `"<MODE> <expiry>"`, a waiter's is `~` and
//! 16 hex digits valued `"<MODE> <expiry> <since>"`, `<MODE>` one of the six modes and the
//! numbers decimal ([`mode_entry`]). Any other field, or a key of another type than a string or
//! a hash, was written by someone else (an application sharing the nodes without a key
//! prefix): every mode script leaves such a key as it is, and [`ACQUIRE_MODE`] answers `-2`
//! (a foreign key) instead of a vote. The mode scripts delete, expire and rewrite only entries
//! they parse as ours, and set or move the key's expiry only while every field is ours.
//!
//! Waiters' entries bound writer starvation: a request is also refused by an incompatible
//! waiter that started waiting before it (scores from the waiters' own clocks, the same on
//! every node, so the order is one across nodes and the first waiter is never refused by
//! another's entry). A stream of readers therefore cannot pass a waiting writer.
//!
//! Hand-over messages, published on the waiter queue's key: `"<named> <next>"` (the key is
//! reserved for the named waiter), `"<named> <next> <window_ms>"` (a window for foreign clients
//! opened; the named waiter attempts after it), or [`WAKE_ALL`].

/// One of the lock's Lua scripts: its body, and its place in the dispatch script
/// ([`BATCH`]), which is the only script a node is sent.
#[derive(Debug)]
pub(crate) struct Script {
    /// Its index in [`SCRIPTS`] (checked by a test), which names it in a batch.
    pub(crate) id: usize,
    /// The body: it reads its own `KEYS` and `ARGV`, and returns as a script would.
    pub(crate) source: &'static str,
}

impl Script {
    pub(crate) const fn new(id: usize, source: &'static str) -> Self {
        Self { id, source }
    }
}

/// Compare-and-delete: delete the key only if it still holds our token (distlock spec, "Correct
/// implementation with a single instance"). Returns 1 if deleted, 0 otherwise.
///
/// The plain scripts read the key with `pcall`: a key taken meanwhile by holders in a
/// [`Mode`](crate::Mode) is a hash, whose `WRONGTYPE` error then compares unequal to any token.
pub(crate) static RELEASE: Script = Script::new(
    0,
    r#"if redis.pcall("get", KEYS[1]) == ARGV[1] then return redis.call("del", KEYS[1]) else return 0 end"#,
);

/// Release with a fair hand-over: like [`RELEASE`], but if waiters are queued on this node
/// (`KEYS[2]`, a sorted set scored by wait start), the key is not deleted: it is reserved for
/// the longest waiter (value: its popped member, ttl `ARGV[2]` ms, the grace) and channel
/// `ARGV[3]` is told `"<named> <next>"`, the named waiter and the one after it (empty if
/// none). A reservation blocks every `SET NX`; only the named waiter's [`ACQUIRE_QUEUED`]
/// takes it, so a releasing holder cannot re-grab the lock ahead of the waiters. Returns 1 if
/// our key was there, 0 otherwise. With no waiter queued it is `RELEASE`, and publishes `"*"`
/// ([`WAKE_ALL`]): requests in a [`Mode`](crate::Mode) refused by
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
    1,
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

/// The quarantine check that opens every acquire script, when `ARGV[$q]` (the quarantine, in
/// ms) is above zero: the node grants nothing, and the script returns `{-1, 0}`, while it may
/// have lost a key that a holder still counts on. This is the distlock spec's "delayed
/// restart" ("Performance, crash recovery and fsync") enforced by the node itself, atomically
/// with the `SET`, and widened from restarts to every loss of data.
///
/// The node's data witness `KEYS[$w]` ([`keys::witness`](crate::keys)) holds the `run_id` of
/// the server that wrote it. When it is missing or holds another id, the node's data is not
/// the data it had when it last voted: it was flushed (`FLUSHALL`, `FLUSHDB`), the server
/// restarted (a new `run_id`, whatever it reloaded from disk), or it was re-synced from or
/// loaded with another server's data (`REPLICAOF`: the witness copied from there holds that
/// server's id). The check then writes the witness with this server's id and the quarantine
/// marker `KEYS[$m]` with a ttl of the quarantine (`PX`), and refuses. While the marker
/// exists, it refuses. The argument: every key this node lost was written before the loss,
/// with a ttl of at most the quarantine (the builder requires the quarantine to cover every
/// ttl, and an extension renews a key to at most its ttl), so it would have expired by the
/// loss plus the quarantine; the marker is written at the first acquisition after the loss,
/// so it outlives all of them, and until then the node voted for nobody. No clock is read:
/// the marker's ttl is counted by the node like every lock key's.
///
/// The witness also records the quarantine it was written with (`"<run_id> <ms>"`), and a
/// handle with another quarantine is refused on that node (`{-3, 0}`): after a loss, the first
/// handle to see it starts the quarantine with its own length, and a shorter one than another
/// handle's ttls would let that node vote while their keys should still be held. Every handle
/// of a key prefix must use the same quarantine. A handle with a longer quarantine than the
/// marker was written with (its value) lengthens what is left of it by the difference. Costs, with the quarantine on: an `INFO server` and two `GET`s per acquisition
/// (ACL: `+info`, and the prefix's keys), and the witness key, one per key prefix per node.
macro_rules! quarantine_check {
    ($q:literal, $w:literal, $m:literal) => {
        concat!(
            "local q = tonumber(ARGV[",
            $q,
            r#"]) or 0
if q > 0 then
  local id = string.match(redis.call("info", "server"), "run_id:(%x+)") or "unknown"
  local witness = redis.call("get", KEYS["#,
            $w,
            r#"])
  local wid, wq = nil, nil
  if type(witness) == "string" then wid, wq = string.match(witness, "^(%x+) (%d+)$") end
  if wid ~= id then
    redis.call("set", KEYS["#,
            $m,
            r#"], q, "PX", q)
    redis.call("set", KEYS["#,
            $w,
            r#"], id .. " " .. q)
    return {-1, 0}
  end
  if tonumber(wq) ~= q then return {-3, 0} end
  local asked = redis.call("get", KEYS["#,
            $m,
            r#"])
  if asked then
    asked = tonumber(asked) or 0
    if asked < q then
      local left = redis.call("pttl", KEYS["#,
            $m,
            r#"])
      if left > 0 then redis.call("set", KEYS["#,
            $m,
            r#"], q, "PX", left + q - asked) end
    end
    return {-1, 0}
  end
end
"#
        )
    };
}

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

/// The ms until `KEYS[$k]` expires (`PTTL`), or -1 when it has no expiry, is gone, or cannot
/// be read (under `pcall`): what a refused attempt reports as the holder's remaining ttl.
macro_rules! left {
    ($k:literal) => {
        concat!(
            r#"(function() local ms = redis.pcall("pttl", KEYS["#,
            $k,
            r#"]) if type(ms) == "number" then return ms end return -1 end)()"#
        )
    };
}

/// Who refused an attempt, so that the client can tell a split vote from a holder
/// ([`AcquireReply::holder`](super::replies::AcquireReply::holder)): the first 16 hex digits
/// of the SHA-1 of the value at `KEYS[$k]` (a holder's token, or the marker of the waiter it is
/// reserved for), or `"?"` when it is not a string (a resource held in modes). A refusal by a
/// window for foreign clients reports `"window"`. A digest, never the token: it cannot be
/// used to release or extend the lock.
macro_rules! holder {
    ($k:literal) => {
        concat!(
            r#"(function() local v = redis.pcall("get", KEYS["#,
            $k,
            r#"]) if type(v) == "string" then return string.sub(redis.sha1hex(v), 1, 16) end return "?" end)()"#
        )
    };
}

/// Two helpers for fencing counters, which are compared as decimal strings (length, then
/// digits), never as Lua numbers (doubles, exact only below 2^53): `decimal(v)`, `v` without
/// leading zeros if it is a plain decimal string, else `"0"`; `below(a, b)`, `a < b` for two
/// such strings.
macro_rules! decimal {
    () => {
        r#"local function decimal(v)
  if type(v) ~= "string" or not string.match(v, "^%d+$") then return "0" end
  local digits = string.match(v, "^0*(%d-)$")
  if digits == "" then return "0" end
  return digits
end
local function below(a, b)
  if #a ~= #b then return #a < #b end
  return a < b
end
"#
    };
}

/// What the acquire scripts read for the fencing write-back, as `fence`: the resource's
/// counter `KEYS[$c]` when it is given, or, when that counter has expired, the highest claim
/// in the key prefix's floor `KEYS[$f]` ([`FENCE`]), so that the first claim after it is
/// confirmed at once. Only a hint: the write-back itself is what [`FENCE`] checks.
macro_rules! fence_read {
    ($c:literal, $f:literal) => {
        concat!(
            r#"local fence = 0
if KEYS["#,
            $c,
            r#"] then
  fence = redis.call("get", KEYS["#,
            $c,
            r#"])
  if not fence then
    local past, current = string.match(redis.call("get", KEYS["#,
            $f,
            r#"]) or "", "^(%d+) (%d+)$")
    fence = current or "0"
    if past and (#past > #current or (#past == #current and past > current)) then fence = past end
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

/// A waiter's attempt: take the key if it is free (and no window for foreign clients is open,
/// `KEYS[3]`) or reserved for this waiter (`ARGV[3]`), and leave the queue; otherwise join the
/// queue (`ZADD NX`, so a waiter keeps its place,
/// scored by its wait start `ARGV[4]`) unless it already holds
/// [`MAX_QUEUED_WAITERS`](crate::MAX_QUEUED_WAITERS) entries (a waiter left out is woken by its retry timer), and keep the queue alive for
/// `ARGV[5]` ms. Also reads
/// the fencing counter `KEYS[7]` when given (or the floor `KEYS[8]`, [`fence_read`]); `ARGV[6]` is the quarantine, `KEYS[5]` and
/// `KEYS[6]` its witness and marker ([`quarantine_check`]). Returns
/// `{1 | 0 | -1, counter, busy[, left, holder]}`, `busy` the streak read from `KEYS[4]` when
/// granted ([`busy_read`]), `left` when refused the ms until the key (or the window) expires,
/// `holder` who refused it ([`holder`]). The queue commands run under
/// `pcall`: without them (ACL) it is a plain attempt.
pub(crate) static ACQUIRE_QUEUED: Script = Script::new(
    4,
    concat!(
        quarantine_check!("6", "5", "6"),
        fence_read!("7", "8"),
        r#"local cur = redis.pcall("get", KEYS[1])
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
local left = "#,
        left!("1"),
        r#"
local holder = "window"
if left < 0 then left = "#,
        left!("3"),
        r#" end
if cur then holder = "#,
        holder!("1"),
        r#" end
return {0, fence, 0, left, holder}"#
    ),
);

/// Compare-and-pexpire: give the key a new ttl only if it still holds our token (distlock
/// spec, "Making the algorithm more reliable: Extending the lock"). A key that is gone is never
/// re-created, and a key is never shortened: a ttl below the key's remaining life leaves it
/// as it is, so the validity its holder already counts on stays true. Returns 1 if the key
/// holds our token (and now lives at least `ARGV[2]` ms), 0 otherwise.
pub(crate) static EXTEND: Script = Script::new(
    2,
    r#"if redis.pcall("get", KEYS[1]) ~= ARGV[1] then return 0 end
if redis.call("pttl", KEYS[1]) < tonumber(ARGV[2]) then redis.call("pexpire", KEYS[1], ARGV[2]) end
return 1"#,
);

/// A plain attempt: `SET key token NX PX ttl`, refused while a
/// window for foreign clients is open (`KEYS[2]`, [`RELEASE_HANDOVER`]) when `ARGV[4]` is `"1"`
/// (the handle has windows on; one with windows off takes the key as a foreign client
/// would), read the streak of
/// hand-overs when granted (`KEYS[3]`, [`busy_read`]), read the resource's fencing counter
/// `KEYS[6]` when given (or the floor `KEYS[7]`, [`fence_read`]), and refuse while quarantined (`ARGV[3]`, with the
/// witness `KEYS[4]` and the marker `KEYS[5]`, [`quarantine_check`]). One round trip:
/// `{1 | 0 | -1, counter, busy[, left, holder]}`, `left` (when refused) the ms until the
/// holder's key (or the window) expires, `holder` who refused it ([`holder`]).
pub(crate) static ACQUIRE: Script = Script::new(
    3,
    concat!(
        quarantine_check!("3", "4", "5"),
        fence_read!("6", "7"),
        r#"if ARGV[4] == "1" and "#,
        window_open!("2"),
        r#" then return {0, fence, 0, "#,
        left!("2"),
        r#", "window"} end
if not redis.call("set", KEYS[1], ARGV[1], "NX", "PX", ARGV[2]) then return {0, fence, 0, "#,
        left!("1"),
        r#", "#,
        holder!("1"),
        r#"} end
"#,
        busy_read!("3"),
        r#"return {1, fence, busy}"#
    ),
);

/// The fencing write-back on one node: confirms the claim `ARGV[1]` if it is above every token
/// this node has confirmed for the resource, and returns `{1 | 0, before}`: 1 if confirmed,
/// and `before`, what the claim was compared with.
///
/// KEYS: the resource's counter `KEYS[1]` (a max register), 0.1.0's counter `KEYS[2]` (read
/// under `pcall` as a floor, never written), the key prefix's fencing floor `KEYS[3]`
/// (`"<past> <current>"`) and the floor's window `KEYS[4]`. ARGV: the claim, and the counter
/// ttl in ms (`0`: counters never expire).
///
/// Counters expire (ttl `ARGV[2]`, renewed by each confirmed claim), so that a node keeps
/// one per resource fenced within the ttl, not one per resource ever fenced. What they knew
/// is kept by the floor: every confirmed claim also raises the floor's `current`, the highest
/// claim of the floor's window; the window (a key whose ttl is cut, by each claim, to half the
/// ttl of the counter it writes) ends at least half a counter ttl before any of its counters,
/// and once it has ended `current` counts as `past`. So when a resource's counter is gone,
/// every token this node confirmed for it is at most the effective `past`, and a claim is
/// compared with that instead. `past` does not move while a window is open, so claims for
/// distinct resources do not refuse each other (a window ending between a hint and its claim
/// costs one more round). A window's end and a counter's expiry are read on one clock, the
/// node's own key expiry; the half-ttl margin covers a backward step of that clock shorter
/// than half the ttl, which could otherwise show an ended window again after its counter
/// was deleted. A floor that is not `"<past> <current>"` is an error: the claim is not
/// confirmed, and the floor is left as it is.
///
/// Counters are compared as decimal strings (length, then digits), never as Lua numbers:
/// those are doubles, exact only below 2^53, and two claims above it would compare equal.
/// Anything that is not a plain decimal (a foreign key of the legacy name holding a token or
/// a hash) reads as 0.
pub(crate) static FENCE: Script = Script::new(
    5,
    concat!(
        decimal!(),
        r#"local counter_key, legacy_key, floor_key, window_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local claim, keep = ARGV[1], tonumber(ARGV[2])
-- The window lasts half the counter ttl: it ends that long before any counter written in it.
local window_ms = math.max(1, math.floor(keep / 2))
local floor = redis.call("get", floor_key)
local past, current = "0", "0"
if floor then
  past, current = string.match(floor, "^(%d+) (%d+)$")
  if not past then error("unreadable fencing floor: " .. floor) end
end
local window_left = redis.call("pttl", window_key)
if window_left == -2 then
  -- The window ended: its claims are now in the past.
  if below(past, current) then past = current end
  current = "0"
end
local before = redis.call("get", counter_key)
if before then before = decimal(before) else before = past end
local legacy = decimal(redis.pcall("get", legacy_key))
if below(before, legacy) then before = legacy end
if not below(before, claim) then return {0, before} end
-- The window first, ending before the counter written after it.
if keep > 0 and (window_left == -1 or window_left == -2 or window_left > window_ms) then
  redis.call("set", window_key, "1", "PX", window_ms)
elseif keep == 0 and window_left == -2 then
  redis.call("set", window_key, "1")
end
if below(current, claim) then current = claim end
redis.call("set", floor_key, past .. " " .. current)
if keep > 0 then
  redis.call("set", counter_key, claim, "PX", keep)
else
  redis.call("set", counter_key, claim)
end
return {1, before}"#
    ),
);

/// The node's clock in milliseconds, as `now` (the clock the per-holder expiries use).
macro_rules! node_now {
    () => {
        r#"local clock = redis.call("time")
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
"#
    };
}

/// Parses one field of a hash at a mode lock's key: `entry(field, value)` returns the entry's
/// mode, expiry (ms of the node's clock), rank (the waiter's `since`, 0 for a holder) and
/// whether it is a waiter's, or `nil` when the field is not an entry of ours (see the module
/// docs): a field that is not a token or a marker, a mode that is not one of the six, a value
/// with anything more or less than our numbers.
macro_rules! mode_entry {
    () => {
        r#"local MODES = {NL = true, CR = true, CW = true, PR = true, PW = true, EX = true}
local function entry(field, value)
  if string.sub(field, 1, 1) == "~" then
    if #field ~= 17 or string.find(field, "[^0-9a-f]", 2) then return nil end
    local held, expiry, since = string.match(value, "^(%u%u) (%d+) (%d+)$")
    if not held or not MODES[held] then return nil end
    return held, tonumber(expiry), tonumber(since), true
  end
  if #field ~= 40 or string.find(field, "[^0-9a-f]") then return nil end
  local held, expiry = string.match(value, "^(%u%u) (%d+)$")
  if not held or not MODES[held] then return nil end
  return held, tonumber(expiry), 0, false
end
"#
    };
}

pub(crate) use mode_entry;

/// Takes `KEYS[1]` in mode `ARGV[2]` for token `ARGV[1]` and `ARGV[3]` ms, if no live entry
/// is incompatible with it: no holder whose mode is missing from `ARGV[6]` (the modes
/// compatible with ours), and no waiter in such a mode with a score below ours (`ARGV[7]`,
/// ties broken by marker). Refused, it records (or refreshes) this request's waiter entry
/// `ARGV[4]` for `ARGV[5]` ms; granted, it leaves that entry in place, so that a grant by too
/// few nodes, cleaned up, does not lose the request its place: the holder's release removes
/// it. A free key is refused while a window for foreign clients is open (`KEYS[2]`, see
/// [`RELEASE_HANDOVER`]), with no entry (a hash would take the
/// key from them). Reads the fencing counter `KEYS[5]` when given (or the floor `KEYS[6]`,
/// [`fence_read`]); `ARGV[8]` is
/// the quarantine, `KEYS[3]` and `KEYS[4]` its witness and marker ([`quarantine_check`]). Returns `{1 | 0 | -1 | -2, counter, 0, left}`,
/// `left` when refused the ms until the last entry that refused it (or the window) expires.
///
/// `-2`: the key holds data we did not write (a hash with a field that is not an entry of
/// ours, [`mode_entry`], or a list, set, sorted set or stream): it is refused, and nothing
/// is written, deleted or expired. Every field is parsed before anything is written, so a
/// hash that is not wholly ours is left exactly as it was. A string is a plain holder (ours
/// or a foreign client's `SET NX`), refused as busy, as the plain lock's `SET NX` is.
pub(crate) static ACQUIRE_MODE: Script = Script::new(
    6,
    concat!(
        quarantine_check!("8", "3", "4"),
        mode_entry!(),
        r#"local key, token, mode, marker = KEYS[1], ARGV[1], ARGV[2], ARGV[4]
local compatible, score = " " .. ARGV[6] .. " ", tonumber(ARGV[7])
"#,
        fence_read!("5", "6"),
        r#"local kind = redis.call("type", key).ok
if kind == "string" then return {0, fence, 0, "#,
        left!("1"),
        r#"} end
if kind ~= "none" and kind ~= "hash" then return {-2, fence, 0, -1} end
if kind == "none" and "#,
        window_open!("2"),
        r#" then return {0, fence, 0, "#,
        left!("2"),
        r#"} end
"#,
        node_now!(),
        r#"local entries = {}
if kind == "hash" then entries = redis.call("hgetall", key) end
local latest, refused, blocked, expired = now, false, now, {}
for i = 1, #entries, 2 do
  local field = entries[i]
  local held, expiry, since, waiter = entry(field, entries[i + 1])
  if not held then return {-2, fence, 0, -1} end
  if expiry <= now then
    table.insert(expired, field)
  else
    if expiry > latest then latest = expiry end
    if field ~= marker and not string.find(compatible, " " .. held .. " ", 1, true) then
      local blocks = not waiter or since < score or (since == score and field < marker)
      if blocks then
        refused = true
        if expiry > blocked then blocked = expiry end
      end
    end
  end
end
for _, field in ipairs(expired) do redis.call("hdel", key, field) end
local expiry, granted = now + tonumber(ARGV[3]), 1
if refused then
  expiry, granted = now + tonumber(ARGV[5]), 0
  redis.call("hset", key, marker, mode .. " " .. expiry .. " " .. ARGV[7])
else
  redis.call("hset", key, token, mode .. " " .. expiry)
end
if expiry > latest then latest = expiry end
redis.call("pexpireat", key, latest)
return {granted, fence, 0, blocked - now}"#
    ),
);

/// Gives token `ARGV[1]`'s entry a new expiry `ARGV[2]` ms from now, if it is there and has
/// not expired; never re-creates it and never brings an expiry forward (as
/// [`EXTEND`]). Returns 1 if the entry is held, 0 otherwise. Only a field that parses as our
/// holder's entry is touched ([`mode_entry`]); the key's expiry is only ever lengthened, to
/// cover the entry.
pub(crate) static EXTEND_MODE: Script = Script::new(
    7,
    concat!(
        mode_entry!(),
        r#"if redis.call("type", KEYS[1]).ok ~= "hash" then return 0 end
local value = redis.call("hget", KEYS[1], ARGV[1])
if not value then return 0 end
local mode, expiry, _, waiter = entry(ARGV[1], value)
if not mode or waiter then return 0 end
"#,
        node_now!(),
        r#"if expiry <= now then
  redis.call("hdel", KEYS[1], ARGV[1])
  return 0
end
local ttl = tonumber(ARGV[2])
if expiry < now + ttl then
  redis.call("hset", KEYS[1], ARGV[1], mode .. " " .. (now + ttl))
end
if redis.call("pttl", KEYS[1]) < ttl then redis.call("pexpireat", KEYS[1], now + ttl) end
return 1"#
    ),
);

/// Removes token `ARGV[1]`'s entry and, when `ARGV[3]` is not empty, the request's waiter
/// entry `ARGV[3]` (only those: the other holders keep theirs), drops expired entries, brings
/// the key's expiry down to the latest remaining entry's, and — when the token's entry was
/// there and `ARGV[2]` names a channel — publishes `"*"` there if waiters' entries remain, or
/// if the key is gone and plain waiters are queued in `KEYS[2]`: that wakes every waiter of
/// the resource (a holder left, or a failed attempt's grant that may have refused them is
/// gone). Returns 1 if the entry was there and not expired, 0 otherwise.
///
/// Only our own entries are removed: the token's and the marker's (fields named by our random
/// values), and expired entries that parse as ours ([`mode_entry`]). If the hash also holds
/// fields we did not write (written into it while we held it), the key's expiry is left as it is: it is
/// never brought forward over someone else's data.
pub(crate) static RELEASE_MODE: Script = Script::new(
    8,
    concat!(
        mode_entry!(),
        r#"if redis.call("type", KEYS[1]).ok ~= "hash" then return 0 end
if ARGV[3] ~= "" then redis.call("hdel", KEYS[1], ARGV[3]) end
local value = redis.call("hget", KEYS[1], ARGV[1])
if not value then return 0 end
redis.call("hdel", KEYS[1], ARGV[1])
local _, mine = entry(ARGV[1], value)
"#,
        node_now!(),
        r#"local held = (mine or 0) > now
local entries = redis.call("hgetall", KEYS[1])
local latest, waiting, foreign = 0, false, false
for i = 1, #entries, 2 do
  local kind, expiry, _, waiter = entry(entries[i], entries[i + 1])
  if not kind then
    foreign = true
  elseif expiry <= now then
    redis.call("hdel", KEYS[1], entries[i])
  else
    if expiry > latest then latest = expiry end
    if waiter then waiting = true end
  end
end
if latest > 0 and not foreign then redis.call("pexpireat", KEYS[1], latest) end
if latest == 0 and not foreign and KEYS[2] then
  local queued = redis.pcall("zcard", KEYS[2])
  waiting = type(queued) == "number" and queued > 0
end
if waiting and ARGV[2] ~= "" then redis.pcall("publish", ARGV[2], "*") end
if held then return 1 end
return 0"#
    ),
);

/// Leaves a resource's waiters: removes marker `ARGV[1]` from the queue of plain waiters at
/// `KEYS[1]` (`ZREM`), or, when `ARGV[2]` is `"1"`, a mode request's waiter entry from the
/// holders' hash at `KEYS[1]` (`HDEL`; a plain lock's string there never held one). Under
/// `pcall`, ignoring what fails. A script, so that it goes through the node's pipeline after
/// the attempts it follows (a `ZREM` sent alone could pass a queued attempt that would
/// re-add the waiter). Returns 1.
pub(crate) static LEAVE: Script = Script::new(
    9,
    r#"local command = "zrem"
if ARGV[2] == "1" then command = "hdel" end
redis.pcall(command, KEYS[1], ARGV[1])
return 1"#,
);

/// The release of a lock held at least for a minimum hold ([`LockOptions::lock_at_least_for`]):
/// if the key still holds our token `ARGV[1]`, it is overwritten with [`KEPT`] to expire
/// `ARGV[2]` ms from now, shorter or longer than it had. Nothing is handed over and nobody is
/// woken: the key expires at the end of the minimum hold. No token is left in it, so an
/// extension of ours still in flight, or a release sent again, no longer matches it and
/// cannot lengthen or delete the kept key. Returns 1 if it held our token, 0 otherwise.
///
/// [`LockOptions::lock_at_least_for`]: crate::LockOptions::lock_at_least_for
pub(crate) static KEEP: Script = Script::new(
    10,
    r#"if redis.pcall("get", KEYS[1]) ~= ARGV[1] then return 0 end
redis.call("set", KEYS[1], ARGV[3], "PX", ARGV[2])
return 1"#,
);

/// Does nothing: a barrier. Its reply comes after those of every call the node's pipeline
/// sent before it (one connection answers in order), so awaiting it awaits them
/// ([`Node::flush`](super::Node::flush)).
pub(crate) static NOOP: Script = Script::new(11, "return 1");

/// The quarantine check alone ([`quarantine_check`], `ARGV[1]` the quarantine in ms, `KEYS[1]`
/// the witness, `KEYS[2]` the marker), run by every handle with the quarantine on when it is
/// built: a node whose data was lost (or that no such handle has seen yet) starts its
/// quarantine then, not at the first acquisition. Returns `{-1, 0}` if the node is in
/// quarantine, `{1, 0}` otherwise.
pub(crate) static QUARANTINE: Script = Script::new(
    12,
    concat!(quarantine_check!("1", "1", "2"), "return {1, 0}"),
);

/// What a key kept for its minimum hold holds ([`KEEP`]): never a token (tokens are hex).
pub(crate) const KEPT: &str = "redlock:kept";

/// What a wake-up message published by [`RELEASE_MODE`] says: every waiter may attempt.
pub(crate) const WAKE_ALL: &str = "*";

/// Every script, in [`Script::id`] order.
pub(crate) const SCRIPTS: [&Script; 13] = [
    &RELEASE,
    &RELEASE_HANDOVER,
    &EXTEND,
    &ACQUIRE,
    &ACQUIRE_QUEUED,
    &FENCE,
    &ACQUIRE_MODE,
    &EXTEND_MODE,
    &RELEASE_MODE,
    &LEAVE,
    &KEEP,
    &NOOP,
    &QUARANTINE,
];

/// What a batched call that raised an error answers in place of its reply:
/// `{ERROR_MARKER, "<the error's text>"}` (no reply of ours is a table starting with a
/// string).
pub(crate) const ERROR_MARKER: &str = "redlock:error";

/// The dispatch script, the only script sent to a node: it runs a batch of calls to the
/// scripts above, in order, each on its own `KEYS` and `ARGV`, and answers one reply per call
/// ([`pipeline`](super::pipeline) sends the calls that concurrent lockers issue in one tick
/// as one `EVALSHA` of it: fred flushes the socket after every script, so one script per call
/// would cost one write per call).
///
/// `ARGV[1]` is the number of calls `n`; `ARGV[2..=1+3n]` say, per call, its script's
/// [`Script::id`], how many keys and how many arguments it has; its keys follow in `KEYS` and
/// its arguments in `ARGV`, call after call. Each call runs under `pcall`: one that raises an
/// error (an `OOM`, a `WRONGTYPE` outside `pcall`) answers `{ERROR_MARKER, text}`, and the
/// others still run, as separate scripts would. A reply of `nil` or `false` answers `false`
/// (a nil reply), so that the array keeps its length.
pub(crate) struct Batch {
    pub(crate) source: String,
    pub(crate) sha1: String,
}

/// [`Batch`], built once from [`SCRIPTS`].
pub(crate) static BATCH: std::sync::LazyLock<Batch> = std::sync::LazyLock::new(|| {
    let mut source = String::from("local S = {}\n");
    for script in SCRIPTS {
        source.push_str(&format!(
            "S[{}] = function(KEYS, ARGV)\n{}\nend\n",
            script.id, script.source
        ));
    }
    source.push_str(&format!(
        r#"local n = tonumber(ARGV[1])
local out = {{}}
local k, a = 1, 2 + 3 * n
for i = 1, n do
  local h = 3 * i - 1
  local script, nk, na = S[tonumber(ARGV[h])], tonumber(ARGV[h + 1]), tonumber(ARGV[h + 2])
  local keys, args = {{}}, {{}}
  for j = 1, nk do keys[j] = KEYS[k + j - 1] end
  for j = 1, na do args[j] = ARGV[a + j - 1] end
  k, a = k + nk, a + na
  local ok, reply = pcall(script, keys, args)
  if ok then
    if reply == nil then reply = false end
    out[i] = reply
  else
    if type(reply) == "table" then reply = reply.err end
    out[i] = {{"{ERROR_MARKER}", tostring(reply)}}
  end
end
return out"#
    ));
    let sha1 = fred::util::sha1_hash(&source);
    Batch { source, sha1 }
});

#[cfg(test)]
mod tests {
    use super::*;
    use crate::options::MAX_QUEUED_WAITERS;

    #[test]
    fn every_script_is_at_its_id() {
        for (i, script) in SCRIPTS.iter().enumerate() {
            assert_eq!(script.id, i);
        }
    }

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
