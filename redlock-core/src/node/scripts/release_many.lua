-- RELEASE_MANY: compare-and-delete of a lock of several resources on one node.
--
-- Redlock step: the release ("Releasing the lock"), and step 5, the clean-up of a failed
-- attempt, for a lock of several resources (acquire_many.lua).
--
-- KEYS: key...     the resources' lock keys, then, as many, their waiter queues: KEYS[1 .. n]
--                  the lock keys, KEYS[n + 1 .. 2n] the queues (also their wake-up channels)
-- ARGV: token      the holder's (or the failed attempt's) token
--       wake       "1" to wake each released key's waiters (hand-over on), "0"
--
-- Returns 1 if every key held our token and was deleted, 0 otherwise (the keys that held it
-- are deleted all the same).
--
-- Deletes each key that still holds `token` (the spec's compare-and-delete, per key); a key
-- another holder has is left. With `wake`, "*" is published on the queue of each key deleted
-- that has waiters queued, so that they attempt at once rather than at their next retry.
local token, wake = ARGV[1], ARGV[2] == "1"
local n = #KEYS / 2
local all = 1

for i = 1, n do
  local key = KEYS[i]
  if redis.pcall("get", key) == token then
    redis.call("del", key)
    if wake then
      local queued = redis.pcall("zcard", KEYS[n + i])
      if type(queued) == "number" and queued > 0 then
        redis.pcall("publish", KEYS[n + i], "*")
      end
    end
  else
    all = 0
  end
end
return all
