//! The kernel's typed per-node commands, each an `impl Node` beside the scripts it sends
//! ([`scripts`](super::scripts)): one acquire request (plain, queued waiter or mode), release
//! (of one resource, of several, of a permit attempt's slots), extension, the fencing
//! write-back, the quarantine check, leaving a queue, a downgrade and the holders' owner labels
//! (the replies every grant shares are decoded in [`node::replies`](crate::node::replies)).

use fred::types::Value;

use super::scripts::{
    ACQUIRE, ACQUIRE_MODE, ACQUIRE_QUEUED, DOWNGRADE, EXTEND, EXTEND_MODE, EXTEND_PERMIT, FENCE,
    KEEP, LEAVE, OWNER, QUARANTINE, RELEASE, RELEASE_HANDOVER, RELEASE_MODE, RELEASE_SLOTS,
};
use crate::keys::ResourceKeys;
use crate::mode::Mode;
use crate::node::replies::{AcquireReply, acquire_reply, counter, set_nx_reply, vote};
use crate::node::scripts::{SET_NX, Script, kept};
use crate::node::{Arg, Node, int_arg};
use crate::outcome::{NodeError, NodeVote};

/// How long a waiter queue and the resource's listen flag outlive the attempt that wrote them,
/// in ms: waiters refresh both at every attempt, so this bounds how long the entries of waiters
/// that died linger; it is longer than the longest wait between a waiter's attempts (60 s, the
/// longest retry delay), so that a live waiter keeps its place and a release still tells it.
/// Also how long a streak's start ([`keys::busy`](crate::keys)) outlives the hand-over that
/// wrote it.
pub(crate) const QUEUE_TTL_MS: u64 = 90_000;

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
    /// A new marker: `~` and a random id.
    fn marker() -> String {
        format!("~{:016x}", crate::random::u64())
    }
}

/// A request's [`Waiter`], ranked from when the request started but drawn at its first use:
/// a lock granted at its first attempt (or refused without waiting) makes no marker.
#[derive(Debug)]
pub(crate) struct LazyWaiter {
    score_ms: i64,
    drawn: std::sync::OnceLock<Waiter>,
}

impl LazyWaiter {
    /// A request's waiter, ranked by the wall clock now.
    pub(crate) fn starting_now() -> Self {
        Self {
            score_ms: crate::random::wall_clock_ms(),
            drawn: std::sync::OnceLock::new(),
        }
    }

    /// The waiter, its marker drawn now if this is its first use.
    pub(crate) fn get(&self) -> &Waiter {
        self.drawn.get_or_init(|| Waiter {
            marker: Waiter::marker(),
            score_ms: self.score_ms,
        })
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
/// [`scripts`](crate::node::scripts)): the quarantine in ms (0: off), and the keys of the
/// node's data witness and of its quarantine marker for the handle's key prefix.
#[derive(Debug)]
pub(crate) struct QuarantineCheck {
    pub(crate) ms: u64,
    pub(crate) witness: String,
    pub(crate) marker: String,
}

impl QuarantineCheck {
    /// The witness and marker keys a script is sent: with the quarantine off the scripts
    /// never touch them, and `key` (the call's lock key) stands in for both, so that an ACL
    /// user allowed only the resources' keys is not refused (`NOPERM`) for keys declared but
    /// never used.
    pub(crate) fn keys_or<'a>(&'a self, key: &'a str) -> (&'a str, &'a str) {
        if self.ms == 0 {
            (key, key)
        } else {
            (self.witness.as_str(), self.marker.as_str())
        }
    }
}

/// One attempt's request to every node (Redlock step 2).
#[derive(Debug, Clone, Copy)]
pub(crate) struct AcquireRequest<'a> {
    /// The keys of the resources it takes, all or none on each node: one resource, or a lock
    /// of several (a plain attempt only; a queued waiter or a mode request takes one).
    pub(crate) keys: &'a [ResourceKeys],
    pub(crate) token: &'a str,
    pub(crate) ttl_ms: u64,
    pub(crate) kind: AcquireKind<'a>,
    /// Read the fencing counter too (or its floor when it has expired).
    pub(crate) fencing: bool,
    /// The quarantine check (the quarantine in ms, 0: none, and its keys; `quarantine_check`
    /// in [`scripts`](crate::node::scripts)).
    pub(crate) quarantine: &'a QuarantineCheck,
    /// Windows for foreign clients are on: a plain attempt refuses an open window's key.
    pub(crate) windowed: bool,
    /// A plain attempt reads the streak of hand-overs (`windowed` implies it): on a key seen
    /// contended lately, so that a poller's hold carries the streak on. Without either, a
    /// plain attempt is the spec's `SET NX PX` alone.
    pub(crate) streak: bool,
    /// A plain attempt on one resource may be the node's own `SET NX PX` when nothing else
    /// is in play: the first attempt of a request that may attempt again. Another attempt
    /// runs the script, whose refusal also says how long the holder has left, in the same
    /// round trip (a busy error's `retry_after`).
    pub(crate) native: bool,
    /// The handle's owner label and the key it goes at for this attempt's token
    /// ([`keys::owner`](crate::keys::owner)), set only on a [native](Self::is_native)
    /// attempt, which writes it with its grant ([`SET_NX`]), in the same call.
    pub(crate) owner: Option<(&'a str, &'a str)>,
}

impl AcquireRequest<'_> {
    /// Whether the attempt is the spec's `SET NX PX` alone: a plain attempt on one resource
    /// with nothing else in play (no quarantine, fencing, window or streak), the first of a
    /// request that may attempt again ([`native`](Self::native)). The node's own command,
    /// or with an owner label [`SET_NX`], which writes the label with the grant.
    pub(crate) fn is_native(&self) -> bool {
        matches!(self.kind, AcquireKind::Plain)
            && self.keys.len() == 1
            && self.quarantine.ms == 0
            && !self.fencing
            && !self.windowed
            && !self.streak
            && self.native
    }
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

impl Node {
    /// One node's vote for `request` (Redlock step 2 on one node). A plain attempt on one
    /// resource with nothing else in play (no quarantine, fencing, window or streak) is the
    /// node's own `SET key token NX PX ttl GET` ([`Node::set_nx`]), the spec's command; any
    /// other is [`ACQUIRE`], the queued waiter's or the mode request's script, in the node's
    /// next batch ([`Node::eval`]).
    pub(crate) async fn acquire(&self, request: &AcquireRequest<'_>) -> AcquireReply {
        let AcquireRequest {
            keys,
            token,
            ttl_ms,
            kind,
            fencing,
            quarantine,
            windowed,
            streak,
            ..
        } = *request;
        // Never sent empty: a request names at least one resource.
        let Some(first) = keys.first() else {
            return AcquireReply::vote(NodeVote::Held);
        };
        let quarantine_ms = int_arg(quarantine.ms);
        let (witness, marker) = quarantine.keys_or(&first.lock);
        let fence = fencing.then_some([first.fencing(), first.fencing_floor()]);
        let keys = first;
        match kind {
            AcquireKind::Mode(mode) => {
                let args = [
                    Arg::from(token),
                    Arg::from(mode.mode.as_str()),
                    int_arg(ttl_ms),
                    Arg::from(mode.waiter.marker.as_str()),
                    int_arg(mode.intent_ttl_ms),
                    Arg::from(mode.compatible.as_str()),
                    Arg::Int(mode.waiter.score_ms),
                    quarantine_ms,
                ];
                // Without windows, the lock key stands in for the window key: the script reads
                // it only when the key is free, so it never finds a window there.
                let window = if windowed {
                    keys.window()
                } else {
                    keys.lock.as_str()
                };
                let script_keys = [keys.lock.as_str(), window, witness, marker, keys.listen()];
                self.acquire_script(&ACQUIRE_MODE, &script_keys, fence, &args)
                    .await
            }
            AcquireKind::Queued(waiter) => {
                let args = [
                    Arg::from(token),
                    int_arg(ttl_ms),
                    Arg::from(waiter.marker.as_str()),
                    Arg::Int(waiter.score_ms),
                    int_arg(QUEUE_TTL_MS),
                    quarantine_ms,
                ];
                let script_keys = [
                    keys.lock.as_str(),
                    keys.waiters(),
                    keys.window(),
                    keys.busy(),
                    witness,
                    marker,
                    keys.listen(),
                ];
                self.acquire_script(&ACQUIRE_QUEUED, &script_keys, fence, &args)
                    .await
            }
            AcquireKind::Plain if request.is_native() => match request.owner {
                // With nothing else in play (no quarantine, fencing, window or streak), the
                // script would run only its `SET NX PX`: the node's own command does that.
                None => {
                    let ttl_ms = i64::try_from(ttl_ms).unwrap_or(i64::MAX);
                    set_nx_reply(self.set_nx(&keys.lock, token, ttl_ms).await)
                }
                // The same `SET NX PX`, and the label written with the grant.
                Some((label, owner_key)) => {
                    let lock = keys.lock.as_str();
                    let script_keys = [lock, lock, lock, owner_key];
                    let args = [
                        Arg::from(token),
                        int_arg(ttl_ms),
                        int_arg(0),
                        Arg::from(label),
                    ];
                    set_nx_reply(self.eval(&SET_NX, &script_keys, &args).await)
                }
            },
            AcquireKind::Plain => {
                let set = request.keys;
                let mut args = vec![
                    Arg::from(token),
                    int_arg(ttl_ms),
                    quarantine_ms,
                    Arg::from(match (windowed, streak) {
                        (true, _) => "1",
                        (false, true) => "2",
                        (false, false) => "0",
                    }),
                ];
                if set.len() > 1 {
                    args.push(int_arg(set.len() as u64));
                }
                let mut script_keys = Vec::with_capacity(2 * set.len() + 3);
                script_keys.extend(set.iter().map(|k| k.lock.as_str()));
                script_keys.extend(set.iter().map(|k| k.window()));
                script_keys.extend([keys.busy(), witness, marker]);
                self.acquire_script(&ACQUIRE, &script_keys, fence, &args)
                    .await
            }
        }
    }

    /// Runs an acquire script on `keys`, followed by the fencing counter's and floor's keys
    /// when given, and reads its `{1 | 0 | -1, counter[, busy]}` reply.
    async fn acquire_script(
        &self,
        script: &'static Script,
        keys: &[&str],
        fence_keys: Option<[&str; 2]>,
        args: &[Arg<'_>],
    ) -> AcquireReply {
        let mut all = keys.to_vec();
        all.extend(fence_keys.into_iter().flatten());
        let key = keys.first().copied().unwrap_or_default();
        acquire_reply(self.eval(script, &all, args).await, key)
    }

    /// Releases `token`'s lock on one node, run to completion ([`Node::eval_release`]; the
    /// release round bounds it): compare-and-delete ([`RELEASE`]); with `handover`, a holder's
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
    ) -> impl Future<Output = Result<bool, NodeError>> + Send + use<> {
        let key = keys.lock.as_str();
        let answer = match (releasing, handover) {
            (Releasing::Keep { keep_ms }, _) => {
                let kept = kept(token);
                let args = [Arg::from(token), int_arg(keep_ms), Arg::from(&kept)];
                self.eval_release(&KEEP, &[key], &args)
            }
            (Releasing::Attempt { mode: true }, _) | (Releasing::Holder { mode: true, .. }, _) => {
                let marker = match releasing {
                    Releasing::Holder { marker, .. } => marker,
                    Releasing::Attempt { .. } | Releasing::Keep { .. } => "",
                };
                let channel = handover.map_or("", |_| keys.waiters());
                let args = [Arg::from(token), Arg::from(channel), Arg::from(marker)];
                let script_keys: &[&str] = match handover {
                    Some(_) => &[key, keys.waiters()],
                    None => &[key],
                };
                self.eval_release(&RELEASE_MODE, script_keys, &args)
            }
            (Releasing::Holder { .. }, Some(h)) => {
                let args = [
                    Arg::from(token),
                    int_arg(h.grace_ms),
                    Arg::from(keys.waiters()),
                    int_arg(h.window_ms),
                    Arg::from(if h.window_due { "1" } else { "0" }),
                    int_arg(h.busy_ms),
                    int_arg(QUEUE_TTL_MS),
                ];
                let script_keys = [
                    key,
                    keys.waiters(),
                    keys.busy(),
                    keys.window(),
                    keys.listen(),
                ];
                self.eval_release(&RELEASE_HANDOVER, &script_keys, &args)
            }
            _ => self.eval_release(&RELEASE, &[key], &[Arg::from(token)]),
        };
        async move { Ok(matches!(answer.await?, Value::Integer(1))) }
    }

    /// Compare-and-pexpire on one node ([`EXTEND`] over the lock keys of a plain lock, one
    /// resource's or several's, or [`EXTEND_MODE`] for a lock held in a mode):
    /// [`NodeVote::Acquired`] if every key (or our entry) got the new ttl, [`NodeVote::Held`]
    /// if one is gone, expired or another holder's.
    pub(crate) async fn extend(
        &self,
        keys: &[&str],
        token: &str,
        ttl_ms: u64,
        mode: bool,
    ) -> NodeVote {
        let args = [Arg::from(token), int_arg(ttl_ms)];
        let script = if mode { &EXTEND_MODE } else { &EXTEND };
        vote(self.eval(script, keys, &args)).await
    }

    /// Compare-and-pexpire of a semaphore permit's `slot` ([`EXTEND_PERMIT`]), keeping the
    /// semaphore's stored number of permits at `capacity` at least as long when it is
    /// `permits` (or gone), so that a permit extended past the capacity's first ttl still
    /// refuses a handle with another number of permits: [`NodeVote::Acquired`] if the slot
    /// got the new ttl, [`NodeVote::Held`] if it is gone, expired or another holder's.
    pub(crate) async fn extend_permit(
        &self,
        (slot, capacity): (&str, &str),
        token: &str,
        ttl_ms: u64,
        permits: u32,
    ) -> NodeVote {
        let args = [
            Arg::from(token),
            int_arg(ttl_ms),
            int_arg(u64::from(permits)),
        ];
        vote(self.eval(&EXTEND_PERMIT, &[slot, capacity], &args)).await
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
        let value = value.to_string();
        let args = [Arg::from(&value), int_arg(counter_ttl_ms)];
        let script_keys = [keys.fencing(), keys.fencing_floor(), keys.fencing_window()];
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
        let key = if mode {
            keys.lock.as_str()
        } else {
            keys.waiters()
        };
        let args = [Arg::from(marker), Arg::from(if mode { "1" } else { "0" })];
        let mut script_keys = vec![key];
        script_keys.extend(alive);
        self.eval(&LEAVE, &script_keys, &args).await.map(drop)
    }

    /// Releases `token` from every one of `slots` that holds it on one node ([`RELEASE`]
    /// over them), run to completion ([`Node::eval_release`]; the release round bounds it):
    /// the clean-up
    /// of a permit attempt. `Ok(true)` if some slot held it. The call is made now, before the
    /// future is polled.
    pub(crate) fn release_slots(
        &self,
        slots: &[&str],
        token: &str,
    ) -> impl Future<Output = Result<bool, NodeError>> + Send + use<> {
        let answer = self.eval_release(&RELEASE, slots, &[Arg::from(token)]);
        async move { Ok(matches!(answer.await?, Value::Integer(n) if n > 0)) }
    }

    /// Releases a lock of several resources on one node ([`RELEASE`] over every resource's
    /// key, or [`RELEASE_SLOTS`] to wake each one's waiters when `wake`), run to completion
    /// (the release round bounds it); made now. `Ok(true)` if every key held our token.
    pub(crate) fn release_many(
        &self,
        keys: &[ResourceKeys],
        token: &str,
        wake: bool,
    ) -> impl Future<Output = Result<bool, NodeError>> + Send + use<> {
        let mut all: Vec<&str> = keys.iter().map(|k| k.lock.as_str()).collect();
        let answer = if wake {
            all.extend(keys.iter().map(|k| k.waiters()));
            all.extend(keys.iter().map(|k| k.listen()));
            self.eval_release(&RELEASE_SLOTS, &all, &[Arg::from(token)])
        } else {
            self.eval_release(&RELEASE, &all, &[Arg::from(token)])
        };
        let n = keys.len();
        async move {
            Ok(
                matches!(answer.await?, Value::Integer(deleted) if usize::try_from(deleted).is_ok_and(|d| d == n)),
            )
        }
    }

    /// Moves `token`'s entry in a resource held in modes to `mode` ([`DOWNGRADE`]), removing
    /// its request's waiter entry `marker`, waking the resource's waiters on `channel`
    /// (empty: nobody), run to completion (its round bounds it); made now, as
    /// [`release`](Self::release). [`NodeVote::Acquired`] if the entry was there
    /// and moved, [`NodeVote::Held`] otherwise.
    pub(crate) fn downgrade(
        &self,
        key: &str,
        (token, marker): (&str, &str),
        mode: Mode,
        channel: &str,
    ) -> impl Future<Output = NodeVote> + Send + use<> {
        let args = [
            Arg::from(token),
            Arg::from(mode.as_str()),
            Arg::from(channel),
            Arg::from(marker),
        ];
        vote(self.eval_release(&DOWNGRADE, &[key], &args))
    }

    /// Writes `label` at `owner_key` beside `key` for `ttl_ms` if `token` holds it on this
    /// node ([`OWNER`]), run to completion; made now, as [`release`](Self::release).
    /// [`NodeVote::Acquired`] if written.
    pub(crate) fn label_holder(
        &self,
        (key, owner_key): (&str, &str),
        (token, label): (&str, &str),
        ttl_ms: u64,
        mode: bool,
    ) -> impl Future<Output = NodeVote> + Send + use<> {
        let args = [
            Arg::from(token),
            Arg::from(label),
            int_arg(ttl_ms),
            Arg::from(if mode { "1" } else { "0" }),
        ];
        vote(self.eval_release(&OWNER, &[key, owner_key], &args))
    }
}

/// The [`FENCE`] script's `{raised, before}`.
fn fence_reply(reply: &Value) -> Option<(bool, u64)> {
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
    fn fence_replies_decode_the_claim_and_the_counter_before_it() {
        let fenced = Value::Array(vec![1.into(), Value::from("9")]);
        assert_eq!(fence_reply(&fenced), Some((true, 9)));
        assert_eq!(fence_reply(&Value::Array(vec![1.into()])), None);
    }
}
