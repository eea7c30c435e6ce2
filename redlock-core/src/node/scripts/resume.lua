-- RESUME: a lock handed to another holder takes a fresh token, atomically on one node.
--
-- Redlock step: none of the spec's own; it is the extension ("Extending the lock") of a lock
-- whose token changes hands. The holder that resumes a detached lock swaps its token for a
-- fresh one on every node, so that the detached lock's token, once a quorum swapped it, can
-- no longer be resumed, extended or released by anyone: at most one resumption holds it.
--
-- KEYS: key       the lock key (a string for the plain lock, a hash for a lock in a mode)
-- ARGV: token     the token the lock holds now (the detached lock's)
--       next      the token that replaces it
--       ttl_ms    the ttl the lock is extended to, in ms (0: it keeps its expiry)
--       mode      "1" for a lock held in a mode (the token is a field of the hash), "0"
--
-- Returns 1 if the key (or the entry) held `token` and now holds `next`, living at least
-- `ttl_ms`; 0 otherwise (gone, expired, another holder's, or already swapped).
--
-- As extend.lua, a key that is gone is never re-created and nothing is shortened: the key (or
-- entry) lives max(what it had left, ttl_ms). The swap is also how a failed resumption gives
-- the lock back: sent with the two tokens exchanged, it restores the detached lock's token on
-- the nodes that had swapped it (with a ttl of 0, so the detached lock is not lengthened).
local key, token, next, ttl_ms, mode = KEYS[1], ARGV[1], ARGV[2], ARGV[3], ARGV[4] == "1"
local ttl = tonumber(ttl_ms)

if not mode then
  if redis.pcall("get", key) ~= token then return 0 end
  local left = redis.call("pttl", key)
  if left < ttl then left = ttl end
  if left < 1 then left = 1 end
  redis.call("set", key, next, "PX", left)
  return 1
end

if redis.call("type", key).ok ~= "hash" then return 0 end
local value = redis.call("hget", key, token)
if not value then return 0 end
local held, expiry, _, waiter = mode_entry(token, value)
if not held or waiter then return 0 end
local now = node_now()
if expiry <= now then
  redis.call("hdel", key, token)
  return 0
end
if expiry < now + ttl then expiry = now + ttl end
redis.call("hdel", key, token)
redis.call("hset", key, next, held .. " " .. expiry)
if redis.call("pttl", key) < ttl then redis.call("pexpireat", key, expiry) end
return 1
