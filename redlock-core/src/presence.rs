//! Whether a foreign client could be locking on the nodes: windows for foreign clients
//! ([`RedlockBuilder::foreign_window`](crate::RedlockBuilder::foreign_window)) open only while
//! one could.
//!
//! A foreign client (node-redlock, redis-py, redlock-php, a plain `SET NX PX`, or one of our
//! own handles with hand-over off, which polls too) polling a key that our waiters keep
//! handing over leaves no trace on the nodes: its refused `SET NX` writes nothing. What it
//! cannot hide is its connection. Every connection of a handle with hand-over that can send
//! commands is named [`CONNECTION_NAME`] (`CLIENT SETNAME`, at every connection), and a check
//! reads, on every node at once, `CLIENT LIST` (every connection open now) and
//! `INFO stats` (`total_connections_received`: every connection opened since the last
//! check, even one that lived for a single attempt). A node counts as having a foreign
//! client when it lists a connection that is not ours and could send a command (pub/sub
//! subscribers, replicas, masters and `MONITOR` connections cannot), when a connection was
//! opened there since the last check (ours, after a reconnection or a new handle, count
//! once), or when it does not answer the check within the node timeout or refuses it (an
//! ACL user without `+client|list` or `+info`; and our connections count as foreign where
//! they could not be named). A node that is down counts as having none: nobody polls it
//! either.
//!
//! Our own requests that poll (one attempt and no wait, or no queue for them: a skip job, a
//! `retry_count(0)` caller in a loop, a lock of several resources) are pollers too, on named
//! connections: each refused one sets the key prefix's poller mark
//! ([`keys::poller`](crate::keys::poller)) on every node for [`POLLER_TTL`] (at most once a
//! third of that per handle), and a node with the mark counts as having a foreign client.
//!
//! The view is read only when it matters: at build time, then in the background whenever a
//! grant finds the key in a streak of hand-overs (or a due release finds it) and the view is
//! older than its maximum age: [`MAX_AGE`], or the window if shorter. An idle or uncontended
//! handle checks nothing. A release never waits for a check (it must not be cut short by a
//! caller that stops waiting): it decides on the view its grant refreshed. A foreign client
//! that connects is therefore seen by every handle within that age and one of its holds (the
//! grant after the age ran out); once seen, the bound windows give holds as for a foreign
//! client that was always there.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use fred::types::Value;

use crate::masters::Masters;
use crate::node::{CONNECTION_NAME, Node};
use crate::outcome::NodeError;

/// The longest a view may be old when a due release asks for it: 500 ms (the window, if
/// shorter).
pub(crate) const MAX_AGE: Duration = Duration::from_millis(500);

/// How long a polling request of ours counts as present after its last refused attempt: the
/// poller mark's ttl. Longer than a poller's usual interval (node-redlock's 200 ± 100 ms, a
/// retry delay), so a poller keeps windows opening while it polls, and short enough that
/// windows stop soon after it stops.
pub(crate) const POLLER_TTL: Duration = Duration::from_secs(3);

/// A handle's view of whether a foreign client could be connected to its nodes.
#[derive(Debug)]
pub(crate) struct Presence {
    /// What the ages are counted from.
    base: Instant,
    /// How old the view may be.
    max_age: Duration,
    /// When the last check ended, in ms since `base`, plus one (0: never checked).
    checked: AtomicU64,
    /// What the last check found (`true` until a check found otherwise).
    foreign: AtomicBool,
    /// A check is running.
    checking: AtomicBool,
    /// Each node's `total_connections_received` at the last check (`u64::MAX`: unknown).
    opened: Vec<AtomicU64>,
    /// The key prefix's poller mark ([`keys::poller`](crate::keys::poller)).
    poller_key: String,
    /// When this handle last set the poller mark, in ms since `base`, plus one (0: never).
    marked: AtomicU64,
}

impl Presence {
    /// A view of `nodes` nodes, for windows of `window`, never checked yet; `poller_key` is
    /// the key prefix's poller mark.
    pub(crate) fn new(nodes: usize, window: Duration, poller_key: String) -> Self {
        Self {
            base: Instant::now(),
            max_age: MAX_AGE.min(window),
            checked: AtomicU64::new(0),
            foreign: AtomicBool::new(true),
            checking: AtomicBool::new(false),
            opened: (0..nodes).map(|_| AtomicU64::new(u64::MAX)).collect(),
            poller_key,
            marked: AtomicU64::new(0),
        }
    }

    /// The poller mark to set after a polling request of this handle was refused, or `None`
    /// when this handle set it less than a third of [`POLLER_TTL`] ago.
    pub(crate) fn mark_due(&self) -> Option<&str> {
        let now = self.ms_since_base() + 1;
        let last = self.marked.load(Ordering::Acquire);
        let every = u64::try_from(POLLER_TTL.as_millis() / 3).unwrap_or(u64::MAX);
        let due = last == 0 || now.saturating_sub(last) >= every;
        (due && self
            .marked
            .compare_exchange(last, now, Ordering::AcqRel, Ordering::Acquire)
            .is_ok())
        .then_some(self.poller_key.as_str())
    }

    /// What the last check found, and whether a new one is due (the view is older than its
    /// maximum age and no check is running); when it is, the caller must run
    /// [`check`](Self::check).
    pub(crate) fn view(&self) -> (bool, bool) {
        // `checked` first: `check` stores `foreign`, then `checked`.
        let checked = self.checked.load(Ordering::Acquire);
        let foreign = self.foreign.load(Ordering::Acquire);
        let age = self
            .ms_since_base()
            .saturating_sub(checked.saturating_sub(1));
        let stale = checked == 0 || u128::from(age) >= self.max_age.as_millis();
        let due = stale
            && self
                .checking
                .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
                .is_ok();
        (foreign, due)
    }

    /// Gives up a check that [`view`](Self::view) made due but that could not be started.
    pub(crate) fn abandon(&self) {
        self.checking.store(false, Ordering::Release);
    }

    /// Checks every node at once, each within `limit`, keeps what it found and returns it.
    /// Dropped midway, it keeps nothing, and the next view is due again.
    pub(crate) async fn check(&self, masters: &Masters, limit: Duration) -> bool {
        /// Ends the check, whichever way it ends.
        struct Done<'a>(&'a AtomicBool);
        impl Drop for Done<'_> {
            fn drop(&mut self) {
                self.0.store(false, Ordering::Release);
            }
        }
        let _done = Done(&self.checking);
        let checked = self.checked.load(Ordering::Acquire);
        let since = (checked > 0)
            .then(|| Duration::from_millis(self.ms_since_base().saturating_sub(checked - 1)));
        let found = futures_util::future::join_all(
            masters
                .nodes
                .iter()
                .zip(&self.opened)
                .map(|(node, opened)| foreign_on(node, opened, since, &self.poller_key, limit)),
        )
        .await;
        let foreign = found.into_iter().any(|foreign| foreign);
        self.foreign.store(foreign, Ordering::Release);
        self.checked
            .store(self.ms_since_base() + 1, Ordering::Release);
        foreign
    }

    fn ms_since_base(&self) -> u64 {
        u64::try_from(self.base.elapsed().as_millis()).unwrap_or(u64::MAX - 1)
    }
}

/// Whether `node` could have a foreign client (see the module docs); `opened` is its count of
/// connections received at the last check (`since` ago; `None`: never checked), updated
/// here; `poller_key` the poller mark of our polling requests.
async fn foreign_on(
    node: &Node,
    opened: &AtomicU64,
    since: Option<Duration>,
    poller_key: &str,
    limit: Duration,
) -> bool {
    let within = |call| async move {
        tokio::time::timeout(limit, call)
            .await
            .unwrap_or(Err(NodeError::Timeout(limit)))
    };
    let (listed, stats, polled) = tokio::join!(
        within(node.call("CLIENT", vec![Value::from("LIST")])),
        within(node.call("INFO", vec![Value::from("stats")])),
        within(node.call("EXISTS", vec![Value::from(poller_key)])),
    );
    if matches!(polled, Ok(Value::Integer(n)) if n > 0) {
        return true;
    }
    let text = match listed {
        Ok(reply) => match reply.as_str() {
            Some(text) => text.into_owned(),
            None => return true,
        },
        Err(NodeError::Reply(_) | NodeError::Timeout(_)) => return true,
        Err(_) => return false,
    };
    if text.lines().any(foreign_connection) {
        return true;
    }
    let received = stats.ok().and_then(|reply| {
        let stats = reply.as_str()?.into_owned();
        stats
            .lines()
            .find_map(|line| line.strip_prefix("total_connections_received:"))
            .and_then(|count| count.trim().parse::<u64>().ok())
    });
    let Some(received) = received else {
        return true;
    };
    let before = opened.swap(received, Ordering::AcqRel);
    match since {
        // The first check has nothing to compare with: it goes by the list alone.
        None => false,
        Some(since) => closed_since(&text, received.saturating_sub(before), since) > 0,
    }
}

/// How many of `opened` connections, opened in the last `since`, are no longer in the
/// `CLIENT LIST` `text`: those opened and closed between two checks (a client that connects
/// for each attempt). The connections still open that may be among them are those listed
/// with an age (whole seconds) of at most `since` rounded up, plus one.
fn closed_since(text: &str, opened: u64, since: Duration) -> u64 {
    let young = since.as_secs() + 2;
    let still_open = text
        .lines()
        .filter_map(|line| {
            line.split(' ')
                .find_map(|field| field.strip_prefix("age="))
                .and_then(|age| age.parse::<u64>().ok())
        })
        .filter(|&age| age < young)
        .count() as u64;
    opened.saturating_sub(still_open)
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
    fn connections_opened_and_closed_between_checks_are_counted() {
        let list = "id=3 name=redlock-rs age=0 flags=N\nid=4 name=redlock-rs age=1 flags=N\nid=5 name=redlock-rs age=40 flags=N\n";
        let half = Duration::from_millis(500);
        // Two opened since, both still listed (young): nothing closed.
        assert_eq!(closed_since(list, 2, half), 0);
        // Three opened, two listed: one came and went.
        assert_eq!(closed_since(list, 3, half), 1);
        // Nothing opened.
        assert_eq!(closed_since(list, 0, half), 0);
        // An old connection is not among the new ones.
        assert_eq!(closed_since("id=5 age=40 flags=N", 1, half), 1);
    }

    #[test]
    fn a_poller_mark_is_due_at_first_then_once_a_third_of_its_ttl() {
        let presence = Presence::new(3, Duration::from_millis(350), "p".into());
        assert_eq!(presence.mark_due(), Some("p"));
        assert_eq!(presence.mark_due(), None);
        // Set a third of the ttl ago: due again.
        let third = u64::try_from(POLLER_TTL.as_millis() / 3).unwrap();
        let now = presence.ms_since_base() + 1;
        presence
            .marked
            .store(now.saturating_sub(third).max(1), Ordering::Release);
        if now > third {
            assert_eq!(presence.mark_due(), Some("p"));
        }
    }

    #[test]
    fn a_view_is_due_when_never_checked_and_only_one_check_runs_at_once() {
        let presence = Presence::new(3, Duration::from_millis(350), "poller".into());
        assert_eq!(presence.view(), (true, true));
        // The check is running: nobody else starts one.
        assert_eq!(presence.view(), (true, false));
        presence.foreign.store(false, Ordering::Release);
        presence
            .checked
            .store(presence.ms_since_base() + 1, Ordering::Release);
        presence.checking.store(false, Ordering::Release);
        assert_eq!(presence.view(), (false, false));
        // A window shorter than 500 ms bounds the age: with none, every view is stale.
        let presence = Presence::new(3, Duration::ZERO, "poller".into());
        presence.foreign.store(false, Ordering::Release);
        presence.checked.store(1, Ordering::Release);
        assert_eq!(presence.view(), (false, true));
    }
}
