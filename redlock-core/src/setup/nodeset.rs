//! The node-set check: two handles that lock the same keys through different node lists
//! (`redlock run --nodes n1,n2,n3` beside applications on n1..n5, or `REDLOCK_NODES` that
//! differ in the middle of a migration) have quorums that need not intersect: each can hold
//! the same resource at once (3 of 5 and 2 of 3 share no node when the first took n3..n5).
//!
//! Each node keeps a marker of the number of nodes the handles of a key prefix use
//! (`{prefix}\0redlock:nodes`), written where there is none with a ttl of [`MARKER_TTL`],
//! which every handle refreshes every third of it. A handle over another number of nodes finds
//! the other marker:
//! - at [`build`](crate::RedlockBuilder::build), the build is refused
//!   ([`BuildError::NodeSetMismatch`]), before any lock is taken;
//! - later (the other handle started at the same time, or after this one's marker expired),
//!   every refresh logs an error naming the node, until the lists agree again.
//!
//! The number, not the nodes' addresses or ids: applications reach the same servers under
//! different names and through proxies, and a node restarted empty loses whatever id it was
//! given, so a marker of either would refuse healthy deployments. The number catches a
//! subset or a superset of the nodes (the usual mistake: a command-line job given three of the
//! five nodes); two lists of the same length over different servers are not caught. It costs
//! one script per node at build time and one per node per refresh period: nothing per lock.
//!
//! A planned change to the number of nodes must stop every handle of the old list before one of
//! the new list starts, which is what the check enforces; once they are all stopped, the old
//! marker expires after [`MARKER_TTL`] (or delete the marker key on the nodes).

use std::sync::Weak;
use std::time::Duration;

use fred::types::Value;

use crate::error::BuildError;
use crate::kernel::masters::Masters;
use crate::keys::BOOKKEEPING_SEPARATOR;
use crate::node::Node;
use crate::outcome::NodeError;

/// How long a node-set marker lives unless a handle refreshes it (every third of it).
pub(crate) const MARKER_TTL: Duration = Duration::from_secs(60);

/// Writes `ARGV[1]` (the number of nodes) as the marker for `ARGV[2]` ms unless another
/// number is there; returns the marker as it was (`""` when none).
const NODE_SET: &str = r#"local marker = redis.call("get", KEYS[1])
if not marker or marker == ARGV[1] then
  redis.call("set", KEYS[1], ARGV[1], "PX", ARGV[2])
end
return marker or """#;

/// The node-set check of one handle.
pub(crate) struct NodeSet {
    marker_key: String,
}

impl NodeSet {
    pub(crate) fn new(key_prefix: &str) -> Self {
        Self {
            marker_key: format!("{key_prefix}{BOOKKEEPING_SEPARATOR}nodes"),
        }
    }

    /// The build-time check: writes the number of nodes as the marker where there is none (or
    /// the same), within `limit` per node, and refuses a node holding another number. A node
    /// that does not answer (down, or an ACL without access to the marker) is not checked.
    ///
    /// # Errors
    /// [`BuildError::NodeSetMismatch`] naming the first node that holds another number.
    pub(crate) async fn check(&self, masters: &Masters, limit: Duration) -> Result<(), BuildError> {
        match self.mark(masters, limit).await {
            Some((node, theirs)) => Err(BuildError::NodeSetMismatch {
                node,
                ours: masters.len(),
                theirs,
            }),
            None => Ok(()),
        }
    }

    /// Refreshes the marker every third of [`MARKER_TTL`] while `masters` (the handle) lives,
    /// logging an error each time a node holds another number.
    pub(crate) fn refresh(self, masters: Weak<Masters>, limit: Duration) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        runtime.spawn(async move {
            loop {
                tokio::time::sleep(MARKER_TTL / 3).await;
                let Some(masters) = masters.upgrade() else {
                    return;
                };
                if let Some((node, theirs)) = self.mark(&masters, limit).await {
                    tracing::error!(
                        node,
                        ours = masters.len(),
                        theirs,
                        "another handle locks these keys through a list of another number of nodes: their majorities need not overlap, so both can hold one resource at once; give every application the same nodes"
                    );
                }
            }
        });
    }

    /// [`NODE_SET`] on every node at once; the first node holding another number, and it.
    async fn mark(&self, masters: &Masters, limit: Duration) -> Option<(String, usize)> {
        let ours = masters.len().to_string();
        let calls = masters
            .nodes
            .iter()
            .map(|node| self.mark_on(node, &ours, limit));
        let answers = futures_util::future::join_all(calls).await;
        masters
            .nodes
            .iter()
            .zip(answers)
            .find_map(|(node, answer)| match answer {
                Ok(marker) if !marker.is_empty() && marker != ours => {
                    Some((node.label.to_string(), marker.parse().unwrap_or(0)))
                }
                Ok(_) => None,
                Err(error) => {
                    tracing::debug!(node = &*node.label, %error, "node set not checked on this node");
                    None
                }
            })
    }

    async fn mark_on(&self, node: &Node, ours: &str, limit: Duration) -> Result<String, NodeError> {
        let ttl_ms = i64::try_from(MARKER_TTL.as_millis()).unwrap_or(i64::MAX);
        let args = vec![
            Value::from(NODE_SET),
            Value::from(1),
            Value::from(self.marker_key.as_str()),
            Value::from(ours),
            Value::Integer(ttl_ms),
        ];
        let reply = tokio::time::timeout(limit, node.call("EVAL", args))
            .await
            .unwrap_or(Err(NodeError::Timeout(limit)))?;
        reply
            .as_string()
            .ok_or_else(|| NodeError::UnexpectedReply("to the node-set script".to_owned()))
    }
}
