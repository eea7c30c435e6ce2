//! The typed per-node commands: one acquire request (plain, queued waiter or mode), release,
//! extension, the fencing write-back and leaving a queue (their replies are decoded in
//! [`replies`](super::replies)).

use std::time::Duration;

use fred::types::Value;
use rand::Rng;

use super::Node;
use super::replies::{AcquireReply, PermitReply, acquire_reply, fence_reply, permit_reply};
use super::scripts::{
    ACQUIRE, ACQUIRE_MANY, ACQUIRE_MODE, ACQUIRE_PERMIT, ACQUIRE_QUEUED, DOWNGRADE, EXTEND,
    EXTEND_MANY, EXTEND_MODE, FENCE, FORCE_RELEASE, KEEP, KEPT, LEAVE, OWNER, QUARANTINE, RELEASE,
    RELEASE_HANDOVER, RELEASE_MODE, RELEASE_SLOTS, RESUME, Script,
};
use crate::keys::ResourceKeys;
use crate::mode::Mode;
use crate::outcome::{NodeError, NodeVote};

/// How long a waiter queue outlives its last enqueue, in ms: waiters refresh it at every
/// attempt, so this only bounds how long the entries of waiters that died linger. Also how long
/// a streak's start ([`keys::busy`](crate::keys)) outlives the hand-over that wrote it.
pub(crate) const QUEUE_TTL_MS: u64 = 30_000;

/// One acquisition's identity as a waiter, drawn once for all its attempts.
#[derive(Debug, Clone)]
pub(crate) struct Waiter {
    /// `~` and a random id: its member in the queue of plain waiters, the value of a key
    /// reserved for it, the field of a mode request's waiter entry.
    pub(crate) marker: String,
    /// When it started, in ms since the Unix epoch: its rank among waiters, the same on every
    /// node.
    pub(crate) score_ms: i64,
}

impl Waiter {
    /// A new identity, ranked by the wall clock now.
    pub(crate) fn draw() -> Self {
        let score_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
        Self {
            marker: format!("~{:016x}", rand::rng().random::<u64>()),
            score_ms,
        }
    }
}

/// One request in a mode: what every node's [`ACQUIRE_MODE`] needs beyond keys and token.
#[derive(Debug)]
pub(crate) struct ModeRequest<'a> {
    pub(crate) mode: Mode,
    /// The modes compatible with `mode`, space-separated.
    compatible: String,
    pub(crate) waiter: &'a Waiter,
    /// How long the waiter entry outlives the attempt that wrote it, in ms.
    intent_ttl_ms: u64,
}

impl<'a> ModeRequest<'a> {
    pub(crate) fn new(mode: Mode, waiter: &'a Waiter, intent_ttl_ms: u64) -> Self {
        Self {
            mode,
            compatible: mode.compatible_list(),
            waiter,
            intent_ttl_ms,
        }
    }
}

/// How an attempt asks a node.
#[derive(Debug, Clone, Copy)]
pub(crate) enum AcquireKind<'a> {
    /// A plain attempt (`SET NX`).
    Plain,
    /// A plain attempt by a queued waiter ([`ACQUIRE_QUEUED`]).
    Queued(&'a Waiter),
    /// A request in a lock mode ([`ACQUIRE_MODE`]).
    Mode(&'a ModeRequest<'a>),
}

/// The quarantine check every acquire script opens with (`quarantine_check` in
/// [`scripts`](super::scripts)): the quarantine in ms (0: off), and the keys of the
/// node's data witness and of its quarantine marker for the handle's key prefix.
#[derive(Debug)]
pub(crate) struct QuarantineCheck {
    pub(crate) ms: u64,
    pub(crate) witness: String,
    pub(crate) marker: String,
}

/// One attempt's request to every node (Redlock step 2).
#[derive(Debug, Clone, Copy)]
pub(crate) struct AcquireRequest<'a> {
    pub(crate) keys: &'a ResourceKeys,
    pub(crate) token: &'a str,
    pub(crate) ttl_ms: u64,
    pub(crate) kind: AcquireKind<'a>,
    /// Read the fencing counter too (or its floor when it has expired).
    pub(crate) fencing: bool,
    /// The quarantine check (the quarantine in ms, 0: none, and its keys; `quarantine_check`
    /// in [`scripts`](super::scripts)).
    pub(crate) quarantine: &'a QuarantineCheck,
    /// Windows for foreign clients are on: a plain attempt refuses an open window's key.
    pub(crate) windowed: bool,
}

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

/// How a release hands the key over to a queued waiter (hand-over on).
#[derive(Debug, Clone)]
pub(crate) struct Handover {
    /// How long the key stays reserved for the named waiter, in ms.
    pub(crate) grace_ms: u64,
    /// The window for foreign clients, in ms (0: never open one, and keep no streak).
    pub(crate) window_ms: u64,
    /// The releasing holder found the streak long enough: open a window if a waiter is
    /// queued, instead of handing over.
    pub(crate) window_due: bool,
    /// How long the key has been busy without a window, by the releasing holder's count
    /// (the streak it read when granted, plus its hold), in ms.
    pub(crate) busy_ms: u64,
}

/// What a release removes.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Releasing<'a> {
    /// A failed attempt's grants (`mode`: made in a lock mode): nothing is handed over, and a
    /// mode request keeps its waiter entry (its place among the waiters).
    Attempt { mode: bool },
    /// A holder's lock, with its mode request's waiter marker (empty for the plain lock).
    Holder { mode: bool, marker: &'a str },
    /// A holder's plain lock released before its minimum hold: kept for `keep_ms` more
    /// ([`KEEP`]), nothing handed over.
    Keep { keep_ms: u64 },
}

/// A ttl, a grace or any other count of milliseconds or seconds as a command argument.
fn int_arg(value: u64) -> Value {
    Value::Integer(i64::try_from(value).unwrap_or(i64::MAX))
}

impl Node {
    /// One node's vote for `request` (Redlock step 2 on one node): [`ACQUIRE`] (`SET NX PX`
    /// outside windows for foreign clients), or the queued waiter's or the mode request's
    /// script, in the node's next batch ([`pipeline`](super::pipeline)). A plain attempt is a
    /// script too, not fred's typed `SET`: the batch carries it with the other lockers'
    /// calls in one command, where the typed `SET` and the window and streak reads would be
    /// four commands per attempt. With 32 lockers on distinct resources (5 nodes, 2 cores) the
    /// batches give 17,500 cycles/s, against 9,100 with every call sent alone.
    pub(crate) async fn acquire(&self, request: &AcquireRequest<'_>) -> AcquireReply {
        let AcquireRequest {
            keys,
            token,
            ttl_ms,
            kind,
            fencing,
            quarantine,
            windowed,
        } = *request;
        let quarantine_ms = int_arg(quarantine.ms);
        // With the quarantine off, the scripts never touch its keys: the lock key stands in
        // for them, so that an ACL user allowed only the resources' keys is not refused
        // (`NOPERM`) for keys declared but never used.
        let (witness, marker) = if quarantine.ms == 0 {
            (keys.lock.as_str(), keys.lock.as_str())
        } else {
            (quarantine.witness.as_str(), quarantine.marker.as_str())
        };
        let fence = fencing.then_some([keys.fencing.as_str(), keys.fencing_floor.as_str()]);
        match kind {
            AcquireKind::Mode(mode) => {
                let args = [
                    Value::from(token),
                    Value::from(mode.mode.as_str()),
                    int_arg(ttl_ms),
                    Value::from(mode.waiter.marker.as_str()),
                    int_arg(mode.intent_ttl_ms),
                    Value::from(mode.compatible.as_str()),
                    Value::Integer(mode.waiter.score_ms),
                    quarantine_ms.clone(),
                ];
                let script_keys = [keys.lock.as_str(), keys.window.as_str(), witness, marker];
                self.acquire_script(&ACQUIRE_MODE, &script_keys, fence, &args)
                    .await
            }
            AcquireKind::Queued(waiter) => {
                let args = [
                    Value::from(token),
                    int_arg(ttl_ms),
                    Value::from(waiter.marker.as_str()),
                    Value::Integer(waiter.score_ms),
                    int_arg(QUEUE_TTL_MS),
                    quarantine_ms.clone(),
                ];
                let script_keys = [
                    keys.lock.as_str(),
                    keys.waiters.as_str(),
                    keys.window.as_str(),
                    keys.busy.as_str(),
                    witness,
                    marker,
                ];
                self.acquire_script(&ACQUIRE_QUEUED, &script_keys, fence, &args)
                    .await
            }
            AcquireKind::Plain => {
                let args = [
                    Value::from(token),
                    int_arg(ttl_ms),
                    quarantine_ms.clone(),
                    Value::from(if windowed { "1" } else { "0" }),
                ];
                let script_keys = [
                    keys.lock.as_str(),
                    keys.window.as_str(),
                    keys.busy.as_str(),
                    witness,
                    marker,
                ];
                self.acquire_script(&ACQUIRE, &script_keys, fence, &args)
                    .await
            }
        }
    }

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
        let (witness, marker) = if quarantine.ms == 0 {
            (queue.waiters.as_str(), queue.waiters.as_str())
        } else {
            (quarantine.witness.as_str(), quarantine.marker.as_str())
        };
        let mut keys = Vec::with_capacity(slots.len() + 4);
        keys.extend([witness, marker, queue.waiters.as_str(), alive]);
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

    /// Runs an acquire script on `keys`, followed by the fencing counter's and floor's keys
    /// when given, and reads its `{1 | 0 | -1, counter[, busy]}` reply.
    async fn acquire_script(
        &self,
        script: &'static Script,
        keys: &[&str],
        fence_keys: Option<[&str; 2]>,
        args: &[Value],
    ) -> AcquireReply {
        let mut all = keys.to_vec();
        all.extend(fence_keys.into_iter().flatten());
        let key = keys.first().copied().unwrap_or_default();
        acquire_reply(self.eval(script, &all, args).await, key)
    }

    /// Releases `token`'s lock on one node, run to completion within `limit`
    /// ([`Node::eval_release`]): compare-and-delete ([`RELEASE`]); with `handover`, a holder's
    /// plain key goes to the longest queued waiter, or opens a window for foreign clients
    /// ([`RELEASE_HANDOVER`]); a lock in a mode removes only its own entry and wakes the
    /// resource's waiters when hand-over is on ([`RELEASE_MODE`]). `Ok(true)` if our key (or
    /// live entry) was there. The call is made now, before the future is polled.
    pub(crate) fn release(
        &self,
        keys: &ResourceKeys,
        token: &str,
        releasing: Releasing<'_>,
        handover: Option<&Handover>,
        limit: Duration,
    ) -> impl Future<Output = Result<bool, NodeError>> + Send + use<> {
        let key = keys.lock.as_str();
        let answer = match (releasing, handover) {
            (Releasing::Keep { keep_ms }, _) => {
                let args = [Value::from(token), int_arg(keep_ms), Value::from(KEPT)];
                self.eval_release(&KEEP, &[key], &args, limit)
            }
            (Releasing::Attempt { mode: true }, _) | (Releasing::Holder { mode: true, .. }, _) => {
                let marker = match releasing {
                    Releasing::Holder { marker, .. } => marker,
                    Releasing::Attempt { .. } | Releasing::Keep { .. } => "",
                };
                let channel = handover.map_or("", |_| keys.waiters.as_str());
                let args = [
                    Value::from(token),
                    Value::from(channel),
                    Value::from(marker),
                ];
                let script_keys: &[&str] = match handover {
                    Some(_) => &[key, keys.waiters.as_str()],
                    None => &[key],
                };
                self.eval_release(&RELEASE_MODE, script_keys, &args, limit)
            }
            (Releasing::Holder { .. }, Some(h)) => {
                let args = [
                    Value::from(token),
                    int_arg(h.grace_ms),
                    Value::from(keys.waiters.as_str()),
                    int_arg(h.window_ms),
                    Value::from(if h.window_due { "1" } else { "0" }),
                    int_arg(h.busy_ms),
                    int_arg(QUEUE_TTL_MS),
                ];
                let script_keys = [
                    key,
                    keys.waiters.as_str(),
                    keys.busy.as_str(),
                    keys.window.as_str(),
                ];
                self.eval_release(&RELEASE_HANDOVER, &script_keys, &args, limit)
            }
            _ => self.eval_release(&RELEASE, &[key], &[Value::from(token)], limit),
        };
        async move { Ok(matches!(answer.await?, Value::Integer(1))) }
    }

    /// Releases `token` from every one of `slots` that holds it on one node
    /// ([`RELEASE_SLOTS`]), run to completion within `limit` ([`Node::eval_release`]): the
    /// clean-up of a permit attempt. `Ok(true)` if some slot held it. The call is made now,
    /// before the future is polled.
    pub(crate) fn release_slots(
        &self,
        slots: &[&str],
        token: &str,
        limit: Duration,
    ) -> impl Future<Output = Result<bool, NodeError>> + Send + use<> {
        let answer = self.eval_release(&RELEASE_SLOTS, slots, &[Value::from(token)], limit);
        async move { Ok(matches!(answer.await?, Value::Integer(n) if n > 0)) }
    }

    /// Releases a lock of several resources on one node ([`RELEASE_SLOTS`] over every
    /// resource's key, waking each one's waiters when `wake`), run to completion within
    /// `limit`; made now. `Ok(true)` if every key held our token.
    pub(crate) fn release_many(
        &self,
        keys: &[ResourceKeys],
        token: &str,
        wake: bool,
        limit: Duration,
    ) -> impl Future<Output = Result<bool, NodeError>> + Send + use<> {
        let mut all: Vec<&str> = keys.iter().map(|k| k.lock.as_str()).collect();
        if wake {
            all.extend(keys.iter().map(|k| k.waiters.as_str()));
        }
        let args = [
            Value::from(token),
            Value::from(if wake { "1" } else { "0" }),
        ];
        let answer = self.eval_release(&RELEASE_SLOTS, &all, &args, limit);
        let n = keys.len();
        async move {
            Ok(
                matches!(answer.await?, Value::Integer(deleted) if usize::try_from(deleted).is_ok_and(|d| d == n)),
            )
        }
    }

    /// One node's vote for a lock of several resources ([`ACQUIRE_MANY`]): every key set to
    /// `token` for `ttl_ms`, or none (a key that exists, or an open window, refuses it all).
    pub(crate) async fn acquire_many(
        &self,
        keys: &[ResourceKeys],
        token: &str,
        ttl_ms: u64,
        quarantine: &QuarantineCheck,
        windowed: bool,
    ) -> AcquireReply {
        let first = keys.first().map_or("", |k| k.lock.as_str());
        let (witness, marker) = if quarantine.ms == 0 {
            (first, first)
        } else {
            (quarantine.witness.as_str(), quarantine.marker.as_str())
        };
        let mut all = Vec::with_capacity(2 + 2 * keys.len());
        all.extend([witness, marker]);
        all.extend(keys.iter().map(|k| k.lock.as_str()));
        all.extend(keys.iter().map(|k| k.window.as_str()));
        let args = [
            Value::from(token),
            int_arg(ttl_ms),
            int_arg(quarantine.ms),
            Value::from(if windowed { "1" } else { "0" }),
        ];
        acquire_reply(self.eval(&ACQUIRE_MANY, &all, &args).await, first)
    }

    /// Compare-and-pexpire of a lock of several resources on one node ([`EXTEND_MANY`]):
    /// [`NodeVote::Acquired`] if every key held our token and now lives `ttl_ms`.
    pub(crate) async fn extend_many(&self, keys: &[&str], token: &str, ttl_ms: u64) -> NodeVote {
        let args = [Value::from(token), int_arg(ttl_ms)];
        match self.eval(&EXTEND_MANY, keys, &args).await {
            Ok(Value::Integer(1)) => NodeVote::Acquired,
            Ok(_) => NodeVote::Held,
            Err(e) => NodeVote::Failed(e),
        }
    }

    /// Compare-and-pexpire on one node ([`EXTEND`], or [`EXTEND_MODE`] for a lock held in a
    /// mode): [`NodeVote::Acquired`] if our key (or entry) got the new ttl,
    /// [`NodeVote::Held`] if it is gone, expired or another holder's.
    pub(crate) async fn extend(&self, key: &str, token: &str, ttl_ms: u64, mode: bool) -> NodeVote {
        let args = [Value::from(token), int_arg(ttl_ms)];
        let script = if mode { &EXTEND_MODE } else { &EXTEND };
        match self.eval(script, &[key], &args).await {
            Ok(Value::Integer(1)) => NodeVote::Acquired,
            Ok(_) => NodeVote::Held,
            Err(e) => NodeVote::Failed(e),
        }
    }

    /// Claims `value` as the resource's next fencing token ([`FENCE`]):
    /// [`NodeVote::Acquired`] if the node confirmed it (it was above every token the node
    /// confirmed for the resource); otherwise [`NodeVote::Held`]. Either way with what it was
    /// compared with (`u64::MAX` if larger).
    /// The counter lives `counter_ttl_ms` (0: forever).
    pub(crate) async fn fence(
        &self,
        keys: &ResourceKeys,
        counter_ttl_ms: u64,
        value: u64,
    ) -> (NodeVote, u64) {
        let args = [Value::from(value.to_string()), int_arg(counter_ttl_ms)];
        let script_keys = [
            keys.fencing.as_str(),
            keys.legacy_fencing.as_str(),
            keys.fencing_floor.as_str(),
            keys.fencing_window.as_str(),
        ];
        match self.eval(&FENCE, &script_keys, &args).await {
            Ok(reply) => match fence_reply(&reply) {
                Some((true, before)) => (NodeVote::Acquired, before),
                Some((false, before)) => (NodeVote::Held, before),
                None => (
                    NodeVote::Failed(NodeError::UnexpectedReply(format!(
                        "to the fence script: {reply:?}"
                    ))),
                    0,
                ),
            },
            Err(e) => (NodeVote::Failed(e), 0),
        }
    }

    /// Runs the quarantine check alone ([`QUARANTINE`]): writes the node's data witness and
    /// starts its quarantine if the witness is missing or another server's. `Ok(true)` if
    /// the node is in quarantine.
    pub(crate) async fn check_quarantine(
        &self,
        quarantine: &QuarantineCheck,
    ) -> Result<bool, NodeError> {
        let keys = [quarantine.witness.as_str(), quarantine.marker.as_str()];
        let reply = self
            .eval(&QUARANTINE, &keys, &[int_arg(quarantine.ms)])
            .await?;
        Ok(acquire_reply(Ok(reply), "").vote != NodeVote::Acquired)
    }

    /// Swaps `token` for `next` on one node's lock key (or entry, for a lock in a `mode`),
    /// keeping its expiry ([`RESUME`]), run to completion within `limit`:
    /// [`NodeVote::Acquired`] with the time the key has left there (`None`: no expiry) if the
    /// node held `token` and now holds `next`, [`NodeVote::Held`] if it did not hold `token`.
    /// The call is made now, before the future is polled, so that a round decided at quorum
    /// still swaps the token on every node.
    pub(crate) fn resume(
        &self,
        key: &str,
        (token, next): (&str, &str),
        mode: bool,
        limit: Duration,
    ) -> impl Future<Output = (NodeVote, Option<Duration>)> + Send + use<> {
        let args = [
            Value::from(token),
            Value::from(next),
            Value::from(if mode { "1" } else { "0" }),
        ];
        let answer = self.eval_release(&RESUME, &[key], &args, limit);
        async move {
            match answer.await {
                Ok(Value::Array(reply)) => match reply.as_slice() {
                    [Value::Integer(1), Value::Integer(left)] => (
                        NodeVote::Acquired,
                        u64::try_from(*left).ok().map(Duration::from_millis),
                    ),
                    [Value::Integer(_), _] => (NodeVote::Held, None),
                    _ => (
                        NodeVote::Failed(NodeError::UnexpectedReply(format!(
                            "to the resume script: {reply:?}"
                        ))),
                        None,
                    ),
                },
                Ok(reply) => (
                    NodeVote::Failed(NodeError::UnexpectedReply(format!(
                        "to the resume script: {reply:?}"
                    ))),
                    None,
                ),
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

    /// Removes whoever holds `keys`' resource on one node, whatever their token
    /// ([`FORCE_RELEASE`]), waking its waiters on `channel` (empty: nobody), run to completion
    /// within `limit`; made now, as [`resume`](Self::resume). [`NodeVote::Acquired`] if a
    /// holder was removed, [`NodeVote::Held`] if none was there, and `Ok(false)` beside it
    /// when the key holds data that is not a lock (left as it was).
    pub(crate) fn force_release(
        &self,
        keys: &ResourceKeys,
        channel: &str,
        limit: Duration,
    ) -> impl Future<Output = (NodeVote, bool)> + Send + use<> {
        let answer = self.eval_release(
            &FORCE_RELEASE,
            &[keys.lock.as_str()],
            &[Value::from(channel)],
            limit,
        );
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

    /// Leaves a resource's waiters (a waiter that gave up): its place in the queue of plain
    /// waiters, or, for a mode request (`mode`), its waiter's entry in the holders' hash
    /// ([`LEAVE`]); and its entry in a semaphore's `alive` set, when given.
    pub(crate) async fn leave(
        &self,
        keys: &ResourceKeys,
        marker: &str,
        mode: bool,
        alive: Option<&str>,
    ) -> Result<(), NodeError> {
        let key = if mode { &keys.lock } else { &keys.waiters };
        let args = [
            Value::from(marker),
            Value::from(if mode { "1" } else { "0" }),
        ];
        let mut script_keys = vec![key.as_str()];
        script_keys.extend(alive);
        self.eval(&LEAVE, &script_keys, &args).await.map(drop)
    }
}

/// A script call's answer as a vote: `1` granted, any other reply refused, an error failed.
async fn vote(answer: impl Future<Output = Result<Value, NodeError>>) -> NodeVote {
    match answer.await {
        Ok(Value::Integer(1)) => NodeVote::Acquired,
        Ok(_) => NodeVote::Held,
        Err(e) => NodeVote::Failed(e),
    }
}
