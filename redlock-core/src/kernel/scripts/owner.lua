-- OWNER: a holder's label (host, pid, application), written beside its lock for operators.
--
-- Redlock step: none; bookkeeping read by INSPECT (Redlock::inspect, `redlock status`), never
-- by a lock decision. Sent after a grant that did not write it (set_nx.lua writes it with a
-- plain attempt that has nothing else in play) and beside each extension, only by a handle
-- given a label.
--
-- KEYS: key        the lock key
--       owner_key  the holder's label key: the lock key, "\0redlock:owner:" and the first 16
--                  hex digits of the SHA-1 of the token (the digest holder_digest in
--                  prelude.lua reports, never the token itself)
-- ARGV: token      the holder's token
--       label      the label
--       ttl_ms     how long the label lives, in ms: the lock's ttl
--       mode       "1" for a lock held in a mode (the token is a field of the hash), "0"
--
-- Returns 1 if the key (or the entry) holds `token` and the label was written, 0 otherwise.
--
-- The label is written only while the token holds the lock here, so a late write never labels
-- someone else's lock; it is keyed by the token's digest, so a label left behind after a
-- release (it is not deleted: it expires with its ttl) names a holder that is gone and is
-- never shown for the next one.
local key, owner_key = KEYS[1], KEYS[2]
local token, label, ttl_ms, mode = ARGV[1], ARGV[2], ARGV[3], ARGV[4] == "1"

if mode then
  if redis.call("type", key).ok ~= "hash" then return 0 end
  local value = redis.call("hget", key, token)
  if not value then return 0 end
  local held, expiry, _, waiter = mode_entry(token, value)
  if not held or waiter or expiry <= node_now() then return 0 end
elseif redis.pcall("get", key) ~= token then
  return 0
end
-- Never shortened, as extend.lua never shortens the lock.
local ttl = tonumber(ttl_ms)
local left = redis.call("pttl", owner_key)
if left > ttl then ttl = left end
redis.call("set", owner_key, label, "PX", ttl)
return 1
