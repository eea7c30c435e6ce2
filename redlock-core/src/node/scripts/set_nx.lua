-- SET_NX: the node's own `SET key token NX PX ttl_ms GET` as a script call: a plain attempt on
-- one resource with nothing else in play, made while the node's pipeline holds calls not yet
-- handed to the client, so that it joins their batch instead of splitting it; or the same
-- attempt by a handle with an owner label, which it writes with the grant.
--
-- Redlock step 2 on one node (distlock spec, "The Redlock algorithm").
--
-- KEYS: key            the lock key
--       witness_key    the quarantine's witness (the lock key, or absent, with the quarantine
--                      off)
--       marker_key     the quarantine's marker (the same)
--       owner_key      optional: the holder's label key (owner.lua)
-- ARGV: token          the attempt's token
--       ttl_ms         the lock's ttl, in ms
--       quarantine_ms  the quarantine after a restart, in ms (0 or absent: off)
--       label          with owner_key: the holder's label
--
-- A batched call on the lock key alone (the quarantine off, no label) is run by the dispatch
-- script as the command itself, without this body (Inline::SetNx in scripts.rs).
--
-- Returns what the command returns: false (nil) when the key was set, the value that was
-- there when it was not; or the quarantine's refusal. The pipeline sends it only with the
-- quarantine off, as the command it stands for, and the check then runs no command. When the
-- key was set and an owner key is given, the label is written there for the ttl, under
-- `pcall`: a write the node refuses (OOM) leaves the grant as it is. (A user whose ACL does
-- not cover the owner key is refused the whole call, as every script declaring it is.) An
-- attempt that fails after this node granted it leaves the label, keyed by its own token's
-- digest and never shown for another holder, until the ttl.
local key, witness_key, marker_key, owner_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local token, ttl_ms, quarantine_ms, label = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local q = quarantine_check(quarantine_ms, witness_key, marker_key)
if q then return q end
local before = redis.call("set", key, token, "NX", "PX", ttl_ms, "GET")
if not before and owner_key and label then
  redis.pcall("set", owner_key, label, "PX", ttl_ms)
end
return before
