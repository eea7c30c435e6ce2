-- ACQUIRE: a plain attempt on one node at a set of lock keys, all or none: `SET key token NX
-- PX ttl` on each. One resource is a set of one; a lock of several resources sends them all.
--
-- Redlock step 2 (acquire the lock in every instance with the same key and random value).
-- For several resources the quorum is counted over nodes, as for one: a node counts when it
-- took every key.
--
-- KEYS: key...         the lock keys, `n` of them (ARGV[5])
--       window_key...  as many window markers for foreign clients (release_handover.lua):
--                      KEYS[1 .. n] the lock keys, KEYS[n + 1 .. 2n] their windows
--       streak_key     the first key's streak start (release_handover.lua)
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
--       n              optional: how many lock keys (1 when absent)
--
-- Returns, in one round trip, `{1 | 0 | -1 | -3, counter, busy[, left, holder]}`: 1 granted
-- (every key set), 0 refused (nothing set), -1 quarantined, -3 a handle with another
-- quarantine (prelude.lua); `counter` the fencing hint (fence_read); `busy` when granted,
-- the streak of hand-overs (busy_read; a set of several keeps none, as it is never handed
-- over); `left` when refused, the ms until the first busy key (or its window) expires
-- (ms_left); `holder` who refused it (holder_digest, or "window"): for one key its name, for
-- several `<i>:<name>` for each busy key, comma-separated, `i` the key's place from 1, so
-- that the client can tell a split from a holder key by key.
--
-- Refused while the node is quarantined, and while a window for foreign clients is open when
-- `windowed` is "1". An attempt at one key with "0" (the first attempt on a resource the
-- handle has not seen contended) that asks for no fencing token, with the quarantine off,
-- runs the spec's `SET NX PX` and nothing else (its `busy` is 0). A key that exists (a
-- holder's string, a hash of holders in modes, anyone else's data) refuses the whole set, and
-- the keys this call set before it are deleted: a node never holds part of a set (but where
-- a SET raises, out of memory, the keys set before it stay until the attempt's clean-up or
-- their ttl), so nobody holds some resources while waiting for others (no hold-and-wait, no
-- deadlock between sets that overlap).
local token, ttl_ms, quarantine_ms = ARGV[1], ARGV[2], ARGV[3]
local windowed, streak = ARGV[4] == "1", ARGV[4] == "1" or ARGV[4] == "2"
local n = tonumber(ARGV[5]) or 1
local streak_key, witness_key, marker_key = KEYS[2 * n + 1], KEYS[2 * n + 2], KEYS[2 * n + 3]
local counter_key, floor_key = KEYS[2 * n + 4], KEYS[2 * n + 5]

local quarantined = quarantine_check(quarantine_ms, witness_key, marker_key)
if quarantined then return quarantined end
local fence = fence_read(counter_key, floor_key)
local taken, holders, left = {}, {}, nil
for i = 1, n do
  local key, window_key = KEYS[i], KEYS[n + i]
  -- What refused this key: its window, or the key itself.
  local at
  if windowed and window_open(window_key) then
    at = window_key
  elseif left then
    -- Already refused: only who holds the rest is read, and nothing more is written. GET
    -- answers nil only for a missing key (under `pcall`, a WRONGTYPE error is not nil).
    if redis.pcall("get", key) then at = key end
  elseif redis.call("set", key, token, "NX", "PX", ttl_ms) then
    table.insert(taken, key)
  else
    at = key
  end
  if at then
    left = left or ms_left(at)
    local holder = "window"
    if at == key then holder = holder_digest(key) end
    if n > 1 then holder = i .. ":" .. holder end
    table.insert(holders, holder)
  end
end
if left then
  for _, key in ipairs(taken) do redis.call("del", key) end
  return {0, fence, 0, left, table.concat(holders, ",")}
end
if streak and n == 1 then return {1, fence, busy_read(streak_key)} end
return {1, fence, 0}
