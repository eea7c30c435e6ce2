//! Deciding a round at quorum: stop waiting as soon as a majority agreed, or as soon as a
//! majority can no longer agree (distlock spec, steps 2–3; node-redlock's early return).

use std::future::Future;

use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;

use crate::node::Node;
use crate::outcome::{NodeOutcome, NodeVote, Outcomes};

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

/// Awaits `calls` (one per node, yielding `(node index, vote, datum)`) until `quorum` of the
/// `n` nodes granted, or more than `n − quorum` did not. Calls still running are dropped: their
/// commands may land anyway, which every caller accounts for.
pub(crate) async fn decide<T, F>(
    n: usize,
    quorum: usize,
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
    let mut against = 0;
    while let Some((i, vote, datum)) = pending.next().await {
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
        if tally.granted >= quorum || against > n - quorum {
            break;
        }
    }
    tally
}
