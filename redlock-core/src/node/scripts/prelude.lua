-- The helpers the lock's scripts share, written once.
--
-- Placed once at the top of the dispatch script (dispatch.lua, ahead of every script it
-- holds) and of the inspect script (inspect.lua). It only defines local functions and one
-- table: it runs no command and reads no KEYS or ARGV, so a script calls the helpers it
-- needs with its own named keys and arguments.
--
-- Which helpers run their commands with `redis.pcall` and which with `redis.call` is part of
-- the scripts' behaviour: a `pcall` helper degrades quietly when a command is refused (an
-- ACL user without it, a key of another type), a `call` helper raises, and the dispatch
-- script then answers the whole call with an error.

-- The node's clock in milliseconds: the clock the per-holder expiries of a resource held in
-- modes use. Raises if `TIME` is refused.
local function node_now()
  local clock = redis.call("time")
  return tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
end

-- The node's clock in milliseconds, or nil when `TIME` cannot be run (under `pcall`: an ACL
-- user without it). For the optional bookkeeping of streaks.
local function node_now_or_nil()
  local clock = redis.pcall("time")
  if type(clock) ~= "table" or not clock[2] then return nil end
  return tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
end

-- The quarantine check that opens every acquire script, with `quarantine_ms` (the script's
-- raw argument: the quarantine in ms) above zero: the node grants nothing, and the check
-- returns `{-1, 0}`, while it may have lost a key that a holder still counts on. This is the
-- distlock spec's "delayed restart" ("Performance, crash recovery and fsync") enforced by the
-- node itself, atomically with the `SET`, and widened from restarts to every loss of data.
-- Returns nil when the script may go on (no quarantine, or the node has not lost data).
--
-- The node's data witness `witness_key` holds the `run_id` of the server that wrote it. When
-- it is missing or holds another id, the node's data is not the data it had when it last
-- voted: it was flushed (`FLUSHALL`, `FLUSHDB`), the server restarted (a new `run_id`,
-- whatever it reloaded from disk), or it was re-synced from or loaded with another server's
-- data (`REPLICAOF`: the witness copied from there holds that server's id). The check then
-- writes the witness with this server's id and the quarantine marker `marker_key` with a ttl
-- of the quarantine (`PX`), and refuses. While the marker exists, it refuses. The argument:
-- every key this node lost was written before the loss, with a ttl of at most the quarantine
-- (the builder requires the quarantine to cover every ttl, and an extension renews a key to
-- at most its ttl), so it would have expired by the loss plus the quarantine; the marker is
-- written at the first acquisition after the loss, so it outlives all of them, and until then
-- the node voted for nobody. No clock is read: the marker's ttl is counted by the node like
-- every lock key's.
--
-- The witness also records the quarantine it was written with (`"<run_id> <ms>"`), and a
-- handle with another quarantine is refused on that node (`{-3, 0}`): after a loss, the first
-- handle to see it starts the quarantine with its own length, and a shorter one than another
-- handle's ttls would let that node vote while their keys should still be held. Every handle
-- of a key prefix must use the same quarantine. A handle with a longer quarantine than the
-- marker was written with (its value) lengthens what is left of it by the difference.
--
-- Costs, with the quarantine on: an `INFO server` and two `GET`s per acquisition (ACL:
-- `+info`, and the prefix's keys), and the witness key, one per key prefix per node. With the
-- quarantine off, no command at all: the client then passes the lock key as both keys.
local function quarantine_check(quarantine_ms, witness_key, marker_key)
  local q = tonumber(quarantine_ms) or 0
  if q > 0 then
    local id = string.match(redis.call("info", "server"), "run_id:(%x+)") or "unknown"
    local witness = redis.call("get", witness_key)
    local wid, wq = nil, nil
    if type(witness) == "string" then wid, wq = string.match(witness, "^(%x+) (%d+)$") end
    if wid ~= id then
      redis.call("set", marker_key, q, "PX", q)
      redis.call("set", witness_key, id .. " " .. q)
      return {-1, 0}
    end
    if tonumber(wq) ~= q then return {-3, 0} end
    local asked = redis.call("get", marker_key)
    if asked then
      asked = tonumber(asked) or 0
      if asked < q then
        local left = redis.call("pttl", marker_key)
        if left > 0 then redis.call("set", marker_key, q, "PX", left + q - asked) end
      end
      return {-1, 0}
    end
  end
  return nil
end

-- How long, in ms of the node's clock, the key has been busy without a window for foreign
-- clients (0 without a streak): read by every plain grant from the streak's start at
-- `streak_key` (written by release_handover.lua). Under `pcall`: without `TIME` or access to
-- that key, 0.
local function busy_read(streak_key)
  local busy = 0
  local started = redis.pcall("get", streak_key)
  if type(started) == "string" then
    local now = node_now_or_nil()
    if now then
      busy = now - (tonumber(started) or 0)
      if busy < 0 then busy = 0 end
    end
  end
  return busy
end

-- The ms until `key` expires (`PTTL`), or -1 when it has no expiry, is gone, or cannot be
-- read (under `pcall`): what a refused attempt reports as the holder's remaining ttl.
local function ms_left(key)
  local ms = redis.pcall("pttl", key)
  if type(ms) == "number" then return ms end
  return -1
end

-- Who refused an attempt, so that the client can tell a split vote from a holder: the first
-- 16 hex digits of the SHA-1 of the value at `key` (a holder's token, or the marker of the
-- waiter it is reserved for), or "?" when it is not a string (a resource held in modes). A
-- refusal by a window for foreign clients reports "window" (the scripts say so themselves).
-- A digest, never the token: it cannot be used to release or extend the lock.
local function holder_digest(key)
  local v = redis.pcall("get", key)
  if type(v) == "string" then return string.sub(redis.sha1hex(v), 1, 16) end
  return "?"
end

-- true while the window for foreign clients at `window_key` is open (release_handover.lua):
-- every request of ours that waits refuses a free key while it is (one that polls is sent
-- without the check). Under `pcall` (without access to that key: no window).
local function window_open(window_key)
  return redis.pcall("exists", window_key) == 1
end

-- Fencing counters are compared as decimal strings (length, then digits), never as Lua
-- numbers (doubles, exact only below 2^53). `decimal(v)`: `v` without leading zeros if it is
-- a plain decimal string, else "0".
local function decimal(v)
  if type(v) ~= "string" or not string.match(v, "^%d+$") then return "0" end
  local digits = string.match(v, "^0*(%d-)$")
  if digits == "" then return "0" end
  return digits
end

-- `a < b` for two decimal strings without leading zeros (see `decimal`).
local function below(a, b)
  if #a ~= #b then return #a < #b end
  return a < b
end

-- What the acquire scripts read for the fencing write-back: the resource's counter
-- `counter_key` when it is given (the client passes the fencing keys only when it asks for a
-- token; 0 without them), or, when that counter has expired, the highest claim in the key
-- prefix's floor `floor_key` (fence.lua), so that the first claim after it is confirmed at
-- once. Only a hint: the write-back itself is what fence.lua checks.
local function fence_read(counter_key, floor_key)
  if not counter_key then return 0 end
  local fence = redis.call("get", counter_key)
  if fence then return fence end
  local past, current = string.match(redis.call("get", floor_key) or "", "^(%d+) (%d+)$")
  fence = current or "0"
  if past and below(current, past) then fence = past end
  return fence
end

-- The six lock modes, as a mode entry spells them.
local MODES = {NL = true, CR = true, CW = true, PR = true, PW = true, EX = true}

-- Parses one field of a hash at a mode lock's key: returns the entry's mode, expiry (ms of
-- the node's clock), rank (the waiter's `since`, 0 for a holder) and whether it is a
-- waiter's, or nil when the field is not an entry of ours: a holder's field is a token (40
-- lowercase hex digits) valued "<MODE> <expiry>", a waiter's is `~` and 16 hex digits valued
-- "<MODE> <expiry> <since>", <MODE> one of the six modes and the numbers decimal. Anything
-- else (a field that is not a token or a marker, a mode that is not one of the six, a value
-- with anything more or less than our numbers) was written by someone else.
local function mode_entry(field, value)
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
