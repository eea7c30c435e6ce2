-- EXTEND_MANY: compare-and-pexpire of a lock of several resources on one node, all or none.
--
-- Redlock step: "Making the algorithm more reliable: Extending the lock", for a lock of
-- several resources (acquire_many.lua).
--
-- KEYS: key...   the resources' lock keys
-- ARGV: token    the holder's token
--       ttl_ms   the new ttl, in ms
--
-- Returns 1 if every key holds our token (and now lives at least `ttl_ms`), 0 otherwise.
--
-- Only when every key still holds our token is any of them extended: a node where one key of
-- the set is gone does not count for the set, and is left as it is. As extend.lua, a key is
-- never re-created and never shortened.
local token, ttl = ARGV[1], tonumber(ARGV[2])

for _, key in ipairs(KEYS) do
  if redis.pcall("get", key) ~= token then return 0 end
end
for _, key in ipairs(KEYS) do
  if redis.call("pttl", key) < ttl then redis.call("pexpire", key, ttl) end
end
return 1
