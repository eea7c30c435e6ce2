-- RELEASE_SLOTS: compare-and-delete over a semaphore's slots, the clean-up of a permit attempt.
--
-- Redlock step 5 (on failure, unlock every instance), for an attempt at a permit: the node
-- may have given the attempt any one slot, and a node whose answer was not heard may still
-- do so (its call lands later, before this one in the node's order), so every slot the
-- attempt may hold is released in one call rather than one release per slot.
--
-- KEYS: slot_key...  the slots' lock keys
-- ARGV: token        the attempt's token
--
-- Deletes each slot key that still holds `token` (release.lua on each). Returns how many it
-- deleted.
local token = ARGV[1]
local deleted = 0
for i = 1, #KEYS do
  if redis.pcall("get", KEYS[i]) == token then
    deleted = deleted + redis.call("del", KEYS[i])
  end
end
return deleted
