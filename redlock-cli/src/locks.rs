//! `redlock locks [PREFIX]`: the locks held on resources under a prefix, found by scanning
//! every node ([`Redlock::list_locks`](redlock_core::Redlock::list_locks)), one line per
//! resource (or, with `--json`, one JSON object: [`json::Locks`]); never a token.

use std::fmt::Write as _;
use std::time::Duration;

use redlock_core::{ListedLock, LockList};

use crate::args::LocksArgs;
use crate::connect::{builder, connect};
use crate::exit::CliError;
use crate::json;
use crate::print::{print, print_json};
use crate::say::say;

/// Prints the locks under `args.prefix` on stdout, then says on stderr which nodes could not
/// be scanned.
///
/// # Errors
/// [`CliError::Build`] for a bad node list; [`CliError::TooFewAnswered`] (after printing what
/// the nodes scanned hold) when fewer than a quorum were scanned to the end;
/// [`CliError::Os`] when the output cannot be written.
pub(crate) async fn locks(args: LocksArgs) -> Result<u8, CliError> {
    // Unreachable nodes are reported, not a reason to stop; no waiter subscriptions.
    let builder = builder(&args.nodes)
        .require_quorum_at_start(false)
        .handover_grace(Duration::ZERO);
    let redlock = connect(builder).await?;
    let list = redlock
        .list_locks(&args.prefix)
        .await
        .map_err(CliError::Lock)?;
    if args.json {
        print_json(
            &json::Locks::new(&args.prefix, &list),
            "could not write the list",
        )?;
    } else {
        print(&render(&list), "could not write the list")?;
        for node in &list.unscanned {
            say(format_args!(
                "{} was not scanned: {}",
                node.node, node.error
            ));
        }
    }
    if !list.is_complete() {
        return Err(CliError::TooFewAnswered {
            answered: list.scanned(),
            nodes: list.nodes,
            quorum: list.quorum,
        });
    }
    Ok(0)
}

/// The list as text: one line per resource.
fn render(list: &LockList) -> String {
    let mut out = String::new();
    for lock in &list.locks {
        out.push_str(&line(lock, list.nodes));
        out.push('\n');
    }
    out
}

/// One resource's line: whether it is held and by whom, on how many nodes of `nodes`, the
/// quorum, how long a quorum keep it, and its semaphore's permits held.
fn line(listed: &ListedLock, nodes: usize) -> String {
    let lock = &listed.lock;
    let summary = if lock.is_held() {
        "held"
    } else if lock.held_on() > 0 {
        "not held by a quorum"
    } else {
        "free"
    };
    let mut line = format!("{}: {summary}", printable(&listed.resource));
    match (json::holder_summary(lock), lock.owner()) {
        (_, Some(owner)) => {
            let _ = write!(line, " by {}", printable(owner));
        }
        ("plain", None) => line.push_str(" (no owner label)"),
        ("modes", None) => line.push_str(" in lock modes"),
        ("reserved", None) => line.push_str(" (handed over to a waiter)"),
        _ => {}
    }
    let _ = write!(
        line,
        "; on {} of {nodes} nodes, quorum {}",
        lock.held_on(),
        lock.quorum
    );
    if let Some(ttl) = json::quorum_ttl(lock) {
        let ttl = Duration::from_millis(u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX));
        let _ = write!(line, ", ttl {}", humantime::format_duration(ttl));
    }
    if !listed.permits.is_empty() {
        let _ = write!(
            line,
            "; {} of {} permits held",
            listed.permits_held(),
            listed.permits.len()
        );
        let owners: Vec<&str> = listed
            .permits
            .iter()
            .filter(|slot| slot.is_held())
            .filter_map(|slot| slot.owner())
            .collect();
        if !owners.is_empty() {
            let _ = write!(line, " by {}", printable(&owners.join(", ")));
        }
    }
    line
}

/// `name` with its control characters escaped (`\n`, `\u{1b}`...): a key another
/// application wrote under the prefix cannot forge a line or move the terminal.
fn printable(name: &str) -> String {
    name.chars()
        .flat_map(|c| {
            let escaped: Vec<char> = if c.is_control() {
                c.escape_default().collect()
            } else {
                vec![c]
            };
            escaped
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_in_a_name_are_escaped() {
        assert_eq!(printable("jobs:charge"), "jobs:charge");
        assert_eq!(printable("a\nb: held"), "a\\nb: held");
        assert_eq!(printable("x\u{1b}[2J"), "x\\u{1b}[2J");
        assert_eq!(printable("zażółć"), "zażółć");
    }
}
