//! The kernel: the handle's state and each Redlock step written once (distlock spec, "The
//! Redlock algorithm"). An attempt on every node with its validity counted from before the
//! first send, less drift ([`acquire`]); the round decided at quorum ([`masters`]); the
//! clean-up of a failed attempt; the retry and wait decision, a pure function
//! (`acquire/decide.rs`), and the wait for a hand-over ([`waiters`]); the lease and its views,
//! extension and auto-extension ([`lease`]); release by compare-and-delete ([`release`]);
//! fencing; and the quarantine check every grant opens with. The commands each step sends a
//! node are in [`commands`], their scripts in [`scripts`] (the `.lua` files in `scripts/`).
//!
//! A primitive is a slice over the kernel (`crate::lock`, `crate::semaphore`, ...): it asks
//! for an acquisition through [`acquire::Protocol`], and the kernel never names it.

pub(crate) mod acquire;
pub(crate) mod commands;
pub(crate) mod contended;
pub(crate) mod deadlines;
pub(crate) mod guard;
pub(crate) mod lease;
pub(crate) mod masters;
pub(crate) mod redlock;
pub(crate) mod release;
pub(crate) mod scripts;
pub(crate) mod waiters;
