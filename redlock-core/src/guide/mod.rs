//! The guide: how to use the lock, how it works, and what it guarantees.
//!
//! These pages hold no code; read them in order, or jump to what you need.
//!
//! Using it:
//!
//! 1. [The lock and its options](lock): take, release, extend, re-enter; the defaults.
//! 2. [Leader election](leader_election): one leader at a time among replicas.
//! 3. [Lock modes](lock_modes): read/write locks, the six modes of a distributed lock manager,
//!    and the write → read downgrade.
//! 4. [Counting semaphores](semaphore): at most K holders of a resource at once.
//! 5. [The attribute](attribute): `#[redlock(...)]` on an async fn; jobs every replica
//!    schedules.
//! 6. [Axum routes](axum): the tower layer, what the client gets (`423`, `503`), graceful
//!    shutdown.
//! 7. [The command line](command_line): `redlock run` for cron jobs and ops scripts; `redlock
//!    release --force` for a dead holder's lock.
//! 8. [Handing a lock on](handing_on): detach it here, resume or release it elsewhere by its
//!    token.
//! 9. [Configuration](configuration): your own nodes, a file, the environment, ACL users.
//! 10. [TLS](tls): `rediss://`, a private CA, mutual TLS.
//! 11. [Metrics and tracing](metrics).
//! 12. [Where to put the nodes](deployment): independent masters, one per failure domain,
//!     timeouts against the round trips, several node sets.
//!
//! Understanding it:
//!
//! 13. [How it works](how_it_works): the algorithm, hand-over to waiters, windows for foreign
//!     clients, lock modes, keys.
//! 14. [Fencing tokens](fencing): ordering the holders' writes at your storage.
//! 15. [Guarantees and their limits](guarantees), in the words of the tests; the quarantine.
//! 16. [Working beside other clients](other_clients): node-redlock, redis-py, redlock-php and
//!     other handles on the same keys.
//! 17. [The protocol, model-checked](model_checking): every interleaving of small systems
//!     under faults, the properties, the known-bad designs it rejects.
//!
//! Every snippet in these pages is compiled by the workspace's tests.

// Each page is a Markdown file beside this one, so that it reads on its own too. The axum page
// is compiled where axum is a dependency (the workspace's `examples/readme`), not as a doctest
// of this crate.

#[doc = include_str!("lock.md")]
pub mod lock {}

#[doc = include_str!("leader_election.md")]
pub mod leader_election {}

#[doc = include_str!("handing_on.md")]
pub mod handing_on {}

#[doc = include_str!("lock_modes.md")]
pub mod lock_modes {}

#[doc = include_str!("semaphore.md")]
pub mod semaphore {}

#[doc = include_str!("attribute.md")]
pub mod attribute {}

#[cfg_attr(not(doctest), doc = include_str!("axum.md"))]
#[cfg_attr(
    doctest,
    doc = "Axum routes (compiled with the workspace's `examples/readme`)."
)]
pub mod axum {}

#[doc = include_str!("command_line.md")]
pub mod command_line {}

#[doc = include_str!("configuration.md")]
pub mod configuration {}

#[doc = include_str!("tls.md")]
pub mod tls {}

#[doc = include_str!("metrics.md")]
pub mod metrics {}

#[doc = include_str!("deployment.md")]
pub mod deployment {}

#[doc = include_str!("how_it_works.md")]
pub mod how_it_works {}

#[doc = include_str!("fencing.md")]
pub mod fencing {}

#[doc = include_str!("guarantees.md")]
pub mod guarantees {}

#[doc = include_str!("other_clients.md")]
pub mod other_clients {}

#[doc = include_str!("model_checking.md")]
pub mod model_checking {}
