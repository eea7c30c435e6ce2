-- LEAVE: a waiter that gave up leaves a resource's waiters on one node.
--
-- Redlock step: none of the spec's; the end of a wait ("Retry on failure") that stops
-- retrying, so that releases no longer hand the key to it.
--
-- KEYS: key      the queue of plain waiters, or (with in_hash) the resource's hash
--       alive_key  optional: a semaphore's `permit-alive` set, which keeps an entry per
--                  queued waiter (acquire_permit.lua), left too
-- ARGV: marker   the waiter's marker
--       in_hash  "1" for a mode request's waiter entry in the holders' hash (a plain lock's
--                string there never held one), anything else for the queue
--
-- Returns 1.
--
-- Removes the marker from the queue (`ZREM`) or the hash (`HDEL`), and from `alive_key` if
-- given, under `pcall`, ignoring what fails. A script, so that it goes through the node's pipeline after the attempts it
-- follows (a `ZREM` sent alone could pass a queued attempt that would re-add the waiter).
local key, marker, in_hash = KEYS[1], ARGV[1], ARGV[2]

local command = "zrem"
if in_hash == "1" then command = "hdel" end
redis.pcall(command, key, marker)
if KEYS[2] then redis.pcall("zrem", KEYS[2], marker) end
return 1
