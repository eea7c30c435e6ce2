-- INSPECT: what one node holds for a resource, read from the outside, never the token.
--
-- Redlock step: none; a read for operators and diagnostics (Redlock::inspect). It takes no
-- lock and changes nothing. Sent on its own with EVAL, after prelude.lua (inspect.rs), not
-- through the dispatch script.
--
-- KEYS: key        the resource's key
--       queue_key  the queue of plain waiters
-- ARGV: none
--
-- Returns `{kind, pttl, queued, flag, owner, ...}`: the key's type, its PTTL, the number of
-- plain waiters queued, a flag and the plain holder's label ("" without one), then, for a
-- plain holder's string, its digest (the first 16 hex digits of the SHA-1 of its token, as
-- holder_digest in prelude.lua reports it: what tells two holders apart whatever their
-- labels), and for a hash (a resource held in modes) one `mode, remaining ms, is-waiter,
-- label` quadruple per live entry, the node's clock deciding what is live. A label is read
-- at the key owner.lua writes for that holder's token (named by the token's digest, so a
-- label left by an earlier holder is never read for this one). The flag says, for a string,
-- that it is a hand-over reservation (a waiter's `~` marker rather than a holder's token,
-- and then no digest follows); for a hash, that it holds a field that is not an entry of ours
-- (mode_entry in prelude.lua), i.e. someone else's data, and then no quadruple follows.
--
-- Only reads: TYPE, PTTL, GET, HGETALL, TIME, and ZCARD under `pcall` (0 without it); the
-- labels with GET under `pcall` ("" without access).
local key, queue_key = KEYS[1], KEYS[2]

-- The digest of a holder's token: what names its label key (owner.lua).
local function digest_of(token)
  return string.sub(redis.sha1hex(token), 1, 16)
end

-- The label of the holder whose token's digest is `digest` (owner.lua), or "".
local function label_of(digest)
  local label = redis.pcall("get", key .. "\0redlock:owner:" .. digest)
  if type(label) == "string" then return label end
  return ""
end

local kind = redis.call("type", key).ok
local pttl = redis.call("pttl", key)
local queued = redis.pcall("zcard", queue_key)
if type(queued) ~= "number" then queued = 0 end
local out = {kind, pttl, queued, 0, ""}
if kind == "string" then
  local value = redis.call("get", key)
  if string.sub(value, 1, 1) == "~" then
    out[4] = 1
  else
    local digest = digest_of(value)
    out[5] = label_of(digest)
    out[6] = digest
  end
elseif kind == "hash" then
  local now = node_now()
  local entries = redis.call("hgetall", key)
  for i = 1, #entries, 2 do
    local mode, expiry, _, waiter = mode_entry(entries[i], entries[i + 1])
    if not mode then return {kind, pttl, queued, 1, ""} end
    if expiry > now then
      table.insert(out, mode)
      table.insert(out, expiry - now)
      if waiter then
        table.insert(out, 1)
        table.insert(out, "")
      else
        table.insert(out, 0)
        table.insert(out, label_of(digest_of(entries[i])))
      end
    end
  end
end
return out
