//! Decoding the scripts' replies: votes, fencing counters and streaks.

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
    pub(super) fn vote(vote: NodeVote) -> Self {
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
pub(super) fn acquire_reply(reply: Result<Value, NodeError>, key: &str) -> AcquireReply {
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

/// One node's answer to a permit request.
#[derive(Debug)]
pub(crate) struct PermitReply {
    /// Granted (some slot), refused (every slot busy), or failed.
    pub(crate) vote: NodeVote,
    /// When granted, the slot taken: its index in the request's order (from 0).
    pub(crate) slot: Option<usize>,
    /// Who held each slot before the request took one: the holder's digest for a busy slot,
    /// `None` for a free one (one entry per slot; empty when the node gave no such answer).
    pub(crate) holders: Vec<Option<String>>,
    /// When refused, how long until the earliest busy slot expires, in ms.
    pub(crate) left_ms: Option<u64>,
}

/// The `{1, 0, slot, holders} | {0, 0, 0, left, holders} | {-1 | -3, 0}` reply of the permit
/// script on the semaphore of `key`, with `slots` slots (a slot outside them is an
/// unexpected reply; `holders` is one digest or empty string per slot, comma-separated).
pub(super) fn permit_reply(
    reply: Result<Value, NodeError>,
    key: &str,
    slots: usize,
) -> PermitReply {
    let (slot, holders) = match &reply {
        Ok(Value::Array(parts)) => {
            let granted = parts.first().and_then(Value::as_i64) == Some(1);
            let at = if granted { 3 } else { 4 };
            (
                parts.get(2).and_then(Value::as_i64),
                parts.get(at).and_then(Value::as_string),
            )
        }
        _ => (None, None),
    };
    let holders: Vec<Option<String>> = holders
        .map(|all| {
            all.split(',')
                .take(slots)
                .map(|h| (!h.is_empty()).then(|| h.to_owned()))
                .collect()
        })
        .unwrap_or_default();
    let AcquireReply { vote, left_ms, .. } = acquire_reply(reply, key);
    match vote {
        NodeVote::Acquired => match slot
            .and_then(|slot| usize::try_from(slot).ok())
            .filter(|slot| (1..=slots).contains(slot))
        {
            Some(slot) => PermitReply {
                vote,
                slot: Some(slot - 1),
                holders,
                left_ms: None,
            },
            None => PermitReply {
                vote: NodeVote::Failed(NodeError::UnexpectedReply(format!(
                    "to the permit script: slot {slot:?} of {slots}"
                ))),
                slot: None,
                holders: Vec::new(),
                left_ms: None,
            },
        },
        vote => PermitReply {
            vote,
            slot: None,
            holders,
            left_ms,
        },
    }
}

/// A fencing counter from a script reply (an integer, or its decimal string).
/// Decimal strings above `u64::MAX` (a counter some other writer set) saturate.
fn counter(value: &Value) -> Option<u64> {
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

/// The [`FENCE`] script's `{raised, before}`.
pub(super) fn fence_reply(reply: &Value) -> Option<(bool, u64)> {
    match reply {
        Value::Array(parts) => match parts.as_slice() {
            [raised, before] => Some((raised.as_i64()? == 1, counter(before)?)),
            _ => None,
        },
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn permit_replies_name_the_slot_from_zero() {
        let reply = |parts: Vec<Value>| permit_reply(Ok(Value::Array(parts)), "k", 3);
        let granted = reply(vec![1.into(), 0.into(), 2.into(), "abc,,".into()]);
        assert_eq!((granted.vote, granted.slot), (NodeVote::Acquired, Some(1)));
        assert_eq!(granted.holders, [Some("abc".to_owned()), None, None]);
        let bare = reply(vec![1.into(), 0.into(), 3.into()]);
        assert_eq!((bare.slot, bare.holders.len()), (Some(2), 0));
        let busy = reply(vec![
            0.into(),
            0.into(),
            0.into(),
            900.into(),
            "abc,def,0123".into(),
        ]);
        assert_eq!(
            (busy.vote, busy.slot, busy.left_ms),
            (NodeVote::Held, None, Some(900))
        );
        assert_eq!(busy.holders.iter().flatten().count(), 3);
        for wrong in [0, 4] {
            let odd = reply(vec![1.into(), 0.into(), wrong.into()]);
            assert!(matches!(
                odd.vote,
                NodeVote::Failed(NodeError::UnexpectedReply(_))
            ));
        }
        let quarantined = reply(vec![(-1).into(), 0.into()]);
        assert_eq!(quarantined.vote, NodeVote::Failed(NodeError::Quarantined));
    }

    #[test]
    fn counters_are_decimal_and_never_negative() {
        assert_eq!(counter(&Value::from("0042")), Some(42));
        assert_eq!(counter(&Value::Integer(-1)), None);
        assert_eq!(counter(&Value::from("-1")), None);
        assert_eq!(counter(&Value::from("")), None);
        assert_eq!(counter(&Value::from("12a")), None);
        let fenced = Value::Array(vec![1.into(), Value::from("9")]);
        assert_eq!(fence_reply(&fenced), Some((true, 9)));
        assert_eq!(fence_reply(&Value::Array(vec![1.into()])), None);
    }
}
