//! Auto-extension: one driver task per handle keeps every auto-extended lease extended, from a
//! single timer queue, however many locks are held.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Weak};
use std::time::Duration;
use tokio::time::Instant;

use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use tokio::sync::mpsc;
use tokio_util::time::DelayQueue;
use tokio_util::time::delay_queue;

use super::{Lease, extend};
use crate::error::LockError;
use crate::kernel::masters::Masters;
use crate::timing;

/// Shortest wait before retrying an extension that too few nodes answered.
const MIN_RETRY: Duration = Duration::from_millis(5);

enum Command {
    Watch(Arc<Lease>),
    Unwatch(u64),
}

/// The handle to a driver. The driver stops when this handle, or the masters, are dropped
/// (with the `Redlock` that owns both).
#[derive(Debug)]
pub(crate) struct Watchdog {
    commands: mpsc::UnboundedSender<Command>,
}

impl Watchdog {
    /// Spawns the driver on `runtime`, the one the handle was built on (whose node
    /// connections it needs), else on the current one: not on whichever runtime happens to
    /// take the first auto-extended lock, which may end long before the handle does. With
    /// neither, auto-extension is off, with a warning; locks then live out their ttl.
    pub(crate) fn start(masters: Weak<Masters>, runtime: Option<&tokio::runtime::Handle>) -> Self {
        let (commands, receiver) = mpsc::unbounded_channel();
        match runtime
            .cloned()
            .or_else(|| tokio::runtime::Handle::try_current().ok())
        {
            Some(runtime) => {
                runtime.spawn(Driver::new(masters).run(receiver));
            }
            None => tracing::warn!("no tokio runtime: locks will not be auto-extended"),
        }
        Self { commands }
    }

    /// Starts extending `lease`.
    pub(crate) fn watch(&self, lease: Arc<Lease>) {
        let _sent = self.commands.send(Command::Watch(lease));
    }

    /// Stops extending the lease `id` (released).
    pub(crate) fn unwatch(&self, id: u64) {
        let _sent = self.commands.send(Command::Unwatch(id));
    }
}

/// A watched lease and where it is in the queue.
struct Watched {
    lease: Arc<Lease>,
    /// `None` while its extension is in flight.
    queued: Option<delay_queue::Key>,
    extensions: u32,
    /// The last extension made was shortened to end at `max_hold`: make no more.
    capped: bool,
}

type InFlight = Pin<Box<dyn Future<Output = (u64, Result<Instant, LockError>)> + Send>>;

struct Driver {
    masters: Weak<Masters>,
    queue: DelayQueue<u64>,
    watched: HashMap<u64, Watched>,
    in_flight: FuturesUnordered<InFlight>,
}

impl Driver {
    fn new(masters: Weak<Masters>) -> Self {
        Self {
            masters,
            queue: DelayQueue::new(),
            watched: HashMap::new(),
            in_flight: FuturesUnordered::new(),
        }
    }

    async fn run(mut self, mut commands: mpsc::UnboundedReceiver<Command>) {
        loop {
            tokio::select! {
                // In this order, so that a run replays exactly (a simulation's seed), and
                // so that a stream of commands never holds back the extensions: the
                // answers and the due extensions are bounded by the leases watched.
                biased;
                Some((id, result)) = self.in_flight.next(), if !self.in_flight.is_empty() => {
                    self.extended(id, result);
                }
                Some(due) = self.queue.next(), if !self.queue.is_empty() => {
                    self.extend(due.into_inner());
                }
                command = commands.recv() => match command {
                    Some(Command::Watch(lease)) => self.watch(lease),
                    Some(Command::Unwatch(id)) => self.unwatch(id),
                    None => return,
                },
            }
        }
    }

    fn watch(&mut self, lease: Arc<Lease>) {
        let id = lease.id;
        let mut watched = Watched {
            lease,
            queued: None,
            extensions: 0,
            capped: false,
        };
        if self.schedule(&mut watched) {
            self.watched.insert(id, watched);
        }
    }

    fn unwatch(&mut self, id: u64) {
        if let Some(Watched {
            queued: Some(key), ..
        }) = self.watched.remove(&id)
        {
            self.queue.remove(&key);
        }
    }

    /// Queues the next extension of `watched`; `false` if there is none to make.
    fn schedule(&mut self, watched: &mut Watched) -> bool {
        let lease = &watched.lease;
        let Some(auto) = lease.auto_extend else {
            return false;
        };
        if lease.is_lost()
            || auto
                .max_extensions
                .is_some_and(|max| watched.extensions >= max)
        {
            return false;
        }
        // Extend once `fraction` of the ttl has passed since the current validity started.
        let drift = timing::drift(lease.ttl, lease.drift_factor);
        let started = lease.deadline() - (lease.ttl - drift);
        let at = (started + lease.ttl.mul_f64(auto.fraction)).max(Instant::now());
        watched.queued = Some(self.queue.insert_at(lease.id, at));
        true
    }

    /// Starts the due extension of lease `id`.
    fn extend(&mut self, id: u64) {
        let Some(watched) = self.watched.get_mut(&id) else {
            return;
        };
        watched.queued = None;
        let lease = Arc::clone(&watched.lease);
        let Some((ttl, capped)) = next_ttl(&lease) else {
            self.watched.remove(&id);
            return;
        };
        watched.capped = capped;
        let Some(masters) = self.masters.upgrade() else {
            return;
        };
        self.in_flight.push(Box::pin(async move {
            let result = extend(&masters, &lease, ttl).await;
            (id, result)
        }));
    }

    /// Handles a finished extension of lease `id`.
    fn extended(&mut self, id: u64, result: Result<Instant, LockError>) {
        let Some(mut watched) = self.watched.remove(&id) else {
            return; // released meanwhile
        };
        match result {
            Ok(_) => {
                watched.extensions += 1;
                if self.schedule(&mut watched) {
                    self.watched.insert(id, watched);
                }
            }
            Err(LockError::Unavailable { .. }) => {
                // Try again soon; the lost signal fires at its deadline if none succeeds.
                let lease = &watched.lease;
                let retry = (lease.ttl / 20).max(MIN_RETRY);
                if !lease.is_lost() && Instant::now() + retry < lease.lost_at() {
                    watched.queued = Some(self.queue.insert(id, retry));
                    self.watched.insert(id, watched);
                }
            }
            Err(error) => {
                tracing::warn!(resource = %watched.lease.resource, %error, "auto-extension stopped");
            }
        }
    }
}

/// The ttl of the next extension and whether it is the last: the lease's ttl, or what is
/// left until `max_hold` when that is shorter (then it is the last); `None` when the cap
/// leaves too little for an extension to move the validity forward.
fn next_ttl(lease: &Lease) -> Option<(Duration, bool)> {
    let Some(hold_until) = lease.auto_extend?.hold_until else {
        return Some((lease.ttl, false));
    };
    let now = Instant::now();
    let left = hold_until.saturating_duration_since(now);
    if left >= lease.ttl {
        return Some((lease.ttl, false));
    }
    let ttl = Duration::from_millis(u64::try_from(left.as_millis()).unwrap_or(u64::MAX));
    let drift = timing::drift(ttl, lease.drift_factor);
    let worth_it = ttl > drift + lease.lost_margin && now + ttl - drift > lease.deadline();
    worth_it.then_some((ttl, true))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::lease::tests::lease;
    use crate::options::LockOptions;

    const TTL: Duration = Duration::from_secs(10);

    fn auto(max_hold: Option<Duration>) -> LockOptions {
        let options = LockOptions::default().ttl(TTL).auto_extend(true);
        match max_hold {
            Some(max) => options.max_hold(max),
            None => options,
        }
    }

    #[test]
    fn without_a_cap_every_extension_is_the_ttl() {
        assert_eq!(next_ttl(&lease(&auto(None), TTL)), Some((TTL, false)));
        // A cap further than a ttl away does not shorten the next extension.
        let far = auto(Some(Duration::from_secs(60)));
        assert_eq!(next_ttl(&lease(&far, TTL)), Some((TTL, false)));
        // Not auto-extended: nothing to extend.
        let plain = LockOptions::default().ttl(TTL);
        assert_eq!(next_ttl(&lease(&plain, TTL)), None);
    }

    #[test]
    fn the_last_extension_ends_at_the_cap() {
        // 4 s of hold left, the lock valid for 1 s more: extend to ~4 s, and stop after.
        let capped = lease(&auto(Some(Duration::from_secs(4))), Duration::from_secs(1));
        let (ttl, last) = next_ttl(&capped).unwrap();
        assert!(last);
        assert!(
            ttl <= Duration::from_secs(4) && ttl > Duration::from_millis(3_900),
            "{ttl:?}"
        );
        // What an extension to the cap adds is not more than the validity held: none.
        let spent = lease(&auto(Some(Duration::from_secs(4))), Duration::from_secs(9));
        assert_eq!(next_ttl(&spent), None);
        // A cap reached leaves nothing to extend.
        let reached = lease(
            &auto(Some(Duration::from_millis(1))),
            Duration::from_secs(1),
        );
        std::thread::sleep(Duration::from_millis(2));
        assert_eq!(next_ttl(&reached), None);
    }
}
