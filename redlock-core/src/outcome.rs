//! What each node answered during one acquisition or release.

use std::fmt;

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
    /// The node restarted less than the quarantine ago and refused to vote
    /// ([`RedlockBuilder::quarantine`](crate::RedlockBuilder::quarantine)): it may have lost
    /// a key that another holder still counts on.
    #[error("restarted less than the quarantine ago; not voting yet")]
    Quarantined,
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
}

/// The answers of all nodes in one attempt, in node order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Outcomes(Vec<NodeOutcome>);

impl Outcomes {
    pub(crate) fn new(outcomes: Vec<NodeOutcome>) -> Self {
        Self(outcomes)
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
        }]);
        assert_eq!(
            outcomes.to_string(),
            "10.0.0.1:6379: error reply: NOPERM no access"
        );
        let io = NodeError::from_fred(Error::new(ErrorKind::IO, "broken pipe"));
        assert!(matches!(&io, NodeError::Io(client) if client.kind() == "IO Error"));
    }
}
