//! Downgrade: a holder in a mode moves to a weaker one on every node at once, each node
//! converting its entry in place (`scripts/downgrade.lua`), so the resource is never free in
//! between.

use std::sync::atomic::{Ordering, fence};
use tokio::time::Instant;

use super::{Held, Lease};
use crate::error::{InvalidInput, LockError};
use crate::kernel::masters::{Masters, Stop};
use crate::mode::Mode;

/// Moves `lease` to `to` on `masters`, waking waiters on `channel` (empty: nobody). See
/// [`LockGuard::downgrade`](crate::LockGuard::downgrade).
pub(crate) async fn downgrade(
    masters: &Masters,
    lease: &Lease,
    to: Mode,
    channel: &str,
) -> Result<(), LockError> {
    let Held::Mode { mode: held, marker } = &lease.held else {
        return Err(InvalidInput::NotADowngrade { from: None, to }.into());
    };
    let from = held.get();
    // A downgrade to the mode the views already show is sent again (a downgrade that too few
    // nodes confirmed, tried again), as long as it is weaker than the mode taken.
    let again = from == to && to.weaker_than(held.taken());
    if !again && !to.weaker_than(from) {
        return Err(InvalidInput::NotADowngrade {
            from: Some(from),
            to,
        }
        .into());
    }
    let lost = |reason| lease.lost_error(reason);
    lease.check().map_err(lost)?;
    // Weaker in every view before anything is sent: a node that converted lets in holders
    // compatible with `to`, and no view may claim more than the nodes enforce. Nodes left
    // in `from` only exclude more.
    held.set(to);
    // A re-entry made meanwhile (a scope of this lock polled on another thread) either sees
    // the weaker mode and does not enter, or is seen here (`reentrant::Reentry::enter`
    // counts its hold before it reads the mode, behind the same kind of fence): a body
    // written for the stronger mode never runs beside the holders the weaker one admits.
    fence(Ordering::SeqCst);
    if lease.holds.load(Ordering::Acquire) > 1 {
        held.set(from);
        return Err(InvalidInput::Shared {
            action: "downgraded",
        }
        .into());
    }
    let start = Instant::now();
    let limit = masters
        .node_timeout
        .min(lease.lost_at().saturating_duration_since(start));
    let (key, token, marker) = (
        lease.keys.lock.as_str(),
        lease.token.expose(),
        marker.as_str(),
    );
    let tally = masters
        .round(masters.quorum, limit, Stop::AtDecision, |node| {
            let answer = node.downgrade(key, (token, marker), to, channel);
            async move { (answer.await, ()) }
        })
        .await;
    let (granted, refused) = (tally.granted, tally.refused);
    let outcomes = masters.outcomes(tally.votes);
    tracing::debug!(
        resource = %lease.resource,
        mode = %to,
        converted = granted,
        refused,
        "downgrade decided"
    );
    if granted >= masters.quorum {
        // Confirmed within the validity only (as an extension is).
        return lease.check().map_err(lost);
    }
    Err(lease.short_of_quorum(masters, refused, outcomes))
}
