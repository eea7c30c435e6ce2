//! Where the lock keeps its own bookkeeping in a node's key space.
//!
//! The lock key itself is the resource's key (the key prefix followed by the resource), so
//! that other Redlock clients on the same nodes exclude ours and are excluded by them. Every
//! other key we write (the waiter queue, which is also the hand-over channel, and the fencing
//! counter) is the lock key followed by [`BOOKKEEPING_SEPARATOR`], which starts with a NUL
//! byte: a plain resource of a foreign client cannot collide with it unless its name holds a
//! NUL byte followed by `redlock:`, and ours may not hold a NUL byte at all (see
//! [`validate_resource`](crate::options::validate_resource)). Following the lock key keeps
//! our keys inside ACL key patterns written for the key prefix (`~lock:*`).

/// What follows the lock key in every other key the lock writes: `"\0redlock:"`, then the
/// kind (`waiters` or `fencing`). Resources and key prefixes may not hold a NUL byte.
pub const BOOKKEEPING_SEPARATOR: &str = "\0redlock:";

/// The sorted set of waiters queued for `key`; also the channel a release publishes the
/// hand-over on.
pub(crate) fn waiters(key: &str) -> String {
    format!("{key}{BOOKKEEPING_SEPARATOR}waiters")
}

/// The fencing counter of `key` (a max register, no ttl).
pub(crate) fn fencing(key: &str) -> String {
    format!("{key}{BOOKKEEPING_SEPARATOR}fencing")
}

/// Where 0.1.0 kept the fencing counter of `key`. Read (never written) as a floor, so tokens
/// keep increasing across the upgrade; a foreign key of that name that is not a decimal
/// number reads as 0.
pub(crate) fn legacy_fencing(key: &str) -> String {
    format!("{key}:fencing-counter")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bookkeeping_keys_follow_the_lock_key_after_a_nul_byte() {
        for key in [waiters("lock:order:1"), fencing("lock:order:1")] {
            assert!(key.starts_with("lock:order:1\0redlock:"), "{key:?}");
        }
        assert_ne!(waiters("x"), fencing("x"));
        // A plain resource named like 0.1.0's suffixes is not ours any more.
        assert_ne!(waiters("x"), "x:waiters");
        assert_ne!(fencing("x"), "x:fencing-counter");
    }
}
