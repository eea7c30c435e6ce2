//! A model of the Redlock protocol as this workspace runs it, checked exhaustively with
//! [stateright](https://docs.rs/stateright).
//!
//! - [`node`]: one Redis node as the lock's scripts see it, each script mirrored in Rust
//!   statement for statement. A [`node::Call`] is what the dispatch script is sent for one
//!   call, so the same call runs here and on a real server (the differential test,
//!   `tests/tests/model_scripts.rs`, compares replies, keys and published messages).
//! - `check` (feature `check`, on by default): clients and nodes exchanging those calls under faults (lost, delayed and
//!   reordered messages, restarts, data loss, fast node clocks, paused clients), the lock's
//!   properties, and the scenarios explored with their known-bad variants.
//!
//! Why stateright: it is a maintained model checker written in Rust, so the model's nodes run
//! the same Rust mirror of the scripts that the differential test compares with the real ones,
//! and the clients use the lock's own types (its lock modes); a TLA+ specification would be a
//! second copy of both. Its checkers give shortest counterexamples (breadth first) and
//! symmetry reduction (depth first).
//!
//! What the model proves, under which faults and up to which sizes, is in redlock-core's guide,
//! "The protocol, model-checked".

#[cfg(feature = "check")]
pub mod check;
pub mod node;
