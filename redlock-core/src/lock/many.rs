//! A lock of several resources ([`Redlock::lock_many`]) as a [`Protocol`]: the kernel's
//! attempt at a set of keys (Redlock steps 1–5, every resource's key taken on each node by
//! one script, all or none, and the quorum counted over nodes), which never joins a queue.
//!
//! No deadlock: an attempt never keeps part of a set. On each node it takes every key or none
//! (`acquire.lua` deletes what it set when a later key refuses), and a failed attempt releases
//! what it took on every node before the next one (step 5): nobody holds some resources while
//! waiting for others, so two requests for overlapping sets never wait for each other. No
//! livelock beyond the lock's own: two requests that meet split the nodes between them and
//! both fail, then attempt again after random delays (the retry jitter, and a split's short
//! random delays), which tell them apart as they do contenders for one resource (distlock
//! spec, "Retry on failure").

use crate::kernel::acquire::attempt::{AttemptFailure, Granted};
use crate::kernel::acquire::{Ask, Protocol};
use crate::kernel::commands::AcquireKind;
use crate::kernel::lease::Held;
use crate::kernel::redlock::Redlock;
use crate::keys::ResourceKeys;
use crate::telemetry::Acquisition;

/// The resources of a lock of several, in the order their keys are sent: sorted, without
/// repeats. The first is the lease's own; the others ride along
/// ([`Grant::also`](crate::kernel::lease::Grant)).
#[derive(Debug, Clone)]
pub(crate) struct ManyKeys {
    pub(crate) resources: Vec<(String, ResourceKeys)>,
    /// Every resource's keys, in the same order.
    keys: Vec<ResourceKeys>,
}

impl ManyKeys {
    /// The lock of `resources` (sorted, without repeats).
    pub(crate) fn new(resources: Vec<(String, ResourceKeys)>) -> Self {
        let keys = resources.iter().map(|(_, keys)| keys.clone()).collect();
        Self { resources, keys }
    }
}

impl Protocol for ManyKeys {
    /// No queue for a lock of several resources: it attempts again after its retry delays (a
    /// waiter of one resource's queue would hold a place there while it waits for the
    /// others).
    fn queues(&self) -> bool {
        false
    }

    async fn attempt<'a>(
        &'a self,
        redlock: &'a Redlock,
        ask: Ask<'a>,
        acquisition: &'a mut Acquisition,
    ) -> Result<Granted, AttemptFailure> {
        // A plain attempt that never reads a streak: a set is never handed over.
        let windows = (AcquireKind::Plain, ask.windowed, false, false);
        let mut granted = redlock
            .attempt(&self.keys, ask.token, ask.options, windows, acquisition)
            .await?;
        granted.grant.held = Held::Keys {
            also: self.resources.iter().skip(1).cloned().collect(),
        };
        Ok(granted)
    }
}
