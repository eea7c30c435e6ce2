-- KEEP: the release of a plain lock held for a minimum hold (lock_at_least_for).
--
-- Redlock step: the release ("Releasing the lock"), deferred: the key stays until the end of
-- the minimum hold, with no token left in it.
--
-- KEYS: key      the lock key
-- ARGV: token    the holder's token
--       keep_ms  how long the key is kept, in ms
--       kept     what the kept key holds ("redlock:kept:" and a digest of the token: never a
--                token, tokens are hex; one hold's own)
--
-- Returns 1 if the key held our token, 0 otherwise.
--
-- If the key still holds our token, it is overwritten with `kept` to expire `keep_ms` from
-- now, shorter or longer than it had. Nothing is handed over and nobody is woken: the key
-- expires at the end of the minimum hold. No token is left in it, so an extension of ours
-- still in flight, or a release sent again, no longer matches it and cannot lengthen or
-- delete the kept key.
local key, token, keep_ms, kept = KEYS[1], ARGV[1], ARGV[2], ARGV[3]

if redis.pcall("get", key) ~= token then return 0 end
redis.call("set", key, kept, "PX", keep_ms)
return 1
