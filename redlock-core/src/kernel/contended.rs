//! The lock keys a handle has seen contended lately: where a first attempt checks for a
//! window for foreign clients.
//!
//! A window (`release_handover.lua`) leaves a contended key free for pollers, and every
//! request of ours that waits refuses it while it is open. Checking for one costs a read on
//! the node, so a request's first attempt asks for the check only on a key this handle saw
//! contended within [`HINT`]: refused by a holder, granted after a streak of hand-overs, or
//! released with a window due. Elsewhere the first attempt is the spec's `SET NX PX` alone;
//! a window on a key this handle never saw contended is taken by it as a poller's would be
//! (nothing unsafe: a window is only a turn for pollers).

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tokio::time::Instant;

/// How long a key counts as contended after it was last seen so: the life of a waiter queue.
pub(crate) const HINT: Duration = Duration::from_secs(30);

/// At most this many keys are remembered; past it, the expired ones are dropped, and if that
/// is not enough, all of them (the cost: a window a first attempt may take).
const MAX_KEYS: usize = 4096;

/// The contended keys and until when each counts.
#[derive(Debug, Default)]
pub(crate) struct Contended {
    keys: Mutex<HashMap<String, Instant>>,
    /// Some key was marked: an uncontended handle never takes the lock.
    any: AtomicBool,
}

impl Contended {
    /// Records `key` as contended now.
    pub(crate) fn mark(&self, key: &str) {
        let now = Instant::now();
        let mut keys = self
            .keys
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if keys.len() >= MAX_KEYS && !keys.contains_key(key) {
            keys.retain(|_, until| *until > now);
            if keys.len() >= MAX_KEYS {
                keys.clear();
            }
        }
        keys.insert(key.to_owned(), now + HINT);
        self.any.store(true, Ordering::Release);
    }

    /// Whether `key` was seen contended within [`HINT`].
    pub(crate) fn is(&self, key: &str) -> bool {
        if !self.any.load(Ordering::Acquire) {
            return false;
        }
        let keys = self
            .keys
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        keys.get(key).is_some_and(|until| *until > Instant::now())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_counts_once_marked_and_others_do_not() {
        let contended = Contended::default();
        assert!(!contended.is("a"));
        contended.mark("a");
        assert!(contended.is("a"));
        assert!(!contended.is("b"));
    }

    #[test]
    fn past_the_bound_expired_keys_go_first_then_all() {
        let contended = Contended::default();
        for i in 0..MAX_KEYS {
            contended.mark(&i.to_string());
        }
        contended.mark("new");
        // None had expired: all were dropped for the new one.
        assert!(contended.is("new"));
        assert!(!contended.is("0"));
        assert_eq!(contended.keys.lock().unwrap().len(), 1);
    }
}
