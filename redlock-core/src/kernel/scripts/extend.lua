-- EXTEND: compare-and-pexpire, the extension of a plain lock: of one resource, or of several
-- at once, all or none on each node.
--
-- Redlock step: "Making the algorithm more reliable: Extending the lock".
--
-- KEYS: key...  the lock keys (one for one resource)
-- ARGV: token   the holder's token
--       ttl_ms  the new ttl, in ms
--
-- Returns 1 if every key holds our token (and now lives at least `ttl_ms`), 0 otherwise.
--
-- Only when every key still holds our token is any of them extended: a node where one key of
-- a set is gone does not count for the set, and is left as it is. A key that is gone is never
-- re-created, and a key is never shortened: a ttl below the key's remaining life leaves it as
-- it is, so the validity its holder already counts on stays true.
local token, ttl = ARGV[1], tonumber(ARGV[2])

for _, key in ipairs(KEYS) do
  if redis.pcall("get", key) ~= token then return 0 end
end
for _, key in ipairs(KEYS) do
  if redis.call("pttl", key) < ttl then redis.call("pexpire", key, ARGV[2]) end
end
return 1
