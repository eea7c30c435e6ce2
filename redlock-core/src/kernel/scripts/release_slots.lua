-- RELEASE_SLOTS: compare-and-delete over several lock keys in one call: the clean-up of a
-- permit attempt, and the release (or clean-up) of a lock of several resources.
--
-- Redlock step 5 (on failure, unlock every instance), and the release ("Releasing the lock"),
-- over several keys signed by one token:
-- - a permit attempt: the node may have given the attempt any one slot, and a node whose
--   answer was not heard may still do so (its call lands later, before this one in the
--   node's order), so every slot the attempt may hold is released in one call rather than
--   one release per slot;
-- - a lock of several resources (acquire_many.lua): every resource's key at once.
--
-- KEYS: key...    the lock keys; with `wake`, followed by as many waiter queues (also their
--                 wake-up channels), then as many listen flags: KEYS[1 .. n] the keys,
--                 KEYS[n + 1 .. 2n] the queues, KEYS[2n + 1 .. 3n] the flags
-- ARGV: token     the holder's (or the attempt's) token
--       wake      optional: "1" to wake the waiters of each key deleted whose listen flag was
--                 there ("*" on its queue's channel: every waiter attempts; requests in a
--                 mode refused by the string listen there without being queued), when
--                 releasing a holder's lock
--
-- Deletes each key that still holds `token` (release.lua on each; with `wake`, the key and
-- its listen flag in one `DEL`, so that a key nobody listens to costs what release.lua
-- does); a key another holder has is left. Returns how many it deleted.
local token, wake = ARGV[1], ARGV[2] == "1"
local n = #KEYS
if wake then n = math.floor(#KEYS / 3) end
local deleted = 0
for i = 1, n do
  if redis.pcall("get", KEYS[i]) == token then
    if wake then
      -- Without access to the flag's key (ACL), the key alone, and waiters woken.
      local gone = redis.pcall("del", KEYS[i], KEYS[2 * n + i])
      if type(gone) ~= "number" then
        redis.call("del", KEYS[i])
        gone = 2
      end
      deleted = deleted + 1
      if gone > 1 then redis.pcall("publish", KEYS[n + i], "*") end
    else
      deleted = deleted + redis.call("del", KEYS[i])
    end
  end
end
return deleted
