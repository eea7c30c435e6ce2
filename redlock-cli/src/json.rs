//! The `--json` output of `redlock status` and `redlock locks`: plain structures with stable,
//! snake_case field names (the user guide's command-line page lists them), built from the
//! public [`ResourceStatus`] and [`LockList`] accessors; never a token (the nodes never give
//! one out). Durations are whole milliseconds (`_ms`); what a node did not answer is `null`.

use std::time::Duration;

use redlock_core::{Holder, ListedLock, LockList, NodeStatus, ResourceStatus};
use serde::Serialize;

/// `redlock status --json`.
#[derive(Debug, Serialize)]
pub(crate) struct Status<'a> {
    /// The resource.
    resource: &'a str,
    /// The nodes that must agree for a lock.
    quorum: usize,
    /// The resource's lock; `null` with `--permits` (not read).
    lock: Option<Lock<'a>>,
    /// The counting semaphore's permits; `null` when none is in use (or not read).
    permits: Option<Permits<'a>>,
}

impl<'a> Status<'a> {
    /// The status of `resource`: its lock's `status` (when read) and its semaphore's `slots`
    /// (when read), for a handle whose quorum is `quorum`.
    pub(crate) fn new(
        resource: &'a str,
        quorum: usize,
        status: Option<&'a ResourceStatus>,
        slots: Option<&'a [ResourceStatus]>,
    ) -> Self {
        Self {
            resource,
            quorum,
            lock: status.map(Lock::new),
            permits: slots.map(Permits::new),
        }
    }
}

/// One lock (a resource's, or a permit's) on every node.
#[derive(Debug, Serialize)]
struct Lock<'a> {
    /// Nodes that answered.
    answered: usize,
    /// Nodes where something is at the key.
    held_on: usize,
    /// Something is at the key on a quorum of nodes.
    is_held: bool,
    /// The label of the plain lock's holder on a quorum of nodes, if it has one.
    owner: Option<&'a str>,
    /// Each node, in the handle's node order.
    nodes: Vec<Node<'a>>,
}

impl<'a> Lock<'a> {
    fn new(status: &'a ResourceStatus) -> Self {
        Self {
            answered: status.answered(),
            held_on: status.held_on(),
            is_held: status.is_held(),
            owner: status.owner(),
            nodes: status.nodes.iter().map(Node::new).collect(),
        }
    }
}

/// What one node holds; every field but `node` and `error` is `null` when it did not answer.
#[derive(Debug, Serialize)]
struct Node<'a> {
    /// The node's label (`host:port`).
    node: &'a str,
    /// Why it gave no answer; `null` when it answered.
    error: Option<String>,
    /// `none`, `plain`, `reserved` (handed over to a waiter), `modes`, `other` (not a lock),
    /// or `unknown` (a kind this redlock does not know).
    holder: Option<&'static str>,
    /// The Redis type of an `other` key (`list`, `hash`...).
    redis_type: Option<&'a str>,
    /// The plain holder's owner label there.
    owner: Option<&'a str>,
    /// The key's remaining ttl; `null` without a key or an expiry.
    ttl_ms: Option<u64>,
    /// Waiters queued there.
    waiters: Option<usize>,
    /// The holders in lock modes (`holder` is `modes`); empty otherwise.
    modes: Vec<ModeHolder<'a>>,
}

impl<'a> Node<'a> {
    fn new(node: &'a NodeStatus) -> Self {
        let mut out = Self {
            node: &node.node,
            error: None,
            holder: None,
            redis_type: None,
            owner: None,
            ttl_ms: None,
            waiters: None,
            modes: Vec::new(),
        };
        match &node.read {
            Err(error) => out.error = Some(error.to_string()),
            Ok(holding) => {
                out.holder = Some(holder_kind(&holding.holder));
                out.owner = holding.owner.as_deref();
                out.ttl_ms = holding.ttl.map(millis);
                out.waiters = Some(holding.waiters);
                match &holding.holder {
                    Holder::Modes(holders) => {
                        out.modes = holders
                            .iter()
                            .map(|h| ModeHolder {
                                mode: h.mode.as_str(),
                                owner: h.owner.as_deref(),
                                ttl_ms: millis(h.ttl),
                            })
                            .collect();
                    }
                    Holder::Other { kind } => out.redis_type = Some(kind),
                    _ => {}
                }
            }
        }
        out
    }
}

/// One holder in a lock mode, on one node.
#[derive(Debug, Serialize)]
struct ModeHolder<'a> {
    /// `NL`, `CR`, `CW`, `PR`, `PW` or `EX`.
    mode: &'static str,
    /// Its owner label.
    owner: Option<&'a str>,
    /// The ttl its entry has left.
    ttl_ms: u64,
}

/// A counting semaphore's permits.
#[derive(Debug, Serialize)]
struct Permits<'a> {
    /// The number of permits read.
    permits: usize,
    /// Permits held on a quorum of nodes.
    held: usize,
    /// Waiters for a permit (the most any node counts).
    waiting: usize,
    /// Each permit, in order.
    slots: Vec<Slot<'a>>,
}

impl<'a> Permits<'a> {
    fn new(slots: &'a [ResourceStatus]) -> Self {
        Self {
            permits: slots.len(),
            held: slots.iter().filter(|slot| slot.is_held()).count(),
            waiting: permit_waiters(slots),
            slots: slots
                .iter()
                .enumerate()
                .map(|(permit, status)| Slot {
                    permit,
                    lock: Lock::new(status),
                })
                .collect(),
        }
    }
}

/// One permit: its number (from 0) and its lock.
#[derive(Debug, Serialize)]
struct Slot<'a> {
    permit: usize,
    #[serde(flatten)]
    lock: Lock<'a>,
}

/// `redlock locks --json`.
#[derive(Debug, Serialize)]
pub(crate) struct Locks<'a> {
    /// The resource prefix listed (`""`: every resource).
    prefix: &'a str,
    /// The handle's nodes.
    nodes: usize,
    /// The nodes that must agree for a lock.
    quorum: usize,
    /// Nodes scanned to the end.
    scanned: usize,
    /// A quorum of nodes were scanned: every lock held on a quorum is listed.
    complete: bool,
    /// The nodes not scanned to the end, and why.
    unscanned: Vec<Unscanned<'a>>,
    /// The resources held, by name.
    locks: Vec<Listed<'a>>,
}

impl<'a> Locks<'a> {
    pub(crate) fn new(prefix: &'a str, list: &'a LockList) -> Self {
        Self {
            prefix,
            nodes: list.nodes,
            quorum: list.quorum,
            scanned: list.scanned(),
            complete: list.is_complete(),
            unscanned: list
                .unscanned
                .iter()
                .map(|node| Unscanned {
                    node: &node.node,
                    error: node.error.to_string(),
                })
                .collect(),
            locks: list.locks.iter().map(Listed::new).collect(),
        }
    }
}

/// A node not scanned to the end.
#[derive(Debug, Serialize)]
struct Unscanned<'a> {
    node: &'a str,
    error: String,
}

/// One resource listed.
#[derive(Debug, Serialize)]
struct Listed<'a> {
    /// The resource.
    resource: &'a str,
    /// Something is at its lock key on a quorum of nodes.
    is_held: bool,
    /// Nodes where something is at its lock key.
    held_on: usize,
    /// Nodes that answered its read.
    answered: usize,
    /// The plain lock's holder's owner label on a quorum of nodes, if it has one.
    owner: Option<&'a str>,
    /// What holds the lock key where something does: `plain`, `reserved`, `modes`, `other`,
    /// `mixed` (not the same on every node), or `none` (only permits are held).
    holder: &'static str,
    /// How long a quorum of nodes keep the key: the quorum-th longest remaining ttl among the
    /// nodes holding it; `null` when fewer than a quorum hold it with an expiry.
    ttl_ms: Option<u64>,
    /// A counting semaphore's permits on the resource; `null` when none was found.
    permits: Option<ListedPermits<'a>>,
}

impl<'a> Listed<'a> {
    fn new(listed: &'a ListedLock) -> Self {
        let lock = &listed.lock;
        Self {
            resource: &listed.resource,
            is_held: lock.is_held(),
            held_on: lock.held_on(),
            answered: lock.answered(),
            owner: lock.owner(),
            holder: holder_summary(lock),
            ttl_ms: quorum_ttl(lock).map(millis),
            permits: (!listed.permits.is_empty()).then(|| ListedPermits {
                permits: listed.permits.len(),
                held: listed.permits_held(),
                owners: listed
                    .permits
                    .iter()
                    .filter(|slot| slot.is_held())
                    .map(ResourceStatus::owner)
                    .collect(),
            }),
        }
    }
}

/// A semaphore's permits, in a listing.
#[derive(Debug, Serialize)]
struct ListedPermits<'a> {
    /// The number of permits read.
    permits: usize,
    /// Permits held on a quorum of nodes.
    held: usize,
    /// The owner label of each permit held (`null` without one), in permit order.
    owners: Vec<Option<&'a str>>,
}

/// The name of a holder's kind in the JSON output (and the text of `redlock locks`).
pub(crate) fn holder_kind(holder: &Holder) -> &'static str {
    match holder {
        Holder::None => "none",
        Holder::Plain => "plain",
        Holder::Reserved => "reserved",
        Holder::Modes(_) => "modes",
        Holder::Other { .. } => "other",
        _ => "unknown",
    }
}

/// The kind of holder at `status`'s key on the nodes where something is: the one kind when
/// they agree, `mixed` otherwise, `none` when nothing is there.
pub(crate) fn holder_summary(status: &ResourceStatus) -> &'static str {
    let mut kinds = status
        .nodes
        .iter()
        .filter_map(|node| node.read.as_ref().ok())
        .filter(|holding| holding.holder.is_present())
        .map(|holding| holder_kind(&holding.holder));
    match kinds.next() {
        None => "none",
        Some(first) if kinds.all(|kind| kind == first) => first,
        Some(_) => "mixed",
    }
}

/// How long a quorum of nodes keep `status`'s key: the quorum-th longest remaining ttl among
/// the nodes where something is at the key; `None` when fewer than a quorum have one there
/// with an expiry.
pub(crate) fn quorum_ttl(status: &ResourceStatus) -> Option<Duration> {
    let mut ttls: Vec<Duration> = status
        .nodes
        .iter()
        .filter_map(|node| node.read.as_ref().ok())
        .filter(|holding| holding.holder.is_present())
        .filter_map(|holding| holding.ttl)
        .collect();
    ttls.sort_unstable_by(|a, b| b.cmp(a));
    ttls.get(status.quorum.checked_sub(1)?).copied()
}

/// The waiters for a semaphore's permits: they share one queue, which each slot's read
/// counts; the most any node counts.
pub(crate) fn permit_waiters(slots: &[ResourceStatus]) -> usize {
    slots.first().map_or(0, |slot| {
        let waiters = slot.nodes.iter().filter_map(|n| n.read.as_ref().ok());
        waiters.map(|holding| holding.waiters).max().unwrap_or(0)
    })
}

/// `duration` in whole milliseconds.
fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}
