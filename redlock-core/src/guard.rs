//! [`LockGuard`]: a held lock, released explicitly or when dropped.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::error::LockError;
use crate::redlock::{Redlock, Released};
use crate::token::Token;

/// What a holder knows about its lock.
#[derive(Debug)]
pub(crate) struct Lease {
    pub(crate) id: u64,
    pub(crate) resource: String,
    pub(crate) key: String,
    pub(crate) token: Token,
    pub(crate) ttl: Duration,
    pub(crate) valid_until: Instant,
}

/// A lock held on a quorum of nodes.
///
/// Release it with [`release`](Self::release). If the guard is dropped instead (early return,
/// panic, cancelled future), the release is still sent from a task spawned on the current
/// tokio runtime — never by blocking — and tracked so that
/// [`Redlock::shutdown`] waits for it.
///
/// The lock is only guaranteed until [`valid_until`](Self::valid_until): work past it may
/// overlap with the next holder (distlock spec, "Safety arguments").
#[derive(Debug)]
#[must_use = "dropping the guard releases the lock at once"]
pub struct LockGuard {
    redlock: Redlock,
    lease: Option<Arc<Lease>>,
}

impl LockGuard {
    pub(crate) fn new(redlock: Redlock, lease: Arc<Lease>) -> Self {
        Self {
            redlock,
            lease: Some(lease),
        }
    }

    fn lease(&self) -> &Lease {
        // Only `release` and `drop` take the lease, and both consume the guard.
        self.lease
            .as_deref()
            .unwrap_or_else(|| unreachable!("lease taken before the guard was consumed"))
    }

    /// The locked resource.
    pub fn resource(&self) -> &str {
        &self.lease().resource
    }

    /// The Redis key (key prefix + resource).
    pub fn key(&self) -> &str {
        &self.lease().key
    }

    /// The token signing this lock on every node. Treat it as a secret.
    pub fn token(&self) -> &Token {
        &self.lease().token
    }

    /// The ttl the lock was taken with.
    pub fn ttl(&self) -> Duration {
        self.lease().ttl
    }

    /// The monotonic instant the lock stops being valid: the acquisition's start + ttl − drift
    /// (distlock spec, step 4).
    pub fn valid_until(&self) -> Instant {
        self.lease().valid_until
    }

    /// Validity left now; zero once expired.
    pub fn remaining_validity(&self) -> Duration {
        self.valid_until().saturating_duration_since(Instant::now())
    }

    /// `true` while the validity has not run out.
    pub fn is_valid(&self) -> bool {
        !self.remaining_validity().is_zero()
    }

    /// Releases the lock on every node with the compare-and-delete script and reports whether
    /// it was still held on a quorum ([`Released::was_held`]).
    ///
    /// The release runs in a tracked task: dropping this future does not cut it short.
    ///
    /// # Errors
    /// [`LockError::ReleaseUnconfirmed`] when fewer than a quorum of nodes answered; the keys
    /// then expire with their ttl.
    pub async fn release(mut self) -> Result<Released, LockError> {
        let Some(lease) = self.lease.take() else {
            unreachable!("lease taken before the guard was consumed")
        };
        let resource = lease.resource.clone();
        let released = match self.redlock.spawn_release(Arc::clone(&lease)) {
            Some(task) => task.await.ok(),
            None => None,
        };
        let released = match released {
            Some(released) => released,
            None => self.redlock.release_key(&lease.key, &lease.token).await,
        };
        if released.answered < released.quorum {
            return Err(LockError::ReleaseUnconfirmed {
                resource,
                answered: released.answered,
                nodes: released.nodes,
                quorum: released.quorum,
            });
        }
        Ok(released)
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        if let Some(lease) = self.lease.take() {
            let resource = lease.resource.clone();
            if self.redlock.spawn_release(lease).is_none() {
                tracing::warn!(
                    resource,
                    "lock guard dropped outside a tokio runtime; the lock expires with its ttl"
                );
            }
        }
    }
}
