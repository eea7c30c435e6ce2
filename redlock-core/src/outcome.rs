//! What each node answered during one acquisition or release.

use std::fmt;
use std::time::Duration;

/// Why a node gave no usable answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum NodeError {
    /// No reply within the per-node time limit. The command may still have been applied.
    #[error("no reply within {0:?}")]
    Timeout(std::time::Duration),
    /// The node is not connected (the client is reconnecting or was never connected).
    #[error("not connected")]
    Disconnected,
    /// The node answered with an error reply (e.g. `NOPERM`, `READONLY`, `OOM`).
    #[error("error reply")]
    Reply(#[source] ClientError),
    /// The connection failed while the command was in flight.
    #[error("connection error")]
    Io(#[source] ClientError),
    /// The node answered something the lock's protocol does not expect (a script replaced
    /// under its SHA1, a proxy rewriting replies): what it answered, and to what.
    #[error("unexpected reply {0}")]
    UnexpectedReply(String),
    /// The node refused to vote: it may have lost a key that another holder still counts on
    /// (restarted, flushed or re-synced, or first seen with the quarantine on), less than the
    /// quarantine ago ([`RedlockBuilder::quarantine`](crate::RedlockBuilder::quarantine)).
    #[error(
        "in quarantine (restarted, flushed or re-synced less than the quarantine ago); not voting yet"
    )]
    Quarantined,
    /// Another handle of the same key prefix uses a quarantine of another length on this node
    /// ([`RedlockBuilder::quarantine`](crate::RedlockBuilder::quarantine)): the node refuses
    /// to vote for this handle. Give every handle of a key prefix the same quarantine (one
    /// shorter than another handle's ttls would let a node that lost data vote while their
    /// keys should still be held).
    #[error(
        "another handle of this key prefix uses a quarantine of another length; give every handle the same"
    )]
    QuarantineMismatch,
    // Keys that hold data the lock did not write.
    /// The lock key holds data this library did not write: a hash with a field that is not
    /// one of a mode lock's entries, or a list, set, sorted set or stream. The node refused
    /// to vote and left the key untouched
    /// ([`LockError::ForeignKey`](crate::LockError::ForeignKey)).
    #[error("the key `{key}` holds data not written by this library; left untouched")]
    ForeignKey {
        /// The key.
        key: String,
    },
    /// The semaphore's slots are in use with another number of permits, stored on the node
    /// by the first attempt; the node took and queued nothing
    /// ([`LockError::PermitsMismatch`](crate::LockError::PermitsMismatch)).
    #[error("the semaphore is in use with {stored} permits here")]
    PermitsMismatch {
        /// The number of permits stored on the node.
        stored: u32,
    },
}

impl NodeError {
    /// The error followed by its client's text, for logs and messages:
    /// `error reply: NOPERM …`.
    pub(crate) fn detailed(&self) -> String {
        match self {
            Self::Reply(client) | Self::Io(client) => format!("{self}: {client}"),
            other => other.to_string(),
        }
    }

    /// Whether the node may answer otherwise later without a change on either side: no
    /// answer in time, no connection, a quarantine that ends by itself, or an error reply of a
    /// node that is busy or not ready (`LOADING`, `BUSY`, `MASTERDOWN`, `NOREPLICAS`,
    /// `TRYAGAIN`, `OOM`). `false` for refusals that stay until someone acts: an ACL or auth
    /// refusal (`NOPERM`, `NOAUTH`, `WRONGPASS`), a read-only replica (`READONLY`), any other
    /// error reply, a reply the protocol does not expect, a quarantine of another length, or
    /// another application's data at the key.
    pub fn is_transient(&self) -> bool {
        const PASSING: [&str; 6] = [
            "LOADING",
            "BUSY",
            "MASTERDOWN",
            "NOREPLICAS",
            "TRYAGAIN",
            "OOM",
        ];
        match self {
            Self::Timeout(_) | Self::Disconnected | Self::Io(_) | Self::Quarantined => true,
            Self::Reply(client) => client
                .details()
                .split(' ')
                .next()
                .is_some_and(|code| PASSING.contains(&code)),
            Self::UnexpectedReply(_)
            | Self::QuarantineMismatch
            | Self::ForeignKey { .. }
            | Self::PermitsMismatch { .. } => false,
        }
    }

    /// The error reply `text` (`NOSCRIPT No matching script.`, `WRONGTYPE …`), classified as
    /// the `fred` client classifies a server's error reply: for a
    /// [`Transport`](crate::transport::Transport) that answers in place of a server.
    pub fn error_reply(text: impl Into<String>) -> Self {
        use fred::error::{Error, ErrorKind};
        let text = text.into();
        let kind = match text.split(' ').next() {
            Some("WRONGTYPE") => ErrorKind::InvalidArgument,
            Some("NOAUTH" | "WRONGPASS") => ErrorKind::Auth,
            _ => ErrorKind::Unknown,
        };
        Self::Reply(ClientError(Error::new(kind, text)))
    }

    /// The connection `text` says failed while a command was in flight: for a
    /// [`Transport`](crate::transport::Transport) whose node went away.
    pub fn io(text: impl Into<String>) -> Self {
        let error = fred::error::Error::new(fred::error::ErrorKind::IO, text.into());
        Self::Io(ClientError(error))
    }

    pub(crate) fn from_fred(error: fred::error::Error) -> Self {
        use fred::error::ErrorKind;
        match error.kind() {
            ErrorKind::Canceled => Self::Disconnected,
            ErrorKind::IO => Self::Io(ClientError(error)),
            _ => Self::Reply(ClientError(error)),
        }
    }
}

/// An error from a node's Redis client (`fred`), kept whole: [`details`](Self::details) is what
/// the node or the client said (displayed), [`kind`](Self::kind) the client's classification.
/// The source of [`NodeError::Reply`] and [`NodeError::Io`] (whose chains read "error reply" or
/// "connection error", then this text) and of [`BuildError::Client`](crate::BuildError).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientError(fred::error::Error);

impl ClientError {
    /// What the node or the client said, e.g. `NOPERM this user has no permissions…`.
    pub fn details(&self) -> &str {
        self.0.details()
    }

    /// The client's classification of the error, e.g. `IO Error`, `Timeout Error`, `Authentication Error`
    /// (fred's `ErrorKind`).
    pub fn kind(&self) -> &'static str {
        self.0.kind().to_str()
    }
}

impl ClientError {
    pub(crate) fn new(error: fred::error::Error) -> Self {
        Self(error)
    }
}

impl fmt::Display for ClientError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0.details())
    }
}

impl std::error::Error for ClientError {}

/// One node's answer in an acquisition attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum NodeVote {
    /// `SET NX` succeeded: this node holds our token.
    Acquired,
    /// `SET NX` was refused: another holder's key is on this node.
    Held,
    /// The node gave no usable answer.
    Failed(NodeError),
    /// The outcome was decided before this node answered (its command may still land; it is
    /// released with the others).
    Undecided,
}

/// A node's label (`host:port`, never credentials) and its answer.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct NodeOutcome {
    /// The node, as `host:port` or a socket path.
    pub node: String,
    /// What it answered.
    pub vote: NodeVote,
    /// For [`NodeVote::Held`] in an acquisition: how long the node said what refused us (the
    /// holder's key, or a window for foreign clients) still lives, by its `PTTL`; `None` when
    /// it has no expiry or was not read.
    pub holder_ttl: Option<Duration>,
}

/// The answers of all nodes in one attempt, in node order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Outcomes(Vec<NodeOutcome>);

impl Outcomes {
    pub(crate) fn new(outcomes: Vec<NodeOutcome>) -> Self {
        Self(outcomes)
    }

    /// Records each node's [`holder_ttl`](NodeOutcome::holder_ttl), in node order.
    pub(crate) fn set_holder_ttls(&mut self, ttls: impl IntoIterator<Item = Option<Duration>>) {
        for (outcome, ttl) in self.0.iter_mut().zip(ttls) {
            outcome.holder_ttl = ttl;
        }
    }

    /// How long until, by the holders' ttls, enough nodes are free for `quorum`: the nodes
    /// that granted count as free, and each holding node frees up when its
    /// [`holder_ttl`](NodeOutcome::holder_ttl) runs out; nodes that failed or were not awaited
    /// count as neither (they may hold it). `None` when that cannot be known (too few holding
    /// nodes report a ttl: a foreign key with no expiry, `PTTL` refused by an ACL, nodes
    /// down). A holder may release sooner, or extend: this is the wait by the ttls now, not
    /// a promise.
    pub fn free_in(&self, quorum: usize) -> Option<Duration> {
        let free = self.acquired();
        let Some(needed) = quorum.checked_sub(free).filter(|&n| n > 0) else {
            return Some(Duration::ZERO);
        };
        let mut ttls: Vec<Duration> = self
            .0
            .iter()
            .filter(|o| matches!(o.vote, NodeVote::Held))
            .filter_map(|o| o.holder_ttl)
            .collect();
        ttls.sort_unstable();
        ttls.get(needed - 1).copied()
    }

    /// Each node's outcome, in node order.
    pub fn as_slice(&self) -> &[NodeOutcome] {
        &self.0
    }

    /// Each node's outcome, in node order.
    pub fn iter(&self) -> std::slice::Iter<'_, NodeOutcome> {
        self.0.iter()
    }

    /// The number of nodes (N); 0 when no node was asked.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// `true` when no node was asked (e.g. a re-entry refused locally).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Nodes that granted the lock.
    pub fn acquired(&self) -> usize {
        self.count(|v| matches!(v, NodeVote::Acquired))
    }

    /// Nodes where another holder's key was found.
    pub fn held(&self) -> usize {
        self.count(|v| matches!(v, NodeVote::Held))
    }

    /// Nodes that did not answer usably.
    pub fn failed(&self) -> usize {
        self.count(|v| matches!(v, NodeVote::Failed(_)))
    }

    /// The number of permits a node said the semaphore is in use with, when one refused the
    /// attempt for that ([`NodeError::PermitsMismatch`]).
    pub(crate) fn permits_mismatch(&self) -> Option<u32> {
        self.iter().find_map(|o| match o.vote {
            NodeVote::Failed(NodeError::PermitsMismatch { stored }) => Some(stored),
            _ => None,
        })
    }

    /// How many nodes refused the attempt for another stored number of permits
    /// ([`NodeError::PermitsMismatch`]).
    pub(crate) fn permits_mismatched(&self) -> usize {
        self.count(|v| matches!(v, NodeVote::Failed(NodeError::PermitsMismatch { .. })))
    }

    /// Nodes where the lock key holds data this library did not write
    /// ([`NodeError::ForeignKey`]).
    pub fn foreign(&self) -> usize {
        self.count(|v| matches!(v, NodeVote::Failed(NodeError::ForeignKey { .. })))
    }

    fn count(&self, pred: impl Fn(&NodeVote) -> bool) -> usize {
        self.0.iter().filter(|o| pred(&o.vote)).count()
    }
}

impl fmt::Display for Outcomes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, outcome) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{}: ", outcome.node)?;
            match &outcome.vote {
                NodeVote::Acquired => f.write_str("acquired")?,
                NodeVote::Held => f.write_str("held by another holder")?,
                NodeVote::Failed(e) => f.write_str(&e.detailed())?,
                NodeVote::Undecided => f.write_str("not awaited")?,
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outcomes(votes: &[(NodeVote, Option<u64>)]) -> Outcomes {
        Outcomes::new(
            votes
                .iter()
                .enumerate()
                .map(|(i, (vote, ms))| NodeOutcome {
                    node: format!("n{i}"),
                    vote: vote.clone(),
                    holder_ttl: ms.map(Duration::from_millis),
                })
                .collect(),
        )
    }

    #[test]
    fn free_in_is_when_a_quorum_of_nodes_is_free_by_the_holders_ttls() {
        use NodeVote::{Acquired, Failed, Held, Undecided};
        let ms = |ms| Some(Duration::from_millis(ms));
        // 5 nodes, quorum 3, held on all: the third shortest ttl.
        let all = outcomes(&[
            (Held, Some(900)),
            (Held, Some(100)),
            (Held, Some(500)),
            (Held, Some(300)),
            (Held, Some(700)),
        ]);
        assert_eq!(all.free_in(3), ms(500));
        // One node granted: two more must free up. The node not awaited may hold it: it
        // counts as neither.
        let one_free = outcomes(&[
            (Acquired, None),
            (Undecided, None),
            (Held, Some(800)),
            (Held, Some(200)),
            (Held, Some(600)),
        ]);
        assert_eq!(one_free.free_in(3), ms(600));
        // Enough free already.
        assert_eq!(one_free.free_in(1), Some(Duration::ZERO));
        // Two nodes down, one granted, two held: both holders must free up, not none.
        let down = outcomes(&[
            (Acquired, None),
            (Failed(NodeError::Timeout(Duration::from_millis(100))), None),
            (Failed(NodeError::Timeout(Duration::from_millis(100))), None),
            (Held, Some(4000)),
            (Held, Some(9000)),
        ]);
        assert_eq!(down.free_in(3), ms(9000));
        // A holding node with no expiry never frees up; too few with one: unknown.
        let forever = outcomes(&[(Held, None), (Held, None), (Held, Some(100))]);
        assert_eq!(forever.free_in(2), None);
        assert_eq!(forever.free_in(1), ms(100));
        assert_eq!(Outcomes::default().free_in(1), None);
    }

    #[test]
    fn a_client_error_is_shown_once_in_a_chain_and_whole_in_outcomes() {
        use fred::error::{Error, ErrorKind};
        let error = NodeError::from_fred(Error::new(ErrorKind::Auth, "NOPERM no access"));
        assert_eq!(error.to_string(), "error reply");
        let source = std::error::Error::source(&error).expect("the client's error");
        assert_eq!(source.to_string(), "NOPERM no access");
        assert!(source.source().is_none());
        let outcomes = Outcomes::new(vec![NodeOutcome {
            node: "10.0.0.1:6379".to_owned(),
            vote: NodeVote::Failed(error),
            holder_ttl: None,
        }]);
        assert_eq!(
            outcomes.to_string(),
            "10.0.0.1:6379: error reply: NOPERM no access"
        );
        let io = NodeError::from_fred(Error::new(ErrorKind::IO, "broken pipe"));
        assert!(matches!(&io, NodeError::Io(client) if client.kind() == "IO Error"));
    }
}
