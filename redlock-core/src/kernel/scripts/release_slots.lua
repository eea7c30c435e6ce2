-- RELEASE_SLOTS: compare-and-delete over several lock keys in one call, waking each key's
-- waiters: the release of a lock of several resources by its holder, with hand-over on.
--
-- Redlock step: the release ("Releasing the lock"), over several keys signed by one token
-- (release.lua over each key), where a request that could not queue may listen for it: a
-- lock of several resources, a mode request refused by the plain key.
--
-- KEYS: key...    the lock keys, followed by as many waiter queues (also their wake-up
--                 channels), then as many listen flags: KEYS[1 .. n] the keys,
--                 KEYS[n + 1 .. 2n] the queues, KEYS[2n + 1 .. 3n] the flags
-- ARGV: token     the holder's token
--
-- Deletes each key that still holds `token`, with its listen flag in one `DEL`, so that a key
-- nobody listens to costs what release.lua does, and wakes the waiters of each key deleted
-- whose listen flag was there ("*" on its queue's channel: every waiter attempts; nothing is
-- handed over). A key another holder has is left. Returns how many it deleted.
local token = ARGV[1]
local n = math.floor(#KEYS / 3)
local deleted = 0
for i = 1, n do
  if redis.pcall("get", KEYS[i]) == token then
    -- Without access to the flag's key (ACL), the key alone, and waiters woken.
    local gone = redis.pcall("del", KEYS[i], KEYS[2 * n + i])
    if type(gone) ~= "number" then
      redis.call("del", KEYS[i])
      gone = 2
    end
    deleted = deleted + 1
    if gone > 1 then redis.pcall("publish", KEYS[n + i], "*") end
  end
end
return deleted
