//! [`LeaderElection::watch`]: who leads, as it changes. Each read is [`Redlock::inspect`];
//! a release published on the resource's hand-over channel starts a short run of quick
//! reads, and a poll reads anyway, so that a message lost (or never sent) delays a change by
//! at most the poll interval.

use std::time::Duration;

use futures_util::Stream;
use tokio::time::Instant;

use crate::admin::inspect::{Holder, ResourceStatus};
use crate::error::LockError;
use crate::kernel::redlock::Redlock;
use crate::kernel::waiters::Listener;
use crate::keys::validate_resource;

use super::LeaderElection;

/// The first quick read after a release message; each next one waits twice as long.
const FIRST_QUICK_READ: Duration = Duration::from_millis(5);

/// The next read while a hand-over is in progress (its reservation lasts the hand-over grace).
const HANDOVER_READ: Duration = Duration::from_millis(10);

/// The leader of an election, as [`LeaderWatch`] sees it: one holder of the resource's lock
/// on a quorum of nodes, for one term.
///
/// Two `Leader`s are equal when they are the same term of the same holder: holders are told
/// apart by their tokens (a digest read on each node, never the token), so a candidate
/// that leads again, in a new term, is a new `Leader` with the same
/// [`owner`](Self::owner).
///
/// A holder's label may be written beside its grant a moment after it (any grant but an
/// uncontended first attempt's, a term won after waiting included): a term read before its
/// label shows is read again for up to the handle's node timeout, and reported without a
/// label only if none shows by then (a leader whose handle has no label).
#[derive(Clone)]
pub struct Leader {
    digest: String,
    owner: Option<String>,
}

impl Leader {
    /// The leader's label ([`RedlockBuilder::owner`](crate::RedlockBuilder::owner)); `None`
    /// when its handle has none.
    pub fn owner(&self) -> Option<&str> {
        self.owner.as_deref()
    }
}

impl PartialEq for Leader {
    fn eq(&self, other: &Self) -> bool {
        self.digest == other.digest
    }
}

impl Eq for Leader {}

impl std::fmt::Debug for Leader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Leader")
            .field("owner", &self.owner)
            .finish_non_exhaustive()
    }
}

/// What one read of every node says about the election.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Seen {
    /// A leader, or nobody (`None`).
    Known(Option<Leader>),
    /// A hand-over is in progress: the next term is read again soon.
    HandingOver,
    /// Too few nodes answered to tell: fewer than a quorum, or the silent ones could hold a
    /// quorum for a holder some of the others show.
    Unknown,
}

impl Seen {
    fn of(status: &ResourceStatus) -> Self {
        if status.answered() < status.quorum {
            return Self::Unknown;
        }
        if let Some((digest, owner)) = status.plain_holder() {
            return Self::Known(Some(Leader {
                digest: digest.to_owned(),
                owner: owner.map(str::to_owned),
            }));
        }
        let handing_over = status.nodes.iter().any(|n| {
            n.read
                .as_ref()
                .is_ok_and(|r| matches!(r.holder, Holder::Reserved))
        });
        if handing_over {
            Self::HandingOver
        } else if status.may_have_plain_holder() {
            // The nodes that did not answer could complete a holder's quorum: not "nobody".
            Self::Unknown
        } else {
            Self::Known(None)
        }
    }
}

impl LeaderElection {
    /// Watches who leads: [`LeaderWatch::changed`] returns the leader now, then each change
    /// (a new term, or nobody leading), as etcd's `Observe` and client-go's `OnNewLeader`
    /// do. Any process can watch without campaigning.
    ///
    /// A change is seen from the resource's hand-over channel when a candidate waits for the
    /// lock (a release is published there, and the next term is read at once), and from a
    /// poll otherwise (a leader stepping down with nobody waiting, a lock that expired
    /// because its leader died or was cut off, a lost message): at most one
    /// [`poll_interval`](LeaderWatch::poll_interval) late. A handle built with hand-over off
    /// ([`RedlockBuilder::handover_grace`](crate::RedlockBuilder::handover_grace) of zero)
    /// joins no channel: every change is seen by the poll. The interval is the election's
    /// [retry delay](crate::LockOptions::retry_delay), the pace of its campaigns, by default.
    ///
    /// ```no_run
    /// # async fn run(redlock: redlock_core::Redlock) -> Result<(), redlock_core::LockError> {
    /// let mut leaders = redlock.leader_election("leader:scheduler").watch();
    /// loop {
    ///     match leaders.changed().await? {
    ///         Some(leader) => println!("led by {:?}", leader.owner()),
    ///         None => println!("nobody leads"),
    ///     }
    /// }
    /// # }
    /// ```
    pub fn watch(&self) -> LeaderWatch {
        LeaderWatch {
            redlock: self.redlock.clone(),
            resource: self.resource.clone(),
            poll: self.options.retry_delay,
            listener: None,
            subscribed: false,
            last: None,
            quick_until: None,
            quick_step: FIRST_QUICK_READ,
            unlabelled: None,
        }
    }
}

/// Who leads an election, as it changes: see [`LeaderElection::watch`]. Reads only; it
/// takes no lock.
#[must_use = "a watch reads nothing until `changed` is awaited"]
pub struct LeaderWatch {
    redlock: Redlock,
    resource: String,
    poll: Duration,
    /// The resource's hand-over channel, joined at the first `changed`.
    listener: Option<Listener>,
    subscribed: bool,
    /// What `changed` returned last; `None` before its first call.
    last: Option<Option<Leader>>,
    /// After a release message: read again quickly until then.
    quick_until: Option<Instant>,
    quick_step: Duration,
    /// A new term read without a label, and since when.
    unlabelled: Option<(String, Instant)>,
}

impl std::fmt::Debug for LeaderWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeaderWatch")
            .field("resource", &self.resource)
            .field("poll_interval", &self.poll)
            .field("leader", &self.last)
            .finish_non_exhaustive()
    }
}

impl LeaderWatch {
    /// How long a change may go unseen when no message tells of it: the nodes are read at
    /// least this often (at least every millisecond: zero is taken as 1 ms). Shorter costs
    /// one read of every node each time.
    pub fn poll_interval(mut self, interval: Duration) -> Self {
        self.poll = interval.max(Duration::from_millis(1));
        self
    }

    /// The leader `changed` returned last: `None` before its first call, `Some(None)` when
    /// nobody led.
    pub fn leader(&self) -> Option<Option<&Leader>> {
        self.last.as_ref().map(Option::as_ref)
    }

    /// The leader now at the first call; then waits for the next change and returns it:
    /// `Some` with the new term's leader, or `None` when nobody leads (the lock released
    /// with no candidate waiting, or expired). A read that fewer than a quorum of nodes
    /// answer, or that finds a hand-over in progress, tells nothing: the wait goes on.
    ///
    /// # Cancel safety
    /// Cancel safe: a leader is recorded as seen only when a call returns it, so a change a
    /// cancelled call had read is returned by the next call.
    ///
    /// # Errors
    /// [`LockError::Invalid`] for a resource that is empty, too long or holds a NUL byte
    /// (nothing is sent); [`LockError::ShuttingDown`] once the handle shuts down
    /// ([`Redlock::shutdown`]).
    pub async fn changed(&mut self) -> Result<Option<Leader>, LockError> {
        validate_resource(&self.resource)?;
        self.subscribe().await;
        let shutdown = self.redlock.inner().shutdown.clone();
        loop {
            if shutdown.is_cancelled() {
                return Err(LockError::ShuttingDown);
            }
            let status = self.redlock.inspect(&self.resource).await?;
            let seen = Seen::of(&status);
            let wait = match seen {
                Seen::Known(Some(leader))
                    if leader.owner.is_none() && self.awaits_label(&leader) =>
                {
                    HANDOVER_READ
                }
                Seen::Known(now) if self.last.as_ref() != Some(&now) => {
                    self.last = Some(now.clone());
                    return Ok(now);
                }
                Seen::Known(_) | Seen::Unknown => self.next_read(),
                Seen::HandingOver => self.next_read().min(HANDOVER_READ),
            };
            let message = async {
                match self.listener.as_mut() {
                    Some(listener) => listener.message().await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                biased;
                () = shutdown.cancelled() => return Err(LockError::ShuttingDown),
                () = message => {
                    // A release on one node: the next term is granted within the hand-over
                    // grace and a round trip; read it quickly until then.
                    let masters = self.redlock.masters();
                    let quick = 2 * (self.redlock.inner().handover_grace + masters.node_timeout);
                    self.quick_until = Some(Instant::now() + quick);
                    self.quick_step = FIRST_QUICK_READ;
                }
                () = tokio::time::sleep(wait) => {}
            }
        }
    }

    /// The watch as a stream: each item is what [`changed`](Self::changed) returns; it ends
    /// after an error.
    pub fn into_stream(self) -> impl Stream<Item = Result<Option<Leader>, LockError>> + Send {
        futures_util::stream::unfold(Some(self), |watch| async move {
            let mut watch = watch?;
            match watch.changed().await {
                Ok(leader) => Some((Ok(leader), Some(watch))),
                Err(error) => Some((Err(error), None)),
            }
        })
    }

    /// Joins the resource's hand-over channel, once (without hand-over, the poll alone).
    async fn subscribe(&mut self) {
        if self.subscribed {
            return;
        }
        if let Some(waiters) = &self.redlock.inner().waiters {
            let keys = self
                .redlock
                .resource_keys(self.redlock.key_for(&self.resource));
            self.listener = Some(waiters.join(keys.waiters()).await);
        }
        self.subscribed = true;
    }

    /// Whether to read `leader`, a new term without a label on any node, again before
    /// reporting it: for the node timeout since it was first read so (its label is written a
    /// moment after its grant).
    fn awaits_label(&mut self, leader: &Leader) -> bool {
        if self
            .last
            .as_ref()
            .is_some_and(|last| last.as_ref() == Some(leader))
        {
            return false;
        }
        let now = Instant::now();
        let since = match &self.unlabelled {
            Some((digest, since)) if *digest == leader.digest => *since,
            _ => {
                self.unlabelled = Some((leader.digest.clone(), now));
                now
            }
        };
        now.duration_since(since) < self.redlock.masters().node_timeout
    }

    /// How long until the next read: the poll interval, or the next quick read while the
    /// quick reads after a release message last.
    fn next_read(&mut self) -> Duration {
        match self.quick_until {
            Some(until) if Instant::now() < until => {
                let step = self.quick_step;
                self.quick_step = (step * 2).min(self.poll);
                step.min(self.poll)
            }
            _ => {
                self.quick_until = None;
                self.poll
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admin::inspect::tests::status_of;

    #[test]
    fn nobody_leads_only_when_the_silent_nodes_could_not_make_a_leaders_quorum() {
        let (a, silent) = (Some(("aaaa", Some("web-1"))), Some(("-", None)));
        let leader = Seen::Known(Some(Leader {
            digest: "aaaa".to_owned(),
            owner: Some("web-1".to_owned()),
        }));
        assert_eq!(Seen::of(&status_of(&[a, a, a, None, silent])), leader);
        // 2 of 5 show a holder and 2 are silent: it may lead.
        assert_eq!(
            Seen::of(&status_of(&[a, a, None, silent, silent])),
            Seen::Unknown
        );
        assert_eq!(
            Seen::of(&status_of(&[a, a, None, None, silent])),
            Seen::Unknown
        );
        assert_eq!(
            Seen::of(&status_of(&[a, None, None, None, silent])),
            Seen::Known(None)
        );
        assert_eq!(
            Seen::of(&status_of(&[a, silent, silent, silent, None])),
            Seen::Unknown
        );
    }
}
