-- The dispatch script: runs a batch of calls to the lock's scripts, in order, and answers one
-- reply per call. It is the only script sent to a node (EVALSHA, or EVAL after NOSCRIPT): the
-- node's pipeline sends the calls that concurrent lockers issue in one tick as one call of it
-- (fred flushes the socket after every script, so one script per call would cost one write
-- per call).
--
-- Redlock step: none; it carries every step's script.
--
-- Assembled by scripts.rs as the locals INLINE_SET_NX, INLINE_RELEASE and INLINE_HANDOVER (the
-- ids of the scripts run inline), then `local function make_scripts()`, which holds prelude.lua and
-- returns `script(id)`, itself returning `function(KEYS, ARGV) <script> end` for the script
-- at `id` (its index in SCRIPTS; made only for the calls that name it), then this file.
-- `make_scripts` runs only for a call that is not inlined: the helpers' definitions alone
-- cost a node as much as a release. Each script reads its own KEYS and ARGV,
-- and returns as a script would.
--
-- KEYS: every call's keys, call after call
-- ARGV: n       the number of calls
--       then, per call, its head: one number, id + 64 * (nk + 2^20 * na), for its script's
--       id, how many keys it has (nk) and how many arguments (na) (batch_head in scripts.rs)
--       then every call's arguments, call after call
--
-- Returns an array of n replies. Each call runs under `pcall` (an inlined one's commands under
-- `redis.pcall`): one that raises an error (an OOM, a WRONGTYPE outside `pcall`) answers
-- {"redlock:error", "<the error's text>"}
-- (ERROR_MARKER in scripts.rs; no reply of ours is a table starting with a string), and the
-- others still run, as separate scripts would. A reply of nil or false answers false (a nil
-- reply), so that the array keeps its length.
--
-- One call alone (every call of a client in sequence): ARGV opens with "=<id>" instead of n,
-- followed by the call's own arguments, and KEYS are its keys. The call runs on the script's
-- own KEYS and ARGV (without the "=<id>"), under `pcall` as in a batch, and its reply is
-- answered as it is, not in an array: the loop below, its tables and the array cost the node
-- as much again as a plain release's own work.
local head = ARGV[1]
if head and string.byte(head, 1) == 61 then
  local id = tonumber(string.sub(head, 2))
  -- release_handover.lua alone: its lock key and its listen flag (KEYS[5]) read at once, and
  -- kept only if the flag is not there (with the flag, or an error reading it, the body runs).
  local read
  if #KEYS == 5 and #ARGV == 8 and id == INLINE_HANDOVER then
    read = redis.pcall("mget", KEYS[1], KEYS[5])
    if type(read) ~= "table" or read.err or read[2] then read = nil end
  end
  if (#KEYS == 1 and #ARGV == 2 and id == INLINE_RELEASE) or read then
    -- release.lua alone on one key (every release of a client in sequence), or
    -- release_handover.lua where nobody listens for the release: compare-and-delete, inline.
    local key, token = KEYS[1], ARGV[2]
    local value, reply = nil, 0
    if read then value = read[1] else value = redis.pcall("get", key) end
    if value == token then reply = redis.pcall("del", key) end
    if type(reply) == "table" then return {"redlock:error", tostring(reply.err)} end
    return reply
  end
  table.remove(ARGV, 1)
  local ok, reply = pcall(make_scripts()(id), KEYS, ARGV)
  if ok then return reply end
  if type(reply) == "table" then reply = reply.err end
  return {"redlock:error", tostring(reply)}
end

local n = tonumber(ARGV[1])
local out, made, script = {}, {}, nil
local k, a = 1, 2 + n
for i = 1, n do
  local h = tonumber(ARGV[1 + i])
  local id = h % 64
  local nk = math.floor(h / 64) % 1048576
  local na = math.floor(h / 67108864)
  local ok, reply, read
  if nk == 5 and na == 7 and id == INLINE_HANDOVER then
    read = redis.pcall("mget", KEYS[k], KEYS[k + 4])
    if type(read) ~= "table" or read.err or read[2] then read = nil end
  end
  if nk == 1 and na == 2 and id == INLINE_SET_NX then
    -- set_nx.lua's short form, its lock key, token and ttl alone: no quarantine argument
    -- (the pipeline sends it only with the quarantine off) and no owner label. The spec's
    -- command, run here without the script's function, tables and `pcall` (INLINE_* are the
    -- ids of the inlined scripts, set above by scripts.rs).
    ok, reply = true, redis.pcall("set", KEYS[k], ARGV[a], "NX", "PX", ARGV[a + 1], "GET")
  elseif (nk == 1 and na == 1 and id == INLINE_RELEASE) or read then
    -- release.lua on one key, or release_handover.lua where nobody listens (as above):
    -- compare-and-delete.
    ok, reply = true, 0
    local key, token = KEYS[k], ARGV[a]
    local value
    if read then value = read[1] else value = redis.pcall("get", key) end
    if value == token then reply = redis.pcall("del", key) end
  else
    -- Each script's function is made once per batch: a batch under load holds many calls
    -- of the same few scripts.
    local run = made[id]
    if not run then
      script = script or make_scripts()
      run = script(id)
      made[id] = run
    end
    -- Made by `unpack` in one step: copying them element by element took a fifth of a
    -- batch's time on the node.
    local keys, args = {unpack(KEYS, k, k + nk - 1)}, {unpack(ARGV, a, a + na - 1)}
    ok, reply = pcall(run, keys, args)
  end
  k, a = k + nk, a + na
  -- An inlined command's error comes back as a table with `err`, as one raised does.
  if ok and type(reply) == "table" and reply.err then ok = false end
  if ok then
    if reply == nil then reply = false end
    out[i] = reply
  else
    if type(reply) == "table" then reply = reply.err end
    out[i] = {"redlock:error", tostring(reply)}
  end
end
return out
