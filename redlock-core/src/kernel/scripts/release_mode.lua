-- RELEASE_MODE: the release of a lock held in a mode, or of a failed attempt's grant in one.
--
-- Redlock step: the release ("Releasing the lock"), and step 5, the clean-up of a failed
-- attempt on every node, for one holder's entry in the hash of a resource held in modes
-- (mode_entry in prelude.lua).
--
-- KEYS: key        the resource's key
--       queue_key  optional (given with hand-over on): the queue of plain waiters
-- ARGV: token      the holder's (or the failed attempt's) token
--       channel    where to wake the waiters (empty: hand-over off, nobody is woken)
--       marker     the request's waiter marker, removed with the holder's entry (empty for
--                  a failed attempt, which keeps its place among the waiters)
--
-- Returns 1 if the token's entry was there and not expired, 0 otherwise.
--
-- Removes the token's entry and the waiter entry `marker` (only those: the other holders keep
-- theirs), drops expired entries, brings the key's expiry down to the latest remaining
-- entry's, and, when the token's entry was there and `channel` is not empty, publishes "*"
-- there if waiters' entries remain, or if the key is gone and plain waiters are queued in
-- `queue_key`: that wakes every waiter of the resource (a holder left, or a failed attempt's
-- grant that may have refused them is gone).
--
-- Only our own entries are removed: the token's and the marker's (fields named by our random
-- values), and expired entries that parse as ours. If the hash also holds fields we did not
-- write (written into it while we held it), the key's expiry is left as it is: it is never
-- brought forward over someone else's data.
local key, queue_key = KEYS[1], KEYS[2]
local token, channel, marker = ARGV[1], ARGV[2], ARGV[3]

if redis.call("type", key).ok ~= "hash" then return 0 end
if marker ~= "" then redis.call("hdel", key, marker) end
local value = redis.call("hget", key, token)
if not value then return 0 end
redis.call("hdel", key, token)
local _, mine = mode_entry(token, value)
local now = node_now()
local held = (mine or 0) > now
local entries = redis.call("hgetall", key)
local latest, waiting, foreign = 0, false, false
for i = 1, #entries, 2 do
  local kind, expiry, _, waiter = mode_entry(entries[i], entries[i + 1])
  if not kind then
    foreign = true
  elseif expiry <= now then
    redis.call("hdel", key, entries[i])
  else
    if expiry > latest then latest = expiry end
    if waiter then waiting = true end
  end
end
if latest > 0 and not foreign then redis.call("pexpireat", key, latest) end
if latest == 0 and not foreign and queue_key then
  local queued = redis.pcall("zcard", queue_key)
  waiting = type(queued) == "number" and queued > 0
end
if waiting and channel ~= "" then redis.pcall("publish", channel, "*") end
if held then return 1 end
return 0
