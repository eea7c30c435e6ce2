-- ACQUIRE: a plain attempt on one node, `SET key token NX PX ttl`.
--
-- Redlock step 2 (acquire the lock in every instance with the same key and random value).
--
-- KEYS: key            the lock key
--       window_key     the window marker for foreign clients (release_handover.lua)
--       streak_key     the streak's start (release_handover.lua)
--       witness_key    the node's data witness (quarantine_check in prelude.lua)
--       marker_key     the quarantine marker
--       counter_key    optional: the resource's fencing counter, when a token is asked for
--       floor_key      optional, with counter_key: the key prefix's fencing floor (fence.lua)
-- ARGV: token          the attempt's token
--       ttl_ms         the lock's ttl, in ms
--       quarantine_ms  the quarantine, in ms (0: off)
--       windowed       "1": refuse a key a window for foreign clients left free, and read
--                      the streak; "2": read the streak only (a request that polls, on a key
--                      its handle saw contended); "0": neither (windows off, or a key not
--                      seen contended: the key is taken as a foreign client would)
--
-- Returns, in one round trip, `{1 | 0 | -1 | -3, counter, busy[, left, holder]}`: 1 granted,
-- 0 refused, -1 quarantined, -3 a handle with another quarantine (prelude.lua); `counter`
-- the fencing hint (fence_read); `busy` when granted, the streak of hand-overs (busy_read);
-- `left` when refused, the ms until the holder's key (or the window) expires (ms_left);
-- `holder` who refused it (holder_digest, or "window").
--
-- Refused while the node is quarantined, and while a window for foreign clients is open when
-- `windowed` is "1". An attempt with "0" (the first attempt on a resource the handle has not
-- seen contended) that asks for no fencing token, with the quarantine off, runs the spec's
-- `SET NX PX` and nothing else (its `busy` is 0).
local key, window_key, streak_key = KEYS[1], KEYS[2], KEYS[3]
local witness_key, marker_key, counter_key, floor_key = KEYS[4], KEYS[5], KEYS[6], KEYS[7]
local token, ttl_ms, quarantine_ms = ARGV[1], ARGV[2], ARGV[3]
local windowed, streak = ARGV[4] == "1", ARGV[4] == "1" or ARGV[4] == "2"

local quarantined = quarantine_check(quarantine_ms, witness_key, marker_key)
if quarantined then return quarantined end
local fence = fence_read(counter_key, floor_key)
if windowed and window_open(window_key) then
  return {0, fence, 0, ms_left(window_key), "window"}
end
if not redis.call("set", key, token, "NX", "PX", ttl_ms) then
  return {0, fence, 0, ms_left(key), holder_digest(key)}
end
if streak then return {1, fence, busy_read(streak_key)} end
return {1, fence, 0}
