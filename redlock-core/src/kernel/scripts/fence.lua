-- FENCE: the fencing write-back on one node, a max register per resource.
--
-- Redlock step: none of the spec's; the fencing token its safety analysis asks for (a number
-- that grows with every lock, checked by the storage the lock protects). Run after a granted
-- step 2, at the fencing quorum.
--
-- KEYS: counter_key  the resource's counter (a max register)
--       floor_key    the fencing floor of the key prefix (without one, of the resource's
--                    family: the key up to its first ':'), "<past> <current>"
--       window_key   the floor's window
-- ARGV: claim        the claimed token, a decimal string
--       keep_ms      the counter ttl, in ms (0: counters never expire)
--
-- Returns `{1 | 0, before}`: 1 if the claim is confirmed (it is above every token this node
-- has confirmed for the resource), and `before`, what the claim was compared with.
--
-- Counters expire (ttl `keep_ms`, renewed by each confirmed claim), so that a node keeps one
-- per resource fenced within the ttl, not one per resource ever fenced. What they knew is kept
-- by the floor: every confirmed claim also raises the floor's `current`, the highest claim of
-- the floor's window; the window (a key whose ttl is cut, by each claim, to half the ttl of
-- the counter it writes) ends at least half a counter ttl before any of its counters, and once
-- it has ended `current` counts as `past`. So when a resource's counter is gone, every token
-- this node confirmed for it is at most the effective `past`, and a claim is compared with
-- that instead. `past` does not move while a window is open, so claims for distinct resources
-- do not refuse each other (a window ending between a hint and its claim costs one more
-- round). A window's end and a counter's expiry are read on one clock, the node's own key
-- expiry; the half-ttl margin covers a backward step of that clock shorter than half the ttl,
-- which could otherwise show an ended window again after its counter was deleted. A floor
-- that is not "<past> <current>" is an error: the claim is not confirmed, and the floor is
-- left as it is.
--
-- Counters are compared as decimal strings (decimal and below in prelude.lua), never as Lua
-- numbers: those are doubles, exact only below 2^53, and two claims above it would compare
-- equal. A counter that is not a plain decimal reads as 0.
local counter_key, floor_key, window_key = KEYS[1], KEYS[2], KEYS[3]
local claim, keep = ARGV[1], tonumber(ARGV[2])

-- The window lasts half the counter ttl: it ends that long before any counter written in it.
local window_ms = math.max(1, math.floor(keep / 2))

local floor = redis.call("get", floor_key)
local past, current = "0", "0"
if floor then
  past, current = string.match(floor, "^(%d+) (%d+)$")
  if not past then error("unreadable fencing floor: " .. floor) end
end
local window_left = redis.call("pttl", window_key)
if window_left == -2 then
  -- The window ended: its claims are now in the past.
  if below(past, current) then past = current end
  current = "0"
end
local before = redis.call("get", counter_key)
if before then before = decimal(before) else before = past end
if not below(before, claim) then return {0, before} end
-- The window first, ending before the counter written after it.
if keep > 0 and (window_left == -1 or window_left == -2 or window_left > window_ms) then
  redis.call("set", window_key, "1", "PX", window_ms)
elseif keep == 0 and window_left == -2 then
  redis.call("set", window_key, "1")
end
if below(current, claim) then current = claim end
redis.call("set", floor_key, past .. " " .. current)
if keep > 0 then
  redis.call("set", counter_key, claim, "PX", keep)
else
  redis.call("set", counter_key, claim)
end
return {1, before}
