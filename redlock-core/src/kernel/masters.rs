//! The masters: the N independent nodes, the quorum, the per-node time limit and the
//! quarantine, and the one round every step of the algorithm runs on them (acquisition,
//! fencing, extension, release): a call to every node at once, decided at quorum, stopping as
//! soon as a majority agreed or can no longer agree (distlock spec, steps 2–3; node-redlock's
//! early return).

use std::future::{Future, poll_fn};
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use crate::error::InvalidInput;
use crate::kernel::commands::QuarantineCheck;
use crate::kernel::deadlines::Deadlines;
use crate::node::Node;
use crate::outcome::{NodeError, NodeOutcome, NodeVote, Outcomes};
use crate::timing;

/// A fencing counter ttl at least this long (2^53 ms, about 285,000 years; the fence script
/// reads the ttl as a Lua number, exact below it) means counters never expire.
const NEVER_EXPIRE: Duration = Duration::from_millis(1 << 53);

/// The N independent masters a lock is taken on, and what every round on them needs.
pub(crate) struct Masters {
    pub(crate) nodes: Vec<Node>,
    /// Nodes that must agree: `N / 2 + 1` ([`timing::quorum`]).
    pub(crate) quorum: usize,
    /// Confirmations a fencing token needs ([`timing::fencing_quorum`]).
    pub(crate) fencing_quorum: usize,
    /// The longest wait for one node in a round.
    pub(crate) node_timeout: Duration,
    /// Restarted nodes grant nothing for this long
    /// ([`RedlockBuilder::quarantine`](crate::RedlockBuilder::quarantine)); zero when off.
    quarantine: Duration,
    /// What the acquire scripts' quarantine check needs.
    pub(crate) quarantine_check: QuarantineCheck,
    /// How long a resource's fencing counter lives:
    /// [`RedlockBuilder::fencing_counter_ttl`](crate::RedlockBuilder::fencing_counter_ttl)
    /// in ms, rounded up; 0: counters never expire.
    pub(crate) fencing_counter_ttl_ms: u64,
    /// The time limits of the rounds in flight: one timer for all of them.
    deadlines: Deadlines,
}

impl Masters {
    /// The masters `nodes`, each command bounded by `node_timeout`, nodes that may have lost
    /// data quarantined for `quarantine` (zero: off), fencing counters kept for
    /// `fencing_counter_ttl`, with the quarantine's keys under `key_prefix`.
    pub(crate) fn new(
        nodes: Vec<Node>,
        node_timeout: Duration,
        quarantine: Duration,
        fencing_counter_ttl: Duration,
        key_prefix: &str,
    ) -> Self {
        Self {
            quorum: timing::quorum(nodes.len()),
            fencing_quorum: timing::fencing_quorum(nodes.len()),
            nodes,
            node_timeout,
            quarantine,
            quarantine_check: QuarantineCheck {
                // Rounded up: the quarantine is never shorter than asked.
                ms: u64::try_from(quarantine.as_nanos().div_ceil(1_000_000)).unwrap_or(u64::MAX),
                witness: crate::keys::witness(key_prefix),
                marker: crate::keys::quarantine_marker(key_prefix),
            },
            deadlines: Deadlines::start(),
            fencing_counter_ttl_ms: if fencing_counter_ttl >= NEVER_EXPIRE {
                0
            } else {
                // Rounded up: a counter never lives shorter than asked (nor 0 ms).
                u64::try_from(fencing_counter_ttl.as_nanos().div_ceil(1_000_000))
                    .unwrap_or(u64::MAX)
                    .max(1)
            },
        }
    }

    /// With the quarantine on, runs its check on every node at once, each within the node
    /// timeout, and waits for them: a node whose data witness is missing or another
    /// server's starts its quarantine now, when the handle is built, rather than at its
    /// first acquisition. Best effort: a node that does not answer (or refuses `INFO`) is
    /// checked by every acquisition anyway.
    pub(crate) async fn start_quarantine(&self) {
        if self.quarantine_check.ms == 0 {
            return;
        }
        let checks = self.nodes.iter().map(|node| async {
            let check = node.check_quarantine(&self.quarantine_check);
            match tokio::time::timeout(self.node_timeout, check).await {
                Ok(Ok(true)) => {
                    tracing::info!(node = %node.label, "node in quarantine: it may have lost data (restarted, flushed or re-synced, or never seen with the quarantine on)");
                }
                Ok(Ok(false)) => {}
                Ok(Err(error)) => {
                    tracing::debug!(node = %node.label, error = error.detailed(), "could not run the quarantine check at start-up");
                }
                Err(_) => {
                    tracing::debug!(node = %node.label, "the quarantine check at start-up timed out");
                }
            }
        });
        futures_util::future::join_all(checks).await;
    }

    /// N.
    pub(crate) fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Whether a fencing token needs every node while the lock itself needs fewer (3 nodes:
    /// 3 of 3 against 2 of 3): then one node down stops every fenced lock, and nothing else
    /// says so. Logs a WARN naming `what` (the fenced lock's user) when it does.
    pub(crate) fn warn_if_fencing_needs_every_node(&self, what: &str) {
        if self.fencing_quorum == self.len() && self.fencing_quorum > self.quorum {
            tracing::warn!(
                nodes = self.len(),
                fencing_quorum = self.fencing_quorum,
                "{what}: a fencing token needs all {} nodes to confirm it (a lock needs {}), so with one node down no fenced lock is granted; use 5 nodes or more for fencing, or turn it off",
                self.len(),
                self.quorum,
            );
        }
    }

    /// Refuses a ttl the node quarantine does not cover (see
    /// [`RedlockBuilder::quarantine`](crate::RedlockBuilder::quarantine)).
    pub(crate) fn check_quarantine(&self, ttl: Duration) -> Result<(), InvalidInput> {
        let quarantine = self.quarantine;
        if quarantine.is_zero() || ttl <= quarantine {
            return Ok(());
        }
        Err(InvalidInput::TtlAboveQuarantine { ttl, quarantine })
    }

    /// One round: `call` on every node at once, within `limit` for the whole round, decided
    /// when `needed` nodes voted [`NodeVote::Acquired`] or as `stop` says ([`decide`]).
    pub(crate) async fn round<'a, T, F, Fut>(
        &'a self,
        needed: usize,
        limit: Duration,
        stop: Stop,
        call: F,
    ) -> Tally<T>
    where
        F: Fn(&'a Node) -> Fut,
        Fut: Future<Output = (NodeVote, T)>,
    {
        let calls = self.nodes.iter().enumerate().map(|(i, node)| {
            let answer = call(node);
            // A node with a limit of its own below the round's is cut there; the others
            // share the round's one timer.
            let own = (node.timeout < limit).then_some(node.timeout);
            async move {
                let answered = match own {
                    None => Some(answer.await),
                    Some(own) => tokio::time::timeout(own, answer).await.ok(),
                };
                match answered {
                    Some((vote, datum)) => (i, vote, Some(datum)),
                    None => (
                        i,
                        NodeVote::Failed(NodeError::Timeout(own.unwrap_or(limit))),
                        None,
                    ),
                }
            }
        });
        let expiry = self.deadlines.after(limit);
        let tally = decide(self.nodes.len(), needed, (limit, expiry), stop, calls).await;
        Tally {
            votes: tally.votes,
            counters: tally.counters.into_iter().map(Option::flatten).collect(),
            granted: tally.granted,
            refused: tally.refused,
        }
    }

    /// Waits, up to `limit`, until every node has answered every call sent to it so far
    /// ([`Node::flush`]): the calls a round left behind at its decision, such as the
    /// releases of the nodes a quorum did not wait for.
    pub(crate) async fn flush(&self, limit: Duration) {
        let flushes = self
            .nodes
            .iter()
            .map(|node| tokio::time::timeout(limit, node.flush()));
        futures_util::future::join_all(flushes).await;
    }

    /// A round's votes with their nodes' labels.
    pub(crate) fn outcomes(&self, votes: Vec<NodeVote>) -> Outcomes {
        Outcomes::new(
            self.nodes
                .iter()
                .zip(votes)
                .map(|(node, vote)| NodeOutcome {
                    node: node.label.to_string(),
                    vote,
                    holder_ttl: None,
                })
                .collect(),
        )
    }

    /// A grant round's outcomes: [`outcomes`](Self::outcomes) of its `votes`, with each
    /// refusing node's holder ttl (the middle of its counter: the holder's time left there,
    /// in ms).
    pub(crate) fn grant_outcomes<A, B>(
        &self,
        votes: Vec<NodeVote>,
        counters: &[Option<(A, Option<u64>, B)>],
    ) -> Outcomes {
        let mut outcomes = self.outcomes(votes);
        outcomes.set_holder_ttls(counters.iter().map(|c| {
            c.as_ref()
                .and_then(|(_, left, _)| *left)
                .map(Duration::from_millis)
        }));
        outcomes
    }
}

/// One round's answers, as far as they were awaited.
pub(crate) struct Tally<T> {
    /// Each node's vote; [`NodeVote::Undecided`] if the round was decided before it answered.
    pub(crate) votes: Vec<NodeVote>,
    /// Each answering node's extra datum (e.g. a fencing counter).
    pub(crate) counters: Vec<Option<T>>,
    /// Nodes that voted [`NodeVote::Acquired`].
    pub(crate) granted: usize,
    /// Nodes that voted [`NodeVote::Held`].
    pub(crate) refused: usize,
}

/// When a round may stop before every node has answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stop {
    /// As soon as enough granted, or too many did not for that to be possible:
    /// acquisition, extension, fencing.
    AtDecision,
    /// As soon as enough granted; otherwise every node is awaited so that the report says
    /// exactly what each did: release.
    AtQuorum,
}

/// Awaits `calls` (one per node, yielding `(node index, vote, datum)`) within one time limit
/// for the whole round (`limit`, which `expiry` completes at), until `needed` nodes granted, or the round is decided by `stop`. Nodes that have not answered
/// when the limit passes vote [`NodeVote::Failed`] with [`NodeError::Timeout`]; nodes left
/// unawaited after an early decision stay [`NodeVote::Undecided`].
///
/// One timer per round, not one per command (and every round's limit is an entry of the
/// handle's [`Deadlines`], which one task fires). Calls still running are dropped, but their
/// commands were already handed to the node's client on the first poll: they land anyway,
/// which every caller accounts for (a failed attempt releases on every node, in order after
/// its `SET`: the same client's connection, and the `SET` handed over first). A release's calls are finished by the node's
/// pipeline task (`Node::eval_release`), so that a `NOSCRIPT` answered after the decision
/// is still followed by its `EVAL`.
pub(crate) async fn decide<T, F>(
    n: usize,
    needed: usize,
    (limit, expiry): (Duration, impl Future<Output = ()>),
    stop: Stop,
    calls: impl IntoIterator<Item = F>,
) -> Tally<T>
where
    F: Future<Output = (usize, NodeVote, T)>,
{
    // A round has a handful of calls (one per node): each wake-up polls those still open, in
    // node order, which costs less than a set with a waker of its own per call, and a round
    // decided early never polls the calls after.
    let mut pending: Vec<Option<Pin<Box<F>>>> =
        calls.into_iter().map(|call| Some(Box::pin(call))).collect();
    let mut tally = Tally {
        votes: vec![NodeVote::Undecided; n],
        counters: (0..n).map(|_| None).collect(),
        granted: 0,
        refused: 0,
    };
    let timer = expiry;
    tokio::pin!(timer);
    let mut against = 0;
    loop {
        let next = poll_fn(|cx| match next_answer(&mut pending, cx) {
            Poll::Pending => timer.as_mut().poll(cx).map(|()| None),
            answered => answered.map(Some),
        })
        .await;
        let (i, vote, datum) = match next {
            Some(Some(answer)) => answer,
            // Every call answered.
            Some(None) => break,
            // The limit passed.
            None => {
                for vote in &mut tally.votes {
                    if *vote == NodeVote::Undecided {
                        *vote = NodeVote::Failed(NodeError::Timeout(limit));
                    }
                }
                break;
            }
        };
        match vote {
            NodeVote::Acquired => tally.granted += 1,
            NodeVote::Held => {
                tally.refused += 1;
                against += 1;
            }
            _ => against += 1,
        }
        if !matches!(vote, NodeVote::Failed(_)) {
            tally.counters[i] = Some(datum);
        }
        tally.votes[i] = vote;
        if tally.granted >= needed
            || (stop == Stop::AtDecision && against > n.saturating_sub(needed))
        {
            break;
        }
    }
    tally
}

/// The first of `calls` (in order) that is ready, its slot emptied; `Ready(None)` once every
/// slot is empty; `Pending` while those left are (each to wake the round through `cx`).
fn next_answer<F: Future>(
    calls: &mut [Option<Pin<Box<F>>>],
    cx: &mut Context<'_>,
) -> Poll<Option<F::Output>> {
    let mut open = false;
    for slot in calls.iter_mut() {
        let Some(call) = slot else {
            continue;
        };
        if let Poll::Ready(answer) = call.as_mut().poll(cx) {
            *slot = None;
            return Poll::Ready(Some(answer));
        }
        open = true;
    }
    if open {
        Poll::Pending
    } else {
        Poll::Ready(None)
    }
}

#[cfg(test)]
mod tests {
    use std::future::{Future, pending, ready};
    use std::pin::Pin;

    use super::*;

    type Call = Pin<Box<dyn Future<Output = (usize, NodeVote, u64)>>>;

    /// Node `i` answers `vote` at once, or never (`None`).
    fn calls(votes: Vec<Option<NodeVote>>) -> Vec<Call> {
        votes
            .into_iter()
            .enumerate()
            .map(|(i, vote)| -> Call {
                match vote {
                    Some(vote) => Box::pin(ready((i, vote, i as u64))),
                    None => Box::pin(pending()),
                }
            })
            .collect()
    }

    /// [`decide`] with a tokio timer of `limit`.
    async fn decide_within<F: Future<Output = (usize, NodeVote, u64)>>(
        n: usize,
        needed: usize,
        limit: Duration,
        stop: Stop,
        calls: Vec<F>,
    ) -> Tally<u64> {
        decide(n, needed, (limit, tokio::time::sleep(limit)), stop, calls).await
    }

    const LIMIT: Duration = Duration::from_millis(20);
    const YES: Option<NodeVote> = Some(NodeVote::Acquired);
    const NO: Option<NodeVote> = Some(NodeVote::Held);

    /// The premise of making each release before its round is polled
    /// (`Node::release`): answers that are ready at a call's first poll (a caller thread
    /// descheduled between sending and awaiting, on a loaded machine) decide a round at quorum
    /// before the later nodes' calls are ever polled. Work done on the first poll of those
    /// calls would never happen.
    #[tokio::test]
    async fn a_round_can_decide_before_polling_every_call() {
        let polled = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = polled.clone();
        let mut all = calls(vec![YES, YES]);
        all.push(Box::pin(async move {
            flag.store(true, std::sync::atomic::Ordering::SeqCst);
            pending::<()>().await;
            (2, NodeVote::Acquired, 2)
        }));
        let tally = decide_within(3, 2, LIMIT, Stop::AtQuorum, all).await;
        assert_eq!(tally.granted, 2);
        assert_eq!(tally.votes[2], NodeVote::Undecided);
        assert!(!polled.load(std::sync::atomic::Ordering::SeqCst));
    }

    /// A round's limit from the handle's deadlines: a node that never answers is timed out
    /// at the limit, not waited for.
    #[tokio::test(start_paused = true)]
    async fn a_node_that_never_answers_is_timed_out_at_the_rounds_limit() {
        let deadlines = crate::kernel::deadlines::Deadlines::start();
        let started = tokio::time::Instant::now();
        let expiry = deadlines.after(LIMIT);
        let tally = decide(
            3,
            2,
            (LIMIT, expiry),
            Stop::AtQuorum,
            calls(vec![YES, None, None]),
        )
        .await;
        assert_eq!(started.elapsed(), LIMIT);
        assert_eq!(tally.granted, 1);
        assert_eq!(tally.votes[1], NodeVote::Failed(NodeError::Timeout(LIMIT)));
    }

    #[tokio::test]
    async fn a_round_stops_as_soon_as_a_quorum_granted() {
        // Nodes 3 and 4 never answer: a quorum of 3 of 5 is enough, no timeout is waited for.
        let started = tokio::time::Instant::now();
        let tally = decide_within(
            5,
            3,
            Duration::from_secs(30),
            Stop::AtDecision,
            calls(vec![YES, NO, YES, YES, None]),
        )
        .await;
        assert!(started.elapsed() < Duration::from_secs(5));
        assert_eq!((tally.granted, tally.refused), (3, 1));
        assert_eq!(tally.votes[4], NodeVote::Undecided);
        assert_eq!(tally.counters[2], Some(2));
        assert_eq!(tally.counters[4], None);
    }

    #[tokio::test]
    async fn a_round_stops_once_a_quorum_is_out_of_reach() {
        // 3 refusals of 5: 3 grants are no longer possible; decided at once, not at the limit.
        let started = tokio::time::Instant::now();
        let tally = decide_within(
            5,
            3,
            Duration::from_secs(30),
            Stop::AtDecision,
            calls(vec![NO, NO, None, NO, None]),
        )
        .await;
        assert_eq!((tally.granted, tally.refused), (0, 3));
        assert!(started.elapsed() < Duration::from_secs(5));
        // Two refusals are not enough to decide: it waits for the limit.
        let tally = decide_within(
            5,
            3,
            LIMIT,
            Stop::AtDecision,
            calls(vec![NO, NO, YES, None, None]),
        )
        .await;
        assert_eq!((tally.granted, tally.refused), (1, 2));
        assert_eq!(tally.votes[3], NodeVote::Failed(NodeError::Timeout(LIMIT)));
    }

    #[tokio::test]
    async fn a_release_round_waits_for_every_node_unless_a_quorum_granted() {
        // At quorum: 3 refusals do not stop it, the timeout does, and every node's vote is
        // known or timed out (none left undecided).
        let tally = decide_within(
            5,
            3,
            LIMIT,
            Stop::AtQuorum,
            calls(vec![NO, NO, NO, YES, None]),
        )
        .await;
        assert_eq!((tally.granted, tally.refused), (1, 3));
        assert!(tally.votes.iter().all(|v| *v != NodeVote::Undecided));
    }

    #[tokio::test]
    async fn failures_count_against_and_keep_no_datum() {
        let failed = Some(NodeVote::Failed(NodeError::Disconnected));
        let started = tokio::time::Instant::now();
        let tally = decide_within(
            3,
            2,
            Duration::from_secs(30),
            Stop::AtDecision,
            calls(vec![failed.clone(), failed, None]),
        )
        .await;
        assert_eq!((tally.granted, tally.refused), (0, 0));
        assert_eq!(tally.counters, vec![None, None, None]);
        assert!(started.elapsed() < Duration::from_secs(5));
        // A fencing quorum (4 of 5) is out of reach after two refusals: decided at once.
        let started = tokio::time::Instant::now();
        let tally = decide_within(
            5,
            4,
            Duration::from_secs(30),
            Stop::AtDecision,
            calls(vec![YES, NO, YES, NO, None]),
        )
        .await;
        assert_eq!((tally.granted, tally.refused), (2, 2));
        assert!(started.elapsed() < Duration::from_secs(5));
    }
}
