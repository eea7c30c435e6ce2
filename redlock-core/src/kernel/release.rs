//! Release (distlock spec, "Releasing the lock"): compare-and-delete on every node at once,
//! decided at quorum, with the hand-over to waiters; the release of dropped guards in the
//! background; [`Redlock::release_all`] and graceful shutdown.

use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

use tracing::Instrument;

use crate::kernel::commands::{Handover, Releasing};
use crate::kernel::lease::Lease;
use crate::kernel::masters::Stop;
use crate::kernel::redlock::Redlock;
use crate::keys::ResourceKeys;
use crate::outcome::NodeVote;
use crate::telemetry;
use crate::token::Token;

/// How many times [`Redlock::release_all`] sends a release that fewer than a quorum answered.
pub(crate) const RELEASE_ROUNDS: usize = 3;

/// The result of releasing a lock on every node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Released {
    /// Nodes where our key was still there and was deleted (or, released before its
    /// [`lock_at_least_for`](crate::LockOptions::lock_at_least_for), set to expire at the end
    /// of the minimum hold).
    pub deleted: usize,
    /// Nodes that answered (deleted or not) before the release was decided: a release
    /// confirmed by a quorum does not wait for the other nodes, whose commands are already
    /// sent.
    pub answered: usize,
    /// Nodes in all.
    pub nodes: usize,
    /// Nodes needed for a majority.
    pub quorum: usize,
    /// `true` when another guard sharing the lock still holds it (the guard whose scope was
    /// re-entered, or another re-entry; [`LockGuard::scope`](crate::LockGuard::scope)): nothing
    /// was sent, the lock stays held.
    pub kept: bool,
}

/// A window for foreign clients opens once the key has been handed over for this many windows'
/// lengths without one (T = 9 W): under a continuous load of ours, at most a tenth of the
/// time goes to windows, used or not.
pub(crate) const FOREIGN_WINDOW_EVERY: u32 = 9;

impl Released {
    /// `true` if the lock was still held on a quorum when it was released (or is still held,
    /// when [`kept`](Self::kept)); `false` means it had expired (or been taken over) before
    /// the release.
    pub fn was_held(&self) -> bool {
        self.kept || self.deleted >= self.quorum
    }
}

impl Released {
    /// What a kept release reports: a re-entered guard whose lock another guard still holds.
    pub(crate) fn still_held(nodes: usize, quorum: usize) -> Self {
        Self {
            deleted: 0,
            answered: 0,
            nodes,
            quorum,
            kept: true,
        }
    }
}

/// What [`Redlock::release_all`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ReleaseAllReport {
    /// Locks whose release a quorum confirmed.
    pub released: Vec<String>,
    /// Locks whose release fewer than a quorum confirmed (they expire with their ttl).
    pub unconfirmed: Vec<String>,
}

impl Redlock {
    /// Releases `key` signed by `token` on every node at once (compare-and-delete), decided
    /// at quorum: it returns as soon as a quorum confirmed the delete (the other nodes'
    /// commands are already sent and land anyway), otherwise once every node answered or the
    /// node timeout passed, so that the report is exact when the lock was not fully held.
    ///
    /// A holder's plain key goes, with waking on, to the longest queued waiter (a failed
    /// attempt's key is just deleted), unless the key has been busy for
    /// [`FOREIGN_WINDOW_EVERY`] windows by the holder's count: then a release that finds a
    /// waiter opens a window for foreign clients instead
    /// (`RELEASE_HANDOVER`). A mode request removes only its own entry, and wakes
    /// the resource's waiters (`RELEASE_MODE`).
    pub(crate) async fn release_key(
        &self,
        keys: &ResourceKeys,
        token: &Token,
        releasing: Releasing<'_>,
        busy: Duration,
    ) -> Released {
        let inner = self.inner();
        // Rounded up: a grace under 1 ms is still a reservation (`PX 0` is an error).
        let millis =
            |d: Duration| u64::try_from(d.as_nanos().div_ceil(1_000_000)).unwrap_or(u64::MAX);
        let window = inner.foreign_window;
        let window_due = !window.is_zero() && busy >= window.saturating_mul(FOREIGN_WINDOW_EVERY);
        if window_due {
            // A window may open: this handle's next first attempt on the key checks for it.
            inner.contended.mark(&keys.lock);
        }
        let handover = inner.waiters.is_some().then(|| Handover {
            grace_ms: millis(inner.handover_grace),
            window_ms: millis(window),
            window_due,
            busy_ms: millis(busy),
        });
        let handover = handover.as_ref();
        let token = token.expose();
        self.release_round(|node| node.release(keys, token, releasing, handover))
            .await
    }

    /// One release round: `call` on every node at once (each call made before the round is
    /// polled, as [`Node::eval_release`](crate::node::Node::eval_release) does: the round
    /// returns at quorum, dropping the calls it has not polled yet, and a release must reach
    /// every node all the same), decided at quorum; `Ok(true)` from a node counts as deleted.
    pub(crate) async fn release_round<'a, F, Fut>(&'a self, call: F) -> Released
    where
        F: Fn(&'a crate::node::Node) -> Fut,
        Fut: Future<Output = Result<bool, crate::outcome::NodeError>>,
    {
        let masters = self.masters();
        let tally = masters
            .round(
                masters.quorum,
                masters.node_timeout,
                Stop::AtQuorum,
                |node| {
                    let answer = call(node);
                    async move {
                        let vote = match answer.await {
                            Ok(true) => NodeVote::Acquired,
                            Ok(false) => NodeVote::Held,
                            Err(e) => NodeVote::Failed(e),
                        };
                        (vote, ())
                    }
                },
            )
            .await;
        Released {
            deleted: tally.granted,
            answered: tally.granted + tally.refused,
            nodes: masters.len(),
            quorum: masters.quorum,
            kept: false,
        }
    }

    /// Releases a holder's lease on every node ([`release_key`](Self::release_key), waking
    /// the waiters; before its minimum hold, keeping the key until then), in its
    /// `redlock.release` span; `via` says who asked: `explicit`
    /// ([`LockGuard::release`](crate::LockGuard::release)), `drop` or `release_all`.
    pub(crate) async fn release_lease(&self, lease: &Lease, via: &'static str) -> Released {
        let keep = lease
            .keep_until
            .map(|until| until.saturating_duration_since(Instant::now()))
            .filter(|left| !left.is_zero());
        let releasing = match keep {
            // Released before its minimum hold: the key stays until then (rounded up, so
            // that it never ends early).
            Some(left) => Releasing::Keep {
                keep_ms: u64::try_from(left.as_nanos().div_ceil(1_000_000)).unwrap_or(u64::MAX),
            },
            None => Releasing::Holder {
                mode: lease.mode().is_some(),
                marker: lease.marker(),
            },
        };
        let span = telemetry::release_span(&lease.resource, &lease.class, via);
        // A permit's slot is a key of ours only: no foreign client polls it, so its release
        // never opens a window for one (it hands the slot over).
        let busy = match lease.permit() {
            Some(_) => Duration::ZERO,
            None => lease.busy(),
        };
        let released = if lease.also().is_empty() {
            self.release_key(&lease.keys, &lease.token, releasing, busy)
                .instrument(span.clone())
                .await
        } else {
            let mut keys = vec![lease.keys.clone()];
            keys.extend(lease.also().iter().map(|(_, keys)| keys.clone()));
            self.release_keys(&keys, &lease.token, true)
                .instrument(span.clone())
                .await
        };
        telemetry::released(&span, released.deleted, released.answered, released.quorum);
        released
    }

    /// Releases a lock of several resources, `keys` all signed by `token`, on every node at
    /// once (compare-and-delete on each key in one call per node), decided at quorum as
    /// [`release_key`](Self::release_key) is; with `wake`, each key's queued waiters are woken
    /// (nothing is handed over: a waiter of one resource attempts at once). A node counts as
    /// deleted when every key held our token there.
    pub(crate) async fn release_keys(
        &self,
        keys: &[ResourceKeys],
        token: &Token,
        wake: bool,
    ) -> Released {
        let token = token.expose();
        self.release_round(|node| node.release_many(keys, token, wake))
            .await
    }

    /// Releases a dropped guard's lease in the background ([`spawn_background`]); `false`
    /// where nothing can be sent. If the release never runs (no runtime, or the runtime shut
    /// down first), a warning says so: the lock then expires with its ttl.
    ///
    /// [`spawn_background`]: Self::spawn_background
    pub(crate) fn spawn_release(&self, lease: Arc<Lease>) -> bool {
        let redlock = self.clone();
        // Made before the task: a task dropped before its first poll reports too.
        let unsent = Unsent(Some(lease.resource.clone()));
        self.spawn_background(async move {
            let released = redlock.release_lease(&lease, "drop").await;
            unsent.sent();
            if released.answered < released.quorum {
                report_unconfirmed(&lease, released.answered, released.quorum);
            }
        })
    }

    /// Releases, by quorum compare-and-delete, every lock still held through this handle (every
    /// guard handed out and not yet released), and reports which
    /// releases a quorum confirmed. Their lost signals fire (reason
    /// [`LostReason::Released`](crate::LostReason::Released)), their auto-extension stops, and their guards become inert.
    ///
    /// A release that fewer than a quorum answered (a node timeout under load, a node
    /// briefly away) is sent again, up to 3 rounds in all, each bounded by
    /// the node timeout; a release is idempotent (a node that already deleted answers "not
    /// held"). Safe against a late holder: a release only deletes a key still signed by our
    /// token, so it can never delete a lock another process took after ours expired.
    ///
    /// # Cancel safety
    /// Every lease is retired, and its release handed to the nodes, at the first poll:
    /// dropping the future does not bring a lock back, and those releases still reach the
    /// nodes. A release a quorum did not confirm is then not tried again; its keys expire with
    /// their ttl.
    pub async fn release_all(&self) -> ReleaseAllReport {
        let mut pending = self.inner().ledger.retire_all();
        let mut report = ReleaseAllReport::default();
        // The leases fewer than a quorum answered in the last round, with how many did.
        let mut unconfirmed = Vec::new();
        for _ in 0..RELEASE_ROUNDS {
            let results = futures_util::future::join_all(pending.iter().map(|lease| async move {
                (lease, self.release_lease(lease, "release_all").await)
            }))
            .await;
            let mut again = Vec::new();
            for (lease, released) in results {
                if released.answered >= self.quorum() {
                    report.released.push(lease.resource.clone());
                } else {
                    again.push((Arc::clone(lease), released.answered));
                }
            }
            unconfirmed = again;
            if unconfirmed.is_empty() {
                break;
            }
            pending = unconfirmed
                .iter()
                .map(|(lease, _)| Arc::clone(lease))
                .collect();
        }
        for (lease, answered) in unconfirmed {
            report_unconfirmed(&lease, answered, self.quorum());
            report.unconfirmed.push(lease.resource.clone());
        }
        tracing::info!(
            released = report.released.len(),
            unconfirmed = report.unconfirmed.len(),
            "released all held locks"
        );
        report
    }

    /// Graceful shutdown: [`begin_shutdown`](Self::begin_shutdown), then
    /// [`release_all`](Self::release_all), then waits up to `timeout` for releases started by
    /// dropped guards to finish, and for every node to have answered every command sent to it
    /// (a release returns once a quorum confirmed it; the other nodes' commands are still on
    /// their way, and a process that exits at once could drop them, leaving the key there
    /// until its ttl). A `timeout` too long for the clock (`Duration::MAX`) is no limit.
    ///
    /// # Cancel safety
    /// Shutdown begins at the first poll and cannot be undone: dropping the future afterwards
    /// leaves the handle shutting down, with its locks' releases under way in the background,
    /// but no longer waits for them.
    pub async fn shutdown(&self, timeout: Duration) -> ReleaseAllReport {
        // `None`: no limit (tokio's timeout takes any duration, a far deadline as none).
        let deadline = Instant::now().checked_add(timeout);
        self.begin_shutdown();
        let report = self.release_all().await;
        self.inner().tracker.close();
        if tokio::time::timeout(timeout, self.inner().tracker.wait())
            .await
            .is_err()
        {
            tracing::warn!(?timeout, "background releases still running at shutdown");
        }
        let left = deadline.map_or(Duration::MAX, |deadline| {
            deadline.saturating_duration_since(Instant::now())
        });
        self.masters().flush(left).await;
        report
    }
}

/// Reports a holder's release that fewer than a quorum confirmed (after every round its
/// caller makes): a warning and, with the `metrics` feature, a count.
pub(crate) fn report_unconfirmed(lease: &Lease, answered: usize, quorum: usize) {
    telemetry::release_unconfirmed(&lease.resource, &lease.class, answered, quorum);
}

/// Warns, when dropped before [`sent`](Self::sent), that a dropped guard's release never ran:
/// there was no runtime, or it shut down first. Silence would hide a lock that stays until
/// its ttl.
struct Unsent(Option<String>);

impl Unsent {
    fn sent(mut self) {
        self.0 = None;
    }
}

impl Drop for Unsent {
    fn drop(&mut self) {
        if let Some(resource) = self.0.take() {
            tracing::warn!(
                resource,
                "the release of a dropped lock guard never ran (no tokio runtime, or it shut down first); the lock expires with its ttl"
            );
        }
    }
}
