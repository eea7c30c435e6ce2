//! The [`Redlock`] handle: the masters, the default options, the ledger of held leases, the
//! waiters, and shutdown. Acquisition is in [`acquire`](crate::kernel::acquire), release and shutdown
//! in [`release`](crate::kernel::release).

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::kernel::lease::Ledger;
use crate::kernel::masters::Masters;
use crate::kernel::waiters::Waiters;
use crate::options::LockOptions;

/// A Redlock distributed lock manager over N independent Redis masters.
///
/// Cheap to clone (an `Arc` inside): build it once at start-up with [`Redlock::builder`] and
/// share it. Every node has its own `fred` client, configured for locking: a per-command
/// timeout, no silent command re-sends, reconnection in the background.
///
/// ```no_run
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// use redlock_core::Redlock;
///
/// let redlock = Redlock::builder()
///     .nodes(["redis://10.0.0.1:6379", "redis://10.0.0.2:6379", "redis://10.0.0.3:6379"])
///     .build()
///     .await?;
/// let guard = redlock.lock("order:42").await?;
/// // ... work that must happen once at a time, within guard.remaining_validity() ...
/// guard.release().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Redlock {
    inner: Arc<Inner>,
}

/// What every clone of a handle shares.
pub(crate) struct Inner {
    pub(crate) masters: Arc<Masters>,
    pub(crate) defaults: LockOptions,
    key_prefix: String,
    /// The label stored beside each lock ([`RedlockBuilder::owner`](crate::RedlockBuilder::owner)).
    pub(crate) owner: Option<Arc<str>>,
    /// Every lease handed out and not yet released, and the auto-extension driver.
    pub(crate) ledger: Ledger,
    /// The runtime the handle was built on, which drives its node connections; background
    /// work (releases of dropped guards, clean-ups, queue exits) runs there.
    runtime: Option<tokio::runtime::Handle>,
    /// Pub/sub waiters and fair hand-over (`None` when the hand-over grace is zero).
    pub(crate) waiters: Option<Arc<Waiters>>,
    /// How long a released key stays reserved for the waiter it was handed to.
    pub(crate) handover_grace: Duration,
    /// Windows for foreign clients ([`RedlockBuilder::foreign_window`](crate::RedlockBuilder::foreign_window)):
    /// zero when off ([`RedlockBuilder::foreign_clients`](crate::RedlockBuilder::foreign_clients)
    /// `false`), and always zero without hand-over.
    pub(crate) foreign_window: Duration,
    /// The keys seen contended lately: a first attempt checks for a window only there.
    pub(crate) contended: crate::kernel::contended::Contended,
    pub(crate) shutdown: CancellationToken,
    pub(crate) tracker: TaskTracker,
}

impl std::fmt::Debug for Redlock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let masters = &self.inner.masters;
        f.debug_struct("Redlock")
            .field("nodes", &self.node_labels().collect::<Vec<_>>())
            .field("quorum", &masters.quorum)
            .field("key_prefix", &self.inner.key_prefix)
            .field("node_timeout", &masters.node_timeout)
            .field("defaults", &self.inner.defaults)
            .finish_non_exhaustive()
    }
}

/// What a handle is built from.
pub(crate) struct Parts {
    pub(crate) masters: Masters,
    pub(crate) defaults: LockOptions,
    pub(crate) key_prefix: String,
    /// The owner label ([`RedlockBuilder::owner`](crate::RedlockBuilder::owner)).
    pub(crate) owner: Option<Arc<str>>,
    pub(crate) handover_grace: Duration,
    /// Windows for foreign clients: zero when off (or without hand-over), at most
    /// [`MAX_FOREIGN_WINDOW`](crate::MAX_FOREIGN_WINDOW).
    pub(crate) foreign_window: Duration,
    /// The subscriptions that wake waiters; `None` when hand-over is off.
    pub(crate) waiters: Option<Arc<Waiters>>,
}

impl Redlock {
    pub(crate) fn from_parts(parts: Parts) -> Self {
        let Parts {
            masters,
            defaults,
            key_prefix,
            owner,
            handover_grace,
            foreign_window,
            waiters,
        } = parts;
        let runtime = tokio::runtime::Handle::try_current().ok();
        Self {
            inner: Arc::new(Inner {
                masters: Arc::new(masters),
                defaults,
                key_prefix,
                owner,
                ledger: Ledger::new(runtime.clone()),
                runtime,
                waiters,
                handover_grace,
                foreign_window,
                contended: crate::kernel::contended::Contended::default(),
                shutdown: CancellationToken::new(),
                tracker: TaskTracker::new(),
            }),
        }
    }

    pub(crate) fn inner(&self) -> &Inner {
        &self.inner
    }

    /// The masters this handle locks on.
    pub(crate) fn masters(&self) -> &Arc<Masters> {
        &self.inner.masters
    }

    /// The default options used by [`lock`](Self::lock).
    pub fn options(&self) -> &LockOptions {
        &self.inner.defaults
    }

    /// The number of nodes (N).
    pub fn node_count(&self) -> usize {
        self.inner.masters.len()
    }

    /// The nodes' labels (`host:port`), in order.
    pub fn node_labels(&self) -> impl Iterator<Item = &str> {
        self.inner.masters.nodes.iter().map(|n| &*n.label)
    }

    /// The number of nodes that must agree: `N / 2 + 1` (distlock spec, step 3).
    pub fn quorum(&self) -> usize {
        self.inner.masters.quorum
    }

    /// The number of nodes that must confirm a fencing token: the smallest F with
    /// `2F − N ≥ 2` (3 of 3, 3 of 4, 4 of 5, 5 of 7); see the crate docs, "Fencing tokens".
    pub fn fencing_quorum(&self) -> usize {
        self.inner.masters.fencing_quorum
    }

    /// This handle's identity for reentrancy: clones share it.
    pub(crate) fn id(&self) -> usize {
        Arc::as_ptr(&self.inner) as usize
    }

    /// The Redis key used for `resource`: the key prefix followed by the resource.
    pub fn key_for(&self, resource: &str) -> String {
        format!("{}{resource}", self.inner.key_prefix)
    }

    /// Every key of the lock key `key` ([`ResourceKeys`](crate::keys::ResourceKeys)).
    pub(crate) fn resource_keys(&self, key: String) -> crate::keys::ResourceKeys {
        crate::keys::ResourceKeys::new(&self.inner.key_prefix, key)
    }

    /// The keys of a semaphore of `permits` permits on the lock key `key`: its queue's, and
    /// its slots' ([`ResourceKeys::permits`](crate::keys::ResourceKeys::permits)).
    pub(crate) fn permit_keys(
        &self,
        key: String,
        permits: u32,
    ) -> (crate::keys::ResourceKeys, crate::keys::PermitSlots) {
        crate::keys::ResourceKeys::permits(&self.inner.key_prefix, key, permits)
    }

    /// Runs `work` in a tracked task ([`shutdown`](Self::shutdown) waits for it) on the
    /// runtime the handle was built on, where its node connections are driven: a guard
    /// dropped by a second runtime that is shutting down is still released by the first.
    /// Without that runtime, on the current one; `false` when there is none.
    pub(crate) fn spawn_background(&self, work: impl Future<Output = ()> + Send + 'static) -> bool {
        let handle = match &self.inner.runtime {
            Some(handle) => handle.clone(),
            None => match tokio::runtime::Handle::try_current() {
                Ok(handle) => handle,
                Err(_) => return false,
            },
        };
        self.inner.tracker.spawn_on(work, &handle);
        true
    }

    /// Refuses new acquisitions from now on ([`LockError::ShuttingDown`](crate::LockError));
    /// attempts waiting for a retry stop too. Locks already held stay held until released.
    pub fn begin_shutdown(&self) {
        self.inner.shutdown.cancel();
    }

    /// `true` once [`begin_shutdown`](Self::begin_shutdown) was called.
    pub fn is_shutting_down(&self) -> bool {
        self.inner.shutdown.is_cancelled()
    }

    /// Number of locks currently held through this handle (and its clones).
    pub fn held_count(&self) -> usize {
        self.inner.ledger.len()
    }
}
