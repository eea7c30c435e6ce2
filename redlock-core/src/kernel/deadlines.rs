//! One timer for every round in flight on a handle's nodes: each round's time limit is an
//! entry here, and one task sleeps until the earliest.
//!
//! A tokio timer registered before every other timer wakes the runtime's timer driver to say
//! so (a write to the driver's event fd, and a thread woken), and a round's limit is almost
//! always that timer: a client in sequence registers one per round and drops it at the
//! answer, a tenth of a millisecond later, so that every round paid that wake-up. Here a
//! round's limit is a place in a sorted map; the task is woken only by a limit sooner than
//! the one it sleeps until (rounds with the same limit, started one after the other, never
//! are), and otherwise wakes at the limit it slept until, finds which limits have passed,
//! wakes their rounds and sleeps until the next. A limit fires at its instant, as a tokio
//! timer does (the task's own timer rounds up to the next millisecond); a limit of zero at its
//! first poll.
//!
//! The task runs on the runtime the handle was built on, as the nodes' pipeline tasks do, and
//! fires the limits set on that runtime (by its clock). A limit set on another runtime is a
//! tokio timer of its own, on that runtime's clock; so is each limit still set once the task
//! is gone (its runtime shut down, even before the task first ran, or every handle dropped),
//! and each set after.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use tokio::runtime::{Handle, Id};
use tokio::sync::Notify;
use tokio::time::{Instant, Sleep};
use tokio_util::sync::{CancellationToken, DropGuard};

/// The time limits of a handle's rounds, and the task that fires them; the task ends when
/// this is dropped.
pub(crate) struct Deadlines {
    shared: Arc<Shared>,
    /// The runtime the task runs on.
    runtime: Id,
    _stop: DropGuard,
}

/// What the rounds and the task share.
struct Shared {
    state: Mutex<State>,
    /// Wakes the task for a limit sooner than the one it sleeps until.
    sooner: Notify,
}

#[derive(Default)]
struct State {
    /// Each limit set and not yet fired or dropped, with the waker of the round that set it
    /// (the number tells apart limits at the same instant).
    set: BTreeMap<(Instant, u64), Waker>,
    /// The number the next limit takes.
    next: u64,
    /// What the task sleeps until (`None`: until a limit is set).
    sleeping_until: Option<Instant>,
    /// The task is gone: limits are tokio timers of their own.
    gone: bool,
    /// Times the task was asked to wake for a sooner limit.
    #[cfg(test)]
    woken_sooner: usize,
    /// Times the task looked for limits to fire.
    #[cfg(test)]
    rounds: usize,
}

impl Shared {
    fn state(&self) -> MutexGuard<'_, State> {
        // Nothing panics while holding the lock; a poisoned map is still a valid one.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl Deadlines {
    /// Starts the task, on the current tokio runtime.
    pub(crate) fn start() -> Self {
        let shared = Arc::new(Shared {
            state: Mutex::new(State::default()),
            sooner: Notify::new(),
        });
        let stop = CancellationToken::new();
        // Made here, not in the task: a task dropped before its first poll (its runtime shut
        // down first) still drops it, and marks the task gone.
        let gone = Gone(shared.clone());
        tokio::spawn(run(gone, stop.clone()));
        Self {
            shared,
            runtime: Handle::current().id(),
            _stop: stop.drop_guard(),
        }
    }

    /// Completes `limit` from now (never, for a `limit` too long for the clock; at its first
    /// poll for zero). Called outside the task's runtime, a tokio timer of its own. Cancel
    /// safe: dropped, it unsets the limit.
    pub(crate) fn after(&self, limit: Duration) -> Expiry {
        let at = match limit {
            Duration::ZERO => At::Now,
            limit => Instant::now()
                .checked_add(limit)
                .map_or(At::Never, At::Instant),
        };
        let here = Handle::try_current().is_ok_and(|handle| handle.id() == self.runtime);
        let own = match at {
            At::Instant(at) if !here => Some(Box::pin(tokio::time::sleep_until(at))),
            _ => None,
        };
        Expiry {
            shared: self.shared.clone(),
            at,
            number: None,
            own,
        }
    }
}

/// When a limit fires.
#[derive(Clone, Copy)]
enum At {
    /// At its first poll (a limit of zero).
    Now,
    /// Never (a limit too long for the clock).
    Never,
    Instant(Instant),
}

/// A round's time limit ([`Deadlines::after`]); a limit of zero fires at its first poll.
pub(crate) struct Expiry {
    shared: Arc<Shared>,
    /// When it fires.
    at: At,
    /// Its number in the map, once set there.
    number: Option<u64>,
    /// Its own timer, once the task is gone.
    own: Option<Pin<Box<Sleep>>>,
}

impl Expiry {
    /// Takes its entry out of the map, if it is there.
    fn unset(&mut self) {
        if let (At::Instant(at), Some(number)) = (self.at, self.number.take()) {
            self.shared.state().set.remove(&(at, number));
        }
    }
}

impl Future for Expiry {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = self.get_mut();
        if let Some(own) = this.own.as_mut() {
            return own.as_mut().poll(cx);
        }
        let at = match this.at {
            At::Now => return Poll::Ready(()),
            At::Never => return Poll::Pending,
            At::Instant(at) => at,
        };
        // No clock read here: the task takes a limit out of the map when it fires it, so a
        // limit set before and no longer there has fired (the task is not gone).
        let mut state = this.shared.state();
        if state.gone {
            drop(state);
            this.unset();
            let mut own = Box::pin(tokio::time::sleep_until(at));
            let polled = own.as_mut().poll(cx);
            this.own = Some(own);
            return polled;
        }
        match this.number {
            Some(number) => match state.set.get_mut(&(at, number)) {
                Some(waker) => waker.clone_from(cx.waker()),
                None => {
                    this.number = None;
                    return Poll::Ready(());
                }
            },
            None => {
                state.next += 1;
                let number = state.next;
                this.number = Some(number);
                state.set.insert((at, number), cx.waker().clone());
            }
        }
        let sooner = state.sleeping_until.is_none_or(|until| at < until);
        if sooner {
            // Once: the rounds polled before the task wakes see it.
            state.sleeping_until = Some(at);
            #[cfg(test)]
            {
                state.woken_sooner += 1;
            }
        }
        drop(state);
        if sooner {
            this.shared.sooner.notify_one();
        }
        Poll::Pending
    }
}

impl Drop for Expiry {
    fn drop(&mut self) {
        self.unset();
    }
}

/// The task: fires the limits that have passed, then sleeps until the earliest left, or
/// until a sooner one is set.
async fn run(gone: Gone, stop: CancellationToken) {
    let shared = gone.0.clone();
    let sleep = tokio::time::sleep(Duration::ZERO);
    tokio::pin!(sleep);
    loop {
        let sooner = shared.sooner.notified();
        let (fired, next) = {
            let mut state = shared.state();
            #[cfg(test)]
            {
                state.rounds += 1;
            }
            let now = Instant::now();
            let mut fired = Vec::new();
            while let Some(entry) = state.set.first_entry() {
                if entry.key().0 > now {
                    break;
                }
                fired.push(entry.remove());
            }
            let next = state.set.first_key_value().map(|(&(at, _), _)| at);
            state.sleeping_until = next;
            (fired, next)
        };
        fired.into_iter().for_each(Waker::wake);
        if let Some(next) = next {
            sleep.as_mut().reset(next);
        }
        tokio::select! {
            biased;
            () = stop.cancelled() => return,
            () = sooner => {}
            () = &mut sleep, if next.is_some() => {}
        }
    }
}

/// Marks the task gone when it ends or is dropped with its runtime, and wakes every round
/// still waiting, which then sets a timer of its own.
struct Gone(Arc<Shared>);

impl Drop for Gone {
    fn drop(&mut self) {
        let waiting = {
            let mut state = self.0.state();
            state.gone = true;
            std::mem::take(&mut state.set)
        };
        waiting.into_values().for_each(Waker::wake);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    /// Polls `expiry` once: whether it fired.
    fn fired(expiry: &mut Expiry) -> bool {
        let mut cx = Context::from_waker(Waker::noop());
        Pin::new(expiry).poll(&mut cx).is_ready()
    }

    #[tokio::test(start_paused = true)]
    async fn a_limit_fires_at_its_instant_and_not_before() {
        let deadlines = Deadlines::start();
        let start = Instant::now();
        deadlines.after(100 * MS).await;
        assert_eq!(start.elapsed(), 100 * MS);
        // Zero: at once.
        deadlines.after(Duration::ZERO).await;
        assert_eq!(start.elapsed(), 100 * MS);
    }

    #[tokio::test(start_paused = true)]
    async fn a_sooner_limit_set_after_a_later_one_fires_at_its_own_instant() {
        let deadlines = Deadlines::start();
        let start = Instant::now();
        let mut later = deadlines.after(100 * MS);
        assert!(!fired(&mut later));
        // The task sleeps until the later limit now.
        tokio::task::yield_now().await;
        deadlines.after(10 * MS).await;
        assert_eq!(start.elapsed(), 10 * MS);
        later.await;
        assert_eq!(start.elapsed(), 100 * MS);
    }

    #[tokio::test(start_paused = true)]
    async fn limits_set_one_after_another_never_wake_the_task_early() {
        let deadlines = Deadlines::start();
        for _ in 0..100 {
            let mut limit = deadlines.after(100 * MS);
            assert!(!fired(&mut limit));
            tokio::task::yield_now().await;
            tokio::time::advance(MS / 10).await;
            drop(limit);
        }
        let state = deadlines.shared.state();
        assert_eq!(state.woken_sooner, 1, "only the first limit woke the task");
        // Its first look, and the one the first limit woke it for: none since.
        assert_eq!(state.rounds, 2, "the task looked for limits to fire");
        assert!(state.set.is_empty(), "a dropped limit is unset");
    }

    #[tokio::test(start_paused = true)]
    async fn limits_at_the_same_instant_all_fire() {
        let deadlines = Arc::new(Deadlines::start());
        let start = Instant::now();
        // Each in a task of its own: one wake-up cannot finish both.
        let rounds: Vec<_> = (0..2)
            .map(|_| {
                let limit = deadlines.after(5 * MS);
                tokio::spawn(limit)
            })
            .collect();
        for round in rounds {
            round.await.unwrap();
        }
        assert_eq!(start.elapsed(), 5 * MS);
    }

    #[tokio::test(start_paused = true)]
    async fn once_the_task_is_gone_a_limit_is_a_timer_of_its_own() {
        let deadlines = Deadlines::start();
        let start = Instant::now();
        let mut waiting = deadlines.after(50 * MS);
        assert!(!fired(&mut waiting));
        let shared = deadlines.shared.clone();
        // Stops the task (every handle gone).
        drop(deadlines);
        tokio::task::yield_now().await;
        assert!(shared.state().gone);
        let bounded = tokio::time::timeout(Duration::from_secs(10), waiting);
        bounded
            .await
            .expect("a limit set before the task ended still fires");
        assert_eq!(start.elapsed(), 50 * MS);
        let after_it = Expiry {
            shared,
            at: At::Instant(Instant::now() + 20 * MS),
            number: None,
            own: None,
        };
        let bounded = tokio::time::timeout(Duration::from_secs(10), after_it);
        bounded
            .await
            .expect("a limit set after the task ended fires");
        assert_eq!(start.elapsed(), 70 * MS);
    }

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap()
    }

    /// The task's runtime shut down before the task ever ran: the limit set there still fires,
    /// awaited on another runtime.
    #[test]
    fn a_task_dropped_before_its_first_poll_leaves_its_limits_timers_of_their_own() {
        let first = runtime();
        let (deadlines, mut waiting) = first.block_on(async {
            let deadlines = Deadlines::start();
            let mut waiting = deadlines.after(20 * MS);
            // Set in the map, and the task not polled yet.
            assert!(!fired(&mut waiting));
            (deadlines, waiting)
        });
        drop(first);
        assert!(deadlines.shared.state().gone);
        runtime().block_on(async {
            let bounded = tokio::time::timeout(Duration::from_secs(10), &mut waiting);
            bounded.await.expect("the limit fires");
        });
    }

    /// A limit set on a runtime other than the task's (which nobody drives here) is a timer
    /// of that runtime.
    #[test]
    fn a_limit_set_on_another_runtime_fires_there() {
        let first = runtime();
        let deadlines = first.block_on(async { Deadlines::start() });
        runtime().block_on(async {
            let bounded = tokio::time::timeout(Duration::from_secs(10), deadlines.after(20 * MS));
            bounded.await.expect("the limit fires");
        });
        drop(first);
    }

    #[tokio::test(start_paused = true)]
    async fn a_limit_too_long_for_the_clock_never_fires() {
        let deadlines = Deadlines::start();
        let never = deadlines.after(Duration::MAX);
        let raced = tokio::time::timeout(Duration::from_secs(3600), never).await;
        assert!(raced.is_err());
    }
}
