//! Where the lock keeps its own bookkeeping in a node's key space.
//!
//! The lock key itself is the resource's key (the key prefix followed by the resource), so
//! that other Redlock clients on the same nodes exclude ours and are excluded by them. Every
//! other key we write (the waiter queue, which is also the hand-over channel, the fencing
//! counter, and the two keys that open windows for foreign clients) is the lock key followed
//! by [`BOOKKEEPING_SEPARATOR`], which starts with a NUL byte: a plain resource of a foreign
//! client cannot collide with it unless its name holds a NUL byte followed by `redlock:`, and
//! ours may not hold a NUL byte at all (see
//! [`validate_resource`](crate::options::validate_resource)). Following the lock key keeps
//! our keys inside ACL key patterns written for the key prefix (`~lock:*`).

/// What follows the lock key in every other key the lock writes: `"\0redlock:"`, then the
/// kind (`waiters`, `fencing`, `busy` or `window`). Resources and key prefixes may not hold a
/// NUL byte.
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

/// Since when (ms on the node's clock) `key` has been handed from one of our holders to the
/// next without a window for foreign clients: set by each hand-over, read by each grant,
/// deleted when a window opens, and left to expire ([`window`]'s length) when the key is freed
/// with nobody queued, so that a key free for a whole window starts a new streak.
pub(crate) fn busy(key: &str) -> String {
    format!("{key}{BOOKKEEPING_SEPARATOR}busy")
}

/// The window for foreign clients on `key`: while it exists (its ttl is the window), `key` is
/// free and every acquisition of ours refuses it, so that a foreign client polling the key
/// finds it free.
pub(crate) fn window(key: &str) -> String {
    format!("{key}{BOOKKEEPING_SEPARATOR}window")
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
        let all = [
            waiters("lock:order:1"),
            fencing("lock:order:1"),
            busy("lock:order:1"),
            window("lock:order:1"),
        ];
        for key in &all {
            assert!(key.starts_with("lock:order:1\0redlock:"), "{key:?}");
        }
        for (i, a) in all.iter().enumerate() {
            assert!(all[i + 1..].iter().all(|b| a != b), "{a:?} twice");
        }
        // A plain resource named like 0.1.0's suffixes is not ours any more.
        assert_ne!(waiters("x"), "x:waiters");
        assert_ne!(fencing("x"), "x:fencing-counter");
    }
}
