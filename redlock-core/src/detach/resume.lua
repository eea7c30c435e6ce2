-- RESUME: a lock handed to another holder takes a fresh token, atomically on one node.
--
-- Redlock step: none of the spec's own; the compare of the extension ("Extending the lock")
-- with a set instead of an expire. The holder that resumes a detached lock swaps its token
-- for a fresh one on every node, so that the detached lock's token, once a quorum swapped it,
-- can no longer be resumed, extended or released by anyone: at most one resumption holds it.
--
-- KEYS: key            the lock key (a string for the plain lock, a hash for a lock in a
--                      mode)
--       witness_key    the node's data witness (quarantine_check in prelude.lua)
--       marker_key     the quarantine marker
-- ARGV: token          the token the lock holds now
--       next           the token that replaces it
--       mode           "1" for a lock held in a mode (the token is a field of the hash), "0"
--       quarantine_ms  the quarantine, in ms (0: off)
--       cap_ms         optional: after the swap, the key (or entry) keeps at most this many
--                      ms (0 or absent: its expiry as it is)
--
-- Returns `{1, left}` if the key (or the entry) held `token` and now holds `next`, `left` the
-- ms it has left (-1: no expiry); `{0, 0}` otherwise (gone, expired, another holder's, or
-- already swapped); `{-1, 0}` or `{-3, 0}` from the quarantine check (prelude.lua).
--
-- A swap grants the lock to a new holder, so it runs the quarantine check first, as every
-- acquire script does: a node restarted from an older snapshot may still hold a token that a
-- quorum has already swapped, and must not vote for a second resumption of it.
--
-- The expiry is kept as it is: never lengthened, never shortened. The client counts its
-- validity from what the nodes report, and extends the lock afterwards with the usual
-- extension. The swap is also how a failed resumption gives the lock back: sent with the two
-- tokens exchanged, it restores the detached lock's token where it was swapped, and with
-- `cap_ms` (what the key had left at the swap, less the time since) the expiry it had, even
-- after the resumption's extension lengthened it.
local key, witness_key, marker_key = KEYS[1], KEYS[2], KEYS[3]
local token, next, mode, quarantine_ms = ARGV[1], ARGV[2], ARGV[3] == "1", ARGV[4]
local cap = tonumber(ARGV[5]) or 0

local quarantined = quarantine_check(quarantine_ms, witness_key, marker_key)
if quarantined then return quarantined end

if not mode then
  if redis.pcall("get", key) ~= token then return {0, 0} end
  redis.call("set", key, next, "KEEPTTL")
  local left = redis.call("pttl", key)
  if cap > 0 and (left < 0 or left > cap) then
    redis.call("pexpire", key, cap)
    left = cap
  end
  return {1, left}
end

if redis.call("type", key).ok ~= "hash" then return {0, 0} end
local value = redis.call("hget", key, token)
if not value then return {0, 0} end
local held, expiry, _, waiter = mode_entry(token, value)
if not held or waiter then return {0, 0} end
local now = node_now()
if expiry <= now then
  redis.call("hdel", key, token)
  return {0, 0}
end
-- The key's expiry, kept: deleting the only field deletes the key, and the HSET that follows
-- would make it again without one.
if cap > 0 and expiry > now + cap then expiry = now + cap end
local key_left = redis.call("pttl", key)
redis.call("hdel", key, token)
redis.call("hset", key, next, held .. " " .. expiry)
if key_left > 0 then
  redis.call("pexpire", key, key_left)
else
  redis.call("pexpireat", key, expiry)
end
return {1, expiry - now}
