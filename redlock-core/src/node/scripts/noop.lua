-- NOOP: does nothing, a barrier.
--
-- Redlock step: none; plumbing of the node's pipeline.
--
-- KEYS: none
-- ARGV: none
--
-- Returns 1. Its reply comes after those of every call the node's pipeline sent before it
-- (one connection answers in order), so awaiting it awaits them.
return 1
