//! Decoding the replies every script shares: the vote of a script that grants (its
//! quarantine and foreign-key answers, its fencing counter and streak), a plain vote, and
//! decimal counters. A script's own reply is decoded beside the command that sends it.

use fred::types::Value;

use crate::outcome::{NodeError, NodeVote};

/// One node's answer to an acquisition.
#[derive(Debug)]
pub(crate) struct AcquireReply {
    pub(crate) vote: NodeVote,
    /// The fencing counter read (0 when not asked for).
    pub(crate) counter: u64,
    /// When granted, how long the key has been busy without a window for foreign clients, in
    /// ms of the node's clock (0 when no streak is running, or for a mode lock).
    pub(crate) busy_ms: u64,
    /// When refused, how long until what refused it (the holder's key, or a window for
    /// foreign clients) expires, in ms; `None` when it has no expiry or was not read.
    pub(crate) left_ms: Option<u64>,
    /// When refused, who refused it: a digest of the holder's token (or of the waiter a key is
    /// reserved for), `"?"` for holders in modes seen by a plain request, `"window"` for a
    /// window for foreign clients; for a request in a mode, the digests of every entry that
    /// blocked it, space-separated. Nodes naming the same holder hold one lock.
    pub(crate) holder: Option<String>,
}

impl AcquireReply {
    /// A vote with nothing read.
    pub(crate) fn vote(vote: NodeVote) -> Self {
        Self {
            vote,
            counter: 0,
            busy_ms: 0,
            left_ms: None,
            holder: None,
        }
    }
}

/// The `{1 | 0 | -1 | -2, counter[, busy[, left[, holder]]]}` reply of the acquire scripts on
/// the lock key `key` (`-1`: quarantined, `-2`: the key holds data we did not write).
pub(crate) fn acquire_reply(reply: Result<Value, NodeError>, key: &str) -> AcquireReply {
    match reply {
        Ok(Value::Array(reply)) => {
            let counter = reply.get(1).and_then(counter).unwrap_or(0);
            let busy_ms = reply.get(2).and_then(self::counter).unwrap_or(0);
            // PTTL's -1 (no expiry) and -2 (no key) read as unknown, as does an error.
            let left_ms = reply
                .get(3)
                .and_then(Value::as_i64)
                .and_then(|ms| u64::try_from(ms).ok())
                .filter(|&ms| ms > 0);
            let vote = match reply.first() {
                Some(Value::Integer(1)) => NodeVote::Acquired,
                Some(Value::Integer(-1)) => {
                    return AcquireReply::vote(NodeVote::Failed(NodeError::Quarantined));
                }
                Some(Value::Integer(-3)) => {
                    return AcquireReply::vote(NodeVote::Failed(NodeError::QuarantineMismatch));
                }
                Some(Value::Integer(-2)) => {
                    return AcquireReply::vote(NodeVote::Failed(NodeError::ForeignKey {
                        key: key.to_owned(),
                    }));
                }
                _ => NodeVote::Held,
            };
            let left_ms = left_ms.filter(|_| vote == NodeVote::Held);
            let holder = reply
                .get(4)
                .and_then(Value::as_string)
                .filter(|_| vote == NodeVote::Held);
            AcquireReply {
                vote,
                counter,
                busy_ms,
                left_ms,
                holder,
            }
        }
        Ok(other) => AcquireReply::vote(NodeVote::Failed(NodeError::UnexpectedReply(format!(
            "to an acquire script: {other:?}"
        )))),
        Err(e) => AcquireReply::vote(NodeVote::Failed(e)),
    }
}

/// One node's answer to `SET key token NX PX ttl GET` ([`Node::set_nx`](super::Node::set_nx)):
/// granted on `nil`; refused when the key was there, by the holder whose token it held (named
/// as the scripts' `holder_digest` names it: the first 16 hex digits of its SHA-1), or by a
/// key that is not a string (holders in lock modes, another application's data: `"?"`, as a
/// script names them; so is a value that is not UTF-8). The holder's time left is not read.
pub(crate) fn set_nx_reply(reply: Result<Value, NodeError>) -> AcquireReply {
    let held = |holder: String| AcquireReply {
        holder: Some(holder),
        ..AcquireReply::vote(NodeVote::Held)
    };
    match reply {
        Ok(Value::Null) => AcquireReply::vote(NodeVote::Acquired),
        Ok(value @ (Value::String(_) | Value::Bytes(_))) => {
            held(match value.as_bytes().map(std::str::from_utf8) {
                Some(Ok(token)) => fred::util::sha1_hash(token).chars().take(16).collect(),
                _ => "?".to_owned(),
            })
        }
        Err(NodeError::Reply(error)) if error.details().starts_with("WRONGTYPE") => {
            held("?".to_owned())
        }
        Ok(other) => AcquireReply::vote(NodeVote::Failed(NodeError::UnexpectedReply(format!(
            "to SET NX PX GET: {other:?}"
        )))),
        Err(error) => AcquireReply::vote(NodeVote::Failed(error)),
    }
}

/// A fencing counter from a script reply (an integer, or its decimal string).
/// Decimal strings above `u64::MAX` (a counter some other writer set) saturate.
pub(crate) fn counter(value: &Value) -> Option<u64> {
    let digits = |text: &str| -> Option<u64> {
        if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) {
            Some(text.parse().unwrap_or(u64::MAX))
        } else {
            None
        }
    };
    match value {
        Value::Integer(i) => u64::try_from(*i).ok(),
        Value::String(s) => digits(s),
        Value::Bytes(b) => digits(std::str::from_utf8(b).ok()?),
        _ => None,
    }
}

/// A script call's answer as a vote: `1` granted, any other reply refused, an error failed.
pub(crate) async fn vote(answer: impl Future<Output = Result<Value, NodeError>>) -> NodeVote {
    match answer.await {
        Ok(Value::Integer(1)) => NodeVote::Acquired,
        Ok(_) => NodeVote::Held,
        Err(e) => NodeVote::Failed(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_set_nx_reply_grants_on_nil_and_names_the_refusing_holder() {
        use fred::error::{Error, ErrorKind};
        let granted = set_nx_reply(Ok(Value::Null));
        assert_eq!((granted.vote, granted.holder), (NodeVote::Acquired, None));
        // A token: refused, named by the scripts' digest of it.
        let held = set_nx_reply(Ok(Value::from("0123abcd")));
        assert_eq!(held.vote, NodeVote::Held);
        let digest: String = fred::util::sha1_hash("0123abcd").chars().take(16).collect();
        assert_eq!(held.holder.as_deref(), Some(digest.as_str()));
        assert_eq!(held.left_ms, None);
        // A value that is not UTF-8, or a key that is not a string: refused, named "?".
        let binary = set_nx_reply(Ok(Value::Bytes(vec![0xff, 0xfe].into())));
        assert_eq!(
            (binary.vote, binary.holder.as_deref()),
            (NodeVote::Held, Some("?"))
        );
        let wrong = Error::new(
            ErrorKind::InvalidArgument,
            "WRONGTYPE Operation against a key",
        );
        let hash = set_nx_reply(Err(NodeError::from_fred(wrong)));
        assert_eq!(
            (hash.vote, hash.holder.as_deref()),
            (NodeVote::Held, Some("?"))
        );
        // Anything else is no vote: never a grant.
        let other = Error::new(ErrorKind::Unknown, "ERR syntax error");
        let failed = set_nx_reply(Err(NodeError::from_fred(other)));
        assert!(matches!(failed.vote, NodeVote::Failed(_)), "{failed:?}");
        let odd = set_nx_reply(Ok(Value::Integer(1)));
        assert!(
            matches!(odd.vote, NodeVote::Failed(NodeError::UnexpectedReply(_))),
            "{odd:?}"
        );
    }

    #[test]
    fn acquire_replies_decode_votes_counters_and_streaks() {
        let reply = |parts: Vec<Value>| acquire_reply(Ok(Value::Array(parts)), "k");
        let granted = reply(vec![
            1.into(),
            Value::from("18446744073709551616"),
            7.into(),
        ]);
        assert_eq!(granted.vote, NodeVote::Acquired);
        assert_eq!((granted.counter, granted.busy_ms), (u64::MAX, 7));
        assert_eq!(reply(vec![0.into(), 5.into()]).vote, NodeVote::Held);
        // A refusal's remaining ttl; PTTL's -1 and -2, and a granted reply's, read as none.
        let left = |ms: i64| reply(vec![0.into(), 0.into(), 0.into(), ms.into()]).left_ms;
        assert_eq!(left(1500), Some(1500));
        assert_eq!((left(-1), left(-2), left(0)), (None, None, None));
        let granted_left = reply(vec![1.into(), 0.into(), 0.into(), 900.into()]);
        assert_eq!(granted_left.left_ms, None);
        let quarantined = reply(vec![(-1).into(), 5.into()]);
        assert_eq!(quarantined.vote, NodeVote::Failed(NodeError::Quarantined));
        assert_eq!(quarantined.counter, 0);
        let foreign = reply(vec![(-2).into(), 0.into(), 0.into(), (-1).into()]);
        assert_eq!(
            foreign.vote,
            NodeVote::Failed(NodeError::ForeignKey { key: "k".into() })
        );
        assert!(matches!(
            acquire_reply(Ok(Value::from("OK")), "k").vote,
            NodeVote::Failed(NodeError::UnexpectedReply(_))
        ));
    }

    #[test]
    fn counters_are_decimal_and_never_negative() {
        assert_eq!(counter(&Value::from("0042")), Some(42));
        assert_eq!(counter(&Value::Integer(-1)), None);
        assert_eq!(counter(&Value::from("-1")), None);
        assert_eq!(counter(&Value::from("")), None);
        assert_eq!(counter(&Value::from("12a")), None);
    }
}
