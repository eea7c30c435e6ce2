//! What a node runs for a permit: the semaphore's script ([`ACQUIRE_PERMIT`], declared and
//! submitted to the dispatch script here, beside `acquire_permit.lua`), the request it is sent
//! ([`PermitRequest`]) and its reply ([`PermitReply`]).
//!
//! A counting semaphore of K permits is K plain locks on its slots' keys
//! ([`keys`](crate::keys): the lock key followed by `permit:<i>`), whose waiters share one
//! queue (`permit-waiters`, with `permit-alive`: until when each waiter counts, on the node's
//! clock). [`ACQUIRE_PERMIT`] takes the slot a hand-over reserved for the waiter, or the first
//! free slot with `SET NX PX` unless as many earlier waiters as free slots still count; a held
//! slot is released, extended and handed over by the plain lock's scripts, and what a failed
//! (or partly granted) attempt took is released by [`RELEASE`](crate::kernel::scripts::RELEASE)
//! over every slot, one call per node.

use fred::types::Value;

use crate::kernel::commands::{QUEUE_TTL_MS, QuarantineCheck, Waiter};
use crate::keys::ResourceKeys;
use crate::node::replies::{AcquireReply, acquire_reply};
use crate::node::scripts::{Effect, Script};
use crate::node::{Arg, Node, int_arg};
use crate::outcome::{NodeError, NodeVote};

/// An attempt at one permit of a counting semaphore: the first free slot in the client's
/// order, `SET NX PX` ([`Redlock::semaphore`], `acquire_permit.lua`).
///
/// [`Redlock::semaphore`]: crate::Redlock::semaphore
static ACQUIRE_PERMIT: Script = Script::new(13, Effect::Grants, include_str!("acquire_permit.lua"));
inventory::submit!(&ACQUIRE_PERMIT);

/// One attempt's request for a permit of a semaphore to every node (Redlock step 2 on the
/// semaphore's slots).
#[derive(Debug, Clone, Copy)]
pub(super) struct PermitRequest<'a> {
    /// The semaphore's queue keys (its `waiters` is the queue and channel).
    pub(super) queue: &'a ResourceKeys,
    /// Until when each queued waiter counts (`keys::permit_alive`).
    pub(super) alive: &'a str,
    /// The semaphore's stored number of permits (`keys::permit_capacity`); the number asked
    /// with is the number of `slots`.
    pub(super) capacity: &'a str,
    /// Its slots, in the order the node should try them.
    pub(super) slots: &'a [ResourceKeys],
    pub(super) token: &'a str,
    pub(super) ttl_ms: u64,
    /// The acquisition's waiter: ranked by its wait start among the queued waiters.
    pub(super) waiter: &'a Waiter,
    /// It has joined the queue: a slot reserved for it is taken first, a refusal keeps its
    /// place and renews its entry for `alive_ms`.
    pub(super) queued: bool,
    pub(super) alive_ms: u64,
    /// The quarantine check.
    pub(super) quarantine: &'a QuarantineCheck,
}

/// One node's answer to a permit request.
#[derive(Debug)]
pub(super) struct PermitReply {
    /// Granted (some slot), refused (every slot busy), or failed.
    pub(super) vote: NodeVote,
    /// When granted, the slot taken: its index in the request's order (from 0).
    pub(super) slot: Option<usize>,
    /// Who held each slot before the request took one: the holder's digest for a busy slot,
    /// `None` for a free one (one entry per slot; empty when the node gave no such answer).
    pub(super) holders: Vec<Option<String>>,
    /// When refused, how long until the earliest busy slot expires, in ms.
    pub(super) left_ms: Option<u64>,
}

/// The `{1, 0, slot, holders} | {0, 0, 0, left, holders} | {-1 | -3, 0} | {-4, 0, stored}`
/// reply of the permit script on the semaphore of `key`, with `slots` slots (a slot outside
/// them is an unexpected reply; `holders` is one digest or empty string per slot,
/// comma-separated; `stored` the semaphore's number of permits when it is not `slots`).
fn permit_reply(reply: Result<Value, NodeError>, key: &str, slots: usize) -> PermitReply {
    if let Ok(Value::Array(parts)) = &reply
        && parts.first().and_then(Value::as_i64) == Some(-4)
    {
        let stored = parts.get(2).and_then(Value::as_string);
        let vote = match stored.as_deref().map(str::parse::<u32>) {
            Some(Ok(stored)) => NodeError::PermitsMismatch { stored },
            _ => NodeError::UnexpectedReply(format!(
                "to the permit script: a stored number of permits {stored:?}"
            )),
        };
        return PermitReply {
            vote: NodeVote::Failed(vote),
            slot: None,
            holders: Vec::new(),
            left_ms: None,
        };
    }
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

impl Node {
    /// One node's answer to a permit request ([`ACQUIRE_PERMIT`]): the slot it granted
    /// (`SET NX PX` of the first free slot in the request's order, or the one reserved for
    /// the waiter), or a refusal when every slot is busy.
    pub(super) async fn acquire_permit(&self, request: &PermitRequest<'_>) -> PermitReply {
        let PermitRequest {
            queue,
            alive,
            capacity,
            slots,
            token,
            ttl_ms,
            waiter,
            queued,
            alive_ms,
            quarantine,
        } = *request;
        let (witness, marker) = quarantine.keys_or(queue.waiters());
        let mut keys = Vec::with_capacity(slots.len() + 6);
        keys.extend([
            witness,
            marker,
            queue.waiters(),
            alive,
            queue.listen(),
            capacity,
        ]);
        keys.extend(slots.iter().map(|slot| slot.lock.as_str()));
        let args = [
            Arg::from(token),
            int_arg(ttl_ms),
            int_arg(quarantine.ms),
            Arg::from(if queued { waiter.marker.as_str() } else { "" }),
            Arg::Int(waiter.score_ms),
            int_arg(QUEUE_TTL_MS),
            int_arg(alive_ms),
            int_arg(slots.len() as u64),
        ];
        permit_reply(
            self.eval(&ACQUIRE_PERMIT, &keys, &args).await,
            &queue.lock,
            slots.len(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node::scripts::mutated;
    use crate::options::MAX_QUEUED_WAITERS;

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
        let other = reply(vec![(-4).into(), 0.into(), "5".into()]);
        assert_eq!(
            other.vote,
            NodeVote::Failed(NodeError::PermitsMismatch { stored: 5 })
        );
        for garbled in [Value::from("five"), Value::Null] {
            let odd = reply(vec![(-4).into(), 0.into(), garbled]);
            assert!(matches!(
                odd.vote,
                NodeVote::Failed(NodeError::UnexpectedReply(_))
            ));
        }
    }

    #[test]
    fn the_permit_script_enforces_the_queue_cap_and_takes_slots_with_nx() {
        let check = format!("< {MAX_QUEUED_WAITERS} then");
        assert!(ACQUIRE_PERMIT.source.contains(&check));
        assert!(
            ACQUIRE_PERMIT
                .source
                .contains(r#"token, "NX", "PX", ttl_ms"#)
        );
    }

    #[test]
    fn the_effect_check_refuses_the_permit_script_with_its_quarantine_check_moved() {
        // acquire_permit.lua with the quarantine check moved below the reserved take.
        let check = "local quarantined = quarantine_check(quarantine_ms, witness_key, marker_key)\n\
                     if quarantined then return quarantined end\n";
        let take = "if reserved then return take(reserved, true) end\n";
        let broken = mutated(ACQUIRE_PERMIT.source, check, "");
        let broken = mutated(&broken, take, &format!("{take}{check}"));
        let refused = ACQUIRE_PERMIT.effect.check(&broken);
        assert!(
            refused
                .as_ref()
                .is_err_and(|e| e.ends_with("a write before the quarantine check")),
            "acquire_permit.lua with its quarantine check below the reserved take: {refused:?}"
        );
        // The script as it is passes.
        assert_eq!(ACQUIRE_PERMIT.effect.check(ACQUIRE_PERMIT.source), Ok(()));
    }
}
