//! `redlock release --force`: removes whoever holds a resource on every node
//! ([`Redlock::force_release`](redlock_core::Redlock::force_release)). The resource's lock
//! only: a counting semaphore's permits are locks of other keys, left to expire with their
//! ttl.

use std::io::Write as _;
use std::time::Duration;

use redlock_core::ForceReleased;

use crate::args::ReleaseArgs;
use crate::connect::{builder, connect};
use crate::exit::CliError;

/// Force-releases `args.resource` and prints what each count of nodes did on stdout.
///
/// # Errors
/// [`CliError::Build`] for a bad node list; [`CliError::TooFewAnswered`] (after printing
/// what the nodes that answered did) when fewer than a quorum answered; [`CliError::Os`]
/// when the output cannot be written.
pub(crate) async fn release(args: ReleaseArgs) -> Result<u8, CliError> {
    // Reachable nodes are cleared even if a quorum is not; the applications' waiters are
    // woken whatever the handle's own hand-over setting.
    let builder = builder(&args.nodes).require_quorum_at_start(false);
    let redlock = connect(builder).await?;
    debug_assert!(args.force, "clap requires --force");
    let report = redlock
        .force_release(&args.resource)
        .await
        .map_err(CliError::Lock)?;
    std::io::stdout()
        .write_all(render(&args.resource, &report).as_bytes())
        .and_then(|()| std::io::stdout().flush())
        .map_err(|source| CliError::Os {
            what: "could not write the report",
            source,
        })?;
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

/// The report as one line.
fn render(resource: &str, report: &ForceReleased) -> String {
    let mut line = if report.removed_any() {
        format!(
            "{resource}: force-released; a holder removed on {} of {} nodes",
            report.removed, report.nodes
        )
    } else {
        // Said of the lock only: a semaphore's permits are other keys, not read here.
        format!(
            "{resource}: no holder of its lock found on the {} nodes that answered (a \
             semaphore's permits are not looked at: `redlock status --permits K` shows them)",
            report.answered
        )
    };
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
