//! Where the lock keeps its own bookkeeping in a node's key space.
//!
//! The lock key itself is the resource's key (the key prefix followed by the resource), so
//! that other Redlock clients on the same nodes exclude ours and are excluded by them. Every
//! other key we write (the waiter queue, which is also the hand-over channel, and the fencing
//! counter) starts with [`BOOKKEEPING_PREFIX`], whose first byte is NUL: a plain resource of a
//! foreign client (or ours, see [`validate_resource`](crate::options::validate_resource))
//! cannot collide with it unless its name starts with a NUL byte too.

/// The first bytes of every key the lock writes besides the lock key: `"\0redlock:"`, then the
/// kind (`waiters:` or `fencing:`), then the lock key. Resources and key prefixes may not start
/// with a NUL byte.
pub const BOOKKEEPING_PREFIX: &str = "\0redlock:";

/// The sorted set of waiters queued for `key`; also the channel a release publishes the
/// hand-over on.
pub(crate) fn waiters(key: &str) -> String {
    format!("{BOOKKEEPING_PREFIX}waiters:{key}")
}

/// The fencing counter of `key` (a max register, no ttl).
pub(crate) fn fencing(key: &str) -> String {
    format!("{BOOKKEEPING_PREFIX}fencing:{key}")
}

/// Where 0.1.0 kept the fencing counter of `key`. Read (never written) as a
/// floor, so tokens keep increasing across the upgrade; a foreign key of that name that is
/// not a number reads as 0.
pub(crate) fn legacy_fencing(key: &str) -> String {
    format!("{key}:fencing-counter")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bookkeeping_keys_start_with_nul_and_end_with_the_lock_key() {
        for key in [waiters("order:1"), fencing("order:1")] {
            assert!(key.starts_with('\0'), "{key:?}");
            assert!(key.ends_with(":order:1"), "{key:?}");
        }
        assert_ne!(waiters("x"), fencing("x"));
        // A plain resource named like the old suffixes is not ours any more.
        assert_ne!(waiters("x"), "x:waiters");
        assert_ne!(fencing("x"), "x:fencing-counter");
    }
}
