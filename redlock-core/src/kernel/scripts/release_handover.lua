-- RELEASE_HANDOVER: the release of a plain lock with a fair hand-over to its waiters.
--
-- Redlock step: the release ("Releasing the lock"), extended with a hand-over to the waiters
-- queued by the spec's "Retry on failure" (a releasing holder cannot re-grab the lock ahead
-- of them).
--
-- KEYS: key            the lock key
--       queue_key      the waiter queue: a sorted set of waiters' markers scored by wait
--                      start, on the same node
--       streak_key     the streak's start: ms on this node's clock since when the key has
--                      been busy without a window for foreign clients
--       window_key     the window marker for foreign clients
--       listen_key     optional: the resource's listen flag, set by every request of ours
--                      that a holder refused and that waits to be told of the release (a
--                      queued waiter, a mode request refused by this plain key)
-- ARGV: token          the holder's token
--       grace_ms       how long a key handed over stays reserved for the named waiter
--       channel        where hand-over messages are published (the queue key's name)
--       window_ms      the window for foreign clients, in ms (0: never open one, and keep no
--                      streak)
--       window_due     "1" when the releasing holder found the streak long enough (decided
--                      by the client, so that every node decides alike)
--       busy_ms        the streak the releasing holder counted (read when granted, plus its
--                      hold), in ms
--       queue_ttl_ms   how long a streak's start, and a listen flag set again, outlive the
--                      hand-over that wrote them
--
-- Returns 1 if the key held our token, 0 otherwise.
--
-- With `listen_key` given and no listen flag on this node, this is release.lua with the flag's
-- key in its `DEL` (which finds it missing): nobody waits to be told, so nothing is read,
-- written or published for waiters, windows or streaks (the dispatch script runs that case as
-- the commands, without this body: Inline::Handover in node/scripts.rs). Otherwise (the flag
-- was there, now deleted with the key, or no `listen_key`) somebody may listen:
--
-- Like release.lua, but if waiters are queued on this node the key is not deleted: it is
-- reserved for the longest waiter (value: its popped marker, ttl `grace_ms`) and `channel`
-- is told "<named> <next>", the named waiter and the one after it (empty if none). A
-- reservation blocks every `SET NX`; only the named waiter's acquire_queued.lua takes it. With
-- no waiter queued it is release.lua, and publishes "*" (wake all): requests in a mode
-- refused by this key could not queue here (a string has no room for their entries), and are
-- woken to attempt.
--
-- Windows for foreign clients, when `window_ms` is above zero: hand-overs would keep the key
-- busy as long as our waiters keep coming, and a foreign client that polls (node-redlock,
-- redis-py, a plain `SET NX`) would never find it free. So when `window_due`, a release that
-- finds a waiter deletes the key instead, and sets the window marker for `window_ms`, which
-- every acquire script of ours respects for a request that waits: the key is free for
-- pollers only (foreign clients, and our requests that never queue). It tells
-- the channel "<named> <next> <window_ms>": the named waiter attempts when the window has
-- passed. The streak's start (now less `busy_ms`, or the start already there if earlier) is
-- written at every hand-over (ttl `streak_ttl_ms`), deleted with a window, and cut to the
-- window's length when the key is freed with nobody queued: a key that stays free that long
-- starts a new streak. A release with nobody queued opens no window: the key is free for
-- anyone at once (a long hold released with nobody waiting costs our next locker nothing).
-- A release that hands the key over or opens a window sets the listen flag again (the
-- waiters after the named one listen too); one that finds nobody queued does not.
--
-- The queue and bookkeeping commands run under `pcall`, so an ACL user without
-- `ZPOPMIN`/`PUBLISH`/`TIME` or without access to our keys still releases (without hand-over
-- or windows).
local key, queue_key, streak_key, window_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local listen_key = KEYS[5]
local token, grace_ms, channel = ARGV[1], ARGV[2], ARGV[3]

if redis.pcall("get", key) ~= token then return 0 end
-- (Without access to the flag's key, ACL, the `DEL` of both fails: the key alone is deleted,
-- and the release goes on as if somebody listened.)
local deleted = listen_key and redis.pcall("del", key, listen_key)
if deleted == 1 then return 1 end
if type(deleted) ~= "number" then redis.call("del", key) end
-- Read only now: the release that finds nobody listening (the common one) needs none of them.
local window_ms, window_due = tonumber(ARGV[4]) or 0, ARGV[5] == "1"
local busy_ms, queue_ttl_ms = tonumber(ARGV[6]) or 0, ARGV[7]
-- Somebody may listen: the key is deleted, and handed over below if a waiter is queued.
local function listen_again()
  if listen_key then redis.pcall("set", listen_key, "1", "PX", queue_ttl_ms) end
end
-- The streak's start to write: now less `busy_ms`, or `before` if earlier; nil without TIME.
local function streak_start(before)
  local now = node_now_or_nil()
  if not now then return nil end
  local since = now - busy_ms
  before = tonumber(before)
  if before and before < since then return before end
  return since
end
local head = redis.pcall("zpopmin", queue_key)
if type(head) == "table" and head[1] then
  local after = redis.pcall("zrange", queue_key, 0, 0)
  local following = (type(after) == "table" and after[1]) or ""
  if window_ms > 0 and window_due then
    local opened = redis.pcall("set", window_key, head[1], "PX", window_ms)
    if type(opened) == "table" and opened.ok then
      redis.pcall("del", streak_key)
      listen_again()
      redis.pcall("publish", channel, head[1] .. " " .. following .. " " .. window_ms)
      return 1
    end
  end
  redis.call("set", key, head[1], "PX", grace_ms)
  if window_ms > 0 then
    local since = streak_start(redis.pcall("get", streak_key))
    if since then redis.pcall("set", streak_key, since, "PX", queue_ttl_ms) end
  end
  listen_again()
  redis.pcall("publish", channel, head[1] .. " " .. following)
else
  if window_ms > 0 then
    local before = redis.pcall("get", streak_key)
    local since = type(before) == "string" and streak_start(before)
    if since then redis.pcall("set", streak_key, since, "PX", window_ms) end
  end
  redis.pcall("publish", channel, "*")
end
return 1
