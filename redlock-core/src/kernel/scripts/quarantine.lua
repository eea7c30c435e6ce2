-- QUARANTINE: the quarantine check alone, run by every handle with the quarantine on when it
-- is built.
--
-- Redlock step: "Performance, crash recovery and fsync" (delayed restarts), before any
-- attempt: a node whose data was lost (or that no such handle has seen yet) starts its
-- quarantine then, not at the first acquisition.
--
-- KEYS: witness_key    the node's data witness for the key prefix
--       marker_key     the quarantine marker for the key prefix
-- ARGV: quarantine_ms  the quarantine, in ms
--
-- Returns `{-1, 0}` if the node is in quarantine, `{-3, 0}` if it was written with another
-- quarantine, `{1, 0}` otherwise (quarantine_check in prelude.lua).
local witness_key, marker_key, quarantine_ms = KEYS[1], KEYS[2], ARGV[1]

local quarantined = quarantine_check(quarantine_ms, witness_key, marker_key)
if quarantined then return quarantined end
return {1, 0}
