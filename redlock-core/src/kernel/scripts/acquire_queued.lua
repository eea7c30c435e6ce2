-- ACQUIRE_QUEUED: a queued waiter's attempt on one node.
--
-- Redlock step 2 (acquire the lock in every instance), for an acquisition that waits: the
-- spec's "Retry on failure", with a queue on every node so that waiters are served in order.
--
-- KEYS: key            the lock key
--       queue_key      the waiter queue (a sorted set scored by wait start)
--       window_key     the window marker for foreign clients (release_handover.lua)
--       streak_key     the streak's start (release_handover.lua)
--       witness_key    the node's data witness (quarantine_check in prelude.lua)
--       marker_key     the quarantine marker
--       listen_key     the resource's listen flag (release_handover.lua)
--       counter_key    optional: the resource's fencing counter, when a token is asked for
--       floor_key      optional, with counter_key: the key prefix's fencing floor (fence.lua)
-- ARGV: token          the attempt's token
--       ttl_ms         the lock's ttl, in ms
--       marker         the waiter's marker (`~` and 16 hex digits), its member in the queue
--       score          the waiter's wait start, ms since the Unix epoch (its rank)
--       queue_ttl_ms   how long the queue outlives this attempt
--       quarantine_ms  the quarantine, in ms (0: off)
--
-- Returns `{1 | 0 | -1 | -3, counter, busy[, left, holder]}`, as acquire.lua: `busy` the
-- streak read when granted (busy_read), `left` when refused the ms until the key (or the
-- window) expires, `holder` who refused it (holder_digest, or "window").
--
-- Takes the key if it is free (and no window for foreign clients is open) or reserved for
-- this waiter (a hand-over named it), and leaves the queue. Otherwise joins the queue
-- (`ZADD NX`, so a waiter keeps its place) unless it already holds MAX_QUEUED_WAITERS (1024)
-- entries (a waiter left out is woken by its retry timer), and keeps the queue alive for
-- `queue_ttl_ms`, and sets the listen flag for as long, so that the next release hands the key
-- over. The queue commands run under `pcall`: without them (ACL) it is a plain attempt.
local key, queue_key, window_key, streak_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local witness_key, marker_key, listen_key = KEYS[5], KEYS[6], KEYS[7]
local counter_key, floor_key = KEYS[8], KEYS[9]
local token, ttl_ms, marker, score = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local queue_ttl_ms, quarantine_ms = ARGV[5], ARGV[6]

local quarantined = quarantine_check(quarantine_ms, witness_key, marker_key)
if quarantined then return quarantined end
local fence = fence_read(counter_key, floor_key)
local current = redis.pcall("get", key)
if current == marker or (not current and not window_open(window_key)) then
  redis.call("set", key, token, "PX", ttl_ms)
  redis.pcall("zrem", queue_key, marker)
  return {1, fence, busy_read(streak_key)}
end
if (tonumber(redis.pcall("zcard", queue_key)) or 0) < 1024 then
  redis.pcall("zadd", queue_key, "NX", score, marker)
end
redis.pcall("pexpire", queue_key, queue_ttl_ms)
if listen_key then redis.pcall("set", listen_key, "1", "PX", queue_ttl_ms) end
local left = ms_left(key)
local holder = "window"
if left < 0 then left = ms_left(window_key) end
if current then holder = holder_digest(key) end
return {0, fence, 0, left, holder}
