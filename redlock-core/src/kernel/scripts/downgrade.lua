-- DOWNGRADE: a holder in a mode moves to a weaker mode, atomically on one node (write -> read
-- without a gap).
--
-- Redlock step: none of the spec's own; a conversion of one holder's entry in the hash of a
-- resource held in modes (mode_entry in prelude.lua), as a DLM converts a lock in place.
--
-- KEYS: key      the resource's key
-- ARGV: token    the holder's token (its field)
--       mode     the mode it moves to (the client checks that it is weaker than the one held)
--       channel  where to wake the waiters (empty: hand-over off, nobody is woken)
--       marker   the holder's request's waiter marker (empty when it has none): its waiter
--                entry, left in place by the grant (acquire_mode.lua), still ranks in the
--                old mode and would refuse the requests the new one admits, so it goes
--
-- Returns 1 if the token's entry was there, live, and now holds `mode`; 0 otherwise.
--
-- The entry keeps its expiry; only its mode changes, in the same script that reads it, so the
-- holder never stops holding the resource on this node. When waiters' entries are there and
-- `channel` is not empty, "*" is published: a waiter the old mode refused may now be let in.
local key, token, mode, channel, marker = KEYS[1], ARGV[1], ARGV[2], ARGV[3], ARGV[4]

if redis.call("type", key).ok ~= "hash" then return 0 end
local value = redis.call("hget", key, token)
if not value then return 0 end
local held, expiry, _, waiter = mode_entry(token, value)
if not held or waiter or expiry <= node_now() then return 0 end
redis.call("hset", key, token, mode .. " " .. expiry)
if marker ~= "" then redis.call("hdel", key, marker) end
if channel ~= "" then
  local fields = redis.call("hkeys", key)
  for _, field in ipairs(fields) do
    if string.sub(field, 1, 1) == "~" then
      redis.pcall("publish", channel, "*")
      break
    end
  end
end
return 1
