-- ACQUIRE_PERMIT: an attempt at one permit of a counting semaphore on one node.
--
-- Redlock step 2 (acquire the lock in every instance with the same key and random value), for
-- a semaphore of K permits: K plain locks, one per slot. The node takes the first free slot in
-- the client's order with `SET NX PX`; the client holds a permit when one slot was granted by
-- a quorum, and releases every other slot it took (step 5).
--
-- KEYS: witness_key    the node's data witness (quarantine_check in prelude.lua)
--       marker_key     the quarantine marker
--       queue_key      the semaphore's waiter queue (a sorted set of markers scored by wait
--                      start), also the channel its slots' releases publish hand-overs on
--       alive_key      until when each queued waiter counts (a sorted set of the same markers
--                      scored by ms of the node's clock)
--       listen_key     the semaphore's listen flag (release_handover.lua), set with the
--                      queue's ttl by a queued waiter refused, so that its slots' releases
--                      hand them over
--       capacity_key   the semaphore's number of permits, as the first attempt stored it
--       slot_key...    the K slots' lock keys, in the order the client prefers them
-- ARGV: token          the attempt's token
--       ttl_ms         the permit's ttl, in ms
--       quarantine_ms  the quarantine, in ms (0: off)
--       marker         the waiter's marker (`~` and 16 hex digits) once it has joined the
--                      queue; empty before
--       score          the waiter's wait start, ms since the Unix epoch (its rank)
--       queue_ttl_ms   how long the queue outlives this attempt
--       alive_ms       how long the waiter's entry counts after this attempt
--       permits        K, the number of permits the client asks with
--
-- Returns `{1, 0, slot, holders}` when granted (`slot` the 1-based index of the slot taken, in
-- the order of KEYS), `{0, 0, 0, left, holders}` when refused (`left` the ms until the
-- earliest busy slot expires, -1 if unknown), `{-1, 0}` quarantined, `{-3, 0}` a handle with
-- another quarantine (prelude.lua), `{-4, 0, stored}` when the capacity key holds another
-- number of permits than `permits` (nothing is taken or queued). `holders` says who held each slot before this request
-- took one, comma-separated in the order of KEYS: the holder's digest (holder_digest in
-- prelude.lua) for a busy slot, empty for a free one (or the one reserved for this waiter),
-- and "ahead" for a free one kept for earlier waiters (a refusal by rank).
-- The client tells a busy semaphore from a split by them: busy when every permit may be held,
-- each slot by one holder on a quorum of nodes (counting those that did not answer).
--
-- A slot reserved for this waiter by a release's hand-over (release_handover.lua: the slot's
-- value is the waiter's marker) is taken at once. Otherwise the first free slot, unless the
-- waiters queued here that started waiting before this one (and still count) are at least as
-- many as the free slots: those are theirs, so a newcomer does not pass them. The entries of
-- waiters that stopped attempting (crashed) stop counting `alive_ms` after their last attempt,
-- and are dropped here as they are met (at most K + 32 entries are read per attempt). A
-- queued waiter granted a slot leaves the queue; one refused keeps its place (`ZADD NX`, at
-- most MAX_QUEUED_WAITERS (1024) entries) and renews its entry. The queue commands run under
-- `pcall`: without them (ACL) it is an attempt without hand-over or ranking. While no waiter
-- has an entry (the liveness set is gone), the attempt neither ranks nor drops: nobody counts
-- ahead of it, and the queue's entries of waiters that died meanwhile are dropped by the next
-- attempt that finds the set, or expire with the queue.
--
-- The capacity: the first attempt on the semaphore stores `permits` at `capacity_key`, and
-- every attempt keeps it at least as long as the longest slot it read (or granted) lives, so
-- that two handles asking with different numbers of permits, which would use different sets
-- of slots, are refused instead of together admitting more holders than the smaller number.
-- A permit's extension (extend_permit.lua) keeps it at least as long as the permit's slot.
--
-- `alive_key` holds entries of queued waiters only: a waiter that leaves (leave.lua) leaves
-- both sets, and each attempt drops the entries that stopped counting and, among the 8 that
-- count for the shortest time, those no longer queued (a waiter a release's hand-over popped
-- from the queue and that never came back), so that the set stays within the queue's size
-- plus the waiters that left within the last `alive_ms`.
local witness_key, marker_key, queue_key, alive_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local listen_key, capacity_key = KEYS[5], KEYS[6]
local token, ttl_ms, quarantine_ms = ARGV[1], ARGV[2], ARGV[3]
local marker, score, queue_ttl_ms, alive_ms = ARGV[4], ARGV[5], ARGV[6], ARGV[7]
local permits = ARGV[8]
local first_slot = 7

local quarantined = quarantine_check(quarantine_ms, witness_key, marker_key)
if quarantined then return quarantined end
local stored = redis.pcall("get", capacity_key)
if type(stored) == "string" and stored ~= permits then return {-4, 0, stored} end
-- Stores the capacity for at least `ms` more, or as long as it had if longer (written each
-- time, so that no branch turns on the millisecond the clock reads).
local function keep_capacity(ms)
  local left = tonumber(redis.pcall("pttl", capacity_key)) or -2
  if ms > 0 or left > 0 then
    redis.pcall("set", capacity_key, permits, "PX", math.max(ms, left))
  end
end
-- The node's clock, and the liveness set's clean-up and the ranking below, only while the
-- set exists: without it no queued waiter counts (none ranks ahead of this one) and there is
-- nothing to drop, and an uncontended attempt runs one `EXISTS` instead of four commands. A
-- waiter refused here reads the clock then, to enter the set (`refused`).
local now = nil
if redis.pcall("exists", alive_key) == 1 then now = node_now_or_nil() end
if now then
  redis.pcall("zremrangebyscore", alive_key, "-inf", now)
  local soonest = redis.pcall("zrange", alive_key, 0, 7)
  if type(soonest) == "table" then
    for _, other in ipairs(soonest) do
      if redis.pcall("zscore", queue_key, other) == false then
        redis.pcall("zrem", alive_key, other)
      end
    end
  end
end
local holders = {}
-- When the latest busy slot frees, in ms (read below, before any refusal).
local latest = 0
local function refused(earliest)
  if marker ~= "" then
    if (tonumber(redis.pcall("zcard", queue_key)) or 0) < 1024 then
      redis.pcall("zadd", queue_key, "NX", score, marker)
    end
    redis.pcall("pexpire", queue_key, queue_ttl_ms)
    if listen_key then redis.pcall("set", listen_key, "1", "PX", queue_ttl_ms) end
    local at = now or node_now_or_nil()
    if at then
      redis.pcall("zadd", alive_key, at + tonumber(alive_ms), marker)
      redis.pcall("pexpire", alive_key, queue_ttl_ms)
    end
  end
  keep_capacity(latest)
  return {0, 0, 0, earliest, table.concat(holders, ",")}
end

-- Who holds each slot (empty: free for this request, the one reserved for it included); the
-- first free one; the one reserved for it; when the earliest and the latest busy one free.
local free, reserved, count, earliest = nil, nil, 0, -1
for i = first_slot, #KEYS do
  local current = redis.pcall("get", KEYS[i])
  holders[i - first_slot + 1] = ""
  if marker ~= "" and current == marker then
    if not reserved then reserved = i end
  elseif not current then
    count = count + 1
    if not free then free = i end
  else
    holders[i - first_slot + 1] = holder_digest(KEYS[i])
    local left = ms_left(KEYS[i])
    if left > 0 and (earliest < 0 or left < earliest) then earliest = left end
    if left > latest then latest = left end
  end
end
local function take(i, is_reserved)
  if is_reserved then
    redis.call("set", KEYS[i], token, "PX", ttl_ms)
  elseif not redis.call("set", KEYS[i], token, "NX", "PX", ttl_ms) then
    return nil
  end
  if marker ~= "" then
    redis.pcall("zrem", queue_key, marker)
    redis.pcall("zrem", alive_key, marker)
  end
  keep_capacity(math.max(latest, tonumber(ttl_ms)))
  return {1, 0, i - first_slot + 1, table.concat(holders, ",")}
end

if reserved then return take(reserved, true) end
if not free then return refused(earliest) end
-- The waiters ahead of this one, while they are fewer than the free slots: those queued here
-- that started waiting before it and still count; the entries that stopped counting are
-- dropped on the way. Without the node's clock, no ranking.
if now then
  local before =
    redis.pcall("zrangebyscore", queue_key, "-inf", "(" .. score, "LIMIT", 0, count + 32)
  if type(before) == "table" then
    local ahead = 0
    for _, other in ipairs(before) do
      local counts_until = tonumber(redis.pcall("zscore", alive_key, other))
      if counts_until and counts_until > now then
        ahead = ahead + 1
        if ahead >= count then
          -- The free slots are the earlier waiters': reported as held (by "ahead"), so that
          -- the client counts them as busy rather than free for it.
          for i = 1, #holders do
            if holders[i] == "" then holders[i] = "ahead" end
          end
          return refused(earliest)
        end
      else
        redis.pcall("zrem", queue_key, other)
        redis.pcall("zrem", alive_key, other)
      end
    end
  end
end
return take(free, false) or refused(earliest)
