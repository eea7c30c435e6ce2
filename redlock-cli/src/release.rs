//! `redlock release --force`: removes whoever holds a resource on every node
//! ([`Redlock::force_release`](redlock_core::Redlock::force_release)): the resource's lock,
//! and the permits of a counting semaphore on it. `redlock release --detached FILE`: releases
//! the lock `redlock hold` detached, by its token
//! ([`Redlock::release_detached`](redlock_core::Redlock::release_detached)).

use std::path::Path;
use std::time::Duration;

use redlock_core::{ForceReleased, LockError};

use crate::args::ReleaseArgs;
use crate::connect::{builder, connect};
use crate::detached;
use crate::exit::CliError;
use crate::print::print;

/// Force-releases `args.resource` and prints what each count of nodes did on stdout; or,
/// with `--detached`, releases the detached lock in that file.
///
/// # Errors
/// [`CliError::Build`] for a bad node list; [`CliError::TooFewAnswered`] (after printing
/// what the nodes that answered did) when fewer than a quorum answered; [`CliError::Os`]
/// when the output cannot be written; with `--detached`, those of [`release_detached`].
pub(crate) async fn release(args: ReleaseArgs) -> Result<u8, CliError> {
    let (resource, path) = match (args.resource, args.detached) {
        (_, Some(path)) => return release_detached(&path, &args.nodes).await,
        (Some(resource), None) => (resource, ()),
        // Refused by the arguments already (a resource is required without --detached).
        (None, None) => return Ok(crate::exit::USAGE),
    };
    let () = path;
    // Reachable nodes are cleared even if a quorum is not; the applications' waiters are
    // woken whatever the handle's own hand-over setting.
    let builder = builder(&args.nodes).require_quorum_at_start(false);
    let redlock = connect(builder).await?;
    debug_assert!(args.force, "clap requires --force");
    let report = redlock
        .force_release(&resource)
        .await
        .map_err(CliError::Lock)?;
    print(&render(&resource, &report), "could not write the report")?;
    redlock.shutdown(Duration::from_secs(1)).await;
    if !report.confirmed() {
        return Err(CliError::TooFewAnswered {
            answered: report.answered,
            nodes: report.nodes,
            quorum: report.quorum,
        });
    }
    Ok(0)
}

/// Releases the detached lock in `path` and prints a line saying so.
///
/// # Errors
/// [`CliError::DetachedUnreadable`], [`CliError::DetachedInvalid`] for the file (nothing is
/// sent); [`CliError::Build`]; [`CliError::DetachedGone`] when a quorum no longer held it
/// (expired, released or resumed already); [`CliError::Lock`] when fewer than a quorum
/// answered (unavailable, 69: the keys then expire with their ttl) or it was taken under
/// another key prefix (usage); [`CliError::Os`] when the output cannot be written.
async fn release_detached(path: &Path, nodes: &crate::args::NodeArgs) -> Result<u8, CliError> {
    let detached = detached::read(path)?;
    let resource = detached.resource().to_owned();
    let redlock = connect(builder(nodes).require_quorum_at_start(false)).await?;
    let released = redlock.release_detached(detached).await;
    redlock.shutdown(Duration::from_secs(1)).await;
    let released = released.map_err(|error| match error {
        // Fewer than a quorum answered: unavailable, as the lock's error says.
        LockError::ReleaseUnconfirmed { .. } => CliError::Lock(error),
        error => CliError::Lock(error),
    })?;
    if !released.was_held() {
        return Err(CliError::DetachedGone {
            resource,
            action: "released",
            source: None,
        });
    }
    let line = format!(
        "{resource}: released the detached lock; deleted on {} of {} nodes, {} answered, \
         quorum {}\n",
        released.deleted, released.nodes, released.answered, released.quorum
    );
    print(&line, "could not write the report")?;
    Ok(0)
}

/// The report as one line.
fn render(resource: &str, report: &ForceReleased) -> String {
    let mut line = if report.removed_any() {
        format!(
            "{resource}: force-released; a holder removed on {} of {} nodes",
            report.removed, report.nodes
        )
    } else {
        format!(
            "{resource}: no holder of its lock found on the {} nodes that answered",
            report.answered
        )
    };
    if report.permits_removed > 0 {
        line.push_str(&format!(
            "; {} semaphore permits' holders removed",
            report.permits_removed
        ));
    }
    line.push_str(&format!(
        ", {} answered, quorum {}",
        report.answered, report.quorum
    ));
    if report.not_a_lock > 0 {
        line.push_str(&format!(
            "; on {} nodes the key holds other data (not a lock), left as it was",
            report.not_a_lock
        ));
    }
    line.push('\n');
    line
}
