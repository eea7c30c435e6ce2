//! The protocol as a stateright model: clients and nodes exchanging the scripts' calls over a
//! network that delays, reorders and (as a fault) loses them, with time, node restarts, data
//! loss and clock drift, and the properties the lock promises.
//!
//! Time is whole ms of a global clock, which the clients read (their clocks are the
//! reference); a node's clock is the global one plus its skew, which may grow up to
//! [`Faults::clock_skew`](config::Faults) (a node clock running fast: its keys expire early
//! by the clients' clocks, which the drift allowance covers).

pub mod client;
pub mod config;
mod keys;
mod run;
pub mod scenarios;
pub mod symmetry;
mod system;

pub use keys::Req;
pub use run::{Search, Verdict, check};
pub use system::{Action, Msg, NodeState, State, System};
