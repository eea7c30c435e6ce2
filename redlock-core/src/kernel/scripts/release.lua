-- RELEASE: compare-and-delete, the release of a plain lock: of one resource, or of several at
-- once.
--
-- Redlock step: the release ("Releasing the lock"), and step 5, the clean-up of a failed
-- attempt on every node (of a lock, or of a semaphore's permit, whose attempt may have been
-- given any one of its slots). For one key the script is the spec's own ("Correct
-- implementation with a single instance").
--
-- KEYS: key...  the lock keys (one for one resource)
-- ARGV: token   the holder's (or the failed attempt's) token
--
-- Deletes each key that still holds `token`; a key another holder has is left. Returns how
-- many it deleted.
--
-- A batched call on one key is run by the dispatch script as these commands, without this
-- body (Inline::CompareAndDelete in node/scripts.rs).
--
-- The plain scripts read the key with `pcall`: a key taken meanwhile by holders in a mode is
-- a hash, whose WRONGTYPE error then compares unequal to any token.
local token, deleted = ARGV[1], 0
for _, key in ipairs(KEYS) do
  if redis.pcall("get", key) == token then deleted = deleted + redis.call("del", key) end
end
return deleted
