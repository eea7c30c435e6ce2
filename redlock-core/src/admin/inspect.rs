//! [`Redlock::inspect`]: what every node holds for a resource, read from the outside (holder
//! present or not, the key's remaining ttl, waiters queued), never the token. For operators
//! (`redlock status`) and for diagnostics; it takes no lock and changes nothing.

use std::time::Duration;

use fred::types::Value;
use futures_util::future::join_all;

use crate::error::{InvalidInput, LockError};
use crate::kernel::redlock::Redlock;
use crate::keys::{ResourceKeys, validate_resource};
use crate::mode::Mode;
use crate::node::Node;
use crate::options::MAX_PERMITS;
use crate::outcome::NodeError;

/// Reads one resource on one node, atomically, and returns what the lock layout says about it
/// without the token (`kernel/scripts.rs` describes the layout, `admin/inspect.lua` the
/// script's keys and reply). Sent on its own with `EVAL`, after the scripts' shared helpers
/// (`node/scripts/prelude.lua`, of which it calls `node_now` and `mode_entry`).
pub(crate) const INSPECT: &str = concat!(
    include_str!("../node/scripts/prelude.lua"),
    include_str!("inspect.lua")
);

/// What [`Redlock::inspect`] read on every node.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ResourceStatus {
    /// The resource.
    pub resource: String,
    /// Its Redis key (the key prefix followed by the resource).
    pub key: String,
    /// The nodes that must agree for a lock: `N / 2 + 1`.
    pub quorum: usize,
    /// Each node's answer, in the handle's node order.
    pub nodes: Vec<NodeStatus>,
}

impl ResourceStatus {
    /// Nodes that answered.
    pub fn answered(&self) -> usize {
        self.nodes.iter().filter(|n| n.read.is_ok()).count()
    }

    /// Nodes where a holder is present ([`Holder::is_present`]).
    pub fn held_on(&self) -> usize {
        self.nodes
            .iter()
            .filter(|n| n.read.as_ref().is_ok_and(|r| r.holder.is_present()))
            .count()
    }

    /// The plain lock's holder's label ([`RedlockBuilder::owner`](crate::RedlockBuilder::owner))
    /// when one holder holds the key on a quorum of nodes with its label shown there: who
    /// holds the resource, or leads. Holders are told apart by their tokens (a digest read on
    /// each node, never the token), not by their labels: two holders with the same label
    /// that split the nodes between them are two holders, neither with a quorum, and the
    /// answer is `None`, as it is when nobody holds a quorum or the holder has no label.
    pub fn owner(&self) -> Option<&str> {
        let holders: Vec<(&str, &str)> = self
            .nodes
            .iter()
            .filter_map(|n| {
                let read = n.read.as_ref().ok()?;
                Some((read.digest.as_deref()?, read.owner.as_deref()?))
            })
            .collect();
        holders
            .iter()
            .find(|holder| holders.iter().filter(|h| h == holder).count() >= self.quorum)
            .map(|&(_, label)| label)
    }

    /// The plain lock's holder on a quorum of nodes, told apart from other holders by its
    /// token's digest (read on each node, never the token): the digest and the holder's
    /// label where one node shows it. `None` when no one holder has a quorum.
    pub(crate) fn plain_holder(&self) -> Option<(&str, Option<&str>)> {
        let reads = || self.nodes.iter().filter_map(|n| n.read.as_ref().ok());
        let digests: Vec<&str> = reads().filter_map(|r| r.digest.as_deref()).collect();
        let digest = *digests
            .iter()
            .find(|d| digests.iter().filter(|other| other == d).count() >= self.quorum)?;
        let owner = reads()
            .filter(|r| r.digest.as_deref() == Some(digest))
            .find_map(|r| r.owner.as_deref());
        Some((digest, owner))
    }

    /// Whether the nodes that gave no answer, with those that show the most common plain
    /// holder, could make a quorum for it: then a holder may lead though
    /// [`plain_holder`](Self::plain_holder) found none on the nodes that answered.
    pub(crate) fn may_have_plain_holder(&self) -> bool {
        let digests: Vec<&str> = self
            .nodes
            .iter()
            .filter_map(|n| n.read.as_ref().ok()?.digest.as_deref())
            .collect();
        let most = digests
            .iter()
            .map(|d| digests.iter().filter(|other| *other == d).count())
            .max()
            .unwrap_or(0);
        most + (self.nodes.len() - self.answered()) >= self.quorum
    }

    /// `true` when something is at the key on a quorum of nodes ([`Holder::is_present`]): a
    /// plain acquisition is refused (a lock of ours, a foreign client's key, a hand-over in
    /// progress, waiters' entries of a resource held in modes, or someone else's data).
    pub fn is_held(&self) -> bool {
        self.held_on() >= self.quorum
    }
}

/// One node's answer to [`Redlock::inspect`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct NodeStatus {
    /// The node's label (`host:port`, never credentials).
    pub node: String,
    /// What it holds for the resource, or why it gave no usable answer (it did not answer
    /// within the handle's node timeout, is not connected, or refused the read, e.g.
    /// `NOPERM`).
    pub read: Result<NodeHolding, NodeError>,
}

/// What one node holds for a resource.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct NodeHolding {
    /// Who holds the lock key there, if anyone.
    pub holder: Holder,
    /// The lock key's remaining ttl on that node (`PTTL`); `None` when there is no key or it
    /// has no expiry (a foreign key set without one).
    pub ttl: Option<Duration>,
    /// Waiters for the resource on that node: plain waiters queued for a hand-over, plus the
    /// waiter entries of mode requests that were refused.
    pub waiters: usize,
    /// The label of the plain lock's holder there
    /// ([`RedlockBuilder::owner`](crate::RedlockBuilder::owner)); `None` without one (a
    /// holder through a handle without a label, or a foreign client). For holders in modes,
    /// see [`ModeHolder::owner`].
    pub owner: Option<String>,
    /// The plain lock's holder there, as the first 16 hex digits of its token's SHA-1 (never
    /// the token): what tells two holders with the same label apart in
    /// [`ResourceStatus::owner`]. `None` without a plain holder.
    digest: Option<String>,
}

/// Who holds a resource's lock key on one node. Tokens are never read out.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Holder {
    /// No key: the resource is free on this node.
    None,
    /// A plain lock (a string at the key: a lock of ours or a foreign client's `SET NX`).
    Plain,
    /// A hand-over in progress: a release reserved the key for a queued waiter, for the
    /// hand-over grace ([`RedlockBuilder::handover_grace`](crate::RedlockBuilder::handover_grace)).
    Reserved,
    /// Held in lock modes ([`Redlock::lock_mode_with`](crate::Redlock::lock_mode_with)): each live
    /// holder's mode and the ttl its entry has left, on the node's clock. Empty when only
    /// waiters' entries are left (counted in [`NodeHolding::waiters`]): the key is still
    /// there, and still refuses a plain acquisition and incompatible later requests.
    Modes(Vec<ModeHolder>),
    /// A key no lock of ours wrote: another type (`list`, `set`, …), or a hash with a field
    /// that is not a mode lock's entry (another application's hash of the same name). Every
    /// acquisition is refused while it is there: the plain lock as busy, a lock in a mode
    /// with [`LockError::ForeignKey`], and neither touches it.
    Other {
        /// Its Redis type (`list`, `set`, `hash`, …).
        kind: String,
    },
}

impl Holder {
    /// `true` when something is at the key on this node, which refuses a plain acquisition
    /// there (`SET NX` refuses any key): anything but [`Holder::None`]. That includes a
    /// [`Holder::Modes`] with no live holder, only waiters' entries: a waiter that crashed
    /// leaves its entry until it expires (a few retry delays), and until then the key refuses
    /// the plain lock, and requests in an incompatible mode that started after it.
    pub fn is_present(&self) -> bool {
        !matches!(self, Holder::None)
    }
}

/// One holder of a resource held in lock modes, on one node.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ModeHolder {
    /// The mode it holds the resource in.
    pub mode: Mode,
    /// The ttl its entry has left on that node.
    pub ttl: Duration,
    /// Its label ([`RedlockBuilder::owner`](crate::RedlockBuilder::owner)), if its handle
    /// has one.
    pub owner: Option<String>,
}

impl Redlock {
    /// Reads what every node holds for `resource`, at once, each within the handle's node
    /// timeout: whether a holder is present, the key's remaining ttl, and the waiters queued
    /// ([`ResourceStatus`]). One read-only `EVAL` per node: an ACL user needs `+eval` and the
    /// commands it runs, `+type +pttl +get`, `+hgetall +time` for a resource held in lock
    /// modes, and `+zcard` to count waiters (0 without it). It takes no lock, changes
    /// nothing, and never reads the token out of the node.
    ///
    /// A snapshot: a holder may come or go right after. Nodes that do not answer are in the
    /// status with their error; deciding what too few answers mean is the caller's.
    ///
    /// ```no_run
    /// # async fn run(redlock: redlock_core::Redlock) -> Result<(), redlock_core::LockError> {
    /// let status = redlock.inspect("report:nightly").await?;
    /// println!("held on {} of {} nodes", status.held_on(), status.nodes.len());
    /// # Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads.
    ///
    /// # Errors
    /// [`LockError::Invalid`] for an empty or over-long resource, or one (or a key prefix)
    /// holding a NUL byte; nothing is sent.
    pub async fn inspect(&self, resource: &str) -> Result<ResourceStatus, LockError> {
        validate_resource(resource)?;
        let key = self.key_for(resource);
        if key.contains('\0') {
            return Err(InvalidInput::ReservedResource.into());
        }
        let keys = self.resource_keys(key);
        Ok(self.read_every_node(resource, keys).await)
    }

    /// [`inspect`](Self::inspect) for the permits of a counting semaphore
    /// ([`Redlock::semaphore`](crate::Redlock::semaphore)): what every node holds for
    /// each of the `permits` slots of the semaphore on `resource`, one [`ResourceStatus`] per
    /// slot, in slot order. A slot is a plain lock of its own (its key is the resource's key
    /// followed by a bookkeeping suffix, in [`ResourceStatus::key`]), so a permit is held
    /// where its slot [`is_held`](ResourceStatus::is_held), by
    /// [`owner`](ResourceStatus::owner) when its holder has a label. The semaphore's waiters
    /// share one queue: each slot's [`NodeHolding::waiters`] counts all of them.
    ///
    /// The number of permits is not stored on the nodes: give the one the semaphore's holders
    /// use (with more, the slots above theirs read free; with fewer, the slots above `permits`
    /// are not read). One read-only `EVAL` per slot and node, all at once, each within the
    /// handle's node timeout; the ACL needs of [`inspect`](Self::inspect).
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads.
    ///
    /// # Errors
    /// As [`inspect`](Self::inspect); [`LockError::Invalid`] for `permits` of 0
    /// ([`InvalidInput::ZeroPermits`]) or above [`MAX_PERMITS`](crate::MAX_PERMITS)
    /// ([`InvalidInput::PermitsAboveCap`]). Nothing is sent.
    pub async fn inspect_permits(
        &self,
        resource: &str,
        permits: u32,
    ) -> Result<Vec<ResourceStatus>, LockError> {
        validate_resource(resource)?;
        if permits == 0 {
            return Err(InvalidInput::ZeroPermits.into());
        }
        if permits > MAX_PERMITS {
            let max = MAX_PERMITS;
            return Err(InvalidInput::PermitsAboveCap { permits, max }.into());
        }
        let key = self.key_for(resource);
        if key.contains('\0') {
            return Err(InvalidInput::ReservedResource.into());
        }
        let (_queue, slots) = self.permit_keys(key, permits);
        let reads = slots
            .slots
            .into_iter()
            .map(|keys| self.read_every_node(resource, keys));
        Ok(join_all(reads).await)
    }

    /// The number of permits the counting semaphore on `resource` is in use with: the first
    /// attempt at one of its permits ([`Redlock::semaphore`](crate::Redlock::semaphore))
    /// stores it on the nodes, and it is kept as long as the permits taken with it; an attempt
    /// with another number is refused with
    /// [`LockError::PermitsMismatch`](crate::LockError::PermitsMismatch). `None` when no one
    /// number is stored on a quorum of nodes (no permit taken lately, or too few answered).
    /// Then read the permits with [`inspect_permits`](Self::inspect_permits).
    ///
    /// One `GET` per node, all at once, each within the handle's node timeout.
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads.
    ///
    /// # Errors
    /// As [`inspect`](Self::inspect) (nothing is sent).
    pub async fn semaphore_permits(&self, resource: &str) -> Result<Option<u32>, LockError> {
        let stored = self.stored_permits(resource).await?;
        let quorum = self.masters().quorum;
        Ok(stored
            .iter()
            .flatten()
            .copied()
            .find(|number| stored.iter().filter(|s| **s == Some(*number)).count() >= quorum))
    }

    /// The number of permits stored for the semaphore on `resource` on each node, in node
    /// order (`None`: none stored, another value, or no answer).
    pub(crate) async fn stored_permits(
        &self,
        resource: &str,
    ) -> Result<Vec<Option<u32>>, LockError> {
        validate_resource(resource)?;
        let key = self.key_for(resource);
        if key.contains('\0') {
            return Err(InvalidInput::ReservedResource.into());
        }
        let capacity = crate::keys::permit_capacity(&key);
        let masters = self.masters();
        let limit = masters.node_timeout;
        let reads = masters.nodes.iter().map(|node| async {
            let read = node.call("GET", vec![Value::from(capacity.as_str())]);
            let value = tokio::time::timeout(limit, read).await.ok()?.ok()?;
            value.as_str()?.parse::<u32>().ok()
        });
        Ok(join_all(reads).await)
    }

    /// [`INSPECT`] of `keys` on every node at once, each within the node timeout.
    async fn read_every_node(&self, resource: &str, keys: ResourceKeys) -> ResourceStatus {
        let masters = self.masters();
        let limit = masters.node_timeout;
        let reads = masters.nodes.iter().map(|node| async {
            NodeStatus {
                node: node.label.to_string(),
                read: read_node(node, &keys, limit).await,
            }
        });
        let nodes = join_all(reads).await;
        ResourceStatus {
            resource: resource.to_owned(),
            key: keys.lock,
            quorum: masters.quorum,
            nodes,
        }
    }
}

/// [`INSPECT`] on one node, within `limit`.
async fn read_node(
    node: &Node,
    keys: &ResourceKeys,
    limit: Duration,
) -> Result<NodeHolding, NodeError> {
    let args = vec![
        Value::from(INSPECT),
        Value::from(2),
        Value::from(keys.lock.as_str()),
        Value::from(keys.waiters()),
    ];
    let reply = tokio::time::timeout(limit, node.call("EVAL", args))
        .await
        .unwrap_or(Err(NodeError::Timeout(limit)))?;
    decode(reply).ok_or_else(|| {
        NodeError::UnexpectedReply("to the inspect script (no lock key layout)".to_owned())
    })
}

/// The reply of [`INSPECT`]; `None` when it is not what the script returns.
fn decode(reply: Value) -> Option<NodeHolding> {
    let reply = match reply {
        Value::Array(values) => values,
        _ => return None,
    };
    let (head, entries) = reply.split_at_checked(5)?;
    let kind = head[0].as_str()?;
    let pttl = head[1].as_i64()?;
    let queued = head[2].as_i64()?;
    // A string reserved for a waiter, or a hash holding someone else's data.
    let flagged = head[3].as_i64()? == 1;
    // A text that is empty when there is none.
    let text = |value: &Value| {
        let text = value.as_str()?;
        Some((!text.is_empty()).then(|| text.into_owned()))
    };
    let (mut owner, mut digest) = (None, None);
    let mut waiters = usize::try_from(queued).unwrap_or(0);
    let holder = match &*kind {
        "none" => Holder::None,
        "string" if flagged => Holder::Reserved,
        "string" => {
            owner = text(&head[4])?;
            // The holder's digest follows, alone.
            let [digest_value] = entries else {
                return None;
            };
            digest = text(digest_value)?;
            Holder::Plain
        }
        "hash" if flagged => Holder::Other {
            kind: "hash".to_owned(),
        },
        "hash" => {
            let mut holders = Vec::new();
            for entry in entries.chunks(4) {
                let [mode, ttl, waiter, owner] = entry else {
                    return None;
                };
                let mode: Mode = mode.as_str()?.parse().ok()?;
                let ttl = Duration::from_millis(u64::try_from(ttl.as_i64()?).ok()?);
                if waiter.as_i64()? == 1 {
                    waiters += 1;
                } else {
                    let owner = text(owner)?;
                    holders.push(ModeHolder { mode, ttl, owner });
                }
            }
            Holder::Modes(holders)
        }
        other => Holder::Other {
            kind: other.to_owned(),
        },
    };
    let ttl = u64::try_from(pttl).ok().map(Duration::from_millis);
    Some(NodeHolding {
        holder,
        ttl,
        waiters,
        owner,
        digest,
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    fn reply(values: Vec<Value>) -> Value {
        Value::Array(values)
    }

    /// A status of one node per entry: `Some((digest, owner))` a plain holder, `None` free,
    /// and a node that did not answer for `"-"`.
    pub(crate) fn status_of(nodes: &[Option<(&str, Option<&str>)>]) -> ResourceStatus {
        let nodes = nodes
            .iter()
            .map(|node| NodeStatus {
                node: "n".to_owned(),
                read: match node {
                    Some(("-", _)) => Err(NodeError::Timeout(Duration::from_millis(100))),
                    Some((digest, owner)) => Ok(NodeHolding {
                        holder: Holder::Plain,
                        ttl: Some(Duration::from_secs(1)),
                        waiters: 0,
                        owner: owner.map(str::to_owned),
                        digest: Some((*digest).to_owned()),
                    }),
                    None => Ok(NodeHolding {
                        holder: Holder::None,
                        ttl: None,
                        waiters: 0,
                        owner: None,
                        digest: None,
                    }),
                },
            })
            .collect::<Vec<_>>();
        ResourceStatus {
            resource: "r".to_owned(),
            key: "r".to_owned(),
            quorum: nodes.len() / 2 + 1,
            nodes,
        }
    }

    #[test]
    fn a_holder_may_lead_while_the_silent_nodes_could_complete_its_quorum() {
        let (a, b, silent) = (
            Some(("aaaa", None)),
            Some(("bbbb", None)),
            Some(("-", None)),
        );
        // 2 of 5 for one holder, 2 silent: they may hold it too.
        assert!(status_of(&[a, a, None, silent, silent]).may_have_plain_holder());
        assert!(status_of(&[a, a, a, None, None]).may_have_plain_holder());
        assert!(status_of(&[a, a, None, None, silent]).may_have_plain_holder());
        // No silent node to make 2 into 3; one cannot make 1 into 3, nor two holders of 1.
        assert!(!status_of(&[a, a, None, None, None]).may_have_plain_holder());
        assert!(!status_of(&[a, None, None, None, silent]).may_have_plain_holder());
        assert!(!status_of(&[a, b, None, silent, None]).may_have_plain_holder());
        assert!(!status_of(&[None, None, None, None, None]).may_have_plain_holder());
    }

    #[test]
    fn the_plain_holder_is_one_token_on_a_quorum_whatever_the_labels() {
        let a = Some(("aaaa", Some("web-1")));
        let a_unlabelled = Some(("aaaa", None));
        let b_same_label = Some(("bbbb", Some("web-1")));
        let silent = Some(("-", None));
        // A quorum of one token: its label, even where only one node shows it.
        let held = status_of(&[a, a_unlabelled, a_unlabelled, None, None]);
        assert_eq!(held.plain_holder(), Some(("aaaa", Some("web-1"))));
        assert_eq!(
            status_of(&[a, a, a]).plain_holder(),
            Some(("aaaa", Some("web-1")))
        );
        // Refused: one short of a quorum, two holders with one label splitting the nodes,
        // nodes that did not answer, nobody.
        assert_eq!(status_of(&[a, a, None, None, None]).plain_holder(), None);
        assert_eq!(
            status_of(&[a, a, b_same_label, b_same_label, None]).plain_holder(),
            None
        );
        assert_eq!(
            status_of(&[a, a, silent, silent, silent]).plain_holder(),
            None
        );
        assert_eq!(status_of(&[None, None, None]).plain_holder(), None);
    }

    #[test]
    fn replies_decode_into_holders_without_tokens() {
        let plain = decode(reply(vec![
            "string".into(),
            1500.into(),
            2.into(),
            0.into(),
            "web-1/4242".into(),
            "0123456789abcdef".into(),
        ]))
        .unwrap();
        assert_eq!(plain.holder, Holder::Plain);
        assert_eq!(plain.owner.as_deref(), Some("web-1/4242"));
        assert_eq!(plain.digest.as_deref(), Some("0123456789abcdef"));
        assert_eq!(plain.ttl, Some(Duration::from_millis(1500)));
        assert_eq!(plain.waiters, 2);

        let reserved = decode(reply(vec![
            "string".into(),
            20.into(),
            0.into(),
            1.into(),
            "".into(),
        ]));
        assert_eq!(reserved.unwrap().holder, Holder::Reserved);

        let free = decode(reply(vec![
            "none".into(),
            (-2).into(),
            0.into(),
            0.into(),
            "".into(),
        ]))
        .unwrap();
        assert_eq!(
            (free.holder.is_present(), free.ttl, free.owner),
            (false, None, None)
        );

        let modes = decode(reply(vec![
            "hash".into(),
            900.into(),
            0.into(),
            0.into(),
            "".into(),
            "PR".into(),
            900.into(),
            0.into(),
            "reader".into(),
            "EX".into(),
            100.into(),
            1.into(),
            "".into(),
        ]))
        .unwrap();
        assert_eq!(
            modes.holder,
            Holder::Modes(vec![ModeHolder {
                mode: Mode::ProtectedRead,
                ttl: Duration::from_millis(900),
                owner: Some("reader".to_owned()),
            }])
        );
        assert_eq!(modes.waiters, 1);

        // Only a waiter's entry: the key is there and refuses a plain lock.
        let waiters_only = decode(reply(vec![
            "hash".into(),
            5.into(),
            0.into(),
            0.into(),
            "".into(),
            "EX".into(),
            5.into(),
            1.into(),
            "".into(),
        ]))
        .unwrap();
        assert_eq!(waiters_only.holder, Holder::Modes(Vec::new()));
        assert_eq!(waiters_only.waiters, 1);
        assert!(waiters_only.holder.is_present());

        // Someone else's hash.
        let hash = decode(reply(vec![
            "hash".into(),
            (-1).into(),
            0.into(),
            1.into(),
            "".into(),
        ]));
        let hash = hash.unwrap();
        assert_eq!(
            hash.holder,
            Holder::Other {
                kind: "hash".into()
            }
        );
        assert!(hash.holder.is_present());

        let foreign = decode(reply(vec![
            "list".into(),
            (-1).into(),
            0.into(),
            0.into(),
            "".into(),
        ]));
        let foreign = foreign.unwrap();
        assert!(foreign.holder.is_present());
        assert_eq!(foreign.ttl, None);

        assert_eq!(decode(Value::Integer(1)), None);
        assert_eq!(decode(reply(vec!["hash".into()])), None);
        let torn = reply(vec![
            "hash".into(),
            5.into(),
            0.into(),
            0.into(),
            "".into(),
            "PR".into(),
            5.into(),
            0.into(),
        ]);
        assert_eq!(decode(torn), None);
    }

    /// A node showing `label`'s holder with the token digest `digest`, or a free node.
    fn node(holder: Option<(&str, &str)>) -> NodeStatus {
        NodeStatus {
            node: "node".to_owned(),
            read: Ok(NodeHolding {
                holder: holder.map_or(Holder::None, |_| Holder::Plain),
                ttl: None,
                waiters: 0,
                owner: holder.map(|(_, label)| label.to_owned()),
                digest: holder.map(|(digest, _)| digest.to_owned()),
            }),
        }
    }

    #[test]
    fn the_owner_is_one_holder_on_a_quorum_not_one_label() {
        let status = |nodes: Vec<NodeStatus>| ResourceStatus {
            resource: "r".to_owned(),
            key: "r".to_owned(),
            quorum: 3,
            nodes,
        };
        let (a, b) = (Some(("aaaa", "replica")), Some(("bbbb", "replica")));
        // Two holders with one label, two nodes each: nobody holds a quorum.
        let split = status(vec![node(a), node(a), node(b), node(b), node(None)]);
        assert_eq!(split.owner(), None);
        assert_eq!(split.held_on(), 4);
        let held = status(vec![node(a), node(a), node(a), node(b), node(b)]);
        assert_eq!(held.owner(), Some("replica"));
    }
}
