-- ACQUIRE_PERMIT: an attempt at one permit of a counting semaphore on one node.
--
-- Redlock step 2 (acquire the lock in every instance with the same key and random value), for
-- a semaphore of K permits: K plain locks, one per slot. The node takes the first free slot in
-- the client's order with `SET NX PX`; the client holds a permit when one slot was granted by
-- a quorum, and releases every other slot it took (step 5).
--
-- KEYS: witness_key    the node's data witness (quarantine_check in prelude.lua)
--       marker_key     the quarantine marker
--       queue_key      the semaphore's waiter queue (a sorted set scored by wait start), also
--                      the channel its slots' releases publish hand-overs on
--       slot_key...    the K slots' lock keys, in the order the client prefers them
-- ARGV: token          the attempt's token
--       ttl_ms         the permit's ttl, in ms
--       quarantine_ms  the quarantine, in ms (0: off)
--       marker         the waiter's marker (`~` and 16 hex digits); empty when the attempt
--                      is not queued
--       score          the waiter's wait start, ms since the Unix epoch (its rank)
--       queue_ttl_ms   how long the queue outlives this attempt
--
-- Returns `{1, 0, slot}` when granted (`slot` the 1-based index of the slot taken, in the
-- order of KEYS), `{0, 0, 0, left, "permits"}` when every slot is busy (`left` the ms until
-- the earliest of them expires, -1 if unknown), `{-1, 0}` quarantined, `{-3, 0}` a handle
-- with another quarantine (prelude.lua).
--
-- A slot reserved for this waiter by a release's hand-over (release_handover.lua: the slot's
-- value is the waiter's marker) is taken first; otherwise the first free slot. A queued
-- waiter granted a slot leaves the queue; one refused joins it (`ZADD NX`, at most
-- MAX_QUEUED_WAITERS (1024) entries) and keeps it alive for `queue_ttl_ms`. The queue
-- commands run under `pcall`: without them (ACL) it is an attempt without hand-over.
local witness_key, marker_key, queue_key = KEYS[1], KEYS[2], KEYS[3]
local token, ttl_ms, quarantine_ms = ARGV[1], ARGV[2], ARGV[3]
local marker, score, queue_ttl_ms = ARGV[4], ARGV[5], ARGV[6]

local quarantined = quarantine_check(quarantine_ms, witness_key, marker_key)
if quarantined then return quarantined end
local free, reserved, earliest = nil, false, -1
for i = 4, #KEYS do
  local current = redis.pcall("get", KEYS[i])
  if marker ~= "" and current == marker then
    free, reserved = i, true
    break
  end
  if not current then
    if not free then free = i end
  else
    local left = ms_left(KEYS[i])
    if left > 0 and (earliest < 0 or left < earliest) then earliest = left end
  end
end
if free then
  if reserved then
    redis.call("set", KEYS[free], token, "PX", ttl_ms)
  elseif not redis.call("set", KEYS[free], token, "NX", "PX", ttl_ms) then
    return {0, 0, 0, earliest, "permits"}
  end
  if marker ~= "" then redis.pcall("zrem", queue_key, marker) end
  return {1, 0, free - 3}
end
if marker ~= "" then
  if (tonumber(redis.pcall("zcard", queue_key)) or 0) < 1024 then
    redis.pcall("zadd", queue_key, "NX", score, marker)
  end
  redis.pcall("pexpire", queue_key, queue_ttl_ms)
end
return {0, 0, 0, earliest, "permits"}
