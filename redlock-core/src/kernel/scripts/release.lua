-- RELEASE: compare-and-delete, the release of a plain lock.
--
-- Redlock step: the release ("Releasing the lock"), and step 5, the clean-up of a failed
-- attempt on every node. The script is the spec's own ("Correct implementation with a single
-- instance").
--
-- KEYS: key    the lock key
-- ARGV: token  the holder's (or the failed attempt's) token
--
-- Deletes the key only if it still holds `token`. Returns 1 if deleted, 0 otherwise.
--
-- The plain scripts read the key with `pcall`: a key taken meanwhile by holders in a mode is
-- a hash, whose WRONGTYPE error then compares unequal to any token.
local key, token = KEYS[1], ARGV[1]
if redis.pcall("get", key) == token then return redis.call("del", key) else return 0 end
