// The README's guide links point at the guide's files in the repository; here they point at
// this build's own pages (the first definition of a link wins).
#![doc = "[guide]: crate::guide\n[guide-lock]: crate::guide::lock\n[guide-leader]: crate::guide::leader_election\n[guide-modes]: crate::guide::lock_modes\n[guide-semaphore]: crate::guide::semaphore\n[guide-attribute]: crate::guide::attribute\n[guide-axum]: crate::guide::axum\n[guide-cli]: crate::guide::command_line\n[guide-handing]: crate::guide::handing_on\n[guide-config]: crate::guide::configuration\n[guide-tls]: crate::guide::tls\n[guide-metrics]: crate::guide::metrics\n[guide-how]: crate::guide::how_it_works\n[guide-fencing]: crate::guide::fencing\n[guide-guarantees]: crate::guide::guarantees\n[guide-others]: crate::guide::other_clients\n[guide-deploy]: crate::guide::deployment\n"]
#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]

// The kernel: the handle's state and each Redlock step, written once (attempt, round,
// retry and wait, lease, extension, release, fencing, the quarantine check).
mod kernel;

// The slices: each primitive over the kernel, with its Lua. None imports another.
mod admin;
mod detach;
mod leader;
mod lock;
mod modes;
mod semaphore;
mod setup;

// Below the kernel: one node, and the transport every command to it goes through.
mod node;

// Values shared by every layer.
mod error;
mod keys;
mod mode;
mod options;
mod outcome;
mod random;
mod telemetry;
mod timing;
mod token;

// Compile-time checks: the public types are `Send + Sync`, the public futures `Send`.
mod send_sync;

pub mod registry;

pub use node::transport;

// The guide: doc-only pages, empty modules.
pub mod guide;

pub use admin::force::ForceReleased;
pub use admin::inspect::{Holder, ModeHolder, NodeHolding, NodeStatus, ResourceStatus};
pub use admin::list::{ListedLock, LockList, UnscannedNode};
pub use detach::resume::DetachedLock;
pub use error::{BuildError, ConfigPath, InvalidInput, LockError, LostReason};
pub use kernel::guard::LockGuard;
pub use kernel::lease::{LockInfo, LostFuture, LostSignal, Scoped};
pub use kernel::redlock::Redlock;
pub use kernel::release::{ReleaseAllReport, Released};
pub use keys::{BOOKKEEPING_SEPARATOR, MAX_OWNER_LEN, MAX_RESOURCE_LEN, MAX_RESOURCES};
pub use leader::{Leader, LeaderElection, LeaderWatch, Term};
pub use mode::{Mode, ParseModeError};
pub use options::{
    DEFAULT_DRIFT_FACTOR, DEFAULT_EXTEND_FRACTION, DEFAULT_RETRY_COUNT, DEFAULT_RETRY_DELAY,
    DEFAULT_RETRY_JITTER, DEFAULT_TTL, LockOptions, MAX_PERMITS, MAX_QUEUED_WAITERS, MAX_TTL,
};
pub use outcome::{ClientError, NodeError, NodeOutcome, NodeVote, Outcomes};
pub use semaphore::Semaphore;
pub use setup::builder::{
    DEFAULT_CONNECT_TIMEOUT, DEFAULT_FOREIGN_WINDOW, DEFAULT_HANDOVER_GRACE, DEFAULT_NODE_TIMEOUT,
    MAX_FOREIGN_WINDOW, MAX_HANDOVER_GRACE, RedlockBuilder,
};
pub use setup::config::{ENV_PREFIX, EnvVar, LockConfig, PemSource, RedlockConfig};
#[cfg(feature = "metrics")]
pub use telemetry::describe_metrics;
pub use telemetry::{MAX_RESOURCE_CLASSES, OTHER_CLASS, resource_class};
pub use timing::DRIFT_FLOOR;

/// The acquisition's decision and Redlock's timing arithmetic, exposed for the protocol
/// model (feature `model`), which runs this code rather than a copy of it. Not a stable
/// API.
#[cfg(feature = "model")]
#[doc(hidden)]
pub mod model {
    pub use crate::kernel::acquire::checked::*;
}
#[cfg(feature = "simulation")]
pub use random::simulation;
pub use token::{EntropyError, Token};

#[cfg(feature = "macros")]
pub use redlock_macros::redlock;

/// The `fred` client the nodes are reached through, re-exported on purpose: its one type in
/// this crate's API, the TLS connector that
/// [`RedlockBuilder::tls_connector`](crate::RedlockBuilder) takes, then comes from the version
/// this crate was built with. Every other client error reaches you as [`ClientError`].
pub use fred;

/// Support for the code `#[redlock]` expands to. Not public API.
#[doc(hidden)]
#[path = "macro_support.rs"]
pub mod __private;
