//! Where the lock keeps its own bookkeeping in a node's key space.
//!
//! The lock key itself is the resource's key (the key prefix followed by the resource), so
//! that other Redlock clients on the same nodes exclude ours and are excluded by them. Every
//! other key we write (the waiter queue, which is also the hand-over channel, the fencing
//! counter, and the two keys that open windows for foreign clients) starts with [`BOOKKEEPING_PREFIX`], whose first byte is NUL: a plain resource of a
//! foreign client (or ours, see [`validate_resource`](crate::options::validate_resource))
//! cannot collide with it unless its name starts with a NUL byte too.

/// The first bytes of every key the lock writes besides the lock key: `"\0redlock:"`, then the
/// kind (`waiters:`, `fencing:`, `busy:` or `window:`), then the lock key. Resources and key prefixes may not start
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

/// Since when (ms on the node's clock) `key` has been handed from one of our holders to the
/// next without a window for foreign clients: set by each hand-over, read by each grant,
/// deleted when a window opens, and left to expire ([`window`]'s length) when the key is freed
/// with nobody queued, so that a key free for a whole window starts a new streak.
pub(crate) fn busy(key: &str) -> String {
    format!("{BOOKKEEPING_PREFIX}busy:{key}")
}

/// The window for foreign clients on `key`: while it exists (its ttl is the window), `key` is
/// free and every acquisition of ours refuses it, so that a foreign client polling the key
/// finds it free.
pub(crate) fn window(key: &str) -> String {
    format!("{BOOKKEEPING_PREFIX}window:{key}")
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
        let all = [
            waiters("order:1"),
            fencing("order:1"),
            busy("order:1"),
            window("order:1"),
        ];
        for key in &all {
            assert!(key.starts_with('\0'), "{key:?}");
            assert!(key.ends_with(":order:1"), "{key:?}");
        }
        for (i, a) in all.iter().enumerate() {
            assert!(all[i + 1..].iter().all(|b| a != b), "{a:?} twice");
        }
        // A plain resource named like the old suffixes is not ours any more.
        assert_ne!(waiters("x"), "x:waiters");
        assert_ne!(fencing("x"), "x:fencing-counter");
    }
}
