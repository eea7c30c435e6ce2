//! The kernel's Lua scripts: the steps it sends for every lease (acquire, extend and release,
//! each over a set of keys; the queued waiter's attempt, hand-over, minimum hold, leaving the
//! waiters, fencing, the quarantine check, the owner label) and a mode lease's (acquire,
//! extend, release, downgrade). Each is one `.lua` file in `scripts/` beside this file, declared
//! here as a [`Script`] with the id that names it in the dispatch script and submitted to
//! [`node::scripts`](crate::node::scripts), which builds that script from every submitted one;
//! the commands that send them are in [`commands`](super::commands).
//!
//! A plain lock is a string at the lock key holding its holder's token (`SET NX PX`). Its
//! bookkeeping keys follow it ([`keys`](crate::keys)): the waiter queue (a sorted set scored by
//! wait start, also the hand-over channel), the fencing counter, the streak start and the
//! window for foreign clients.
//!
//! A resource held in modes is a hash at the resource's key: one field per holder (its token),
//! valued `"<MODE> <expiry>"`, and one field per waiter that was refused (its marker, `~…`),
//! valued `"<MODE> <expiry> <since>"`. Expiries are absolute milliseconds of the node's clock
//! (`TIME`): Redis 7.0 has no per-field ttl, so each script drops the expired entries it reads,
//! and keeps the key's own expiry at the latest entry's, so the key disappears with its last
//! holder even if nobody comes back. A string at the key is a plain holder (or a reservation
//! for one of its waiters): it counts as exclusive, and since a string cannot carry other
//! holders it refuses every mode, NL included.
//!
//! A hash at the key is ours only while every field in it is one of our entries: a holder's
//! field is a token (40 lowercase hex digits) valued `"<MODE> <expiry>"`, a waiter's is `~` and
//! 16 hex digits valued `"<MODE> <expiry> <since>"`, `<MODE>` one of the six modes and the
//! numbers decimal (`mode_entry` in `node/scripts/prelude.lua`). Any other field, or a key of
//! another type than a string or a hash, was written by someone else (an application sharing
//! the nodes without a key prefix): every mode script leaves such a key as it is, and
//! [`ACQUIRE_MODE`] answers `-2` (a foreign key) instead of a vote. The mode scripts delete,
//! expire and rewrite only entries they parse as ours, and set or move the key's expiry only
//! while every field is ours.
//!
//! Waiters' entries bound writer starvation: a request is also refused by an incompatible
//! waiter that started waiting before it (scores from the waiters' own clocks, the same on
//! every node, so the order is one across nodes and the first waiter is never refused by
//! another's entry). A stream of readers therefore cannot pass a waiting writer.
//!
//! Hand-over messages, published on the waiter queue's key: `"<named> <next>"` (the key is
//! reserved for the named waiter), `"<named> <next> <window_ms>"` (a window for foreign clients
//! opened; the named waiter attempts after it), or [`WAKE_ALL`](crate::node::scripts::WAKE_ALL).

use crate::node::scripts::{Effect, Inline, Script};

/// Compare-and-delete (`release.lua`).
pub(crate) static RELEASE: Script =
    Script::new(0, Effect::Compares, include_str!("scripts/release.lua"))
        .inlined(Inline::CompareAndDelete);
inventory::submit!(&RELEASE);

/// Release with a fair hand-over to the longest waiter, or a window for foreign clients
/// (`release_handover.lua`).
pub(crate) static RELEASE_HANDOVER: Script = Script::new(
    1,
    Effect::Compares,
    include_str!("scripts/release_handover.lua"),
)
.inlined(Inline::Handover);
inventory::submit!(&RELEASE_HANDOVER);

/// Compare-and-pexpire, never shortening the key (`extend.lua`).
pub(crate) static EXTEND: Script =
    Script::new(2, Effect::Compares, include_str!("scripts/extend.lua"));
inventory::submit!(&EXTEND);

/// A plain attempt, `SET key token NX PX ttl` (`acquire.lua`).
pub(crate) static ACQUIRE: Script =
    Script::new(3, Effect::Grants, include_str!("scripts/acquire.lua"));
inventory::submit!(&ACQUIRE);

/// A queued waiter's attempt, joining the queue when refused (`acquire_queued.lua`),
/// which enforces [`MAX_QUEUED_WAITERS`](crate::MAX_QUEUED_WAITERS).
pub(crate) static ACQUIRE_QUEUED: Script = Script::new(
    4,
    Effect::Grants,
    include_str!("scripts/acquire_queued.lua"),
);
inventory::submit!(&ACQUIRE_QUEUED);

/// The fencing write-back, a max register per resource (`fence.lua`).
pub(crate) static FENCE: Script =
    Script::new(5, Effect::Neither, include_str!("scripts/fence.lua"));
inventory::submit!(&FENCE);

/// An attempt in a lock mode (`acquire_mode.lua`).
pub(crate) static ACQUIRE_MODE: Script =
    Script::new(6, Effect::Grants, include_str!("scripts/acquire_mode.lua"));
inventory::submit!(&ACQUIRE_MODE);

/// The extension of a lock held in a mode (`extend_mode.lua`).
pub(crate) static EXTEND_MODE: Script =
    Script::new(7, Effect::Compares, include_str!("scripts/extend_mode.lua"));
inventory::submit!(&EXTEND_MODE);

/// The release of a lock held in a mode (`release_mode.lua`).
pub(crate) static RELEASE_MODE: Script = Script::new(
    8,
    Effect::Compares,
    include_str!("scripts/release_mode.lua"),
);
inventory::submit!(&RELEASE_MODE);

/// A waiter leaves a resource's waiters (`leave.lua`).
pub(crate) static LEAVE: Script =
    Script::new(9, Effect::Neither, include_str!("scripts/leave.lua"));
inventory::submit!(&LEAVE);

/// The release of a lock held for a minimum hold, keeping the key as [`KEPT`]
/// ([`LockOptions::lock_at_least_for`], `keep.lua`).
///
/// [`KEPT`]: crate::node::scripts::KEPT
/// [`LockOptions::lock_at_least_for`]: crate::LockOptions::lock_at_least_for
pub(crate) static KEEP: Script =
    Script::new(10, Effect::Compares, include_str!("scripts/keep.lua"));
inventory::submit!(&KEEP);

/// The quarantine check alone, run when a handle is built (`quarantine.lua`).
pub(crate) static QUARANTINE: Script =
    Script::new(12, Effect::Neither, include_str!("scripts/quarantine.lua"));
inventory::submit!(&QUARANTINE);

/// A lock of several resources released by its holder, waking each key's listeners:
/// compare-and-delete over several keys in one call (`release_slots.lua`).
pub(crate) static RELEASE_SLOTS: Script = Script::new(
    14,
    Effect::Compares,
    include_str!("scripts/release_slots.lua"),
);
inventory::submit!(&RELEASE_SLOTS);

/// A holder in a mode moves to a weaker mode (`downgrade.lua`).
pub(crate) static DOWNGRADE: Script =
    Script::new(16, Effect::Compares, include_str!("scripts/downgrade.lua"));
inventory::submit!(&DOWNGRADE);

/// A permit's extension: compare-and-pexpire of its slot, keeping the semaphore's stored
/// number of permits at least as long (`extend_permit.lua`).
pub(crate) static EXTEND_PERMIT: Script = Script::new(
    20,
    Effect::Compares,
    include_str!("scripts/extend_permit.lua"),
);
inventory::submit!(&EXTEND_PERMIT);

/// A holder's label written beside its lock (`owner.lua`).
pub(crate) static OWNER: Script =
    Script::new(18, Effect::Compares, include_str!("scripts/owner.lua"));
inventory::submit!(&OWNER);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::options::MAX_QUEUED_WAITERS;

    #[test]
    fn the_queue_cap_is_the_one_the_script_enforces() {
        let check = format!("< {MAX_QUEUED_WAITERS} then");
        assert!(
            ACQUIRE_QUEUED.source.contains(&check),
            "{}",
            ACQUIRE_QUEUED.source
        );
    }
}
