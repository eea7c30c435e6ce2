//! The Redlock timing arithmetic: quorum, drift and validity (distlock spec, steps 3 and 4).

use std::time::Duration;

/// The fixed part of the clock drift allowance, added to `ttl × drift_factor`.
///
/// Redis expires keys with millisecond precision, so every Redlock implementation adds 2 ms
/// (node-redlock, RedLock.net, rslock, Hyperf).
pub const DRIFT_FLOOR: Duration = Duration::from_millis(2);

/// The number of nodes that must agree: a strict majority, `N / 2 + 1` (distlock spec, step 3).
pub(crate) fn quorum(nodes: usize) -> usize {
    nodes / 2 + 1
}

/// The number of nodes that must confirm a fencing token: `N / 2 + 2` for odd N, `N / 2 + 1`
/// for even N (never more than N), so that any two such sets share at least two nodes
/// (`2F − N ≥ 2`). One of the two may have lost its data (restarted empty); the other still
/// holds the earlier token, so the later claim must be above it. See the crate docs, "Fencing
/// tokens". 3 of 3, 3 of 4, 4 of 5, 5 of 7. With one node no quorum survives its data loss
/// (F = 1).
pub(crate) fn fencing_quorum(nodes: usize) -> usize {
    (nodes.saturating_add(3) / 2).min(nodes)
}

/// The clock drift allowance for a lock of `ttl`: `ttl × drift_factor + 2 ms`.
///
/// It covers the rate difference between the client's clock and the nodes' clocks over the
/// lifetime of the lock (distlock spec, "Safety arguments": `CLOCK_DRIFT`).
pub(crate) fn drift(ttl: Duration, drift_factor: f64) -> Duration {
    // As `Duration::mul_f64`, without its panic: a factor that is not a number, negative or
    // too large (which `LockOptions::validate` refuses) leaves no validity at all.
    Duration::try_from_secs_f64(drift_factor * ttl.as_secs_f64())
        .map_or(Duration::MAX, |drift| drift.saturating_add(DRIFT_FLOOR))
}

/// A point on a monotonic clock: [`tokio::time::Instant`] in the lock, milliseconds from an
/// origin (as a [`Duration`]) in the protocol model, which runs the same arithmetic.
pub(crate) trait Moment: Copy {
    /// The time from `earlier` to `self` (zero when `earlier` is later).
    fn since(self, earlier: Self) -> Duration;
    /// `self + after`: at most a year ahead for an [`Instant`](tokio::time::Instant)
    /// (as good as forever for a lock), saturating for a [`Duration`].
    fn plus(self, after: Duration) -> Self;
}

impl Moment for tokio::time::Instant {
    fn since(self, earlier: Self) -> Duration {
        self.saturating_duration_since(earlier)
    }

    fn plus(self, after: Duration) -> Self {
        self.checked_add(after)
            .unwrap_or_else(|| self + Duration::from_secs(365 * 24 * 60 * 60))
    }
}

impl Moment for Duration {
    fn since(self, earlier: Self) -> Duration {
        self.saturating_sub(earlier)
    }

    fn plus(self, after: Duration) -> Self {
        self.saturating_add(after)
    }
}

/// Redlock steps 3–4 for a round whose clock was read at `start`, before its first send
/// (step 1), and that a quorum granted by `now`: the end of the validity it gives,
/// `start + ttl − drift`, while `ttl − elapsed − drift` is above zero; otherwise `Err` with
/// the time elapsed.
pub(crate) fn valid_until<T: Moment>(
    start: T,
    now: T,
    ttl: Duration,
    drift: Duration,
) -> Result<T, Duration> {
    let elapsed = now.since(start);
    let left = ttl.checked_sub(elapsed).and_then(|l| l.checked_sub(drift));
    match left.filter(|left| !left.is_zero()) {
        Some(_) => Ok(start.plus(ttl - drift)),
        None => Err(elapsed),
    }
}

/// The validity end an extension to `ttl` gives once a quorum confirmed it: counted from
/// `start`, the clock read before its first send, as a grant's is, never from the replies
/// (a node may have set its expiry as soon as the request reached it), less the drift.
pub(crate) fn extended_until<T: Moment>(start: T, ttl: Duration, drift: Duration) -> T {
    start.plus(ttl.saturating_sub(drift))
}

/// The least a start-up waits, once a quorum of nodes is ready, for the others.
pub(crate) const START_GRACE: Duration = Duration::from_millis(250);

/// Runs `tasks` (one per node; `true` when that node is ready, each bounding itself by
/// `limit`) at once, and returns once every one has finished, or once `quorum` of them are
/// ready and the others have had as long again as the quorum took (at least
/// [`START_GRACE`], never past `limit`), whichever comes first: a start-up needs a quorum,
/// and waits no longer for a node that is down. Without a quorum every task is awaited, so
/// that each says why it failed (one that does not bound itself is cut a second past
/// `limit`). The unfinished tasks are dropped (a node's client keeps connecting in the
/// background). Each node's answer, in order; `false` for one not ready.
pub(crate) async fn until_quorum_ready<F>(
    tasks: Vec<F>,
    quorum: usize,
    limit: Duration,
) -> Vec<bool>
where
    F: std::future::Future<Output = bool>,
{
    use futures_util::StreamExt as _;
    let started = tokio::time::Instant::now();
    let far = |after: Duration| {
        started
            .checked_add(after)
            .unwrap_or_else(|| started + Duration::from_secs(365 * 24 * 60 * 60))
    };
    let end = far(limit);
    let backstop = far(limit.saturating_add(Duration::from_secs(1)));
    let mut ready = vec![false; tasks.len()];
    let mut running: futures_util::stream::FuturesUnordered<_> = tasks
        .into_iter()
        .enumerate()
        .map(|(i, task)| async move { (i, task.await) })
        .collect();
    let give_up = tokio::time::sleep_until(backstop);
    tokio::pin!(give_up);
    let mut count = 0;
    loop {
        tokio::select! {
            biased;
            next = running.next() => match next {
                Some((i, ok)) => {
                    ready[i] = ok;
                    if ok {
                        count += 1;
                        if count == quorum {
                            let now = tokio::time::Instant::now();
                            let grace = started.elapsed().max(START_GRACE);
                            let deadline = now.checked_add(grace).unwrap_or(end);
                            give_up.as_mut().reset(deadline.min(end).max(now));
                        }
                    }
                }
                None => return ready,
            },
            () = &mut give_up => return ready,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[tokio::test(start_paused = true)]
    async fn a_start_waits_for_a_quorum_then_a_grace_not_for_a_node_that_is_down() {
        let after = |ms: u64, ok: bool| async move {
            tokio::time::sleep(Duration::from_millis(ms)).await;
            ok
        };
        let limit = Duration::from_secs(2);
        // Three of five ready at 10 ms, one down (never ready), one late at 300 ms: waits
        // 250 ms past the quorum (the grace), not the 2 s limit; the late one is not waited for.
        let started = tokio::time::Instant::now();
        let tasks = vec![
            after(5, true),
            after(10, true),
            after(2_000, false),
            after(8, true),
            after(300, true),
        ];
        let ready = until_quorum_ready(tasks, 3, limit).await;
        assert_eq!(ready, [true, true, false, true, false]);
        assert_eq!(started.elapsed(), Duration::from_millis(260));
        // Everyone ready early: no grace waited.
        let started = tokio::time::Instant::now();
        let ready = until_quorum_ready(
            vec![after(1, true), after(2, true), after(3, true)],
            2,
            limit,
        )
        .await;
        assert_eq!(ready, [true; 3]);
        assert_eq!(started.elapsed(), Duration::from_millis(3));
        // A slow quorum (400 ms) gives the rest as long again, within the limit.
        let started = tokio::time::Instant::now();
        let tasks = vec![after(400, true), after(400, true), after(700, true)];
        assert_eq!(until_quorum_ready(tasks, 2, limit).await, [true; 3]);
        assert_eq!(started.elapsed(), Duration::from_millis(700));
        // No quorum: every task awaited (each says why it failed), failures not ready.
        let started = tokio::time::Instant::now();
        let tasks = vec![after(1, false), after(2_000, false), after(5, true)];
        assert_eq!(
            until_quorum_ready(tasks, 2, limit).await,
            [false, false, true]
        );
        assert_eq!(started.elapsed(), limit);
        // A task that does not bound itself is cut a second past the limit.
        let started = tokio::time::Instant::now();
        let tasks = vec![after(1, false), after(60_000, true), after(5, true)];
        assert_eq!(
            until_quorum_ready(tasks, 2, limit).await,
            [false, false, true]
        );
        assert_eq!(started.elapsed(), limit + Duration::from_secs(1));
    }

    #[test]
    fn fencing_quorums_share_two_nodes_and_are_the_smallest_that_do() {
        assert_eq!(fencing_quorum(1), 1);
        for n in 2..=64 {
            let f = fencing_quorum(n);
            assert!(f <= n && f >= quorum(n), "n = {n}, f = {f}");
            assert!(2 * f >= n + 2, "two sets of {f} of {n} may share one node");
            assert!(2 * (f - 1) < n + 2, "{f} of {n} is not the smallest");
        }
        assert_eq!(
            [3, 4, 5, 7].map(fencing_quorum),
            [3, 3, 4, 5],
            "the figures the docs give"
        );
    }

    #[test]
    fn quorum_is_a_strict_majority() {
        assert_eq!(
            (1..=7).map(quorum).collect::<Vec<_>>(),
            [1, 2, 2, 3, 3, 4, 4]
        );
    }

    /// The validity left to a lock of `ttl` whose round took `elapsed`, by [`valid_until`].
    fn validity(ttl: Duration, elapsed: Duration, factor: f64) -> Option<Duration> {
        let end = valid_until(Duration::ZERO, elapsed, ttl, drift(ttl, factor)).ok()?;
        Some(end - elapsed)
    }

    #[test]
    fn validity_subtracts_elapsed_and_drift() {
        // 10 s ttl, 1 % drift: drift = 100 ms + 2 ms.
        let left = validity(Duration::from_secs(10), Duration::from_millis(50), 0.01);
        assert_eq!(left, Some(Duration::from_millis(10_000 - 50 - 102)));
        assert_eq!(
            validity(Duration::from_millis(100), Duration::from_millis(97), 0.01),
            None
        );
        assert_eq!(
            validity(Duration::from_millis(100), Duration::from_millis(200), 0.01),
            None
        );
        // The end is counted from the start, whenever the quorum came.
        let start = Duration::from_millis(1_000);
        let ttl = Duration::from_millis(100);
        let at = |now| {
            valid_until(
                start,
                Duration::from_millis(now),
                ttl,
                Duration::from_millis(3),
            )
        };
        assert_eq!(at(1_010), Ok(Duration::from_millis(1_097)));
        assert_eq!(at(1_096), Ok(Duration::from_millis(1_097)));
        assert_eq!(at(1_097), Err(Duration::from_millis(97)));
    }

    #[test]
    fn an_extension_is_counted_from_its_start_less_the_drift() {
        let start = Duration::from_millis(1_000);
        let (ttl, drift) = (Duration::from_millis(100), Duration::from_millis(3));
        assert_eq!(
            extended_until(start, ttl, drift),
            Duration::from_millis(1_097)
        );
        // A drift longer than the ttl (refused by validation) gives no validity, not a panic.
        assert_eq!(extended_until(start, ttl, Duration::MAX), start);
        let far = tokio::time::Instant::now();
        assert!(extended_until(far, Duration::MAX, drift) > far);
    }

    proptest! {
        #[test]
        fn validity_never_exceeds_ttl_minus_elapsed_minus_drift(
            ttl_ms in 1u64..86_400_000,
            elapsed_ms in 0u64..100_000,
            factor in 0.0f64..0.5,
        ) {
            let ttl = Duration::from_millis(ttl_ms);
            let elapsed = Duration::from_millis(elapsed_ms);
            match validity(ttl, elapsed, factor) {
                Some(left) => {
                    prop_assert!(left + elapsed + drift(ttl, factor) <= ttl);
                    prop_assert!(!left.is_zero());
                }
                None => prop_assert!(elapsed + drift(ttl, factor) >= ttl),
            }
        }
    }
}
