//! Leader election on a resource: campaign (wait for the lock for as long as it takes), lead
//! while the lock is held (auto-extended), end the term when the lost signal fires, and
//! campaign again; until a shutdown signal. Watching who leads is
//! [`LeaderElection::watch`].

use std::future::Future;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::error::LockError;
use crate::kernel::lease::LockInfo;
use crate::kernel::redlock::Redlock;
use crate::options::LockOptions;

mod watch;

pub use watch::{Leader, LeaderWatch};

impl Redlock {
    /// A leader election on `resource` among every process that runs one on it (a
    /// *candidate* each): see [`LeaderElection`]. The lock is taken with this handle's default
    /// options, waiting forever and auto-extended; change them with
    /// [`LeaderElection::options`].
    pub fn leader_election(&self, resource: impl Into<String>) -> LeaderElection {
        LeaderElection {
            redlock: self.clone(),
            resource: resource.into(),
            options: self.options().clone(),
            shutdown: CancellationToken::new(),
        }
    }
}

/// One candidate of a leader election: at most one candidate leads at a time (its *term*),
/// for as long as it holds the lock on the resource.
///
/// [`run`](Self::run) loops: it *campaigns* (acquires the resource with
/// [`LockOptions::wait_forever`], so it waits however long the current leader leads), then
/// runs one *term*: the future the caller's closure returns for a [`Term`], while the lock is
/// auto-extended ([`LockOptions::auto_extend`]). The term ends, its [`Term::ended`] fires and
/// its future is dropped, when:
/// - the lock's [`LostSignal`](crate::LostSignal) fires (an extension was refused, the
///   validity ran out unextended, or the lock was released by
///   [`Redlock::release_all`]): leadership can no longer be trusted, so the term stops before
///   the lock's validity runs out, and the candidate campaigns again;
/// - the term's future completes: the candidate *steps down* (releases; the lock is handed
///   to a waiting candidate, if any) and campaigns again;
/// - the shutdown signal ([`with_shutdown`](Self::with_shutdown)) fires: the lock is released
///   and `run` returns.
///
/// Dropping the `run` future (an aborted task) drops the term and releases the lock in the
/// background, as any dropped guard does; a crashed process's lock expires with its ttl,
/// after which another candidate leads.
///
/// ```no_run
/// # async fn run(redlock: redlock_core::Redlock) -> Result<(), redlock_core::LockError> {
/// use std::time::Duration;
/// use redlock_core::LockOptions;
/// use tokio_util::sync::CancellationToken;
///
/// let shutdown = CancellationToken::new();
/// redlock
///     .leader_election("leader:scheduler")
///     .options(LockOptions::default().ttl(Duration::from_secs(10)))
///     .with_shutdown(shutdown.clone())
///     .run(|term| async move {
///         // Leading: the fencing token orders this term's writes after every earlier term's.
///         let _fence = term.fencing_token();
///         loop {
///             // the leader's work; dropped at an `.await` when the term ends
///             tokio::time::sleep(Duration::from_secs(1)).await;
///         }
///     })
///     .await?;
/// # Ok(()) }
/// ```
#[derive(Debug)]
#[must_use = "a leader election does nothing until `run` is awaited"]
pub struct LeaderElection {
    redlock: Redlock,
    resource: String,
    options: LockOptions,
    shutdown: CancellationToken,
}

/// How a term ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TermEnd {
    Lost,
    SteppedDown,
    Shutdown,
}

impl LeaderElection {
    /// The options the lock is taken with (default: the handle's): ttl, retry delays (the
    /// campaign's pace when no release wakes it), extension share, lost margin, fencing...
    /// `run` sets three of them whatever is given: [`wait_forever`](LockOptions::wait_forever),
    /// [`auto_extend`](LockOptions::auto_extend) and `reentrant(false)` (a candidate is always
    /// a holder of its own). [`max_hold`](LockOptions::max_hold) limits the length of a term:
    /// the lock then runs out, the term ends, and the candidate campaigns again. The lock is
    /// always the plain exclusive one: a shared mode would let several candidates lead.
    pub fn options(mut self, options: LockOptions) -> Self {
        self.options = options;
        self
    }

    /// Ends the election when `shutdown` is cancelled: a campaign stops, a term ends (its
    /// future is dropped), the lock is released, and [`run`](Self::run) returns `Ok(())`.
    /// [`Redlock::shutdown`] ends it too (it releases the lock, the term ends, and the next
    /// campaign is refused); [`Redlock::begin_shutdown`] alone ends a campaign, not a term.
    pub fn with_shutdown(mut self, shutdown: CancellationToken) -> Self {
        self.shutdown = shutdown;
        self
    }

    /// The election's shutdown signal (the one given to [`with_shutdown`](Self::with_shutdown),
    /// or its own): cancel it to end the election.
    pub fn shutdown_signal(&self) -> CancellationToken {
        self.shutdown.clone()
    }

    /// The resource campaigned for.
    pub fn resource(&self) -> &str {
        &self.resource
    }

    /// Who leads now: the label of the resource's holder
    /// ([`RedlockBuilder::owner`](crate::RedlockBuilder::owner)) when one holder holds the
    /// lock on a quorum of nodes with its label shown there
    /// ([`ResourceStatus::owner`](crate::ResourceStatus::owner): holders are told apart by
    /// their tokens, so candidates sharing one label that split the nodes are nobody); `None`
    /// when nobody leads, or the leader's handle has no label. A read of every node
    /// ([`Redlock::inspect`]), so any process can observe the election without campaigning:
    /// `redlock.leader_election("scheduler").leader().await?`. A snapshot: the leader may
    /// change right after.
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads.
    ///
    /// # Errors
    /// As [`Redlock::inspect`].
    pub async fn leader(&self) -> Result<Option<String>, LockError> {
        let status = self.redlock.inspect(&self.resource).await?;
        Ok(status.owner().map(str::to_owned))
    }

    /// Campaigns and leads until shutdown: see [`LeaderElection`]. `term` is called once per
    /// term with its [`Term`]; the future it returns is the leader's work.
    ///
    /// # Cancel safety
    /// Dropping the future (an aborted task) ends the campaign, or the term: the term's future is
    /// dropped, its [`Term::ended`] fires, and the lock is released in the background, as a dropped
    /// guard's is.
    ///
    /// # Errors
    /// The lock errors a wait without end can still return: [`LockError::Invalid`] (a bad
    /// resource or options, before anything is sent) and [`LockError::Entropy`] (no random
    /// token). A busy resource and unavailable nodes are waited out, never returned.
    pub async fn run<F, Fut>(self, mut term: F) -> Result<(), LockError>
    where
        F: FnMut(Term) -> Fut,
        Fut: Future<Output = ()>,
    {
        let resource = self.resource.as_str();
        let options = self
            .options
            .clone()
            .wait_forever()
            .auto_extend(true)
            .reentrant(false);
        if options.fencing {
            self.redlock
                .masters()
                .warn_if_fencing_needs_every_node("a fenced leader election");
        }
        let mut number = 0u64;
        loop {
            let campaign = self.redlock.lock_one(resource, None, &options);
            let guard = tokio::select! {
                biased;
                () = self.shutdown.cancelled() => return Ok(()),
                acquired = campaign => match acquired {
                    Ok(guard) => guard,
                    Err(LockError::ShuttingDown) => return Ok(()),
                    Err(error) => return Err(error),
                },
            };
            number += 1;
            let info = guard.info();
            tracing::info!(
                resource,
                term = number,
                fencing_token = info.fencing_token(),
                "leader: term begins"
            );
            // Cancelled when the term ends, however it ends (this future dropped included).
            let ended = self.shutdown.child_token();
            let _end_on_drop = ended.clone().drop_guard();
            let work = term(Term {
                number,
                info,
                ended: ended.clone(),
            });
            let end = tokio::select! {
                biased;
                () = self.shutdown.cancelled() => TermEnd::Shutdown,
                () = guard.lost() => TermEnd::Lost,
                () = work => TermEnd::SteppedDown,
            };
            // The term's future is gone (dropped by the select if unfinished).
            ended.cancel();
            match end {
                TermEnd::Lost => tracing::warn!(
                    resource,
                    term = number,
                    reason = guard.info().lost().reason().map(|r| r.to_string()),
                    "leader: lock lost, term ended; campaigning again"
                ),
                TermEnd::SteppedDown => {
                    tracing::info!(resource, term = number, "leader: term over, stepping down");
                }
                TermEnd::Shutdown => tracing::info!(resource, term = number, "leader: shutdown"),
            }
            // A lost lock is released too: its keys may remain on a minority of nodes.
            if let Err(error) = guard.release().await {
                tracing::debug!(resource, term = number, %error, "leader: release after the term");
            }
            if end == TermEnd::Shutdown {
                return Ok(());
            }
        }
    }
}

/// One term of a leader: the lock it leads by, and the signal of the term's end. Cheap to
/// clone.
///
/// The term's future is dropped when the term ends, so work it awaits stops at its next
/// `.await`. Work it hands to other tasks does not: give them [`cancellation`](Self::cancellation)
/// and stop them when it fires.
#[derive(Debug, Clone)]
pub struct Term {
    number: u64,
    info: LockInfo,
    ended: CancellationToken,
}

impl Term {
    /// This candidate's count of terms, from 1.
    pub fn number(&self) -> u64 {
        self.number
    }

    /// The lock held for this term: resource, validity, lost signal.
    pub fn info(&self) -> &LockInfo {
        &self.info
    }

    /// The lock's fencing token, with [`LockOptions::fencing`]: every term's token is above
    /// every earlier term's, across candidates. Hand it to the storage the leader writes to.
    pub fn fencing_token(&self) -> Option<u64> {
        self.info.fencing_token()
    }

    /// The validity the lock has left now (moved forward by each extension).
    pub fn remaining_validity(&self) -> Duration {
        self.info.remaining_validity()
    }

    /// Completes when the term has ended (lost, stepped down, shutdown, or the election's
    /// future dropped).
    ///
    /// # Cancel safety
    /// Cancel safe: it only waits for the signal.
    pub async fn ended(&self) {
        self.ended.cancelled().await;
    }

    /// `true` once the term has ended.
    pub fn is_ended(&self) -> bool {
        self.ended.is_cancelled()
    }

    /// A cancellation token that is cancelled when the term ends: hand it to tasks the term
    /// spawns, which the end of the term does not drop.
    pub fn cancellation(&self) -> CancellationToken {
        self.ended.child_token()
    }
}
