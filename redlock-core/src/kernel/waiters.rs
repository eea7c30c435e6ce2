//! Waking waiters without polling, and handing the lock over fairly.
//!
//! A waiter joins the resource's queue on every node (a sorted set scored by when it started
//! waiting) and subscribes to the resource's hand-over channel on every node. A release finding
//! waiters reserves the key for the longest one for a short grace and publishes its name
//! (`RELEASE_HANDOVER` in the node scripts): that waiter attempts at once, the
//! others keep waiting, and a releasing holder that wants the lock again finds it reserved and
//! queues behind them. A lost message costs at most the retry delay (the fallback timer); a dead
//! named waiter costs the grace.
//!
//! Windows for foreign clients: once the key has been handed over long enough, a release frees
//! it for a window instead, during which no acquisition of ours takes it, and publishes
//! `"<named> <next> <window ms>"`: the named waiter attempts when the window has passed, the
//! next one a grace later (if the named one is gone), the others keep waiting.
//!
//! One subscriber connection per node and handle, opened in the background when the handle is
//! built; one dispatch task
//! per node; a channel is subscribed while it has local waiters and for a short linger after.
//!
//! About 420 lines, one job: the subscription per node, the listeners and the wake-ups they
//! wait for are one state machine (a listener must exist before its subscription is awaited),
//! which a split would spread over files.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;

use crate::node::scripts::WAKE_ALL;
use crate::node::transport::Channels;

/// How long a channel stays subscribed after its last local waiter left, so that a stream of
/// contended acquisitions does not subscribe and unsubscribe each time.
const LINGER: Duration = Duration::from_secs(2);

/// How long a subscription keeps trying in the background (a node still connecting, or
/// down) before the next join tries again.
const SUBSCRIBE_LIMIT: Duration = Duration::from_secs(10);

/// Messages buffered per channel for a slow waiter (beyond that it is woken to attempt).
const CHANNEL_CAPACITY: usize = 64;

/// A handle's subscriptions and the waiters listening on them.
pub(crate) struct Waiters {
    subscribers: Vec<Arc<dyn Channels>>,
    channels: Mutex<HashMap<String, Channel>>,
    node_timeout: Duration,
}

struct Channel {
    waiters: usize,
    /// Every node confirmed the subscription; until then each join tries again (a node that
    /// was still connecting, or down, when the first waiter came).
    subscribed: bool,
    /// Bumped on every join, so that a linger started earlier does not unsubscribe.
    generation: u64,
    tx: broadcast::Sender<Arc<str>>,
}

/// What ended a wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Wake {
    /// A release named this waiter: the key is reserved for it, or a window for foreign
    /// clients before its turn has passed.
    Named,
    /// The fallback timer ran out, or messages were missed: attempt anyway.
    Timer,
    /// The handle is shutting down.
    Shutdown,
}

impl Waiters {
    /// The waiters over one subscriber per node ([`Channels`]), each connecting in the
    /// background (a node that is down keeps reconnecting; its messages are covered by the
    /// fallback timer meanwhile). Must run inside a tokio runtime.
    pub(crate) fn start(subscribers: Vec<Arc<dyn Channels>>, node_timeout: Duration) -> Arc<Self> {
        let waiters = Arc::new(Self {
            subscribers,
            channels: Mutex::new(HashMap::new()),
            node_timeout,
        });
        for subscriber in &waiters.subscribers {
            let to = Arc::downgrade(&waiters);
            subscriber.deliver_to(Box::new(move |channel, text| match to.upgrade() {
                Some(waiters) => {
                    waiters.deliver(channel, Arc::from(text));
                    true
                }
                None => false,
            }));
        }
        waiters
    }

    /// Awaits the subscriber connections, each for at most `limit`, until every one is
    /// connected or a quorum is and the others had a grace
    /// ([`until_quorum_ready`](crate::timing::until_quorum_ready)); one that is down keeps
    /// connecting in the background (its messages are covered by the fallback timer).
    pub(crate) async fn connected(&self, limit: Duration) {
        let connections = self
            .subscribers
            .iter()
            .map(|subscriber| async move {
                tokio::time::timeout(limit, subscriber.connected())
                    .await
                    .is_ok_and(|connected| connected.is_ok())
            })
            .collect();
        let quorum = crate::timing::quorum(self.subscribers.len());
        crate::timing::until_quorum_ready(connections, quorum, limit).await;
    }

    fn channels(&self) -> MutexGuard<'_, HashMap<String, Channel>> {
        self.channels.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Joins `channel` as a waiter: subscribes on every node unless every node already
    /// confirmed it (awaiting each node's connection and subscription for at most the node
    /// timeout, and letting the slower ones go on in the background: a node that is down costs
    /// that at each join until it is back), and returns the listener.
    pub(crate) async fn join(self: &Arc<Self>, channel: &str) -> Listener {
        let (rx, unconfirmed) = {
            let mut channels = self.channels();
            match channels.get_mut(channel) {
                Some(state) => {
                    state.waiters += 1;
                    state.generation += 1;
                    (state.tx.subscribe(), !state.subscribed)
                }
                None => {
                    let (tx, rx) = broadcast::channel(CHANNEL_CAPACITY);
                    channels.insert(
                        channel.to_owned(),
                        Channel {
                            waiters: 1,
                            subscribed: false,
                            generation: 0,
                            tx,
                        },
                    );
                    (rx, true)
                }
            }
        };
        // The listener first: if this future is dropped while the subscription is awaited,
        // its drop leaves the channel, which is then unsubscribed after the linger.
        let listener = Listener {
            waiters: Arc::clone(self),
            channel: channel.to_owned(),
            rx,
        };
        if unconfirmed {
            // Each subscription runs in its own task: one still connecting when the node
            // timeout ends completes in the background, instead of leaving this waiter to its
            // fallback timer.
            let tasks = self.subscribers.iter().map(|subscriber| {
                let (waiters, subscriber) = (Arc::downgrade(self), Arc::clone(subscriber));
                let channel = channel.to_owned();
                tokio::spawn(async move {
                    let subscribed = subscribe(&*subscriber, &channel, SUBSCRIBE_LIMIT).await;
                    // Confirmed after every waiter left and the channel was unsubscribed: no
                    // one will unsubscribe it again, so this task does.
                    let wanted = waiters
                        .upgrade()
                        .is_some_and(|waiters| waiters.channels().contains_key(&channel));
                    if subscribed && !wanted {
                        let _ =
                            tokio::time::timeout(SUBSCRIBE_LIMIT, subscriber.unsubscribe(&channel))
                                .await;
                    }
                    subscribed
                })
            });
            let confirmed =
                tokio::time::timeout(self.node_timeout, futures_util::future::join_all(tasks))
                    .await;
            if confirmed.is_ok_and(|all| all.into_iter().all(|ok| matches!(ok, Ok(true))))
                && let Some(state) = self.channels().get_mut(channel)
            {
                state.subscribed = true;
            }
        }
        listener
    }

    fn leave(self: &Arc<Self>, channel: &str) {
        let generation = {
            let mut channels = self.channels();
            let Some(state) = channels.get_mut(channel) else {
                return;
            };
            state.waiters -= 1;
            if state.waiters > 0 {
                return;
            }
            state.generation
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let (waiters, channel) = (Arc::downgrade(self), channel.to_owned());
        runtime.spawn(async move {
            tokio::time::sleep(LINGER).await;
            let Some(waiters) = waiters.upgrade() else {
                return;
            };
            {
                let mut channels = waiters.channels();
                match channels.get(&channel) {
                    Some(state) if state.waiters == 0 && state.generation == generation => {
                        channels.remove(&channel);
                    }
                    _ => return,
                }
            }
            for subscriber in &waiters.subscribers {
                let _ =
                    tokio::time::timeout(waiters.node_timeout, subscriber.unsubscribe(&channel))
                        .await;
            }
        });
    }

    /// Passes a hand-over message (`"<named> <next>"`) to the channel's local waiters.
    fn deliver(&self, channel: &str, message: Arc<str>) {
        if let Some(state) = self.channels().get(channel) {
            let _ = state.tx.send(message);
        }
    }
}

impl Drop for Waiters {
    fn drop(&mut self) {
        let subscribers = std::mem::take(&mut self.subscribers);
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                for subscriber in subscribers {
                    let _ = subscriber.quit().await;
                }
            });
        }
    }
}

/// Subscribes one node to `channel` once it is connected, within `limit`; `true` if the node
/// confirmed it.
async fn subscribe(subscriber: &dyn Channels, channel: &str, limit: Duration) -> bool {
    match tokio::time::timeout(limit, subscriber.subscribe(channel)).await {
        Ok(Ok(())) => true,
        Ok(Err(error)) => {
            tracing::debug!(%error, "could not subscribe; waiting falls back to the timer");
            false
        }
        Err(_) => {
            tracing::debug!("subscription timed out; waiting falls back to the timer");
            false
        }
    }
}

/// One waiter's subscription to a resource's hand-overs; leaves the channel when dropped.
pub(crate) struct Listener {
    waiters: Arc<Waiters>,
    channel: String,
    rx: broadcast::Receiver<Arc<str>>,
}

impl std::fmt::Debug for Listener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Listener")
            .field("channel", &self.channel)
            .finish()
    }
}

impl Listener {
    /// Waits for the next message on the channel, whatever it says (a release on one node),
    /// or for messages missed by a slow reader; never returns once the handle's subscriptions
    /// are gone.
    pub(crate) async fn message(&mut self) {
        match self.rx.recv().await {
            Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => {}
            Err(broadcast::error::RecvError::Closed) => std::future::pending().await,
        }
    }

    /// Waits until releases on `quorum` nodes name `marker` or wake everyone
    /// ([`WAKE_ALL`], a mode holder's release) ([`Wake::Named`]), `fallback` passes
    /// ([`Wake::Timer`]), or `shutdown` fires.
    ///
    /// Each node publishes its own hand-over, and the nodes run the release at slightly
    /// different times: attempting on the first message would find the key still held on the
    /// nodes that have not run it yet, and a named waiter that misses its quorum leaves its
    /// reservations to expire. So the named waiter attempts once a quorum of nodes named it,
    /// or `settle` after the first did (a node that is down or unsubscribed never will).
    /// A release naming another waiter with this one next in line re-arms the timer to
    /// `after_other` (the grace and a slack): if the named waiter is gone, its reservation has
    /// expired by then and this one attempts. Waiters further back keep sleeping: they are
    /// named in turn (or woken by their fallback).
    ///
    /// A message that also gives a window for foreign clients (`"<named> <next> <ms>"`) moves
    /// those times past the window, which no acquisition of ours may use: the named waiter
    /// attempts `after_window` after the window has passed on the last node that named it (it
    /// opened there before the message was sent), the next one `after_other` after that; not
    /// beyond `longest` (the waiter's deadline), and not cut to the fallback.
    pub(crate) async fn wait(
        &mut self,
        marker: &str,
        timing: WaitTiming,
        shutdown: &CancellationToken,
    ) -> Wake {
        let started = tokio::time::Instant::now();
        let timer = tokio::time::sleep(timing.fallback);
        tokio::pin!(timer);
        let hard_deadline = started + timing.fallback;
        let longest = started + timing.longest.max(timing.fallback);
        let mut named = 0;
        // When this waiter attempts after a window that named it.
        let mut after_window: Option<tokio::time::Instant> = None;
        loop {
            tokio::select! {
                biased;
                () = shutdown.cancelled() => return Wake::Shutdown,
                message = self.rx.recv() => match message {
                    Ok(message) => {
                        let mut parts = message.split(' ');
                        let (first, next) = (parts.next(), parts.next());
                        let window = parts
                            .next()
                            .and_then(|ms| ms.parse::<u64>().ok())
                            .filter(|&ms| ms > 0)
                            .map(Duration::from_millis);
                        let now = tokio::time::Instant::now();
                        if first == Some(marker) || first == Some(WAKE_ALL) {
                            if let Some(window) = window {
                                let at = later(now, window + timing.after_window).min(longest);
                                if after_window.is_none_or(|before| at > before) {
                                    after_window = Some(at);
                                    timer.as_mut().reset(at);
                                }
                                continue;
                            }
                            if after_window.is_some() {
                                // Another node opened a window: it decides.
                                continue;
                            }
                            named += 1;
                            if named >= timing.quorum {
                                return Wake::Named;
                            }
                            if named == 1 {
                                timer.as_mut().reset(now + timing.settle);
                            }
                        } else if named == 0 && after_window.is_none() && next == Some(marker) {
                            let at = match window {
                                Some(window) => later(now, window + timing.after_other).min(longest),
                                None => (now + timing.after_other).min(hard_deadline),
                            };
                            timer.as_mut().reset(at);
                        }
                    }
                    Err(broadcast::error::RecvError::Lagged(_)) => return Wake::Timer,
                    Err(broadcast::error::RecvError::Closed) => {
                        (&mut timer).await;
                        return Wake::Timer;
                    }
                },
                () = &mut timer => {
                    return if named > 0 || after_window.is_some() {
                        Wake::Named
                    } else {
                        Wake::Timer
                    };
                }
            }
        }
    }
}

/// `now + after`; a span too long for the clock (a window in a message that
/// no node of ours sent) gives a deadline a year away, which every caller caps further.
fn later(now: tokio::time::Instant, after: Duration) -> tokio::time::Instant {
    now.checked_add(after)
        .unwrap_or_else(|| now + Duration::from_secs(365 * 24 * 60 * 60))
}

/// The timers of one [`Listener::wait`].
#[derive(Debug, Clone, Copy)]
pub(crate) struct WaitTiming {
    /// Attempt anyway after this long (the retry delay).
    pub(crate) fallback: Duration,
    /// Attempt this long after the waiter ahead was named (grace + slack).
    pub(crate) after_other: Duration,
    /// Attempt this long after the first node named this waiter, if fewer than a quorum did.
    pub(crate) settle: Duration,
    /// Attempt this long after a window for foreign clients that named this waiter passed.
    pub(crate) after_window: Duration,
    /// The longest this wait may last past a window (the time left before the waiter's
    /// deadline); the fallback bounds it otherwise.
    pub(crate) longest: Duration,
    /// Nodes whose hand-over makes the attempt worthwhile.
    pub(crate) quorum: usize,
}

impl Drop for Listener {
    fn drop(&mut self) {
        self.waiters.leave(&self.channel);
    }
}
