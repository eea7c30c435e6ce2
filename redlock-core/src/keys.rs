//! Where the lock keeps its own bookkeeping in a node's key space.
//!
//! The lock key itself is the resource's key (the key prefix followed by the resource), so
//! that other Redlock clients on the same nodes exclude ours and are excluded by them. Every
//! other key we write (the waiter queue, which is also the hand-over channel, the fencing
//! counter, and the two keys that open windows for foreign clients) is the lock key followed
//! by [`BOOKKEEPING_SEPARATOR`], which starts with a NUL byte: a plain resource of a foreign
//! client cannot collide with it unless its name holds a NUL byte followed by `redlock:`, and
//! ours may not hold a NUL byte at all ([`validate_resource`]). Following the lock key keeps
//! our keys inside ACL key patterns written for the key prefix (`~lock:*`).

use crate::error::InvalidInput;

/// What follows the lock key in every other key the lock writes: `"\0redlock:"`, then the
/// kind (`waiters`, `listen`, `fencing`, `busy`, `window`, or a semaphore's `permit:<slot>`,
/// `permit-waiters`, `permit-listen`, `permit-alive` and `permit-capacity`). Resources and key prefixes may not hold a NUL byte.
pub const BOOKKEEPING_SEPARATOR: &str = "\0redlock:";

/// The longest resource name, in bytes.
pub const MAX_RESOURCE_LEN: usize = 1024;

/// Checks a resource name: not empty, at most [`MAX_RESOURCE_LEN`] bytes, no NUL byte (the
/// lock's own bookkeeping keys are the lock key followed by one, [`BOOKKEEPING_SEPARATOR`]).
///
/// # Errors
/// [`InvalidInput::EmptyResource`], [`InvalidInput::ResourceTooLong`] or
/// [`InvalidInput::ReservedResource`].
pub(crate) fn validate_resource(resource: &str) -> Result<(), InvalidInput> {
    if resource.is_empty() {
        return Err(InvalidInput::EmptyResource);
    }
    if resource.len() > MAX_RESOURCE_LEN {
        return Err(InvalidInput::ResourceTooLong {
            len: resource.len(),
            max: MAX_RESOURCE_LEN,
        });
    }
    if resource.contains('\0') {
        return Err(InvalidInput::ReservedResource);
    }
    Ok(())
}

/// Every key of one resource, named once per acquisition and kept by its lease.
#[derive(Debug, Clone)]
pub(crate) struct ResourceKeys {
    /// The lock key: the key prefix followed by the resource.
    pub(crate) lock: String,
    /// [`waiters`].
    pub(crate) waiters: String,
    /// [`fencing`].
    pub(crate) fencing: String,
    /// [`fencing_floor`] of the resource's [`fencing_namespace`].
    pub(crate) fencing_floor: String,
    /// [`fencing_window`] of the resource's [`fencing_namespace`].
    pub(crate) fencing_window: String,
    /// [`busy`].
    pub(crate) busy: String,
    /// [`window`].
    pub(crate) window: String,
    /// [`listen`] (a semaphore's slots share the semaphore's, [`permit_listen`]).
    pub(crate) listen: String,
}

impl ResourceKeys {
    /// The keys of the lock key `lock`, taken by a handle with key prefix `prefix`.
    pub(crate) fn new(prefix: &str, lock: String) -> Self {
        let namespace = fencing_namespace(prefix, &lock);
        Self {
            waiters: waiters(&lock),
            fencing: fencing(&lock),
            fencing_floor: fencing_floor(namespace),
            fencing_window: fencing_window(namespace),
            busy: busy(&lock),
            window: window(&lock),
            listen: listen(&lock),
            lock,
        }
    }
}

impl ResourceKeys {
    /// The keys of a semaphore's permits on the lock key `lock`
    /// ([`Redlock::semaphore`](crate::Redlock::semaphore)): its waiter queue's keys
    /// (the lock key's, with [`permit_waiters`] for the waiters), and its slots'.
    pub(crate) fn permits(prefix: &str, lock: String, permits: u32) -> (Self, PermitSlots) {
        let (queue, flag) = (permit_waiters(&lock), permit_listen(&lock));
        let slots = PermitSlots {
            alive: permit_alive(&lock),
            capacity: permit_capacity(&lock),
            slots: (0..permits)
                .map(|slot| Self {
                    waiters: queue.clone(),
                    listen: flag.clone(),
                    ..Self::new(prefix, permit_slot(&lock, slot))
                })
                .collect(),
        };
        let base = Self {
            waiters: queue,
            listen: flag,
            ..Self::new(prefix, lock)
        };
        (base, slots)
    }
}

/// The keys of a semaphore's slots, and of its waiters' liveness.
#[derive(Debug, Clone)]
pub(crate) struct PermitSlots {
    /// [`permit_alive`].
    pub(crate) alive: String,
    /// [`permit_capacity`].
    pub(crate) capacity: String,
    /// Each slot's keys ([`permit_slot`]): a plain lock whose waiters are the semaphore's,
    /// so that a slot's release hands it to the semaphore's longest waiter.
    pub(crate) slots: Vec<ResourceKeys>,
}

/// The lock key of slot `slot` (from 0) of the semaphore on `key`: a plain Redlock lock,
/// whose holder holds one of the semaphore's permits.
fn permit_slot(key: &str, slot: u32) -> String {
    format!("{key}{BOOKKEEPING_SEPARATOR}permit:{slot}")
}

/// The sorted set of the waiters for a permit of the semaphore on `key`; also the channel
/// its slots' releases publish their hand-overs on.
fn permit_waiters(key: &str) -> String {
    format!("{key}{BOOKKEEPING_SEPARATOR}permit-waiters")
}

/// The listen flag of the semaphore on `key` ([`listen`] for its slots): set by a queued
/// waiter for a permit when refused, so that a slot's release hands the slot over.
fn permit_listen(key: &str) -> String {
    format!("{key}{BOOKKEEPING_SEPARATOR}permit-listen")
}

/// The number of permits of the semaphore on `key`, stored by its first attempt and kept
/// at least as long as any slot it read: an attempt with another number is refused
/// ([`LockError::PermitsMismatch`](crate::LockError::PermitsMismatch)).
pub(crate) fn permit_capacity(key: &str) -> String {
    format!("{key}{BOOKKEEPING_SEPARATOR}permit-capacity")
}

/// [`permit_capacity`] of the semaphore whose slot `slot` has the lock key `slot_key`
/// ([`permit_slot`]); `None` when `slot_key` is not that slot's key.
pub(crate) fn permit_capacity_of_slot(slot_key: &str, slot: u32) -> Option<String> {
    let suffix = format!("{BOOKKEEPING_SEPARATOR}permit:{slot}");
    slot_key.strip_suffix(&suffix).map(permit_capacity)
}

/// Until when (ms of the node's clock) each waiter in [`permit_waiters`] counts: a sorted set
/// of the same markers scored by that instant, renewed at each of the waiter's attempts, so
/// that the entry of a waiter that crashed stops holding back the ones behind it.
fn permit_alive(key: &str) -> String {
    format!("{key}{BOOKKEEPING_SEPARATOR}permit-alive")
}

/// The sorted set of waiters queued for `key`; also the channel a release publishes the
/// hand-over on.
fn waiters(key: &str) -> String {
    format!("{key}{BOOKKEEPING_SEPARATOR}waiters")
}

/// The listen flag of `key`: set (with the waiter queue's ttl) by every request of ours that a
/// holder of `key` refused and that waits to be told of its release (a queued waiter, a mode
/// request refused by a plain holder), deleted by the release with the key. A release that
/// finds no flag is the spec's compare-and-delete and nothing else: nothing is read, written
/// or published for waiters unless one listens.
fn listen(key: &str) -> String {
    format!("{key}{BOOKKEEPING_SEPARATOR}listen")
}

/// The fencing counter of `key`: a max register, with a ttl
/// ([`RedlockBuilder::fencing_counter_ttl`](crate::RedlockBuilder::fencing_counter_ttl)),
/// backed by the key prefix's [`fencing_floor`] once it has expired.
fn fencing(key: &str) -> String {
    format!("{key}{BOOKKEEPING_SEPARATOR}fencing")
}

/// Since when (ms on the node's clock) `key` has been handed from one of our holders to the
/// next without a window for foreign clients: set by each hand-over, read by each grant,
/// deleted when a window opens, and left to expire ([`window`]'s length) when the key is freed
/// with nobody queued, so that a key free for a whole window starts a new streak.
fn busy(key: &str) -> String {
    format!("{key}{BOOKKEEPING_SEPARATOR}busy")
}

/// The window for foreign clients on `key`: while it exists (its ttl is the window), `key` is
/// free and every request of ours that waits refuses it, so that a client polling the key (a
/// foreign client, or a request of ours that never queues) finds it free.
fn window(key: &str) -> String {
    format!("{key}{BOOKKEEPING_SEPARATOR}window")
}

/// The label key of the holder of `key` whose token is `token` ([`OWNER`]):
/// `<key>\0redlock:owner:<digest>`, the digest being the first 16 hex digits of the token's
/// SHA-1 (what the scripts report as the holder's digest), never the token.
///
/// [`OWNER`]: crate::kernel::scripts::OWNER
pub(crate) fn owner(key: &str, token: &str) -> String {
    let digest = fred::util::sha1_hash(token);
    format!(
        "{key}{BOOKKEEPING_SEPARATOR}owner:{}",
        digest.get(..16).unwrap_or(&digest)
    )
}

/// The most resources one lock of several ([`Redlock::lock_many`](crate::Redlock::lock_many))
/// takes together: each is a key in one script call per node.
pub const MAX_RESOURCES: usize = 64;

/// The longest owner label, in bytes ([`RedlockBuilder::owner`](crate::RedlockBuilder::owner)).
pub const MAX_OWNER_LEN: usize = 256;

/// The witness of a node's data for the handles of key prefix `prefix`, written by the
/// quarantine check of every acquire script (quarantine on): it holds the `run_id` of the
/// server that wrote it. A node where it is missing (`FLUSHALL`, `FLUSHDB`, a restart without
/// it on disk) or holds another server's id (a restart, a `REPLICAOF` re-sync, data copied
/// from another server) may have lost keys that holders still count on: it sits out a
/// quarantine ([`quarantine_marker`]). Under the prefix, so that ACL key patterns written for
/// the prefix cover it; it cannot be a lock key (resources are never empty) nor another
/// bookkeeping key.
pub(crate) fn witness(prefix: &str) -> String {
    format!("{prefix}{BOOKKEEPING_SEPARATOR}witness")
}

/// The quarantine marker for the handles of key prefix `prefix`: while it exists (its ttl is
/// what is left of the quarantine, its value the quarantine in ms it was written for), the
/// node grants no acquisition ([`witness`]).
pub(crate) fn quarantine_marker(prefix: &str) -> String {
    format!("{prefix}{BOOKKEEPING_SEPARATOR}quarantine")
}

/// Which fencing floor the lock key `lock` of a handle with key prefix `prefix` uses: the
/// key prefix; with no prefix, the lock key up to and including its first `:` (`order:` for
/// `order:42`), or nothing when it has none. So that ACL key patterns written for the prefix,
/// or for a resource family (`~order:*`), cover the floor's keys, and a handle's floors stay
/// few (one per key prefix, or per family).
pub(crate) fn fencing_namespace<'a>(prefix: &'a str, lock: &'a str) -> &'a str {
    if !prefix.is_empty() {
        return prefix;
    }
    lock.find(':').map_or("", |colon| &lock[..=colon])
}

/// The fencing floor of `namespace` ([`fencing_namespace`]): `"<past> <current>"`, the
/// highest token confirmed on this node before the floor's window ([`fencing_window`]) and
/// within it (the fence script, `FENCE` in `kernel::scripts`, keeps both). A resource whose
/// counter has expired compares its next claim with the floor.
fn fencing_floor(namespace: &str) -> String {
    format!("{namespace}{BOOKKEEPING_SEPARATOR}fencing-floor")
}

/// The window of a [`fencing_floor`]: while it exists, the floor's `current` collects the
/// window's claims; once it has expired (half a counter ttl before any counter written in
/// it), `current` counts as `past`.
fn fencing_window(namespace: &str) -> String {
    format!("{namespace}{BOOKKEEPING_SEPARATOR}fencing-window")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slots_key_leads_to_its_semaphores_capacity_and_nothing_else_does() {
        let slot = permit_slot("lock:jobs", 3);
        assert_eq!(
            permit_capacity_of_slot(&slot, 3),
            Some(permit_capacity("lock:jobs"))
        );
        assert_eq!(permit_capacity_of_slot(&slot, 2), None);
        assert_eq!(permit_capacity_of_slot("lock:jobs", 3), None);
        assert_eq!(permit_capacity_of_slot("lock:jobs:permit:3", 3), None);
    }

    #[test]
    fn bookkeeping_keys_follow_the_lock_key_after_a_nul_byte() {
        let all = [
            waiters("lock:order:1"),
            fencing("lock:order:1"),
            busy("lock:order:1"),
            window("lock:order:1"),
        ];
        for key in &all {
            assert!(key.starts_with("lock:order:1\0redlock:"), "{key:?}");
        }
        for (i, a) in all.iter().enumerate() {
            assert!(all[i + 1..].iter().all(|b| a != b), "{a:?} twice");
        }
        // The quarantine's keys follow the prefix, and are no resource's.
        assert_eq!(witness("lock:"), "lock:\0redlock:witness");
        assert_eq!(quarantine_marker("lock:"), "lock:\0redlock:quarantine");
        assert!(!all.contains(&witness("lock:order:1")));
        // So do the fencing floor's; without a prefix, they follow the resource's family.
        let prefixed = ResourceKeys::new("lock:", "lock:order:1".to_owned());
        assert_eq!(prefixed.fencing_floor, "lock:\0redlock:fencing-floor");
        assert_eq!(prefixed.fencing_window, "lock:\0redlock:fencing-window");
        let family = ResourceKeys::new("", "order:1:item".to_owned());
        assert_eq!(family.fencing_floor, "order:\0redlock:fencing-floor");
        let plain = ResourceKeys::new("", "job".to_owned());
        assert_eq!(plain.fencing_floor, "\0redlock:fencing-floor");
        assert!(!all.contains(&prefixed.fencing_floor));
        // A semaphore's slots and queue follow the lock key too, apart from the lock's own.
        let (base, slots) = ResourceKeys::permits("lock:", "lock:order:1".to_owned(), 2);
        assert_eq!(base.lock, "lock:order:1");
        assert_eq!(base.waiters, "lock:order:1\0redlock:permit-waiters");
        assert_eq!(slots.alive, "lock:order:1\0redlock:permit-alive");
        let slots = &slots.slots;
        assert_eq!(slots[1].lock, "lock:order:1\0redlock:permit:1");
        assert!(slots.iter().all(|slot| slot.waiters == base.waiters));
        assert!(!all.contains(&base.waiters) && !all.contains(&slots[0].lock));
        // A plain resource named like 0.1.0's suffixes is not ours any more.
        assert_ne!(waiters("x"), "x:waiters");
        assert_ne!(fencing("x"), "x:fencing-counter");
    }

    #[test]
    fn resources_must_be_non_empty_and_bounded() {
        assert_eq!(
            validate_resource("order:1\0redlock:fencing"),
            Err(InvalidInput::ReservedResource)
        );
        // The suffixes 0.1.0 reserved are plain resources now.
        assert_eq!(validate_resource("order:1:fencing-counter"), Ok(()));
        assert_eq!(validate_resource("order:1:waiters"), Ok(()));
        assert_eq!(validate_resource("\0"), Err(InvalidInput::ReservedResource));
        assert_eq!(validate_resource(""), Err(InvalidInput::EmptyResource));
        assert!(validate_resource(&"x".repeat(MAX_RESOURCE_LEN)).is_ok());
        assert!(matches!(
            validate_resource(&"x".repeat(MAX_RESOURCE_LEN + 1)),
            Err(InvalidInput::ResourceTooLong { .. })
        ));
    }
}
