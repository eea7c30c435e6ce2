//! [`Redlock::list_locks`]: the locks held under a resource prefix, found by `SCAN` on every
//! node and each read as [`Redlock::inspect`] reads it. For operators (`redlock locks`); it
//! takes no lock and changes nothing.

use std::collections::BTreeMap;
use std::time::Duration;

use fred::types::Value;
use futures_util::future::join_all;

use crate::admin::inspect::{Holder, NodeHolding, ResourceStatus};
use crate::error::{InvalidInput, LockError};
use crate::kernel::redlock::Redlock;
use crate::keys::{BOOKKEEPING_SEPARATOR, validate_resource};
use crate::node::Node;
use crate::options::MAX_PERMITS;
use crate::outcome::NodeError;

/// The `COUNT` of each `SCAN` call: how many keys a node looks at per call, which bounds the
/// size of each reply and the time the node spends on it.
const SCAN_PAGE: u32 = 500;

/// How many resources are read at once once the scan is done.
const READS_AT_ONCE: usize = 32;

/// What [`Redlock::list_locks`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockList {
    /// The resources held, by name (byte order).
    pub locks: Vec<ListedLock>,
    /// The nodes whose scan did not go through all their keys, with why, in the handle's
    /// node order.
    pub unscanned: Vec<UnscannedNode>,
    /// The handle's nodes.
    pub nodes: usize,
    /// The nodes that must agree for a lock: `N / 2 + 1`.
    pub quorum: usize,
}

impl LockList {
    /// Nodes whose scan went through all their keys.
    pub fn scanned(&self) -> usize {
        self.nodes - self.unscanned.len()
    }

    /// `true` when a quorum of nodes were scanned: then every lock held on a quorum of nodes
    /// is in [`locks`](Self::locks) (at least one of its nodes was scanned). With fewer, a
    /// lock held only on the nodes that were not scanned is missing.
    pub fn is_complete(&self) -> bool {
        self.scanned() >= self.quorum
    }
}

/// A node that [`Redlock::list_locks`] could not scan to the end.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct UnscannedNode {
    /// The node's label (`host:port`, never credentials).
    pub node: String,
    /// Why: it did not answer a `SCAN` within the handle's node timeout, is not connected, or
    /// refused it (an ACL user without `+scan`).
    pub error: NodeError,
}

/// One resource [`Redlock::list_locks`] found held.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ListedLock {
    /// The resource (its key without the handle's key prefix).
    pub resource: String,
    /// Its lock, as [`Redlock::inspect`] reads it (possibly free, when only permits are held).
    pub lock: ResourceStatus,
    /// The permits of a counting semaphore on the resource
    /// ([`Redlock::semaphore`](crate::Redlock::semaphore)), one status per permit in permit
    /// order, as [`Redlock::inspect_permits`] reads them; empty when the scan found no permit
    /// of one.
    pub permits: Vec<ResourceStatus>,
}

impl ListedLock {
    /// The permits held on a quorum of nodes ([`ResourceStatus::is_held`]).
    pub fn permits_held(&self) -> usize {
        self.permits.iter().filter(|slot| slot.is_held()).count()
    }
}

/// What the scan found of one resource.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Found {
    /// Its lock key.
    lock: bool,
    /// A key of a semaphore on it: the number of permits it shows at least (its highest
    /// slot seen plus one; 0 for only the semaphore's stored number of permits).
    permits: Option<u32>,
}

impl Redlock {
    /// Lists the locks held on resources whose names start with `prefix` (under the handle's
    /// key prefix; `""` for every resource): every node is scanned (`SCAN` with `MATCH
    /// <key prefix><prefix>*`, page by page, each call within the handle's node timeout), the
    /// names found on any node are merged, and each resource is then read on every node as
    /// [`inspect`](Self::inspect) reads it, never its token. Locks of other clients on the
    /// same keys (a foreign `SET key value NX PX`) are listed too, without an owner label.
    ///
    /// The lock's own bookkeeping keys (every key holding
    /// [`BOOKKEEPING_SEPARATOR`](crate::BOOKKEEPING_SEPARATOR): waiter queues, fencing
    /// counters, owner labels...) are not resources. The permit keys of a counting semaphore
    /// ([`Redlock::semaphore`](crate::Redlock::semaphore)) show its resource, listed with its
    /// permits ([`ListedLock::permits`], for the number of permits stored on the nodes, or
    /// else as many as the highest permit found). A resource is listed when a lock is at its
    /// key on at least one node, or one of its permits is: a string with an expiry (ours or
    /// a foreign client's), a hand-over in progress, or holders or waiters in lock modes.
    /// Other data of the same name (another type, a string without an expiry) is not a lock
    /// and is not listed, and neither is a resource freed between the scan and its read.
    ///
    /// Cost: `SCAN` walks each node's whole key space, 500 keys per call, whatever
    /// the prefix; then one read-only `EVAL` per resource and node (two reads more per node
    /// for a semaphore), a few dozen resources at once. An ACL user needs `+scan` and what
    /// [`inspect`](Self::inspect) needs.
    ///
    /// A snapshot, not atomic: a lock taken during the scan may be missing, and one released
    /// during it is dropped when read. Nodes whose scan stopped are in
    /// [`LockList::unscanned`]; deciding what too few scans mean is the caller's
    /// ([`LockList::is_complete`]).
    ///
    /// ```no_run
    /// # async fn run(redlock: redlock_core::Redlock) -> Result<(), redlock_core::LockError> {
    /// let list = redlock.list_locks("report:").await?;
    /// for lock in &list.locks {
    ///     println!("{}: held by {:?}", lock.resource, lock.lock.owner());
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads.
    ///
    /// # Errors
    /// [`LockError::Invalid`] ([`InvalidInput::ReservedResource`]) when the key prefix or
    /// `prefix` holds a NUL byte; nothing is sent.
    pub async fn list_locks(&self, prefix: &str) -> Result<LockList, LockError> {
        let key_prefix = self.key_for("");
        let pattern = format!("{key_prefix}{prefix}");
        if pattern.contains('\0') {
            return Err(InvalidInput::ReservedResource.into());
        }
        let masters = self.masters();
        let limit = masters.node_timeout;
        let pattern = format!("{}*", glob_escape(&pattern));
        let scans = join_all(masters.nodes.iter().map(|node| scan(node, &pattern, limit))).await;
        let mut found: BTreeMap<String, Found> = BTreeMap::new();
        let mut unscanned = Vec::new();
        for (node, scan) in masters.nodes.iter().zip(scans) {
            match scan {
                Ok(keys) => {
                    for key in keys {
                        let Some(rest) = key.strip_prefix(key_prefix.as_str()) else {
                            continue;
                        };
                        if let Some((resource, seen)) = classify(rest) {
                            let entry = found.entry(resource.to_owned()).or_default();
                            entry.lock |= seen.lock;
                            entry.permits = entry.permits.max(seen.permits);
                        }
                    }
                }
                Err(error) => unscanned.push(UnscannedNode {
                    node: node.label.to_string(),
                    error,
                }),
            }
        }
        let found: Vec<(String, Found)> = found.into_iter().collect();
        let mut locks = Vec::new();
        for batch in found.chunks(READS_AT_ONCE) {
            let reads = batch
                .iter()
                .map(|(resource, seen)| self.read_listed(resource, *seen));
            locks.extend(join_all(reads).await.into_iter().flatten());
        }
        Ok(LockList {
            locks,
            unscanned,
            nodes: masters.len(),
            quorum: masters.quorum,
        })
    }

    /// Reads `resource` (its lock, and its semaphore's permits when the scan `seen` one);
    /// `None` when no node holds a lock or permit of it any more.
    async fn read_listed(&self, resource: &str, seen: Found) -> Option<ListedLock> {
        let lock = self.inspect(resource).await.ok()?;
        let permits = match seen.permits {
            None => Vec::new(),
            Some(highest) => {
                let stored = self.semaphore_permits(resource).await.ok().flatten();
                let permits = stored.unwrap_or(highest).max(highest).min(MAX_PERMITS);
                if permits == 0 {
                    Vec::new()
                } else {
                    let slots = self.inspect_permits(resource, permits).await;
                    slots.unwrap_or_default()
                }
            }
        };
        let locked = |status: &ResourceStatus| {
            status
                .nodes
                .iter()
                .any(|node| node.read.as_ref().is_ok_and(is_lock))
        };
        (locked(&lock) || permits.iter().any(locked)).then(|| ListedLock {
            resource: resource.to_owned(),
            lock,
            permits,
        })
    }
}

/// Whether a node's holding is a lock: a string with an expiry (ours or a foreign client's
/// `SET NX PX`), a hand-over in progress, or a resource held (or waited for) in lock modes.
fn is_lock(holding: &NodeHolding) -> bool {
    match holding.holder {
        Holder::Plain => holding.ttl.is_some(),
        Holder::Reserved | Holder::Modes(_) => true,
        _ => false,
    }
}

/// What a key, without the key prefix, says of a resource: its lock key, or a key of a
/// semaphore on it (a permit, or the number of permits stored); `None` for the lock's other
/// bookkeeping keys and for names that cannot be resources.
fn classify(key: &str) -> Option<(&str, Found)> {
    let (resource, seen) = match key.split_once(BOOKKEEPING_SEPARATOR) {
        None => (
            key,
            Found {
                lock: true,
                permits: None,
            },
        ),
        Some((resource, kind)) => {
            let permits = match kind {
                "permit-capacity" => 0,
                _ => kind
                    .strip_prefix("permit:")?
                    .parse::<u32>()
                    .ok()?
                    .checked_add(1)?,
            };
            let permits = Some(permits);
            let lock = false;
            (resource, Found { lock, permits })
        }
    };
    validate_resource(resource).ok()?;
    Some((resource, seen))
}

/// `text` as a `SCAN MATCH` pattern matching itself only: `*`, `?`, `[`, `]` and `\` escaped
/// with a backslash.
fn glob_escape(text: &str) -> String {
    let mut escaped = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            escaped.push('\\');
        }
        escaped.push(c);
    }
    escaped
}

/// Every key of `node` matching `pattern`, by `SCAN` pages of [`SCAN_PAGE`], each call
/// within `limit`; keys that are not UTF-8 are skipped (no resource's key is).
async fn scan(node: &Node, pattern: &str, limit: Duration) -> Result<Vec<String>, NodeError> {
    let mut keys = Vec::new();
    let mut cursor = "0".to_owned();
    loop {
        let args = vec![
            Value::from(cursor.as_str()),
            Value::from("MATCH"),
            Value::from(pattern),
            Value::from("COUNT"),
            Value::from(SCAN_PAGE),
        ];
        let reply = tokio::time::timeout(limit, node.call("SCAN", args))
            .await
            .unwrap_or(Err(NodeError::Timeout(limit)))?;
        let (next, page) = decode_page(reply)
            .ok_or_else(|| NodeError::UnexpectedReply("to SCAN (no cursor and keys)".to_owned()))?;
        keys.extend(page);
        if next == "0" {
            return Ok(keys);
        }
        cursor = next;
    }
}

/// A `SCAN` reply: the next cursor and the page's UTF-8 keys.
fn decode_page(reply: Value) -> Option<(String, Vec<String>)> {
    let Value::Array(reply) = reply else {
        return None;
    };
    let [cursor, Value::Array(page)] = <[Value; 2]>::try_from(reply).ok()? else {
        return None;
    };
    let cursor = cursor.as_str()?.into_owned();
    let keys = page
        .iter()
        .filter_map(|key| key.as_str().map(std::borrow::Cow::into_owned))
        .collect();
    Some((cursor, keys))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_name_their_resource_and_bookkeeping_is_skipped() {
        let lock = Found {
            lock: true,
            permits: None,
        };
        assert_eq!(classify("report:1"), Some(("report:1", lock)));
        let permit = |permits| Found {
            lock: false,
            permits: Some(permits),
        };
        assert_eq!(
            classify("export\0redlock:permit:2"),
            Some(("export", permit(3)))
        );
        assert_eq!(
            classify("export\0redlock:permit-capacity"),
            Some(("export", permit(0)))
        );
        for bookkeeping in [
            "job\0redlock:waiters",
            "job\0redlock:listen",
            "job\0redlock:fencing",
            "job\0redlock:owner:0123456789abcdef",
            "job\0redlock:permit-waiters",
            "job\0redlock:permit:x",
            "\0redlock:witness",
            "order:\0redlock:fencing-floor",
        ] {
            assert_eq!(classify(bookkeeping), None, "{bookkeeping:?}");
        }
        // Not a resource name: empty, or holding a NUL byte.
        assert_eq!(classify(""), None);
        assert_eq!(classify("a\0b"), None);
    }

    #[test]
    fn patterns_match_the_prefix_literally() {
        assert_eq!(glob_escape("lock:"), "lock:");
        assert_eq!(glob_escape(r"a*b?[c]\d"), r"a\*b\?\[c\]\\d");
    }

    #[test]
    fn scan_pages_decode() {
        let page = Value::Array(vec![
            Value::from("17"),
            Value::Array(vec![Value::from("a"), Value::from("b")]),
        ]);
        assert_eq!(
            decode_page(page),
            Some(("17".to_owned(), vec!["a".to_owned(), "b".to_owned()]))
        );
        assert_eq!(decode_page(Value::Integer(0)), None);
        assert_eq!(decode_page(Value::Array(vec![Value::from("0")])), None);
    }
}
