//! Extension by quorum (distlock spec, "Making the algorithm more reliable: Extending the
//! lock"): compare-and-pexpire on every node at once, valid only if a quorum confirmed it
//! before the lock's lost deadline.

use std::time::Duration;
use tokio::time::Instant;

use super::Lease;
use crate::error::LockError;
use crate::kernel::masters::{Masters, Stop};
use crate::keys;
use crate::options::LockOptions;
use crate::telemetry;
use crate::timing;

/// Extends `lease` to `ttl` from now on `masters`. See
/// [`LockGuard::extend`](crate::LockGuard::extend).
pub(crate) async fn extend(
    masters: &Masters,
    lease: &Lease,
    ttl: Duration,
) -> Result<Instant, LockError> {
    let was_lost = lease.is_lost();
    let result = extend_once(masters, lease, ttl).await;
    telemetry::extension(&lease.class, was_lost, result.as_ref().map(|_| ()));
    result
}

async fn extend_once(
    masters: &Masters,
    lease: &Lease,
    ttl: Duration,
) -> Result<Instant, LockError> {
    let lost = |reason| lease.lost_error(reason);
    // The acquisition's rules for the new ttl: not zero, under the cap, longer than the
    // drift and the lost margin.
    let options = LockOptions::default()
        .ttl(ttl)
        .drift_factor(lease.drift_factor)
        .lost_margin(lease.lost_margin);
    options.validate()?;
    masters.check_quarantine(ttl)?;
    let (ttl, ttl_ms) = (options.sent_ttl(), options.ttl_millis());
    let drift = timing::drift(ttl, lease.drift_factor);
    lease.check().map_err(lost)?;

    let deadline = lease.lost_at();
    let start = Instant::now();
    let limit = masters
        .node_timeout
        .min(deadline.saturating_duration_since(start));
    let (key, token, mode) = (
        lease.keys.lock.as_str(),
        lease.token.expose(),
        lease.mode().is_some(),
    );
    let owner = lease.owner.as_ref();
    // A permit keeps its semaphore's stored number of permits alive as long as itself.
    let capacity = lease.permit().and_then(|permit| {
        keys::permit_capacity_of_slot(key, permit.slot).map(|c| (c, permit.permits))
    });
    let capacity = capacity.as_ref().map(|(c, permits)| (c.as_str(), *permits));
    let tally = masters
        .round(masters.quorum, limit, Stop::AtDecision, |node| {
            // The label follows the lock's ttl, in the same batch (not awaited: it is for
            // operators, and decides nothing).
            if let Some(owner) = owner {
                let labels = (token, &*owner.label);
                drop(node.label_holder((key, &owner.key), labels, ttl_ms, mode));
            }
            let keys = lease.lock_keys();
            async move {
                let vote = match capacity {
                    Some((capacity, permits)) => {
                        node.extend_permit((key, capacity), token, ttl_ms, permits)
                            .await
                    }
                    None => node.extend(&keys, token, ttl_ms, mode).await,
                };
                (vote, ())
            }
        })
        .await;
    let (granted, refused) = (tally.granted, tally.refused);
    let outcomes = masters.outcomes(tally.votes);
    tracing::debug!(
        resource = %lease.resource,
        extended = granted,
        refused,
        elapsed_us = start.elapsed().as_micros() as u64,
        "extension decided"
    );
    if granted >= masters.quorum {
        // Only an extension confirmed within the current validity counts (spec: "within
        // the validity time"); the signal may have fired meanwhile, and never un-fires.
        lease.check().map_err(lost)?;
        lease.extend_to(timing::extended_until(start, ttl, drift));
        return Ok(lease.valid_until());
    }
    Err(lease.short_of_quorum(masters, refused, outcomes))
}
