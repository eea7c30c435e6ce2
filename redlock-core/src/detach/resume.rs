//! Detached locks: a lock handed from one holder to another (a web request to a worker, a
//! process to its restarted self), resumed or released by its token.
//!
//! [`LockGuard::detach`] gives up the guard without releasing the lock and returns a
//! [`DetachedLock`]. [`Redlock::resume`] takes it up in any process: on every node at once it
//! swaps the detached token for a fresh one (`scripts/resume.lua`), keeping the keys' expiry,
//! holds it when a quorum swapped while their keys had validity left, and extends it to the
//! resumed ttl when they had less. Once a quorum swapped,
//! the detached token holds fewer than a quorum, so a second resumption of the same
//! `DetachedLock` fails: at most one holder resumes it.

use std::time::{Duration, SystemTime};
use tokio::time::Instant;

use tracing::Instrument;

use crate::error::{InvalidInput, LockError, LostReason};
use crate::kernel::acquire::fence;
use crate::kernel::commands::Releasing;
use crate::kernel::guard::LockGuard;
use crate::kernel::lease::{Grant, Held, Permit};
use crate::kernel::masters::Stop;
use crate::kernel::redlock::Redlock;
use crate::kernel::release::Released;
use crate::keys::{self, ResourceKeys, validate_resource};
use crate::mode::Mode;
use crate::options::{LockOptions, MAX_PERMITS};
use crate::outcome::NodeVote;
use crate::telemetry;
use crate::timing;
use crate::token::Token;

/// A held lock handed on without its guard: what another process needs to resume it
/// ([`Redlock::resume`]) or release it ([`Redlock::release_detached`]).
///
/// **It is a bearer secret**: it carries the lock's token, and whoever has it can take the
/// lock over or release it. Hand it on only through channels you would trust with a password
/// (its `Debug` output redacts the token; this crate never logs it). With the `serde` feature
/// it serializes, token included, for a job queue or a file.
///
/// The lock stays held on the nodes until its keys expire unless it is resumed: a detached
/// lock is not extended by anyone. Its [`valid_until`](Self::valid_until) is the detaching
/// process's wall-clock reading of the validity left, for information: the nodes decide
/// whether it is still held when it is resumed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DetachedLock {
    resource: String,
    key: String,
    token: Token,
    mode: Option<Mode>,
    marker: String,
    ttl: Duration,
    fencing_token: Option<u64>,
    valid_until: SystemTime,
    /// A semaphore's permit: which one; `key` is then its slot's key.
    permit: Option<Permit>,
}

impl DetachedLock {
    /// The locked resource.
    pub fn resource(&self) -> &str {
        &self.resource
    }

    /// The Redis key (key prefix + resource): a handle with another key prefix cannot resume
    /// it.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The token signing the lock on every node. Treat it as a secret.
    pub fn token(&self) -> &Token {
        &self.token
    }

    /// The mode the lock is held in; `None` for the plain exclusive lock.
    pub fn mode(&self) -> Option<Mode> {
        self.mode
    }

    /// For a semaphore's permit ([`Redlock::semaphore`](crate::Redlock::semaphore)), the
    /// semaphore's number of permits; `None` for a lock.
    pub fn permits(&self) -> Option<u32> {
        self.permit.map(|permit| permit.permits)
    }

    /// For a semaphore's permit, the slot it holds (from 0); `None` for a lock.
    pub fn slot(&self) -> Option<u32> {
        self.permit.map(|permit| permit.slot)
    }

    /// The ttl the lock was taken with: what [`Redlock::resume`] extends it to.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// The lock's fencing token, if it was taken with one. A resumed lock is a new holder and
    /// takes a fresh, larger one ([`Redlock::resume_with`]).
    pub fn fencing_token(&self) -> Option<u64> {
        self.fencing_token
    }

    /// When the validity ended, by the wall clock of the process that detached it (its
    /// monotonic deadline read as `SystemTime`). For information only: clocks of two machines
    /// differ, and the nodes decide at [`Redlock::resume`].
    pub fn valid_until(&self) -> SystemTime {
        self.valid_until
    }
}

impl LockGuard {
    /// Gives up this guard without releasing the lock, and returns what another holder needs
    /// to resume it ([`Redlock::resume`]) or release it ([`Redlock::release_detached`]): a job
    /// handed from a web request to a worker, or a holder about to restart.
    ///
    /// From here this process no longer holds the lock: the guard's auto-extension stops, its
    /// lost signal fires ([`LostReason::Detached`]), and neither its drop nor
    /// [`Redlock::release_all`] releases it. The keys stay on the nodes until their ttl
    /// unless the lock is resumed; a minimum hold
    /// ([`LockOptions::lock_at_least_for`]) does not travel with it.
    ///
    /// # Errors
    /// - [`LockError::Lost`]: the lock can no longer be trusted (released, refused, or its
    ///   validity ran out): there is nothing to hand on; the guard is consumed and the lock
    ///   released as a drop would;
    /// - [`LockError::Invalid`] ([`InvalidInput::Shared`]): re-entries share this lock
    ///   ([`hold_count`](Self::hold_count) above 1); ([`InvalidInput::ManyWith`]): it is a
    ///   lock of several resources ([`Redlock::lock_many`]), which cannot be handed on. The
    ///   lock is not handed on, and this guard's hold is given back as a drop would.
    ///
    /// A semaphore's permit is handed on as a lock is: the [`DetachedLock`] names its
    /// semaphore's number of permits and its slot, and the resumed guard holds that slot.
    pub fn detach(self) -> Result<DetachedLock, LockError> {
        let redlock = self.handle().clone();
        let lease = std::sync::Arc::clone(self.lease_ref());
        if let Err(reason) = lease.check() {
            return Err(LockError::Lost {
                resource: lease.resource.clone(),
                reason,
            });
        }
        if self.hold_count() > 1 {
            return Err(InvalidInput::Shared { action: "detached" }.into());
        }
        if !lease.also().is_empty() {
            return Err(InvalidInput::ManyWith { option: "detach" }.into());
        }
        if !redlock.inner().ledger.detach(&lease) {
            // Retired meanwhile (`release_all`, shutdown): nothing to hand on.
            return Err(LockError::Lost {
                resource: lease.resource.clone(),
                reason: lease.check().err().unwrap_or(LostReason::Released),
            });
        }
        // Out of the ledger: the guard's drop no longer releases it.
        self.forget();
        let left = lease.deadline().saturating_duration_since(Instant::now());
        Ok(DetachedLock {
            resource: lease.resource.clone(),
            key: lease.keys.lock.clone(),
            token: lease.token.clone(),
            mode: lease.mode(),
            marker: lease.marker().to_owned(),
            ttl: lease.ttl,
            fencing_token: lease.fencing_token,
            valid_until: SystemTime::now()
                .checked_add(left)
                .unwrap_or_else(SystemTime::now),
            permit: lease.permit(),
        })
    }
}

impl LockGuard {
    /// Takes a guard that was never handed out back out of the ledger, without releasing
    /// it: `false` if [`Redlock::release_all`] retired (and released) it first.
    fn take_back(self) -> bool {
        let lease = std::sync::Arc::clone(self.lease_ref());
        let taken = self.handle().inner().ledger.retire(&lease);
        self.forget();
        taken
    }
}

impl Redlock {
    /// Resumes `detached` with the handle's default options and the detached lock's ttl. See
    /// [`resume_with`](Self::resume_with).
    ///
    /// # Cancel safety
    /// As [`resume_with`](Self::resume_with).
    ///
    /// # Errors
    /// As [`resume_with`](Self::resume_with).
    pub async fn resume(&self, detached: &DetachedLock) -> Result<LockGuard, LockError> {
        let options = self.options().clone().ttl(detached.ttl);
        self.resume_with(detached, &options).await
    }

    /// Takes up a lock another guard [detached](LockGuard::detach), here or in another
    /// process, and returns a guard that extends, auto-extends and releases it like the
    /// original (with `options`: ttl, auto-extension and its caps, drift, lost margin, minimum
    /// hold from now).
    ///
    /// On every node at once the detached token is swapped for a fresh one, keeping the key's
    /// expiry; it is held when a quorum swapped. The swap is a grant to a new holder: a node
    /// in quarantine ([`RedlockBuilder::quarantine`](crate::RedlockBuilder::quarantine): it
    /// restarted, or lost its data, and may hold a token a quorum already swapped) refuses
    /// it, as it refuses every acquisition. Its validity is what those nodes hold: the
    /// round's start + the time the quorum's keys have left (the quorum-th longest) − drift
    /// (distlock spec, steps 1–4, with the keys' remaining life for the ttl), so the guard
    /// never claims more than the nodes hold. When that is less than `options`' ttl gives, the
    /// lock is extended to it as any lock is (compare-and-pexpire, counted from that round's
    /// start); if too few nodes confirm it, the guard is returned with the validity the swap
    /// gave. After the swap the detached token holds
    /// fewer than a quorum: the same `DetachedLock` resumed again, or released, is refused. A
    /// failed resumption swaps the token back where it swapped it, with the expiry each key
    /// had at the swap (an extension the resumption made meanwhile is cut back), so it
    /// can be tried again; a resumption dropped at any point before it returns (during the
    /// swap, the extension or the fencing round) does the same in the background.
    ///
    /// The mode is the detached lock's. A fenced lock is fenced again: the resumed guard's
    /// [`fencing_token`](LockGuard::fencing_token) is larger than the detached one (one more
    /// round, at the fencing quorum), so that the protected storage refuses a late write of
    /// the holder that detached it.
    ///
    /// # Cancel safety
    /// Dropping the future gives the lock back to the detached token (in the background, on
    /// the handle's runtime; [`Redlock::shutdown`] waits for it).
    ///
    /// # Errors
    /// - [`LockError::Invalid`]: bad options (a minimum hold for a lock in a mode is
    ///   [`InvalidInput::AtLeastWithMode`]); `options` ask for fencing the detached lock does
    ///   not have, or `detached` was taken through another key prefix
    ///   ([`InvalidInput::ResumeMismatch`]) (nothing is sent);
    /// - [`LockError::Lost`]: a majority no longer holds the detached token (it expired, was
    ///   released, or was already resumed);
    /// - [`LockError::Unavailable`]: too few nodes answered to decide, or, for a fenced lock,
    ///   too few confirmed its new fencing token; the swap was undone; try again;
    /// - [`LockError::NoValidity`]: a quorum swapped it, but its keys had too little time
    ///   left to be valid; the swap was undone;
    /// - [`LockError::ShuttingDown`]: the handle is shutting down (also when shutdown began
    ///   during the rounds: the swap is then undone, so another process can resume it, unless
    ///   [`Redlock::release_all`] released the resumed lock first).
    pub async fn resume_with(
        &self,
        detached: &DetachedLock,
        options: &LockOptions,
    ) -> Result<LockGuard, LockError> {
        let resource = detached.resource.as_str();
        let keys = self.check_detached(detached)?;
        if options.fencing && detached.fencing_token.is_none() {
            return Err(InvalidInput::ResumeMismatch { option: "fencing" }.into());
        }
        if detached.mode.is_some() && options.lock_at_least_for.is_some() {
            // A minimum hold is the plain lock's (`Redlock::lock_mode_with`).
            return Err(InvalidInput::AtLeastWithMode.into());
        }
        options.validate()?;
        self.masters().check_quarantine(options.ttl)?;
        if self.is_shutting_down() {
            return Err(LockError::ShuttingDown);
        }
        let span = telemetry::resume_span(resource);
        self.resume_round(detached, keys, options)
            .instrument(span)
            .await
    }

    /// The checks every use of a detached lock makes before anything is sent: its resource,
    /// and its key, which must be this handle's key for the resource (or, for a permit, its
    /// slot's); returns the keys it holds.
    fn check_detached(&self, detached: &DetachedLock) -> Result<ResourceKeys, LockError> {
        validate_resource(&detached.resource)?;
        let key = self.key_for(&detached.resource);
        let keys = match detached.permit {
            None => self.resource_keys(key),
            Some(Permit { permits, slot }) if slot < permits && permits <= MAX_PERMITS => {
                let (_queue, mut slots) = self.permit_keys(key, permits);
                slots.slots.swap_remove(slot as usize)
            }
            Some(_) => {
                return Err(InvalidInput::ResumeMismatch { option: "permit" }.into());
            }
        };
        if keys.lock != detached.key {
            return Err(InvalidInput::ResumeMismatch {
                option: "key prefix",
            }
            .into());
        }
        Ok(keys)
    }

    /// The swap round of [`resume_with`](Self::resume_with), its checks passed, then the
    /// extension and fencing rounds the resumed lock needs; the give-back stays armed until
    /// the guard is handed out, so that an error or a drop at any point swaps the detached
    /// token back.
    async fn resume_round(
        &self,
        detached: &DetachedLock,
        keys: ResourceKeys,
        options: &LockOptions,
    ) -> Result<LockGuard, LockError> {
        let resource = detached.resource.as_str();
        let next = Token::generate().map_err(LockError::Entropy)?;
        let masters = self.masters();
        let limit = masters.node_timeout;
        let key = detached.key.as_str();
        let (mode, old) = (detached.mode.is_some(), detached.token.expose());
        let quarantine = &masters.quarantine_check;
        // Armed before anything is sent: whichever way this future ends without a guard
        // (an error, or dropped midway), the token goes back to the detached one.
        let mut give_back = GiveBack {
            redlock: self.clone(),
            key: detached.key.clone(),
            tokens: Some((next.clone(), detached.token.clone())),
            mode,
            left: Vec::new(),
            _running: self.inner().tracker.token(),
        };
        let start = Instant::now();
        let tally = masters
            .round(masters.quorum, limit, Stop::AtDecision, |node| {
                node.resume(key, (old, next.expose()), (mode, 0), quarantine, limit)
            })
            .await;
        let elapsed = start.elapsed();
        // What each node's key had left at the swap: a give-back after the extension round
        // restores that, not the extended expiry.
        give_back.keep_expiries(start, &tally.counters);
        let (granted, refused) = (tally.granted, tally.refused);
        // What the swapping nodes have left (no expiry: at least the ttl asked for), the
        // longest first: the quorum-th is what a quorum holds.
        let mut left: Vec<Duration> = tally
            .votes
            .iter()
            .zip(&tally.counters)
            .filter(|(vote, _)| matches!(vote, NodeVote::Acquired))
            .map(|(_, left)| left.flatten().unwrap_or(options.sent_ttl()))
            .collect();
        left.sort_unstable_by(|a, b| b.cmp(a));
        let outcomes = masters.outcomes(tally.votes);
        tracing::debug!(swapped = granted, refused, "resumption decided");
        let Some(&held) = left.get(masters.quorum - 1) else {
            give_back.now().await;
            if refused > masters.len() - masters.quorum {
                return Err(LockError::Lost {
                    resource: resource.to_owned(),
                    reason: LostReason::Refused(outcomes),
                });
            }
            return Err(LockError::Unavailable {
                resource: resource.to_owned(),
                attempts: 1,
                quorum: masters.quorum,
                outcomes,
            });
        };
        if self.is_shutting_down() {
            // Shutdown began during the swap: nothing more is sent but the give-back, which
            // `shutdown` waits for (`_running`).
            give_back.now().await;
            return Err(LockError::ShuttingDown);
        }
        let drift = timing::drift(held, options.drift_factor);
        let mut valid_until = start + held.saturating_sub(drift);
        if Instant::now() >= valid_until {
            give_back.now().await;
            return Err(LockError::NoValidity {
                resource: resource.to_owned(),
                attempts: 1,
                elapsed,
                ttl: held,
            });
        }
        // Extended to the ttl asked for when the keys hold less; if too few nodes confirm,
        // it is held all the same, until what the swap gave.
        let (ttl, ttl_drift) = (
            options.sent_ttl(),
            timing::drift(options.sent_ttl(), options.drift_factor),
        );
        if valid_until < start + ttl.saturating_sub(ttl_drift) {
            let token = next.expose();
            let start = Instant::now();
            let limit = limit.min(valid_until.saturating_duration_since(start));
            let ttl_ms = options.ttl_millis();
            // A permit keeps its semaphore's stored number of permits alive as long.
            let capacity = detached.permit.and_then(|permit| {
                keys::permit_capacity_of_slot(key, permit.slot).map(|c| (c, permit.permits))
            });
            let capacity = capacity.as_ref().map(|(c, permits)| (c.as_str(), *permits));
            let tally = masters
                .round(masters.quorum, limit, Stop::AtDecision, |node| async move {
                    let vote = match capacity {
                        Some((capacity, permits)) => {
                            node.extend_permit((key, capacity), token, ttl_ms, permits)
                                .await
                        }
                        None => node.extend(&[key], token, ttl_ms, mode).await,
                    };
                    (vote, ())
                })
                .await;
            if tally.granted >= masters.quorum && Instant::now() < valid_until {
                valid_until = valid_until.max(start + ttl - ttl_drift);
            }
        }
        // A resumer is a new holder: a fenced lock takes a fresh token, above the detached
        // lock's, so that storage refuses a late write of the detaching holder.
        let fencing_token = match detached.fencing_token {
            Some(before) => match fence(masters, &keys, before, limit).await {
                Ok(token) => Some(token),
                Err(outcomes) => {
                    give_back.now().await;
                    return Err(LockError::Unavailable {
                        resource: resource.to_owned(),
                        attempts: 1,
                        quorum: masters.fencing_quorum,
                        outcomes,
                    });
                }
            },
            None => None,
        };
        if Instant::now() >= valid_until {
            give_back.now().await;
            return Err(LockError::NoValidity {
                resource: resource.to_owned(),
                attempts: 1,
                elapsed: start.elapsed(),
                ttl: held,
            });
        }
        let grant = Grant {
            fencing_token,
            held: match (detached.permit, detached.mode) {
                (Some(permit), _) => Held::Permit(permit),
                (None, Some(mode)) => Held::mode(mode, detached.marker.clone()),
                (None, None) => Held::ONE,
            },
            ..Grant::new(start, valid_until)
        };
        let class = telemetry::class_of(resource, options);
        let guard = self.register(resource, &class, keys, next, options, grant);
        if self.is_shutting_down() {
            // Shutdown began during the rounds: what `release_all` missed is given back to
            // the detached token, so that another process can resume it. If `release_all`
            // took it first, it released it: nothing is given back (a swap back racing its
            // deletes would leave the detached token on a minority).
            if guard.take_back() {
                give_back.now().await;
            } else {
                give_back.tokens = None;
            }
            return Err(LockError::ShuttingDown);
        }
        give_back.tokens = None;
        Ok(guard)
    }

    /// Releases `detached` on every node (compare-and-delete with its token, waking the
    /// resource's waiters), from any process: a holder that will not resume a lock it
    /// detached. A lock already resumed elsewhere holds another token and is not touched.
    ///
    /// # Cancel safety
    /// The releases are handed to the nodes at the first poll: dropping the future afterwards does
    /// not cut them short. Calling it again is safe: a node whose key is gone has nothing to
    /// delete.
    ///
    /// # Errors
    /// - [`LockError::Invalid`]: a bad resource, or `detached` was taken through another key
    ///   prefix ([`InvalidInput::ResumeMismatch`]); nothing is sent;
    /// - [`LockError::ReleaseUnconfirmed`]: fewer than a quorum of nodes answered; the keys
    ///   then expire with their ttl.
    pub async fn release_detached(&self, detached: DetachedLock) -> Result<Released, LockError> {
        let keys = self.check_detached(&detached)?;
        let releasing = Releasing::Holder {
            mode: detached.mode.is_some(),
            marker: &detached.marker,
        };
        let class = telemetry::resource_class(&detached.resource);
        let span = telemetry::release_span(&detached.resource, &class, "detached");
        let released = self
            .release_key(&keys, &detached.token, releasing, Duration::ZERO)
            .instrument(span.clone())
            .await;
        telemetry::released(&span, released.deleted, released.answered, released.quorum);
        if released.answered < released.quorum {
            return Err(LockError::ReleaseUnconfirmed {
                resource: detached.resource.clone(),
                answered: released.answered,
                nodes: released.nodes,
                quorum: released.quorum,
            });
        }
        Ok(released)
    }
}

/// A resumption's swap, undone unless disarmed (`tokens` taken): swaps the fresh token back to
/// the detached one on every node, now ([`now`](Self::now)) or, when the resumption's future
/// is dropped midway, in the background on the handle's runtime.
struct GiveBack {
    redlock: Redlock,
    key: String,
    /// The fresh token and the detached one; `None` once the lock is held.
    tokens: Option<(Token, Token)>,
    mode: bool,
    /// Per node, until when its key was to live when it swapped (from the swap round's
    /// start, which is earlier than the swap: never later than the key's own expiry); empty
    /// before the swap round decided. A node that swapped unheard gets the longest of them.
    left: Vec<Option<Instant>>,
    /// Counts the resumption among the handle's background work until the give-back, if any,
    /// is sent or spawned (fields drop after `drop`): `shutdown` waits for it, so it never
    /// returns while a resumption it did not release may still lengthen or keep the keys.
    _running: tokio_util::task::task_tracker::TaskTrackerToken,
}

impl GiveBack {
    /// Records what each node's key had left at the swap (`counters`, per node, from the
    /// swap round started at `start`), so that the give-back restores it.
    fn keep_expiries(&mut self, start: Instant, counters: &[Option<Option<Duration>>]) {
        self.left = counters
            .iter()
            .map(|left| left.flatten().and_then(|left| start.checked_add(left)))
            .collect();
    }

    /// The cap of node `i`'s key at a give-back now, in ms: what it had left at the swap less
    /// the time since (at least 1 ms); 0 (no cap) before the swap round decided, when nothing
    /// can have lengthened it.
    fn cap_ms(&self, i: usize) -> u64 {
        let Some(longest) = self.left.iter().flatten().max() else {
            return 0;
        };
        let until = self.left.get(i).copied().flatten().unwrap_or(*longest);
        let ms = until
            .saturating_duration_since(Instant::now())
            .as_millis()
            .max(1);
        u64::try_from(ms).unwrap_or(u64::MAX)
    }

    /// Swaps back on every node, each within the node timeout.
    async fn now(&mut self) {
        if let Some(give_back) = self.sends() {
            give_back.await;
        }
    }

    /// The swap back, sent to every node now; `None` if disarmed.
    fn sends(&mut self) -> Option<impl Future<Output = ()> + Send + use<>> {
        let (next, old) = self.tokens.take()?;
        let masters = self.redlock.masters();
        let limit = masters.node_timeout;
        // The detached lock keeps the time it had: each key's expiry at the swap.
        let (key, mode) = (self.key.as_str(), self.mode);
        let answers: Vec<_> = masters
            .nodes
            .iter()
            .enumerate()
            .map(|(i, node)| {
                let tokens = (next.expose(), old.expose());
                let quarantine = &masters.quarantine_check;
                node.resume(key, tokens, (mode, self.cap_ms(i)), quarantine, limit)
            })
            .collect();
        Some(async move {
            futures_util::future::join_all(answers).await;
        })
    }
}

impl Drop for GiveBack {
    fn drop(&mut self) {
        if let Some(give_back) = self.sends() {
            // The calls are already handed to the nodes' pipelines; the task only awaits them.
            let _spawned = self.redlock.spawn_background(give_back);
        }
    }
}

/// The serialized form of a [`DetachedLock`]: plain fields, durations and times in ms.
#[cfg(feature = "serde")]
#[derive(serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Wire {
    resource: String,
    key: String,
    token: String,
    mode: Option<String>,
    marker: String,
    ttl_ms: u64,
    fencing_token: Option<u64>,
    valid_until_unix_ms: u64,
    /// A permit's semaphore size and slot; absent for a lock.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    permits: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    slot: Option<u32>,
}

/// With the `serde` feature: serializes every field, **the token included** (it is a bearer
/// secret: see [`DetachedLock`]).
#[cfg(feature = "serde")]
#[cfg_attr(docsrs, doc(cfg(feature = "serde")))]
impl serde::Serialize for DetachedLock {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        let since_epoch = self
            .valid_until
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default();
        Wire {
            resource: self.resource.clone(),
            key: self.key.clone(),
            token: self.token.expose().to_owned(),
            mode: self.mode.map(|m| m.as_str().to_owned()),
            marker: self.marker.clone(),
            ttl_ms: ms(self.ttl),
            fencing_token: self.fencing_token,
            valid_until_unix_ms: ms(since_epoch),
            permits: self.permits(),
            slot: self.slot(),
        }
        .serialize(serializer)
    }
}

/// With the `serde` feature: reads what [`Serialize`](serde::Serialize) wrote, and refuses a
/// token, mode or marker that no lock of this crate could have.
#[cfg(feature = "serde")]
#[cfg_attr(docsrs, doc(cfg(feature = "serde")))]
impl<'de> serde::Deserialize<'de> for DetachedLock {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        let wire = Wire::deserialize(deserializer)?;
        let token = Token::parse(&wire.token)
            .ok_or_else(|| D::Error::custom("token: not a lock token (40 lowercase hex digits)"))?;
        let mode = wire
            .mode
            .map(|m| m.parse::<Mode>())
            .transpose()
            .map_err(D::Error::custom)?;
        let marker_ok = wire.marker.is_empty()
            || (wire.marker.len() == 17
                && wire.marker.starts_with('~')
                && wire.marker[1..]
                    .bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)));
        if !marker_ok {
            return Err(D::Error::custom("marker: not a waiter marker"));
        }
        let permit = match (wire.permits, wire.slot) {
            (None, None) => None,
            (Some(permits), Some(slot)) if slot < permits && permits <= MAX_PERMITS => {
                Some(Permit { permits, slot })
            }
            _ => {
                return Err(D::Error::custom(
                    "permits, slot: a permit needs both, with the slot below the permits",
                ));
            }
        };
        Ok(Self {
            resource: wire.resource,
            key: wire.key,
            token,
            mode,
            marker: wire.marker,
            ttl: Duration::from_millis(wire.ttl_ms),
            fencing_token: wire.fencing_token,
            valid_until: SystemTime::UNIX_EPOCH
                .checked_add(Duration::from_millis(wire.valid_until_unix_ms))
                .unwrap_or(SystemTime::UNIX_EPOCH),
            permit,
        })
    }
}
