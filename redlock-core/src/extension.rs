//! Extension by quorum (distlock spec, "Making the algorithm more reliable: Extending the
//! lock"): compare-and-pexpire on every node at once, valid only if a quorum confirmed it
//! before the lock's lost deadline.

use std::time::{Duration, Instant};

use crate::error::{LockError, LostReason};
use crate::lease::Lease;
use crate::options::LockOptions;
use crate::quorum::{self, Stop};
use crate::redlock::Redlock;
use crate::timing;

impl Redlock {
    /// Extends `lease` to `ttl` from now. See [`LockGuard::extend`](crate::LockGuard::extend).
    pub(crate) async fn extend_lease(
        &self,
        lease: &Lease,
        ttl: Duration,
    ) -> Result<Instant, LockError> {
        let lost = |reason| LockError::Lost {
            resource: lease.resource.clone(),
            reason,
        };
        // The acquisition's rules for the new ttl: not zero, under the cap, longer than the
        // drift and the lost margin.
        let options = LockOptions::default()
            .ttl(ttl)
            .drift_factor(lease.drift_factor)
            .lost_margin(lease.lost_margin);
        options.validate()?;
        self.check_quarantine(ttl)?;
        let (ttl, ttl_ms) = (options.sent_ttl(), options.ttl_millis());
        let drift = timing::drift(ttl, lease.drift_factor);
        lease.check().map_err(lost)?;

        let inner = self.inner();
        let n = inner.nodes.len();
        let deadline = lease.lost_at();
        let start = Instant::now();
        let limit = inner
            .node_timeout
            .min(deadline.saturating_duration_since(start));
        let (key, token, mode) = (lease.key.as_str(), lease.token.expose(), lease.mode);
        let tally = quorum::decide(
            n,
            inner.quorum,
            limit,
            Stop::Decided,
            inner.nodes.iter().enumerate().map(|(i, node)| async move {
                (i, node.extend(key, token, ttl_ms, mode).await, ())
            }),
        )
        .await;
        let (granted, refused) = (tally.granted, tally.refused);
        let outcomes = tally.outcomes(&inner.nodes);
        tracing::debug!(
            resource = %lease.resource,
            extended = granted,
            refused,
            elapsed_us = start.elapsed().as_micros() as u64,
            "extension decided"
        );
        if granted >= inner.quorum {
            // Only an extension confirmed within the current validity counts (spec: "within
            // the validity time"); the signal may have fired meanwhile, and never un-fires.
            lease.check().map_err(lost)?;
            lease.extend_to(start + ttl - drift);
            return Ok(lease.valid_until());
        }
        if refused > n - inner.quorum {
            let reason = LostReason::Refused(outcomes);
            lease.mark_lost(reason.clone());
            return Err(lost(reason));
        }
        Err(LockError::Unavailable {
            resource: lease.resource.clone(),
            attempts: 1,
            quorum: inner.quorum,
            outcomes,
        })
    }
}
