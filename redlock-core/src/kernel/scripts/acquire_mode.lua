-- ACQUIRE_MODE: an attempt in a lock mode on one node.
--
-- Redlock step 2 (acquire the lock in every instance), for a resource held in modes: a hash
-- at the key, one field per holder and per refused waiter (the layout is described in
-- scripts.rs, the entries are parsed by mode_entry in prelude.lua).
--
-- KEYS: key            the resource's key
--       window_key     the window marker for foreign clients (release_handover.lua)
--       witness_key    the node's data witness (quarantine_check in prelude.lua)
--       marker_key     the quarantine marker
--       listen_key     the resource's listen flag (release_handover.lua)
--       counter_key    optional: the resource's fencing counter, when a token is asked for
--       floor_key      optional, with counter_key: the key prefix's fencing floor (fence.lua)
-- ARGV: token          the attempt's token (the holder's field)
--       mode           the mode asked for (NL, CR, CW, PR, PW or EX)
--       ttl_ms         the lock's ttl, in ms
--       marker         the request's waiter marker (the waiter's field)
--       intent_ttl_ms  how long a waiter entry outlives the attempt that wrote it
--       compatible     the modes compatible with `mode`, space-separated
--       since          the request's wait start, ms since the Unix epoch (its rank)
--       quarantine_ms  the quarantine, in ms (0: off)
--
-- Returns `{1 | 0 | -1 | -2 | -3, counter, 0, left[, holders]}`: 1 granted, 0 refused, -1
-- quarantined, -3 a handle with another quarantine (prelude.lua), -2 a foreign key (below);
-- `counter` the fencing hint (fence_read); `left` when refused, the ms until the last entry
-- that refused it (or the window) expires; `holders` when refused, who refused it, so that
-- the client can tell a split vote from a busy resource as for the plain lock: the digests
-- (holder_digest's form: 16 hex digits of the SHA-1) of every entry that blocked it, sorted
-- and space-separated (a plain holder's key: its value's digest; a window: "window").
--
-- Takes the key in `mode` for `ttl_ms` if no live entry is incompatible with it: no holder
-- whose mode is missing from `compatible`, and no waiter in such a mode with a rank below
-- ours (ties broken by marker). Refused, it records (or refreshes) this request's waiter
-- entry for `intent_ttl_ms`; granted, it leaves that entry in place, so that a grant by too
-- few nodes, cleaned up, does not lose the request its place: the holder's release removes
-- it. A free key is refused while a window for foreign clients is open, with no entry (a
-- hash would take the key from them). Expired entries it reads are dropped, and the key's
-- expiry is kept at the latest entry's.
--
-- -2: the key holds data we did not write (a hash with a field that is not an entry of ours,
-- or a list, set, sorted set or stream): it is refused, and nothing is written, deleted or
-- expired. Every field is parsed before anything is written, so a hash that is not wholly
-- ours is left exactly as it was. A string is a plain holder (ours or a foreign client's
-- `SET NX`), refused as busy, as the plain lock's `SET NX` is; a request of ours refused by
-- one cannot queue there (a string has no room for its entry), so it sets the resource's
-- listen flag for `intent_ttl_ms` (`NX`: never shortening a queued waiter's): the plain
-- holder's release then wakes every waiter.
local key, window_key, witness_key, marker_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local listen_key, counter_key, floor_key = KEYS[5], KEYS[6], KEYS[7]
local token, mode, ttl_ms, marker = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local intent_ttl_ms, compatible_modes, since, quarantine_ms = ARGV[5], ARGV[6], ARGV[7], ARGV[8]

local quarantined = quarantine_check(quarantine_ms, witness_key, marker_key)
if quarantined then return quarantined end
local compatible, score = " " .. compatible_modes .. " ", tonumber(since)
local fence = fence_read(counter_key, floor_key)
local kind = redis.call("type", key).ok
if kind == "string" then
  if listen_key then redis.pcall("set", listen_key, "1", "NX", "PX", intent_ttl_ms) end
  return {0, fence, 0, ms_left(key), holder_digest(key)}
end
if kind ~= "none" and kind ~= "hash" then return {-2, fence, 0, -1} end
if kind == "none" and window_open(window_key) then
  return {0, fence, 0, ms_left(window_key), "window"}
end
local now = node_now()
local entries = {}
if kind == "hash" then entries = redis.call("hgetall", key) end
local latest, refused, blocked, expired, blocking = now, false, now, {}, {}
for i = 1, #entries, 2 do
  local field = entries[i]
  local held, expiry, rank, waiter = mode_entry(field, entries[i + 1])
  if not held then return {-2, fence, 0, -1} end
  if expiry <= now then
    table.insert(expired, field)
  else
    if expiry > latest then latest = expiry end
    if field ~= marker and not string.find(compatible, " " .. held .. " ", 1, true) then
      local blocks = not waiter or rank < score or (rank == score and field < marker)
      if blocks then
        refused = true
        if expiry > blocked then blocked = expiry end
        table.insert(blocking, string.sub(redis.sha1hex(field), 1, 16))
      end
    end
  end
end
for _, field in ipairs(expired) do redis.call("hdel", key, field) end
local expiry, granted = now + tonumber(ttl_ms), 1
if refused then
  expiry, granted = now + tonumber(intent_ttl_ms), 0
  redis.call("hset", key, marker, mode .. " " .. expiry .. " " .. since)
else
  redis.call("hset", key, token, mode .. " " .. expiry)
end
if expiry > latest then latest = expiry end
redis.call("pexpireat", key, latest)
if refused then
  table.sort(blocking)
  return {granted, fence, 0, blocked - now, table.concat(blocking, " ")}
end
return {granted, fence, 0, blocked - now}
