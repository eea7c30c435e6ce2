//! Deciding a round at quorum: stop waiting as soon as a majority agreed, or as soon as a
//! majority can no longer agree (distlock spec, steps 2–3; node-redlock's early return).

use std::future::Future;
use std::time::Duration;

use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;

use crate::node::Node;
use crate::outcome::{NodeError, NodeOutcome, NodeVote, Outcomes};

/// One round's answers, as far as they were awaited.
pub(crate) struct Tally<T> {
    /// Each node's vote; [`NodeVote::Undecided`] if the round was decided before it answered.
    pub(crate) votes: Vec<NodeVote>,
    /// Each answering node's extra datum (e.g. a fencing counter).
    pub(crate) data: Vec<Option<T>>,
    /// Nodes that voted [`NodeVote::Acquired`].
    pub(crate) granted: usize,
    /// Nodes that voted [`NodeVote::Held`].
    pub(crate) refused: usize,
}

impl<T> Tally<T> {
    /// The votes with their nodes' labels.
    pub(crate) fn outcomes(self, nodes: &[Node]) -> Outcomes {
        Outcomes(
            nodes
                .iter()
                .zip(self.votes)
                .map(|(node, vote)| NodeOutcome {
                    node: node.label.clone(),
                    vote,
                })
                .collect(),
        )
    }
}

/// When a round may stop before every node has answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stop {
    /// As soon as a quorum granted, or more than `n − quorum` did not (a quorum is then out
    /// of reach): acquisition, extension, fencing.
    Decided,
    /// As soon as a quorum granted; otherwise every node is awaited so that the report says
    /// exactly what each did: release.
    Granted,
}

/// Awaits `calls` (one per node, yielding `(node index, vote, datum)`) within one time limit
/// for the whole round, until the round is decided by `stop`. Nodes that have not answered
/// when the limit passes vote [`NodeVote::Failed`] with [`NodeError::Timeout`]; nodes left
/// unawaited after an early decision stay [`NodeVote::Undecided`].
///
/// One timer per round, not one per command. Calls still running are dropped, but their
/// commands were already handed to the node's client on the first poll: they land anyway,
/// which every caller accounts for (a failed attempt releases on every node, in order after
/// its `SET` on the same connection). A release's calls run in tasks of their own
/// ([`Node::eval_release`](crate::node::Node::eval_release)), so that a `NOSCRIPT` answered
/// after the decision is still followed by its `EVAL`.
pub(crate) async fn decide<T, F>(
    n: usize,
    quorum: usize,
    limit: Duration,
    stop: Stop,
    calls: impl IntoIterator<Item = F>,
) -> Tally<T>
where
    F: Future<Output = (usize, NodeVote, T)>,
{
    let mut pending: FuturesUnordered<F> = calls.into_iter().collect();
    let mut tally = Tally {
        votes: vec![NodeVote::Undecided; n],
        data: (0..n).map(|_| None).collect(),
        granted: 0,
        refused: 0,
    };
    let timer = tokio::time::sleep(limit);
    tokio::pin!(timer);
    let mut against = 0;
    loop {
        let (i, vote, datum) = tokio::select! {
            biased;
            next = pending.next() => match next {
                Some(answer) => answer,
                None => break,
            },
            () = &mut timer => {
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
            tally.data[i] = Some(datum);
        }
        tally.votes[i] = vote;
        if tally.granted >= quorum || (stop == Stop::Decided && against > n - quorum) {
            break;
        }
    }
    tally
}
