//! `redlock status`: whether a holder is present on each node and the lock key's remaining
//! ttl there ([`Redlock::inspect`](redlock_core::Redlock::inspect)), then each permit of a
//! counting semaphore on the resource when the nodes store its number
//! ([`Redlock::semaphore_permits`](redlock_core::Redlock::semaphore_permits)); with
//! `--permits K`, the K permits only
//! ([`Redlock::inspect_permits`](redlock_core::Redlock::inspect_permits)); never the token.
//! As text, or with `--json` as one JSON object ([`json::Status`]).

use std::fmt::Write as _;
use std::time::Duration;

use redlock_core::{Holder, NodeHolding, ResourceStatus};

use crate::args::StatusArgs;
use crate::connect::{builder, connect};
use crate::exit::CliError;
use crate::json;
use crate::print::{print, print_json};

/// Prints the status of `args.resource` on stdout, as text or (`--json`) JSON.
///
/// # Errors
/// [`CliError::Build`] for a bad node list; [`CliError::TooFewAnswered`] (after printing what
/// the nodes that answered hold) when fewer than a quorum answered; [`CliError::Os`] when
/// the output cannot be written.
pub(crate) async fn status(args: StatusArgs) -> Result<u8, CliError> {
    // Unreachable nodes are shown as such, not a reason to stop; no waiter subscriptions.
    let builder = builder(&args.nodes)
        .require_quorum_at_start(false)
        .handover_grace(Duration::ZERO);
    let redlock = connect(builder).await?;
    let resource = args.resource.as_str();
    // The lock (not read with --permits), then the semaphore's permits when one is in use
    // (its number of permits is stored on the nodes) or asked for.
    let (lock, slots) = match args.permits {
        None => {
            let status = redlock.inspect(resource).await.map_err(CliError::Lock)?;
            let stored = redlock
                .semaphore_permits(resource)
                .await
                .map_err(CliError::Lock)?;
            let slots = match stored {
                Some(permits) => Some(
                    redlock
                        .inspect_permits(resource, permits)
                        .await
                        .map_err(CliError::Lock)?,
                ),
                None => None,
            };
            (Some(status), slots)
        }
        Some(permits) => {
            let slots = redlock
                .inspect_permits(resource, permits)
                .await
                .map_err(CliError::Lock)?;
            (None, Some(slots))
        }
    };
    if args.json {
        let quorum = redlock.quorum();
        let shown = json::Status::new(resource, quorum, lock.as_ref(), slots.as_deref());
        print_json(&shown, "could not write the status")?;
    } else {
        let mut text = lock
            .as_ref()
            .map_or_else(String::new, |status| render(resource, status, true));
        if let Some(slots) = &slots {
            text.push_str(&render_permits(resource, slots));
        }
        print(&text, "could not write the status")?;
    }
    // The lock decides; with --permits, the slot with the fewest answers (every slot is on
    // the same nodes).
    let fewest = match (&lock, &slots) {
        (Some(status), _) => Some(status),
        (None, Some(slots)) => slots.iter().min_by_key(|slot| slot.answered()),
        (None, None) => None,
    };
    if let Some(status) = fewest
        && status.answered() < status.quorum
    {
        return Err(CliError::TooFewAnswered {
            answered: status.answered(),
            nodes: status.nodes.len(),
            quorum: status.quorum,
        });
    }
    Ok(0)
}

/// A semaphore's permits as text: a summary line (permits held, waiters queued), then each
/// permit's status as [`render`] gives a lock's, named `<resource> permit <i>`, without the
/// waiters on each node's line (they wait for any permit: the summary counts them once).
fn render_permits(resource: &str, slots: &[ResourceStatus]) -> String {
    let held = slots.iter().filter(|slot| slot.is_held()).count();
    let queued = json::permit_waiters(slots);
    let mut out = format!("{resource}: {held} of {} permits held", slots.len());
    if queued > 0 {
        let _ = write!(out, ", {queued} waiting");
    }
    out.push('\n');
    for (slot, status) in slots.iter().enumerate() {
        out.push_str(&render(&format!("{resource} permit {slot}"), status, false));
    }
    out
}

/// The status of `status` as text, named `name`: a summary line, then one line per node
/// (with the waiters queued there when `waiters`).
fn render(name: &str, status: &ResourceStatus, waiters: bool) -> String {
    let nodes = status.nodes.len();
    let held_on = status.held_on();
    let summary = if status.is_held() {
        "held"
    } else if held_on > 0 {
        "not held by a quorum (a lock being taken, released, or expiring)"
    } else {
        "free"
    };
    let owner = status
        .owner()
        .map_or(String::new(), |owner| format!(" by {owner}"));
    let mut out = format!(
        "{name}: {summary}{owner}; holder on {held_on} of {nodes} nodes, {} answered, quorum {}\n",
        status.answered(),
        status.quorum,
    );
    let width = status.nodes.iter().map(|n| n.node.len()).max().unwrap_or(0);
    for node in &status.nodes {
        let line = match &node.read {
            Ok(holding) => describe(holding, waiters),
            Err(error) => format!("no answer: {error}"),
        };
        let _ = writeln!(out, "  {:width$}  {line}", node.node);
    }
    out
}

/// One node's line (with the waiters queued there when `waiters`).
fn describe(holding: &NodeHolding, waiters: bool) -> String {
    let ttl = |ttl: Option<Duration>| match ttl {
        Some(ttl) => format!("ttl {}", humantime::format_duration(ttl)),
        None => "no ttl".to_owned(),
    };
    let mut line = match &holding.holder {
        Holder::None => "free".to_owned(),
        Holder::Plain => match &holding.owner {
            Some(owner) => format!("held by {owner}, {}", ttl(holding.ttl)),
            None => format!("held, {}", ttl(holding.ttl)),
        },
        Holder::Reserved => format!("handed over to a waiter, {}", ttl(holding.ttl)),
        Holder::Modes(holders) if holders.is_empty() => "free (mode waiters only)".to_owned(),
        Holder::Modes(holders) => {
            let each: Vec<String> = holders
                .iter()
                .map(|h| match &h.owner {
                    Some(owner) => format!("{} by {owner} {}", h.mode, ttl(Some(h.ttl))),
                    None => format!("{} {}", h.mode, ttl(Some(h.ttl))),
                })
                .collect();
            format!("held in modes: {}", each.join(", "))
        }
        Holder::Other { kind } => format!("a {kind} key (not a lock), {}", ttl(holding.ttl)),
        _ => format!("held, {}", ttl(holding.ttl)),
    };
    if waiters && holding.waiters > 0 {
        let _ = write!(line, ", {} waiting", holding.waiters);
    }
    line
}
