-- FORCE_RELEASE: an operator removes the holders a force-read named (force_read.lua) on one
-- node, whatever their token.
--
-- Redlock step: none; the release ("Releasing the lock") with the compare made on digests of
-- the holders the operator's read found, not on a token of the caller's own. It exists for a
-- holder known to be dead while its ttl is long, and it breaks the lock's guarantee for a
-- holder that is still alive: that holder learns it at its next extension, which a majority
-- refuses (its lost signal fires), and until then it may work beside the next holder.
--
-- KEYS: key      the lock key
-- ARGV: channel  where to wake the waiters (the waiter queue's key; empty: nobody is woken)
--       then the digests of the holders to remove (force_read.lua), one argument each
--
-- Returns 1 if a holder was removed, 0 if the key held none of them, -2 if the key holds data
-- that is not a lock (left exactly as it was).
--
-- A string at the key with an expiry is a plain holder (ours, a foreign Redlock client's
-- `SET NX PX`, a reservation for a waiter, or a key kept for a minimum hold): it is deleted
-- if its digest is one of those given. Every lock has an expiry; a string without one is an
-- application's value, not a lock, and is left as it is (-2). A hash is a resource held in
-- modes: the holders' entries named are removed, other holders' and waiters' entries stay,
-- and the key's expiry follows the latest one left; a hash with any field that is not an
-- entry of ours, or a key of another type, is not a lock of ours and is not touched. Waiters
-- are woken ("*") when a holder was removed. A holder that took the key after the read (the
-- next one, once this call reaches a node late) has another token, so another digest: it is
-- never removed (unless it wrote the same value: a foreign client that does not use a random
-- value is told apart from its next holder by nothing).
local key, channel = KEYS[1], ARGV[1]
local named = {}
for i = 2, #ARGV do named[ARGV[i]] = true end

local kind = redis.call("type", key).ok
if kind == "none" then return 0 end
if kind == "string" then
  if redis.call("pttl", key) < 0 then return -2 end
  if not named[redis.sha1hex(redis.call("get", key))] then return 0 end
  redis.call("del", key)
  if channel ~= "" then redis.pcall("publish", channel, "*") end
  return 1
end
if kind ~= "hash" then return -2 end
local entries = redis.call("hgetall", key)
local holders, latest = {}, 0
for i = 1, #entries, 2 do
  local held, expiry, _, waiter = mode_entry(entries[i], entries[i + 1])
  if not held then return -2 end
  if not waiter and named[redis.sha1hex(entries[i])] then
    table.insert(holders, entries[i])
  elseif expiry > latest then
    latest = expiry
  end
end
if #holders == 0 then return 0 end
for _, field in ipairs(holders) do redis.call("hdel", key, field) end
if latest > 0 and redis.call("exists", key) == 1 then redis.call("pexpireat", key, latest) end
if channel ~= "" then redis.pcall("publish", channel, "*") end
return 1
