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

/// Every key of one resource, named once per acquisition and kept by its lease: the lock key,
/// and the bookkeeping keys after it, held in one buffer (one allocation for all of them, not
/// one each: every lock names them).
#[derive(Debug, Clone)]
pub(crate) struct ResourceKeys {
    /// The lock key: the key prefix followed by the resource.
    pub(crate) lock: String,
    /// The bookkeeping keys, one after another, in [`Kind`] order.
    others: String,
    /// Where each of `others` ends.
    ends: [usize; KINDS],
}

/// The bookkeeping keys of [`ResourceKeys`], in the order they are kept.
#[derive(Debug, Clone, Copy)]
enum Kind {
    Waiters,
    Fencing,
    FencingFloor,
    FencingWindow,
    Busy,
    Window,
    Listen,
}

/// How many [`Kind`]s there are.
const KINDS: usize = 7;

/// Each bookkeeping key as `(base, kind)`: `<base>\0redlock:<kind>`, in [`Kind`] order.
type Parts<'a> = [(&'a str, &'a str); KINDS];

impl ResourceKeys {
    /// The keys of the lock key `lock`, taken by a handle with key prefix `prefix`.
    pub(crate) fn new(prefix: &str, lock: String) -> Self {
        let namespace = fencing_namespace(prefix, &lock);
        let others = join([
            (&lock, "waiters"),
            (&lock, "fencing"),
            (namespace, "fencing-floor"),
            (namespace, "fencing-window"),
            (&lock, "busy"),
            (&lock, "window"),
            (&lock, "listen"),
        ]);
        Self::with(lock, others)
    }

    fn with(lock: String, (others, ends): (String, [usize; KINDS])) -> Self {
        Self { lock, others, ends }
    }

    fn get(&self, kind: Kind) -> &str {
        let i = kind as usize;
        let start = i.checked_sub(1).map_or(0, |before| self.ends[before]);
        self.others.get(start..self.ends[i]).unwrap_or_default()
    }

    /// The sorted set of the waiters queued for the lock key; also the channel a release
    /// publishes the hand-over on. A semaphore's slots share the semaphore's
    /// (the semaphore's `permit-waiters` key).
    pub(crate) fn waiters(&self) -> &str {
        self.get(Kind::Waiters)
    }

    /// The fencing counter of the lock key: a max register, with a ttl
    /// ([`RedlockBuilder::fencing_counter_ttl`](crate::RedlockBuilder::fencing_counter_ttl)),
    /// backed by the [`fencing_floor`](Self::fencing_floor) once it has expired.
    pub(crate) fn fencing(&self) -> &str {
        self.get(Kind::Fencing)
    }

    /// The fencing floor of the resource's [`fencing_namespace`]: `"<past> <current>"`, the
    /// highest token confirmed on this node before the floor's window
    /// ([`fencing_window`](Self::fencing_window)) and within it (the fence script, `FENCE` in
    /// `kernel::scripts`, keeps both). A resource whose counter has expired compares its next
    /// claim with the floor.
    pub(crate) fn fencing_floor(&self) -> &str {
        self.get(Kind::FencingFloor)
    }

    /// The window of the [`fencing_floor`](Self::fencing_floor): while it exists, the floor's
    /// `current` collects the window's claims; once it has expired (half a counter ttl before
    /// any counter written in it), `current` counts as `past`.
    pub(crate) fn fencing_window(&self) -> &str {
        self.get(Kind::FencingWindow)
    }

    /// Since when (ms on the node's clock) the lock key has been handed from one of our
    /// holders to the next without a window for foreign clients: set by each hand-over, read
    /// by each grant, deleted when a window opens, and left to expire (the window's length)
    /// when the key is freed with nobody queued, so that a key free for a whole window starts
    /// a new streak.
    pub(crate) fn busy(&self) -> &str {
        self.get(Kind::Busy)
    }

    /// The window for foreign clients on the lock key: while it exists (its ttl is the
    /// window), the key is free and every request of ours that waits refuses it, so that a
    /// client polling the key (a foreign client, or a request of ours that never queues)
    /// finds it free.
    pub(crate) fn window(&self) -> &str {
        self.get(Kind::Window)
    }

    /// The listen flag of the lock key: set (with the waiter queue's ttl) by every request of
    /// ours that a holder refused and that waits to be told of its release (a queued waiter,
    /// a mode request refused by a plain holder), deleted by the release with the key. A
    /// release that finds no flag is the spec's compare-and-delete and nothing else: nothing
    /// is read, written or published for waiters unless one listens. A semaphore's slots
    /// share the semaphore's (the semaphore's `permit-listen` key).
    pub(crate) fn listen(&self) -> &str {
        self.get(Kind::Listen)
    }
}

/// Each of `parts` as `<base>\0redlock:<kind>`, one after another, and where each ends.
fn join(parts: Parts<'_>) -> (String, [usize; KINDS]) {
    let len = parts
        .iter()
        .map(|(base, kind)| base.len() + BOOKKEEPING_SEPARATOR.len() + kind.len())
        .sum();
    let mut others = String::with_capacity(len);
    let mut ends = [0; KINDS];
    for ((base, kind), end) in parts.iter().zip(&mut ends) {
        others.push_str(base);
        others.push_str(BOOKKEEPING_SEPARATOR);
        others.push_str(kind);
        *end = others.len();
    }
    (others, ends)
}

impl ResourceKeys {
    /// The keys of a semaphore's permits on the lock key `lock`
    /// ([`Redlock::semaphore`](crate::Redlock::semaphore)): its waiter queue's keys
    /// (the lock key's, with the semaphore's `permit-waiters` key for the waiters and the semaphore's `permit-listen` key for the
    /// listen flag), and its slots', which share that queue and flag.
    pub(crate) fn permits(prefix: &str, lock: String, permits: u32) -> (Self, PermitSlots) {
        let keys = |key: &str| {
            let namespace = fencing_namespace(prefix, key);
            join([
                (&lock, "permit-waiters"),
                (key, "fencing"),
                (namespace, "fencing-floor"),
                (namespace, "fencing-window"),
                (key, "busy"),
                (key, "window"),
                (&lock, "permit-listen"),
            ])
        };
        let slots = PermitSlots {
            alive: permit_alive(&lock),
            capacity: permit_capacity(&lock),
            slots: (0..permits)
                .map(|slot| {
                    let slot_key = permit_slot(&lock, slot);
                    let others = keys(&slot_key);
                    Self::with(slot_key, others)
                })
                .collect(),
        };
        let others = keys(&lock);
        (Self::with(lock, others), slots)
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

/// Until when (ms of the node's clock) each waiter in the semaphore's `permit-waiters` key counts: a sorted set
/// of the same markers scored by that instant, renewed at each of the waiter's attempts, so
/// that the entry of a waiter that crashed stops holding back the ones behind it.
fn permit_alive(key: &str) -> String {
    format!("{key}{BOOKKEEPING_SEPARATOR}permit-alive")
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
        let keys = ResourceKeys::new("lock:", "lock:order:1".to_owned());
        let all = [
            keys.waiters(),
            keys.fencing(),
            keys.busy(),
            keys.window(),
            keys.listen(),
        ];
        assert_eq!(keys.waiters(), "lock:order:1\0redlock:waiters");
        assert_eq!(keys.listen(), "lock:order:1\0redlock:listen");
        for key in &all {
            assert!(key.starts_with("lock:order:1\0redlock:"), "{key:?}");
        }
        for (i, a) in all.iter().enumerate() {
            assert!(all[i + 1..].iter().all(|b| a != b), "{a:?} twice");
        }
        // The quarantine's keys follow the prefix, and are no resource's.
        assert_eq!(witness("lock:"), "lock:\0redlock:witness");
        assert_eq!(quarantine_marker("lock:"), "lock:\0redlock:quarantine");
        assert!(!all.contains(&witness("lock:order:1").as_str()));
        // So do the fencing floor's; without a prefix, they follow the resource's family.
        assert_eq!(keys.fencing_floor(), "lock:\0redlock:fencing-floor");
        assert_eq!(keys.fencing_window(), "lock:\0redlock:fencing-window");
        let family = ResourceKeys::new("", "order:1:item".to_owned());
        assert_eq!(family.fencing_floor(), "order:\0redlock:fencing-floor");
        let plain = ResourceKeys::new("", "job".to_owned());
        assert_eq!(plain.fencing_floor(), "\0redlock:fencing-floor");
        assert_eq!(plain.fencing(), "job\0redlock:fencing");
        assert!(!all.contains(&keys.fencing_floor()));
        // A semaphore's slots and queue follow the lock key too, apart from the lock's own.
        let (base, slots) = ResourceKeys::permits("lock:", "lock:order:1".to_owned(), 2);
        assert_eq!(base.lock, "lock:order:1");
        assert_eq!(base.waiters(), "lock:order:1\0redlock:permit-waiters");
        assert_eq!(base.listen(), "lock:order:1\0redlock:permit-listen");
        assert_eq!(base.busy(), keys.busy());
        assert_eq!(slots.alive, "lock:order:1\0redlock:permit-alive");
        let slots = &slots.slots;
        assert_eq!(slots[1].lock, "lock:order:1\0redlock:permit:1");
        assert_eq!(
            slots[1].busy(),
            "lock:order:1\0redlock:permit:1\0redlock:busy"
        );
        assert_eq!(slots[1].fencing_floor(), keys.fencing_floor());
        assert!(slots.iter().all(|slot| slot.waiters() == base.waiters()));
        // Without a prefix, a slot's fencing floor is the semaphore's resource family's.
        let (family, family_slots) = ResourceKeys::permits("", "order:1".to_owned(), 1);
        assert_eq!(family.fencing_floor(), "order:\0redlock:fencing-floor");
        assert_eq!(
            family_slots.slots[0].fencing_floor(),
            family.fencing_floor()
        );
        assert!(slots.iter().all(|slot| slot.listen() == base.listen()));
        assert!(!all.contains(&base.waiters()) && !all.contains(&slots[0].lock.as_str()));
        // A plain resource named like 0.1.0's suffixes is not ours any more.
        let x = ResourceKeys::new("", "x".to_owned());
        assert_ne!(x.waiters(), "x:waiters");
        assert_ne!(x.fencing(), "x:fencing-counter");
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
