-- EXTEND_MODE: the extension of a lock held in a mode.
--
-- Redlock step: "Making the algorithm more reliable: Extending the lock", for one holder's
-- entry in the hash of a resource held in modes (mode_entry in prelude.lua).
--
-- KEYS: key     the resource's key
-- ARGV: token   the holder's token (its field)
--       ttl_ms  the new ttl, in ms
--
-- Returns 1 if the entry is held, 0 otherwise.
--
-- Gives the token's entry a new expiry `ttl_ms` from now, if it is there and has not expired;
-- never re-creates it and never brings an expiry forward (as extend.lua). Only a field that
-- parses as our holder's entry is touched; the key's expiry is only ever lengthened, to cover
-- the entry.
local key, token, ttl_ms = KEYS[1], ARGV[1], ARGV[2]

if redis.call("type", key).ok ~= "hash" then return 0 end
local value = redis.call("hget", key, token)
if not value then return 0 end
local mode, expiry, _, waiter = mode_entry(token, value)
if not mode or waiter then return 0 end
local now = node_now()
if expiry <= now then
  redis.call("hdel", key, token)
  return 0
end
local ttl = tonumber(ttl_ms)
if expiry < now + ttl then
  redis.call("hset", key, token, mode .. " " .. (now + ttl))
end
if redis.call("pttl", key) < ttl then redis.call("pexpireat", key, now + ttl) end
return 1
