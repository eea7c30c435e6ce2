-- EXTEND_PERMIT: compare-and-pexpire of a semaphore permit's slot, keeping the semaphore's
-- stored number of permits at least as long.
--
-- Redlock step: "Making the algorithm more reliable: Extending the lock", for a permit (a
-- plain lock on one of the semaphore's slots; see acquire_permit.lua).
--
-- KEYS: slot_key      the permit's slot (its lock key)
--       capacity_key  the semaphore's number of permits, as its first attempt stored it
-- ARGV: token         the holder's token
--       ttl_ms        the new ttl, in ms
--       permits       the number of permits the holder took the permit with
--
-- Returns 1 if the slot holds our token (and now lives at least `ttl_ms`), 0 otherwise.
--
-- As extend.lua for the slot: only our token's slot is extended, never shortened, never
-- re-created. Then the stored number of permits, when it is ours (or gone: the slot, which
-- holds our token, was granted under ours), is kept at least as long as the slot, so that a
-- handle asking with another number stays refused while the permit lives. A number another
-- handle stored is left to expire: a node where our slot is not held says nothing of it.
local slot_key, capacity_key = KEYS[1], KEYS[2]
local token, ttl, permits = ARGV[1], tonumber(ARGV[2]), ARGV[3]

if redis.pcall("get", slot_key) ~= token then return 0 end
if redis.call("pttl", slot_key) < ttl then redis.call("pexpire", slot_key, ARGV[2]) end
local stored = redis.pcall("get", capacity_key)
if stored == permits or stored == false then
  if redis.call("pttl", capacity_key) < ttl then
    redis.call("set", capacity_key, permits, "PX", ARGV[2])
  end
end
return 1
