//! The commands of the primitives beyond one lock of one resource: a semaphore's permits
//! and their clean-up, the release of a lock of several resources, a resumption
//! by token, a downgrade, the operator's force-release and the holders' owner labels.

use std::time::Duration;

use fred::types::Value;

use super::{QUEUE_TTL_MS, QuarantineCheck, Waiter, int_arg, vote};
use crate::keys::ResourceKeys;
use crate::mode::Mode;
use crate::node::Node;
use crate::node::replies::{PermitReply, permit_reply};
use crate::node::scripts::{
    ACQUIRE_PERMIT, DOWNGRADE, FORCE_READ, FORCE_RELEASE, OWNER, RELEASE, RELEASE_SLOTS, RESUME,
};
use crate::outcome::{NodeError, NodeVote};

/// One attempt's request for a permit of a semaphore to every node (Redlock step 2 on the
/// semaphore's slots).
#[derive(Debug, Clone, Copy)]
pub(crate) struct PermitRequest<'a> {
    /// The semaphore's queue keys (its `waiters` is the queue and channel).
    pub(crate) queue: &'a ResourceKeys,
    /// Until when each queued waiter counts (`keys::permit_alive`).
    pub(crate) alive: &'a str,
    /// Its slots, in the order the node should try them.
    pub(crate) slots: &'a [ResourceKeys],
    pub(crate) token: &'a str,
    pub(crate) ttl_ms: u64,
    /// The acquisition's waiter: ranked by its wait start among the queued waiters.
    pub(crate) waiter: &'a Waiter,
    /// It has joined the queue: a slot reserved for it is taken first, a refusal keeps its
    /// place and renews its entry for `alive_ms`.
    pub(crate) queued: bool,
    pub(crate) alive_ms: u64,
    /// The quarantine check.
    pub(crate) quarantine: &'a QuarantineCheck,
}

impl Node {
    /// One node's answer to a permit request ([`ACQUIRE_PERMIT`]): the slot it granted
    /// (`SET NX PX` of the first free slot in the request's order, or the one reserved for
    /// the waiter), or a refusal when every slot is busy.
    pub(crate) async fn acquire_permit(&self, request: &PermitRequest<'_>) -> PermitReply {
        let PermitRequest {
            queue,
            alive,
            slots,
            token,
            ttl_ms,
            waiter,
            queued,
            alive_ms,
            quarantine,
        } = *request;
        let (witness, marker) = quarantine.keys_or(&queue.waiters);
        let mut keys = Vec::with_capacity(slots.len() + 5);
        keys.extend([
            witness,
            marker,
            queue.waiters.as_str(),
            alive,
            queue.listen.as_str(),
        ]);
        keys.extend(slots.iter().map(|slot| slot.lock.as_str()));
        let args = [
            Value::from(token),
            int_arg(ttl_ms),
            int_arg(quarantine.ms),
            Value::from(if queued { waiter.marker.as_str() } else { "" }),
            Value::Integer(waiter.score_ms),
            int_arg(QUEUE_TTL_MS),
            int_arg(alive_ms),
        ];
        permit_reply(
            self.eval(&ACQUIRE_PERMIT, &keys, &args).await,
            &queue.lock,
            slots.len(),
        )
    }

    /// Releases `token` from every one of `slots` that holds it on one node ([`RELEASE`]
    /// over them), run to completion within `limit` ([`Node::eval_release`]): the clean-up
    /// of a permit attempt. `Ok(true)` if some slot held it. The call is made now, before the
    /// future is polled.
    pub(crate) fn release_slots(
        &self,
        slots: &[&str],
        token: &str,
        limit: Duration,
    ) -> impl Future<Output = Result<bool, NodeError>> + Send + use<> {
        let answer = self.eval_release(&RELEASE, slots, &[Value::from(token)], limit);
        async move { Ok(matches!(answer.await?, Value::Integer(n) if n > 0)) }
    }

    /// Releases a lock of several resources on one node ([`RELEASE`] over every resource's
    /// key, or [`RELEASE_SLOTS`] to wake each one's waiters when `wake`), run to completion
    /// within `limit`; made now. `Ok(true)` if every key held our token.
    pub(crate) fn release_many(
        &self,
        keys: &[ResourceKeys],
        token: &str,
        wake: bool,
        limit: Duration,
    ) -> impl Future<Output = Result<bool, NodeError>> + Send + use<> {
        let mut all: Vec<&str> = keys.iter().map(|k| k.lock.as_str()).collect();
        let answer = if wake {
            all.extend(keys.iter().map(|k| k.waiters.as_str()));
            all.extend(keys.iter().map(|k| k.listen.as_str()));
            self.eval_release(&RELEASE_SLOTS, &all, &[Value::from(token)], limit)
        } else {
            self.eval_release(&RELEASE, &all, &[Value::from(token)], limit)
        };
        let n = keys.len();
        async move {
            Ok(
                matches!(answer.await?, Value::Integer(deleted) if usize::try_from(deleted).is_ok_and(|d| d == n)),
            )
        }
    }

    /// Swaps `token` for `next` on one node's lock key (or entry, for a lock in a `mode`),
    /// keeping its expiry ([`RESUME`]), run to completion within `limit`:
    /// [`NodeVote::Acquired`] with the time the key has left there (`None`: no expiry) if the
    /// node held `token` and now holds `next`, [`NodeVote::Held`] if it did not hold `token`,
    /// the key then keeping at most `cap_ms` (0: its expiry as it is);
    /// [`NodeError::Quarantined`] (or [`NodeError::QuarantineMismatch`]) from the quarantine
    /// check that opens the script, as every grant's. The call is made now, before the future
    /// is polled, so that a round decided at quorum still swaps the token on every node.
    pub(crate) fn resume(
        &self,
        key: &str,
        (token, next): (&str, &str),
        (mode, cap_ms): (bool, u64),
        quarantine: &QuarantineCheck,
        limit: Duration,
    ) -> impl Future<Output = (NodeVote, Option<Duration>)> + Send + use<> {
        let (witness, marker) = quarantine.keys_or(key);
        let args = [
            Value::from(token),
            Value::from(next),
            Value::from(if mode { "1" } else { "0" }),
            int_arg(quarantine.ms),
            int_arg(cap_ms),
        ];
        let answer = self.eval_release(&RESUME, &[key, witness, marker], &args, limit);
        async move {
            let unexpected = |reply: &dyn std::fmt::Debug| {
                NodeVote::Failed(NodeError::UnexpectedReply(format!(
                    "to the resume script: {reply:?}"
                )))
            };
            match answer.await {
                Ok(Value::Array(reply)) => match reply.as_slice() {
                    [Value::Integer(1), Value::Integer(left)] => (
                        NodeVote::Acquired,
                        u64::try_from(*left).ok().map(Duration::from_millis),
                    ),
                    [Value::Integer(-1), _] => (NodeVote::Failed(NodeError::Quarantined), None),
                    [Value::Integer(-3), _] => {
                        (NodeVote::Failed(NodeError::QuarantineMismatch), None)
                    }
                    [Value::Integer(0), _] => (NodeVote::Held, None),
                    _ => (unexpected(&reply), None),
                },
                Ok(reply) => (unexpected(&reply), None),
                Err(e) => (NodeVote::Failed(e), None),
            }
        }
    }

    /// Moves `token`'s entry in a resource held in modes to `mode` ([`DOWNGRADE`]), removing
    /// its request's waiter entry `marker`, waking the resource's waiters on `channel`
    /// (empty: nobody), run to completion within `limit`;
    /// made now, as [`resume`](Self::resume). [`NodeVote::Acquired`] if the entry was there
    /// and moved, [`NodeVote::Held`] otherwise.
    pub(crate) fn downgrade(
        &self,
        key: &str,
        (token, marker): (&str, &str),
        mode: Mode,
        channel: &str,
        limit: Duration,
    ) -> impl Future<Output = NodeVote> + Send + use<> {
        let args = [
            Value::from(token),
            Value::from(mode.as_str()),
            Value::from(channel),
            Value::from(marker),
        ];
        vote(self.eval_release(&DOWNGRADE, &[key], &args, limit))
    }

    /// Reads who holds `keys`' resource on one node ([`FORCE_READ`]), within `limit`: the
    /// holders' digests (SHA-1 of what signs each hold, never the token), empty when it holds
    /// none; `Ok(None)` when the key holds data that is not a lock.
    pub(crate) async fn force_read(
        &self,
        keys: &ResourceKeys,
        limit: Duration,
    ) -> Result<Option<Vec<String>>, NodeError> {
        let answer = self.eval_release(&FORCE_READ, &[keys.lock.as_str()], &[], limit);
        match answer.await? {
            Value::Array(reply) => match reply.split_first() {
                Some((Value::Integer(1), digests)) => digests
                    .iter()
                    .map(|d| {
                        d.as_string().ok_or_else(|| {
                            NodeError::UnexpectedReply(format!(
                                "to the force-read script: {reply:?}"
                            ))
                        })
                    })
                    .collect::<Result<Vec<_>, _>>()
                    .map(Some),
                Some((Value::Integer(0), [])) => Ok(Some(Vec::new())),
                Some((Value::Integer(-2), [])) => Ok(None),
                _ => Err(NodeError::UnexpectedReply(format!(
                    "to the force-read script: {reply:?}"
                ))),
            },
            reply => Err(NodeError::UnexpectedReply(format!(
                "to the force-read script: {reply:?}"
            ))),
        }
    }

    /// Removes the holders named by `digests` (a [`force_read`](Self::force_read) of every
    /// node) from `keys`' resource on one node, whatever their token ([`FORCE_RELEASE`]),
    /// waking its waiters on `channel` (empty: nobody), run to completion within `limit`;
    /// made now, as [`resume`](Self::resume). A holder that took the key after the read has
    /// another digest and stays. [`NodeVote::Acquired`] if a holder was removed,
    /// [`NodeVote::Held`] if none of them was there, and `true` beside it when the key holds
    /// data that is not a lock (left as it was).
    pub(crate) fn force_release(
        &self,
        keys: &ResourceKeys,
        digests: &[String],
        channel: &str,
        limit: Duration,
    ) -> impl Future<Output = (NodeVote, bool)> + Send + use<> {
        let mut args = Vec::with_capacity(1 + digests.len());
        args.push(Value::from(channel));
        args.extend(digests.iter().map(|d| Value::from(d.as_str())));
        let answer = self.eval_release(&FORCE_RELEASE, &[keys.lock.as_str()], &args, limit);
        async move {
            match answer.await {
                Ok(Value::Integer(1)) => (NodeVote::Acquired, false),
                Ok(Value::Integer(-2)) => (NodeVote::Held, true),
                Ok(Value::Integer(_)) => (NodeVote::Held, false),
                Ok(reply) => (
                    NodeVote::Failed(NodeError::UnexpectedReply(format!(
                        "to the force-release script: {reply:?}"
                    ))),
                    false,
                ),
                Err(e) => (NodeVote::Failed(e), false),
            }
        }
    }

    /// Writes `label` at `owner_key` beside `key` for `ttl_ms` if `token` holds it on this
    /// node ([`OWNER`]), within `limit`; made now, as [`resume`](Self::resume).
    /// [`NodeVote::Acquired`] if written.
    pub(crate) fn label_holder(
        &self,
        (key, owner_key): (&str, &str),
        (token, label): (&str, &str),
        ttl_ms: u64,
        mode: bool,
        limit: Duration,
    ) -> impl Future<Output = NodeVote> + Send + use<> {
        let args = [
            Value::from(token),
            Value::from(label),
            int_arg(ttl_ms),
            Value::from(if mode { "1" } else { "0" }),
        ];
        vote(self.eval_release(&OWNER, &[key, owner_key], &args, limit))
    }
}
