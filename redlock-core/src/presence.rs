//! Whether a foreign client could be locking on the nodes: windows for foreign clients
//! ([`RedlockBuilder::foreign_window`](crate::RedlockBuilder::foreign_window)) open only while
//! one could.
//!
//! A foreign client (node-redlock, redis-py, redlock-php, a plain `SET NX PX`) polling a key
//! that our waiters keep handing over leaves no trace on the nodes: its refused `SET NX`
//! writes nothing. What it cannot hide is its connection. Every connection of a handle that
//! can send commands is named [`CONNECTION_NAME`] (`CLIENT SETNAME`, at every connection), and
//! `CLIENT LIST` on a node shows every other one. While no node shows another connection that
//! could send a command (pub/sub subscribers, replicas, masters and `MONITOR` connections
//! cannot), nobody but our handles can be polling a key, and a window would idle the key for
//! nobody; the first such connection turns windows back on.
//!
//! The view is read at most every [`MAX_AGE`], and only when it matters: at build time, and
//! then by a release whose streak makes a window due, which starts a new check in the
//! background when the last one is older (an idle or uncontended handle checks nothing). A
//! foreign client therefore counts from at most [`MAX_AGE`] plus one round trip after it
//! connected, less than the streak a window waits for (twice the window), so its bound is
//! the one windows give. Erring on the side of windows: a node that refuses `CLIENT LIST`
//! (an ACL user without `+client|list`), or a connection of ours that could not be named
//! (without `+client|setname`), counts as a foreign client. A node that does not answer at
//! all (down, or past the node timeout) is not counted: nobody polls it either.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use fred::types::Value;

use crate::masters::Masters;
use crate::node::{CONNECTION_NAME, Node};
use crate::outcome::NodeError;

/// How old the view may be when a release asks for it: 500 ms.
pub(crate) const MAX_AGE: Duration = Duration::from_millis(500);

/// A handle's view of whether a foreign client could be connected to its nodes.
#[derive(Debug)]
pub(crate) struct Presence {
    /// What the ages are counted from.
    base: Instant,
    /// When the last check ended, in ms since `base`, plus one (0: never checked).
    checked: AtomicU64,
    /// What the last check found (`true` until a check found otherwise).
    foreign: AtomicBool,
    /// A check is running.
    checking: AtomicBool,
}

impl Default for Presence {
    fn default() -> Self {
        Self {
            base: Instant::now(),
            checked: AtomicU64::new(0),
            foreign: AtomicBool::new(true),
            checking: AtomicBool::new(false),
        }
    }
}

impl Presence {
    /// What the last check found, and whether a new one is due (the view is older than
    /// [`MAX_AGE`] and no check is running); when it is, the caller must run
    /// [`check`](Self::check).
    pub(crate) fn view(&self) -> (bool, bool) {
        let foreign = self.foreign.load(Ordering::Acquire);
        let checked = self.checked.load(Ordering::Acquire);
        let now = self.ms_since_base();
        let stale = checked == 0 || now.saturating_sub(checked - 1) >= MAX_AGE.as_millis() as u64;
        let due = stale
            && self
                .checking
                .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
                .is_ok();
        (foreign, due)
    }

    /// Reads `CLIENT LIST` on every node at once, each within `limit`, and keeps what it found.
    pub(crate) async fn check(&self, masters: &Masters, limit: Duration) {
        let found = futures_util::future::join_all(
            masters.nodes.iter().map(|node| foreign_on(node, limit)),
        )
        .await;
        let foreign = found.into_iter().any(|foreign| foreign);
        self.foreign.store(foreign, Ordering::Release);
        self.checked
            .store(self.ms_since_base() + 1, Ordering::Release);
        self.checking.store(false, Ordering::Release);
    }

    /// Gives up a check that [`view`](Self::view) made due but that could not be started.
    pub(crate) fn abandon(&self) {
        self.checking.store(false, Ordering::Release);
    }

    fn ms_since_base(&self) -> u64 {
        u64::try_from(self.base.elapsed().as_millis()).unwrap_or(u64::MAX - 1)
    }
}

/// Whether `node` shows a connection that is not ours and could send commands, or refuses to
/// say; `false` when it does not answer within `limit`.
async fn foreign_on(node: &Node, limit: Duration) -> bool {
    let listed = tokio::time::timeout(limit, node.call("CLIENT", vec![Value::from("LIST")]))
        .await
        .unwrap_or(Err(NodeError::Timeout(limit)));
    match listed {
        Ok(reply) => match reply.as_str() {
            Some(text) => text.lines().any(foreign_connection),
            None => true,
        },
        Err(NodeError::Reply(_)) => true,
        Err(_) => false,
    }
}

/// Whether one line of `CLIENT LIST` is a connection that is not ours and could send a
/// command: not named [`CONNECTION_NAME`], and not a pub/sub subscriber (`P`), a replica
/// (`S`), a master (`M`) or a `MONITOR` (`O`).
fn foreign_connection(line: &str) -> bool {
    if line.trim().is_empty() {
        return false;
    }
    let (mut name, mut flags) = ("", "");
    for field in line.split(' ') {
        if let Some(value) = field.strip_prefix("name=") {
            name = value;
        } else if let Some(value) = field.strip_prefix("flags=") {
            flags = value;
        }
    }
    name != CONNECTION_NAME && !flags.contains(['P', 'S', 'M', 'O'])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_other_connections_that_can_send_commands_are_foreign() {
        let ours = "id=3 addr=127.0.0.1:5 laddr=127.0.0.1:6379 fd=8 name=redlock-rs age=0 idle=0 flags=N db=0 sub=0 psub=0 cmd=client|list";
        let subscriber =
            "id=4 addr=127.0.0.1:6 fd=9 name= age=0 idle=0 flags=P db=0 sub=1 psub=0 cmd=subscribe";
        let replica = "id=5 addr=127.0.0.1:7 fd=10 name= age=0 idle=0 flags=S db=0 cmd=replconf";
        let monitor = "id=6 addr=127.0.0.1:8 fd=11 name= age=0 idle=0 flags=O db=0 cmd=monitor";
        let node_redlock =
            "id=7 addr=127.0.0.1:9 fd=12 name= age=3 idle=0 flags=N db=0 sub=0 psub=0 cmd=set";
        let named_else =
            "id=8 addr=127.0.0.1:10 fd=13 name=redlock-rs-not age=3 idle=0 flags=N db=0 cmd=get";
        for line in [ours, subscriber, replica, monitor, "", "  "] {
            assert!(!foreign_connection(line), "{line}");
        }
        for line in [node_redlock, named_else, "id=9 flags=N"] {
            assert!(foreign_connection(line), "{line}");
        }
    }

    #[test]
    fn a_view_is_due_when_never_checked_and_only_one_check_runs_at_once() {
        let presence = Presence::default();
        assert_eq!(presence.view(), (true, true));
        // The check is running: nobody else starts one.
        assert_eq!(presence.view(), (true, false));
        presence.foreign.store(false, Ordering::Release);
        presence
            .checked
            .store(presence.ms_since_base() + 1, Ordering::Release);
        presence.checking.store(false, Ordering::Release);
        assert_eq!(presence.view(), (false, false));
    }
}
