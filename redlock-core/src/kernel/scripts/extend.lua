-- EXTEND: compare-and-pexpire, the extension of a plain lock.
--
-- Redlock step: "Making the algorithm more reliable: Extending the lock".
--
-- KEYS: key     the lock key
-- ARGV: token   the holder's token
--       ttl_ms  the new ttl, in ms
--
-- Returns 1 if the key holds our token (and now lives at least `ttl_ms`), 0 otherwise.
--
-- Gives the key a new ttl only if it still holds our token. A key that is gone is never
-- re-created, and a key is never shortened: a ttl below the key's remaining life leaves it as
-- it is, so the validity its holder already counts on stays true.
local key, token, ttl_ms = KEYS[1], ARGV[1], ARGV[2]
if redis.pcall("get", key) ~= token then return 0 end
if redis.call("pttl", key) < tonumber(ttl_ms) then redis.call("pexpire", key, ttl_ms) end
return 1
