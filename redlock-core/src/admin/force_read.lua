-- FORCE_READ: who holds a resource on one node, read before an operator's force-release.
--
-- Redlock step: none; the first half of the force-release (force_release.lua deletes only the
-- holders this read named, so that a delete that reaches a node late cannot remove the next
-- holder's lock there).
--
-- KEYS: key  the lock key
-- ARGV: none
--
-- Returns `{0}` if the key holds no holder, `{-2}` if it holds data that is not a lock (left
-- exactly as it is), or `{1, digest, ...}`: one digest per holder, the SHA-1 (40 hex digits)
-- of what signs its hold (a plain key's value: a holder's token, a reservation's waiter
-- marker, the mark of a key kept for a minimum hold; a mode holder's field: its token). A
-- digest, never the token: it cannot be used to release or extend the lock.
--
-- What counts as a lock is what force_release.lua removes: a string with an expiry, or a hash
-- whose every field is an entry of ours (its holders named, its waiters not).
local key = KEYS[1]

local kind = redis.call("type", key).ok
if kind == "none" then return {0} end
if kind == "string" then
  if redis.call("pttl", key) < 0 then return {-2} end
  return {1, redis.sha1hex(redis.call("get", key))}
end
if kind ~= "hash" then return {-2} end
local entries = redis.call("hgetall", key)
local out = {1}
for i = 1, #entries, 2 do
  local held, _, _, waiter = mode_entry(entries[i], entries[i + 1])
  if not held then return {-2} end
  if not waiter then table.insert(out, redis.sha1hex(entries[i])) end
end
if #out == 1 then return {0} end
return out
