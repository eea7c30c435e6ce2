-- ACQUIRE_MANY: one attempt at several resources at once on one node, all or none.
--
-- Redlock step 2 (acquire the lock in every instance), for a lock of several resources: on
-- this node either every resource's key is set to the token, or none is. The quorum is
-- counted over nodes, as for one resource.
--
-- KEYS: witness_key    the node's data witness (quarantine_check in prelude.lua)
--       marker_key     the quarantine marker
--       key...         the resources' lock keys, then, as many, their window markers for
--                      foreign clients (release_handover.lua): KEYS[3 .. 2 + n] are the lock
--                      keys, KEYS[3 + n .. 2 + 2n] the windows
-- ARGV: token          the attempt's token
--       ttl_ms         the lock's ttl, in ms
--       quarantine_ms  the quarantine, in ms (0: off)
--       windowed       "1" when the handle has windows for foreign clients on
--
-- Returns `{1 | 0 | -1 | -3, 0, 0[, left, holders]}`: 1 granted (every key set), 0 refused
-- (nothing set), -1 quarantined, -3 a handle with another quarantine (prelude.lua); when
-- refused, the ms until the first busy key (or its window) expires, and who refused it on
-- each busy key: `<i>:<holder>` for each, comma-separated, `i` the key's place from 1 and
-- `<holder>` its holder's digest (holder_digest) or "window", so that the client can tell a
-- split from a holder key by key.
--
-- Every key is checked before any is written: a key that exists (a holder's string, a hash
-- of holders in modes, anyone else's data) or a window that is open refuses the whole
-- attempt, and nothing is written. A node therefore never holds part of a set: a client
-- never holds some resources of a set while it waits for the others (no hold-and-wait, so no
-- deadlock between sets that overlap).
local witness_key, marker_key = KEYS[1], KEYS[2]
local token, ttl_ms, quarantine_ms, windowed = ARGV[1], ARGV[2], ARGV[3], ARGV[4] == "1"
local n = (#KEYS - 2) / 2

local quarantined = quarantine_check(quarantine_ms, witness_key, marker_key)
if quarantined then return quarantined end
local left, holders = nil, {}
for i = 1, n do
  local key, window_key = KEYS[2 + i], KEYS[2 + n + i]
  if windowed and window_open(window_key) then
    left = left or ms_left(window_key)
    table.insert(holders, i .. ":window")
  -- Anything at the key refuses it (a string, a hash of holders in modes, anyone's data):
  -- GET answers nil only for a missing key (under `pcall`, a WRONGTYPE error is not nil).
  elseif redis.pcall("get", key) then
    left = left or ms_left(key)
    table.insert(holders, i .. ":" .. holder_digest(key))
  end
end
if left then return {0, 0, 0, left, table.concat(holders, ",")} end
for i = 1, n do
  redis.call("set", KEYS[2 + i], token, "PX", ttl_ms)
end
return {1, 0, 0}
