//! Error types: invalid input, lock failures, build failures.
//!
//! Longer than most modules (about 600 lines) for one reason: each variant carries its own
//! message, saying what happened and what to do, and its docs; the three enums convert into
//! one another, so they stay together.

use std::time::Duration;

use crate::outcome::{NodeVote, Outcomes};

/// Input rejected before anything was sent to a node.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum InvalidInput {
    /// The resource name is empty.
    #[error("the resource name is empty; pass the name of what you are locking, e.g. \"order:42\"")]
    EmptyResource,
    /// The resource name is longer than the cap.
    #[error("the resource name is {len} bytes, more than the {max} allowed")]
    ResourceTooLong {
        /// Its length in bytes.
        len: usize,
        /// The cap ([`MAX_RESOURCE_LEN`](crate::MAX_RESOURCE_LEN)).
        max: usize,
    },
    /// The ttl is zero.
    #[error("the ttl is zero; a lock needs a ttl of a few milliseconds or more")]
    ZeroTtl,
    /// The ttl is above the cap.
    #[error("the ttl {ttl:?} is above the cap of {max:?}; check the unit (ttl is a Duration)")]
    TtlAboveCap {
        /// The ttl asked for.
        ttl: Duration,
        /// The cap ([`MAX_TTL`](crate::options::MAX_TTL)).
        max: Duration,
    },
    /// The ttl is not longer than the drift allowance, so no validity could ever be left.
    #[error(
        "the ttl {ttl:?} leaves no validity after the {drift:?} clock drift allowance; use a longer ttl"
    )]
    TtlTooShort {
        /// The ttl asked for.
        ttl: Duration,
        /// `ttl × drift_factor + 2 ms`.
        drift: Duration,
    },
    /// The drift factor is outside `[0, 0.5)` or not a number.
    #[error("the drift factor {0} is outside [0, 0.5); the usual value is 0.01")]
    DriftFactor(f64),
    /// The resource (or the key prefix) holds a NUL byte, which marks the lock's own
    /// bookkeeping keys ([`BOOKKEEPING_SEPARATOR`](crate::BOOKKEEPING_SEPARATOR)).
    #[error(
        "resource names and key prefixes may not hold a NUL byte: a lock key followed by one names the lock's own bookkeeping (waiter queue, fencing counter)"
    )]
    ReservedResource,
    /// The lost-signal margin leaves no validity before it.
    #[error(
        "the lost margin {margin:?} is not shorter than the {validity:?} validity (ttl − drift); use a smaller margin or a longer ttl"
    )]
    LostMargin {
        /// The margin asked for.
        margin: Duration,
        /// `ttl − drift`.
        validity: Duration,
    },
    /// The auto-extension share is outside `(0, 1)` or would extend after the lost signal.
    #[error(
        "the extension share {fraction} of the {ttl:?} ttl is outside (0, 1) or leaves no time to extend before the lost margin ({margin:?}); the usual value is 1/3"
    )]
    ExtendFraction {
        /// The share asked for.
        fraction: f64,
        /// The ttl.
        ttl: Duration,
        /// The lost-signal margin.
        margin: Duration,
    },
    /// The ttl is longer than the handle's node quarantine, which must cover every ttl.
    #[error(
        "the ttl {ttl:?} is longer than the node quarantine {quarantine:?}: a node restarted empty could vote again while this key should still be held; use a shorter ttl or a longer quarantine"
    )]
    TtlAboveQuarantine {
        /// The ttl asked for.
        ttl: Duration,
        /// The quarantine ([`RedlockBuilder::quarantine`](crate::RedlockBuilder::quarantine)).
        quarantine: Duration,
    },
    /// [`Redlock::lock_many`](crate::Redlock::lock_many) was given no resource.
    #[error(
        "no resource given; name the resources to lock together, e.g. [\"account:1\", \"account:2\"]"
    )]
    NoResources,
    /// [`Redlock::lock_many`](crate::Redlock::lock_many) was given more resources than the
    /// cap.
    #[error("{len} resources given, more than the {max} one lock can take together")]
    TooManyResources {
        /// How many distinct resources were given.
        len: usize,
        /// The cap ([`MAX_RESOURCES`](crate::MAX_RESOURCES)).
        max: usize,
    },
    /// A lock of several resources ([`Redlock::lock_many`](crate::Redlock::lock_many)) was
    /// asked with an option it cannot give: `fencing` (one token would
    /// have to order several resources' writers), `reentrant` (re-entry follows one
    /// resource's lock), `lock_at_least_for`, or it was detached (`detach`).
    #[error(
        "a lock of several resources cannot be taken with {option}; take it without, or lock the resources one by one"
    )]
    ManyWith {
        /// The option: `fencing`, `reentrant`, `lock_at_least_for` or `detach`.
        option: &'static str,
    },
    /// [`LockGuard::detach`](crate::LockGuard::detach) or
    /// [`LockGuard::downgrade`](crate::LockGuard::downgrade) on a lock that re-entries share:
    /// it would change the lock under another guard of this process.
    #[error(
        "the lock cannot be {action} while re-entries share it (hold count above 1); drop the re-entered guards first"
    )]
    Shared {
        /// `detached` or `downgraded`.
        action: &'static str,
    },
    /// [`LockGuard::downgrade`](crate::LockGuard::downgrade) to a mode that is not weaker
    /// ([`Mode::weaker_than`](crate::Mode::weaker_than)), or of the plain lock (`from` is
    /// `None`), which is not held in a mode: take it with `Redlock::write_lock` or `lock_mode_with`
    /// to downgrade it later.
    #[error(
        "{to} is not a downgrade of {}; a downgrade moves to a mode compatible with more holders (EX -> PR for write -> read), and only a lock taken in a mode can move",
        .from.map_or("the plain lock", crate::Mode::as_str)
    )]
    NotADowngrade {
        /// The mode held; `None` for the plain lock.
        from: Option<crate::Mode>,
        /// The mode asked for.
        to: crate::Mode,
    },
    /// [`Redlock::resume_with`](crate::Redlock::resume_with) asked for what the detached lock
    /// does not have: fencing it was taken without, or another key prefix.
    #[error(
        "the resumption asks for another {option} than the detached lock has; resume it with the detached lock's own (or through a handle with its key prefix)"
    )]
    ResumeMismatch {
        /// `fencing`, `key prefix`, or `permit` (a permit's slot outside its semaphore).
        option: &'static str,
    },
    /// A reentrant acquisition inside the scope of a lock that cannot give what it asks for:
    /// the outer lock was taken without fencing, auto-extension or a minimum hold this one
    /// asks for, or with auto-extension capped sooner (`max_hold`, `max_extensions`). Re-entry shares the outer lock, so it could only give less in silence.
    #[error(
        "a reentrant acquisition asks for {option}, which the lock it re-enters was taken without; take the outer lock with {option} too"
    )]
    ReentryAsksMore {
        /// The option: `fencing`, `auto_extend`, `max_hold`, `max_extensions` or
        /// `lock_at_least_for`.
        option: &'static str,
    },
    /// `max_hold` is zero.
    #[error("max_hold is zero; give the longest time the lock may be held, e.g. 10 minutes")]
    ZeroMaxHold,
    /// `lock_at_least_for` is longer than the ttl.
    #[error(
        "lock_at_least_for {at_least:?} is longer than the ttl {ttl:?}; the minimum hold must fit in the ttl (raise the ttl, or shorten the minimum hold)"
    )]
    AtLeastAboveTtl {
        /// The minimum hold asked for.
        at_least: Duration,
        /// The ttl.
        ttl: Duration,
    },
    /// `lock_at_least_for` was asked for a lock in a mode.
    #[error(
        "lock_at_least_for applies to the plain exclusive lock only, not to a lock taken in a mode"
    )]
    AtLeastWithMode,
    /// A semaphore of zero permits ([`Redlock::semaphore`](crate::Redlock::semaphore)).
    #[error("permits is zero; a semaphore needs at least one permit")]
    ZeroPermits,
    /// More permits than [`MAX_PERMITS`](crate::MAX_PERMITS).
    #[error("permits {permits} is above the cap {max}: every attempt reads each slot on each node")]
    PermitsAboveCap {
        /// The permits asked for.
        permits: u32,
        /// The cap.
        max: u32,
    },
    /// A semaphore's permit was asked with an option it cannot give: `fencing` (the holders of
    /// different slots share no order) or `reentrant` (re-entry follows the resource's lock,
    /// not a slot); or the axum layer was given both a concurrency limit and a mode (`mode`:
    /// a permit is a plain lock on one slot).
    #[error("permits cannot be combined with {option}; remove one of the two")]
    PermitsWith {
        /// The option: `fencing`, `reentrant` or `mode`.
        option: &'static str,
    },
}

/// Why a lock could not be taken or released.
///
/// [`Busy`](Self::Busy) means another holder has the resource; [`SplitVote`](Self::SplitVote)
/// that nobody has it but contenders kept splitting the vote; [`Unavailable`](Self::Unavailable)
/// means too few nodes answered to decide; [`Invalid`](Self::Invalid) means nothing was sent.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LockError {
    /// The input was rejected before anything was sent.
    #[error("invalid lock request: {0}")]
    Invalid(#[from] InvalidInput),
    /// Another holder has the resource: enough nodes answered, but too few granted the lock
    /// (distlock spec, step 3), on every attempt until retries or the wait deadline ran out.
    #[error(
        "resource `{resource}` is busy: {} of {} nodes granted it on the last of {attempts} attempt(s), {quorum} needed ({outcomes})",
        outcomes.acquired(), outcomes.len()
    )]
    Busy {
        /// The resource.
        resource: String,
        /// Attempts made.
        attempts: u32,
        /// Nodes needed.
        quorum: usize,
        /// The last attempt's per-node answers.
        outcomes: Outcomes,
    },
    /// A split vote: nobody holds the resource, but contenders attempting at the same time
    /// (this one among them) each got too few nodes for a quorum, on every attempt, including
    /// the extra attempts made after a split vote (distlock spec, "Retry on failure"). The
    /// nodes that refused named different holders, none of which can have a quorum even
    /// counting the nodes that did not answer. Unlike [`Busy`](Self::Busy), no other holder is
    /// doing the work: attempt again.
    #[error(
        "resource `{resource}`: split vote, no holder has a quorum but {} of {} nodes granted it on the last of {attempts} attempt(s), {quorum} needed ({outcomes}); attempt again",
        outcomes.acquired(), outcomes.len()
    )]
    SplitVote {
        /// The resource.
        resource: String,
        /// Attempts made.
        attempts: u32,
        /// Nodes needed.
        quorum: usize,
        /// The last attempt's per-node answers.
        outcomes: Outcomes,
    },
    /// Too few nodes answered to reach a quorum: Redis is down, stalled or unreachable.
    #[error(
        "resource `{resource}`: Redis unavailable, only {} of {} nodes answered on the last of {attempts} attempt(s), {quorum} needed ({outcomes})",
        outcomes.len() - outcomes.failed(), outcomes.len()
    )]
    Unavailable {
        /// The resource.
        resource: String,
        /// Attempts made.
        attempts: u32,
        /// Nodes needed.
        quorum: usize,
        /// The last attempt's per-node answers.
        outcomes: Outcomes,
    },
    /// A quorum granted the lock, but acquiring took so long that no validity was left
    /// (distlock spec, step 3: elapsed ≥ ttl − drift); the partial lock was released.
    #[error(
        "resource `{resource}`: a quorum granted the lock but acquisition took {elapsed:?} of the {ttl:?} ttl, leaving no validity ({attempts} attempt(s))"
    )]
    NoValidity {
        /// The resource.
        resource: String,
        /// Attempts made.
        attempts: u32,
        /// Time the last attempt took.
        elapsed: Duration,
        /// The ttl.
        ttl: Duration,
    },
    /// Fewer than a quorum of nodes confirmed a release; the lock expires with its ttl.
    #[error(
        "release of `{resource}` unconfirmed: only {answered} of {nodes} nodes answered, {quorum} needed; the key expires with its ttl"
    )]
    ReleaseUnconfirmed {
        /// The resource.
        resource: String,
        /// Nodes that answered.
        answered: usize,
        /// Nodes in all.
        nodes: usize,
        /// Nodes needed.
        quorum: usize,
    },
    /// The [`Redlock`](crate::Redlock) is shutting down and refuses new acquisitions.
    #[error("shutting down: new lock acquisitions are refused")]
    ShuttingDown,
    /// No handle is registered under this name (see [`registry`](crate::registry)).
    #[error(
        "no Redlock is registered under the name `{0}`; call `redlock_core::registry::register(\"{0}\", redlock)` at start-up"
    )]
    NotRegistered(String),
    /// The lock was held but can no longer be trusted; the work it guarded was stopped (in
    /// [`Redlock::with_lock`](crate::Redlock::with_lock) and `#[redlock(auto_extend)]`) or
    /// the extension was refused.
    #[error("the lock on `{resource}` was lost: {reason}")]
    Lost {
        /// The resource.
        resource: String,
        /// Why.
        reason: LostReason,
    },
    /// The OS CSPRNG failed to give a token.
    #[error("could not draw a token from the OS random source")]
    Entropy(#[source] crate::token::EntropyError),
    // Keys that hold data the lock did not write.
    /// The lock key holds data this library did not write, on too many nodes for a quorum:
    /// a hash with fields that are not a mode lock's entries (another application's hash of
    /// the same name), or a list, set, sorted set or stream. A lock in a
    /// [`Mode`](crate::Mode) refuses such a key and leaves it exactly as it was (no field
    /// deleted, no expiry set). The plain lock's `SET NX` refuses it too, as
    /// [`Busy`](Self::Busy). Give the handle a key prefix
    /// ([`RedlockBuilder::key_prefix`](crate::RedlockBuilder::key_prefix), e.g. `"lock:"`) so
    /// that lock keys cannot collide with your application's keys.
    #[error(
        "resource `{resource}`: the key `{key}` holds data not written by this library on {} of {} nodes ({outcomes}); it was left untouched. Use a key prefix (e.g. RedlockBuilder::key_prefix(\"lock:\")) so that lock keys cannot collide with your application's keys",
        outcomes.foreign(), outcomes.len()
    )]
    ForeignKey {
        /// The resource.
        resource: String,
        /// The key on the nodes (the key prefix followed by the resource).
        key: String,
        /// The last attempt's per-node answers.
        outcomes: Outcomes,
    },
    /// A semaphore's permit was asked for with another number of permits than the one the
    /// semaphore is in use with on the nodes: the first attempt on a semaphore stores its
    /// number of permits, kept as long as a permit taken with it lives (extended with it).
    /// Two numbers would use two sets of slots and together admit more holders than the
    /// smaller one, so when more than `N − quorum` nodes store another number (no quorum can
    /// grant this one) the attempt is refused at once (no retries) and takes nothing; fewer
    /// such nodes count as failed nodes. Give every handle on the
    /// resource the same number ([`Redlock::semaphore`](crate::Redlock::semaphore)); to
    /// change it, stop every holder and wait for their permits to be released or expire.
    #[error(
        "resource `{resource}`: the semaphore is in use with {stored} permits, and this one asks for {permits} ({outcomes}); give every handle on the resource the same number of permits, or change it once the permits taken with {stored} are released or expired"
    )]
    PermitsMismatch {
        /// The resource.
        resource: String,
        /// The number of permits asked with.
        permits: u32,
        /// The number of permits stored on the nodes.
        stored: u32,
        /// The attempt's per-node answers.
        outcomes: Outcomes,
    },
}

impl LockError {
    /// `true` if another holder has the resource ([`LockError::Busy`]).
    pub fn is_busy(&self) -> bool {
        matches!(self, Self::Busy { .. })
    }

    /// How long until the holder's lock runs out by its ttl, for [`LockError::Busy`]: the
    /// time until enough nodes are free for a quorum, from the remaining ttls the nodes
    /// reported on the last attempt ([`Outcomes::free_in`]). `None` for other errors, or when
    /// unknown (e.g. a foreign key with no expiry). The holder may release sooner or extend:
    /// this is a hint for `Retry-After`, not a promise.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            Self::Busy {
                quorum, outcomes, ..
            } => outcomes.free_in(*quorum),
            _ => None,
        }
    }

    /// Whether the same call, made again later, may succeed: the resource was busy or the
    /// vote split ([`Busy`](Self::Busy), [`SplitVote`](Self::SplitVote)), the acquisition
    /// outran its validity ([`NoValidity`](Self::NoValidity)), the OS random source failed
    /// ([`Entropy`](Self::Entropy)), or too few nodes answered
    /// ([`Unavailable`](Self::Unavailable)) while enough of the others failed for a reason
    /// that passes ([`NodeError::is_transient`](crate::NodeError::is_transient): a timeout,
    /// a lost connection, a node loading its data) for a quorum to be possible later.
    ///
    /// `false` when calling again cannot help without a change: bad input
    /// ([`Invalid`](Self::Invalid)), data of another application at the key
    /// ([`ForeignKey`](Self::ForeignKey)), nodes refusing for good (`Unavailable` where so
    /// many nodes answered `NOPERM`, `READONLY` or another lasting refusal that no quorum is
    /// left), a handle shutting down ([`ShuttingDown`](Self::ShuttingDown)) or never
    /// registered ([`NotRegistered`](Self::NotRegistered)), a lock that is gone
    /// ([`Lost`](Self::Lost): the guard's calls cannot succeed again; take a new lock), and
    /// [`ReleaseUnconfirmed`](Self::ReleaseUnconfirmed), where there is nothing to do again:
    /// the key expires with its ttl.
    ///
    /// How long to wait first: [`retry_after`](Self::retry_after) for a busy resource, the
    /// retry delay otherwise.
    pub fn is_retryable(&self) -> bool {
        match self {
            Self::Busy { .. }
            | Self::SplitVote { .. }
            | Self::NoValidity { .. }
            | Self::Entropy(_) => true,
            Self::Unavailable {
                quorum, outcomes, ..
            } => {
                let lasting = outcomes
                    .iter()
                    .filter(|o| matches!(&o.vote, NodeVote::Failed(e) if !e.is_transient()))
                    .count();
                outcomes.len() - lasting >= *quorum
            }
            Self::Invalid(_)
            | Self::Lost { .. }
            | Self::ReleaseUnconfirmed { .. }
            | Self::ShuttingDown
            | Self::NotRegistered(_)
            | Self::ForeignKey { .. }
            | Self::PermitsMismatch { .. } => false,
        }
    }

    /// `true` if Redis could not decide: too few nodes answered, the acquisition outran its
    /// validity, a release was unconfirmed, or the handle is shutting down.
    pub fn is_unavailable(&self) -> bool {
        matches!(
            self,
            Self::Unavailable { .. }
                | Self::NoValidity { .. }
                | Self::ReleaseUnconfirmed { .. }
                | Self::ShuttingDown
        )
    }
}

impl LockError {
    /// [`LockError::ForeignKey`] for an attempt that failed with `outcomes`, when some node
    /// found data we did not write at the key and no other holder has a quorum (then it is
    /// [`Busy`](Self::Busy), and the foreign data is not what stands in the way); `None`
    /// otherwise.
    pub(crate) fn foreign_key(
        resource: &str,
        quorum: usize,
        outcomes: &Outcomes,
    ) -> Option<LockError> {
        if outcomes.held() >= quorum {
            return None;
        }
        let key = outcomes.iter().find_map(|o| match &o.vote {
            crate::outcome::NodeVote::Failed(crate::outcome::NodeError::ForeignKey { key }) => {
                Some(key.clone())
            }
            _ => None,
        })?;
        Some(LockError::ForeignKey {
            resource: resource.to_owned(),
            key,
            outcomes: outcomes.clone(),
        })
    }
}

/// Why a held lock can no longer be trusted (its [`LostSignal`](crate::LostSignal) fired).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LostReason {
    /// An extension found our token on too few nodes for a quorum ever to hold it: the keys
    /// expired, were deleted, or another holder has them.
    #[error("an extension was refused by a majority ({0})")]
    Refused(Outcomes),
    /// The validity deadline (less the lost margin) came with no confirmed extension.
    #[error("its validity ran out with no confirmed extension")]
    Expired,
    /// The lock was released (by its guard, or by `release_all` / `shutdown`).
    #[error("it was released")]
    Released,
    /// The lock was handed on with [`LockGuard::detach`](crate::LockGuard::detach): it is
    /// still held, by whoever resumes it, no longer through this guard.
    #[error("it was detached, to be resumed elsewhere")]
    Detached,
}

/// Why a [`Redlock`](crate::Redlock) could not be built.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BuildError {
    /// No node was given.
    #[error(
        "no Redis node given; add node URLs (e.g. redis://127.0.0.1:6379) or set REDLOCK_NODES"
    )]
    NoNodes,
    /// A node URL could not be parsed.
    #[error(
        "node URL #{index} `{node}` is malformed: {reason}; a node URL looks like redis://[user:password@]host[:port][/db], e.g. redis://127.0.0.1:6379"
    )]
    InvalidUrl {
        /// Position of the URL in the list (0-based; for `REDLOCK_NODES`, in its
        /// comma-separated entries).
        index: usize,
        /// The entry as given, its credentials replaced by `***`.
        node: String,
        /// What is wrong with it (credentials are never included).
        reason: String,
    },
    /// `rediss://` was asked for but no TLS feature is compiled in (fred would silently connect
    /// in plaintext).
    #[error(
        "node {node} uses TLS (rediss://) but redlock-core was built without TLS; enable the `tls-rustls` or `tls-native` feature"
    )]
    TlsNotEnabled {
        /// The node.
        node: String,
    },
    /// A TLS setting of the builder cannot be used
    /// (`RedlockBuilder::tls_ca_pem` and its siblings, with a TLS feature): PEM text without
    /// a certificate, a malformed certificate, a key that cannot be read or does not fit the
    /// certificate, or a connector given beside the PEM settings. Found before connecting.
    #[error("TLS settings: {reason}")]
    Tls {
        /// What is wrong (never the key itself).
        reason: String,
    },
    /// A unix socket URL was given without the `unix-sockets` feature.
    #[error(
        "node {node} is a unix socket but redlock-core was built without the `unix-sockets` feature"
    )]
    UnixSocketsNotEnabled {
        /// The node.
        node: String,
    },
    /// A Redis Cluster URL (or a `fred` client configured for a cluster) was given: a cluster
    /// shards keys, so it is not N independent masters. Give each master's own `redis://` URL.
    #[error(
        "node {node} is a Redis Cluster URL or client; Redlock needs independent masters (give each master's own redis:// URL)"
    )]
    ClusterNotSupported {
        /// The node.
        node: String,
    },
    /// A Sentinel URL (`redis-sentinel://`, `rediss-sentinel://`, `valkey-sentinel://`,
    /// `valkeys-sentinel://`) or a `fred` client configured for Sentinel was given. Refused
    /// before anything is sent: a failover promotes an asynchronous replica that may lack the
    /// latest lock keys and fencing counters, and its long uptime defeats the
    /// [quarantine](crate::RedlockBuilder::quarantine), so two clients can both hold one lock,
    /// undetected. List each master's own address as a `redis://` URL, and run them as
    /// independent masters, not as a replication group.
    #[error(
        "node #{index} `{node}` is behind Redis Sentinel, which Redlock does not support: a failover promotes an asynchronous replica that can lack the latest lock keys and fencing counters, and its long uptime defeats the quarantine, so two clients could both hold one lock; list each master's own address as a redis:// URL (e.g. redis://10.0.0.1:6379), each an independent master, not a replication group"
    )]
    SentinelNotSupported {
        /// Position of the node: among the URLs (0-based, as for
        /// [`InvalidUrl`](Self::InvalidUrl)), then the clients given with
        /// [`client`](crate::RedlockBuilder::client), numbered after the URLs.
        index: usize,
        /// The URL as given, its credentials replaced by `***`; for a client, its Sentinel
        /// service and Sentinel addresses.
        node: String,
    },
    /// A node runs in cluster mode (`cluster_enabled:1` in `INFO cluster`): it shards keys
    /// over its cluster, so the lock's multi-key scripts would fail with `MOVED` or
    /// `CROSSSLOT`. Found at build time; give independent masters with `cluster-enabled no`.
    #[error(
        "node {node} runs in cluster mode (cluster_enabled:1): it shards keys over its cluster, so the lock's multi-key scripts would fail with MOVED or CROSSSLOT; give independent masters, each with `cluster-enabled no`"
    )]
    ClusterEnabled {
        /// The node.
        node: String,
    },
    /// A node is a replica (`role:slave` in `INFO replication`): it answers writes with
    /// `READONLY`, and holds a copy of its master's keys. Found at build time; list only
    /// masters, none a replica of another.
    #[error(
        "node {node} is a replica{}: it answers writes with READONLY and holds a copy of its master's keys, so it is not an independent master; list only masters, none a replica of another",
        master.as_deref().map(|m| format!(" of {m}")).unwrap_or_default()
    )]
    Replica {
        /// The node.
        node: String,
        /// Its master (`master_host:master_port`), if it reported one.
        master: Option<String>,
    },
    /// Two nodes are one replication group: they share a replication id (`master_replid` or
    /// `master_replid2` in `INFO replication`), as a master and its replica do, or a promoted
    /// replica and its former master, or a server started from another's data. They hold the
    /// same keys and fail together. Found at build time; list independent masters only.
    #[error(
        "nodes {other} and {node} are one replication group (they share the replication id {replid}: one replicates or was promoted from the other's group, or was started from its data), so they hold the same keys and fail together; list independent masters, none replicating from another"
    )]
    SameReplicationGroup {
        /// The later node in the list.
        node: String,
        /// The earlier node it shares the id with.
        other: String,
        /// The shared id.
        replid: String,
    },
    /// A node can evict lock keys: `maxmemory` is set and `maxmemory-policy` is not
    /// `noeviction` (`INFO memory`). `allkeys-*` policies evict any key, `volatile-*` keys
    /// with a ttl, which every lock key has; an evicted lock key lets a second client take the
    /// lock. Found at build time; set `maxmemory-policy noeviction` (a full node then refuses
    /// new locks instead) or `maxmemory 0`.
    #[error(
        "node {node} can evict lock keys: maxmemory is {maxmemory} bytes with maxmemory-policy `{policy}` (allkeys-* evicts any key, volatile-* any key with a ttl, as every lock key has), and an evicted lock key lets a second client take the lock; set `maxmemory-policy noeviction` on it (a full node then refuses new locks instead), or `maxmemory 0`"
    )]
    EvictionPolicy {
        /// The node.
        node: String,
        /// Its `maxmemory_policy`.
        policy: String,
        /// Its `maxmemory`, in bytes.
        maxmemory: u64,
    },
    /// The same node was given twice (same address, or the same server `run_id`).
    #[error(
        "node {node} is given twice; Redlock's majority only means something over distinct servers"
    )]
    DuplicateNode {
        /// The node.
        node: String,
    },
    /// A node holds the marker of handles that lock the same keys (the same key prefix)
    /// through a list of another number of nodes: their majorities need not overlap, so both
    /// could hold one resource at once. Give every application the same nodes; when changing
    /// the number of nodes, stop every handle of the old list first (its marker then expires
    /// within a minute, or delete the key `<key prefix>\0redlock:nodes` on the nodes), or
    /// turn the check off with
    /// [`RedlockBuilder::node_set_check`](crate::RedlockBuilder::node_set_check).
    #[error(
        "node {node} is used by handles with {theirs} nodes for the same keys, and this one has {ours}: their majorities need not overlap, so two holders could lock one resource at once; give every application the same nodes (when changing the nodes, stop every handle of the old list first)"
    )]
    NodeSetMismatch {
        /// The first node found holding the other list's marker.
        node: String,
        /// The number of nodes of this handle.
        ours: usize,
        /// The number of nodes the other handles use.
        theirs: usize,
    },
    /// The environment variable holding the node list is missing or empty.
    #[error("environment variable {var} is not set or empty; set it to comma-separated node URLs")]
    MissingEnv {
        /// The variable.
        var: String,
    },
    /// An environment variable read by [`from_env`](crate::RedlockBuilder::from_env) is
    /// malformed. Its value is never shown: some (node URLs, TLS keys) hold credentials.
    #[error("environment variable {var} is malformed ({reason}); expected {expected}")]
    Env {
        /// The variable, e.g. `REDLOCK_TTL`.
        var: String,
        /// The form it takes, e.g. "a duration such as 250ms, 30s or 1h 30m".
        expected: &'static str,
        /// What is wrong with the value (never the value itself).
        reason: String,
    },
    /// A file named by the configuration could not be read (a TLS certificate or key given
    /// as a path: [`RedlockConfig::tls_ca`](crate::RedlockConfig::tls_ca) and its siblings).
    #[error("cannot read the {option} file {path}")]
    ReadFile {
        /// The option, e.g. `tls_ca`.
        option: &'static str,
        /// The path (shown only when it looks like one: see [`ConfigPath`]).
        path: ConfigPath,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The default lock options are invalid.
    #[error("invalid default lock options: {0}")]
    Invalid(#[from] InvalidInput),
    /// An option of the builder is out of range.
    #[error("invalid builder option `{name}`: {reason}")]
    Option {
        /// The option.
        name: &'static str,
        /// What is wrong.
        reason: String,
    },
    /// Fewer than a quorum of nodes could be reached within the connect timeout.
    #[error("only {reachable} of {nodes} nodes were reachable within {timeout:?}, {quorum} needed: {}", failures.join("; "))]
    TooFewReachable {
        /// Nodes connected.
        reachable: usize,
        /// Nodes in all.
        nodes: usize,
        /// Nodes needed.
        quorum: usize,
        /// The connect timeout.
        timeout: Duration,
        /// `node: reason` for each unreachable node.
        failures: Vec<String>,
    },
    /// The fred client could not be created for a node.
    #[error("could not create the client for node {node}")]
    Client {
        /// The node.
        node: String,
        /// The client's error.
        source: crate::outcome::ClientError,
    },
}

/// The longest path shown in an error or `Debug` output.
const MAX_SHOWN_PATH: usize = 200;

/// A configured path as errors and `Debug` show it: quoted when it is a file, or looks like a
/// file name (it has a `.`, which base64 never has); otherwise only its length, since it may
/// be a key pasted where a path goes (on one line, with a byte-order mark, without its
/// `-----BEGIN` line), which must never be shown.
pub(crate) fn shown_path(path: &std::path::Path) -> String {
    let text = path.to_string_lossy();
    let plain = text.len() <= MAX_SHOWN_PATH
        && !text.chars().any(|c| c.is_control() || c == '\u{feff}')
        && (text.contains('.') || path.is_file());
    if plain {
        format!("`{text}`")
    } else {
        format!("<a value of {} bytes, not shown: no such file>", text.len())
    }
}

/// A path from the configuration. `Debug` and `Display` quote it only when it is a file or
/// looks like a file name (it has a `.`, which base64 never has), and otherwise give only its
/// length, so that an error printed with `{:?}` (a `main` returning `Result`) never shows a
/// key pasted where a path goes.
#[derive(Clone, PartialEq, Eq)]
pub struct ConfigPath(pub std::path::PathBuf);

impl std::fmt::Debug for ConfigPath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&shown_path(&self.0))
    }
}

impl std::fmt::Display for ConfigPath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&shown_path(&self.0))
    }
}

#[cfg(test)]
mod tests {
    use super::{InvalidInput, LockError, LostReason};
    use crate::outcome::{NodeError, NodeOutcome, NodeVote, Outcomes};

    fn reply(text: &str) -> NodeError {
        NodeError::from_fred(fred::error::Error::new(
            fred::error::ErrorKind::Unknown,
            text.to_owned(),
        ))
    }

    /// `Unavailable` on 3 nodes (quorum 2) after `votes`.
    fn unavailable(votes: Vec<NodeVote>) -> LockError {
        let outcomes = votes
            .into_iter()
            .enumerate()
            .map(|(i, vote)| NodeOutcome {
                node: format!("10.0.0.{i}:6379"),
                vote,
                holder_ttl: None,
            })
            .collect();
        LockError::Unavailable {
            resource: "order:1".to_owned(),
            attempts: 1,
            quorum: 2,
            outcomes: Outcomes::new(outcomes),
        }
    }

    #[test]
    fn node_errors_that_pass_are_told_from_lasting_refusals() {
        for passing in [
            NodeError::Timeout(std::time::Duration::from_millis(100)),
            NodeError::Disconnected,
            NodeError::Quarantined,
            reply("LOADING Redis is loading the dataset in memory"),
            reply("BUSY Redis is busy running a script."),
            reply("OOM command not allowed when used memory > 'maxmemory'."),
        ] {
            assert!(passing.is_transient(), "{passing:?}");
        }
        for lasting in [
            reply("NOPERM this user has no permissions to run the 'evalsha' command"),
            reply("READONLY You can't write against a read only replica."),
            reply("ERR unknown command"),
            reply("NOPERMISSIVE is not a code"),
            NodeError::QuarantineMismatch,
            NodeError::UnexpectedReply("to a batch: 7".to_owned()),
        ] {
            assert!(!lasting.is_transient(), "{lasting:?}");
        }
    }

    #[test]
    fn an_error_says_whether_the_same_call_may_succeed_later() {
        let outcomes = || Outcomes::new(Vec::new());
        let resource = || "order:1".to_owned();
        let timeout = || NodeVote::Failed(NodeError::Timeout(std::time::Duration::ZERO));
        let noperm = || NodeVote::Failed(reply("NOPERM no permissions"));
        let retryable = [
            LockError::Busy {
                resource: resource(),
                attempts: 1,
                quorum: 2,
                outcomes: outcomes(),
            },
            LockError::SplitVote {
                resource: resource(),
                attempts: 1,
                quorum: 2,
                outcomes: outcomes(),
            },
            LockError::NoValidity {
                resource: resource(),
                attempts: 1,
                elapsed: std::time::Duration::from_secs(1),
                ttl: std::time::Duration::from_secs(1),
            },
            // Two nodes timed out: they may answer later.
            unavailable(vec![timeout(), timeout(), NodeVote::Acquired]),
            // One refuses for good, but the two others can still make a quorum.
            unavailable(vec![noperm(), timeout(), NodeVote::Acquired]),
        ];
        for error in &retryable {
            assert!(error.is_retryable(), "{error}");
        }
        let final_ = [
            LockError::Invalid(InvalidInput::EmptyResource),
            // Two of three refuse for good: no quorum is left.
            unavailable(vec![noperm(), noperm(), NodeVote::Acquired]),
            LockError::ReleaseUnconfirmed {
                resource: resource(),
                answered: 1,
                nodes: 3,
                quorum: 2,
            },
            LockError::ShuttingDown,
            LockError::NotRegistered("orders".to_owned()),
            LockError::Lost {
                resource: resource(),
                reason: LostReason::Expired,
            },
            LockError::Lost {
                resource: resource(),
                reason: LostReason::Refused(outcomes()),
            },
            LockError::Lost {
                resource: resource(),
                reason: LostReason::Released,
            },
            LockError::ForeignKey {
                resource: resource(),
                key: "order:1".to_owned(),
                outcomes: outcomes(),
            },
        ];
        for error in &final_ {
            assert!(!error.is_retryable(), "{error}");
        }
    }
}
