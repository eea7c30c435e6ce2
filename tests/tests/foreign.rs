//! Foreign clients are not starved by our hand-overs (issue 15): while our waiters keep a
//! resource busy, a foreign Redlock client polling the same key (node-redlock, redis-py,
//! redlock-php, a plain `SET NX PX`) gets it within T + one of our holds + W, where W is the
//! window ([`RedlockBuilder::foreign_window`]) and T = 9 × W. Against
//! real redis-server processes; the foreign client is a Redlock loop written here on plain
//! fred clients (SET NX PX on every node, a majority wins, otherwise delete its own keys and
//! sleep its poll interval). Windows are on by default (foreign clients are declared, not
//! detected: [`RedlockBuilder::foreign_clients`]); with `foreign_clients(false)` none opens.
//!
//! [`RedlockBuilder::foreign_window`]: redlock_core::RedlockBuilder::foreign_window
//! [`RedlockBuilder::foreign_clients`]: redlock_core::RedlockBuilder::foreign_clients

#![allow(clippy::unwrap_used)] // tests unwrap: a failure is the assertion

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;
use tokio::time::Instant;

use fred::clients::Client;
use fred::interfaces::{ClientLike, KeysInterface, LuaInterface};
use fred::types::{Expiration, SetOptions};
use rand::Rng;
use redlock_core::{BOOKKEEPING_SEPARATOR, DEFAULT_FOREIGN_WINDOW, LockOptions, Mode, Redlock};
use redlock_tests::checker::History;
use redlock_tests::{RedisNodes, lock_as, plain_client, within};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// The window every test here runs with: the default.
const W: Duration = DEFAULT_FOREIGN_WINDOW;

/// How long our key may be handed over before a window opens (T): nine windows, as
/// `RedlockBuilder::foreign_window` documents (windows take at most a tenth of the time).
fn every() -> Duration {
    W * 9
}

/// Our holders hold for 20 to 50 ms.
const HOLD_MIN_MS: u64 = 20;
const HOLD_MAX_MS: u64 = 50;

/// The documented bound for a foreign client polling at most every W: T + one of our holds
/// + W.
fn bound() -> Duration {
    every() + ms(HOLD_MAX_MS) + W
}

/// What a loaded 2-core machine adds to [`bound`]: hand-over and attempt latencies, timers
/// firing late. A starved poller waits as long as our load lasts (seconds).
const SLACK: Duration = Duration::from_millis(600);

/// The window marker of the lock key `key`, in our bookkeeping namespace.
fn window_key(key: &str) -> String {
    format!("{key}{BOOKKEEPING_SEPARATOR}window")
}

/// A handle over `nodes` with `window` as its foreign window.
async fn handle(nodes: &RedisNodes, window: Duration) -> Redlock {
    Redlock::builder()
        .nodes(nodes.urls())
        .foreign_window(window)
        .build()
        .await
        .unwrap()
}

/// A foreign Redlock client: node-redlock's algorithm on plain clients.
struct Foreign {
    clients: Vec<Client>,
}

/// node-redlock's release script: delete the key only if it still holds our value.
const FOREIGN_RELEASE: &str = r#"if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("del", KEYS[1]) end return 0"#;

impl Foreign {
    async fn connect(nodes: &RedisNodes) -> Self {
        let mut clients = Vec::new();
        for url in nodes.urls() {
            clients.push(plain_client(&url).await);
        }
        Self { clients }
    }

    /// One attempt: `SET key value NX PX ttl` on every node at once; held if a majority
    /// granted, otherwise its own keys are deleted.
    async fn try_once(&self, key: &str, value: &str) -> bool {
        let sets = self.clients.iter().map(|client| async move {
            let reply: Option<String> = client
                .set(
                    key,
                    value,
                    Some(Expiration::PX(10_000)),
                    Some(SetOptions::NX),
                    false,
                )
                .await
                .unwrap();
            reply.is_some()
        });
        let granted = futures_util::future::join_all(sets)
            .await
            .into_iter()
            .filter(|&ok| ok)
            .count();
        if granted > self.clients.len() / 2 {
            return true;
        }
        self.release(key, value).await;
        false
    }

    /// Closes its connections.
    async fn quit(self) {
        for client in self.clients {
            let _ = client.quit().await;
        }
    }

    async fn release(&self, key: &str, value: &str) {
        let releases = self.clients.iter().map(|client| async move {
            let _: i64 = client
                .eval(FOREIGN_RELEASE, vec![key], vec![value])
                .await
                .unwrap();
        });
        futures_util::future::join_all(releases).await;
    }

    /// Waits until one of ours holds `key` (its value on the first node is a token of ours, not
    /// a value of this client's).
    async fn until_ours(&self, key: &str) {
        within("our load to hold the key", async {
            loop {
                let value: Option<String> = self.clients[0].get(key).await.unwrap();
                if value.is_some_and(|v| !v.starts_with("foreign-") && !v.starts_with('~')) {
                    return;
                }
                tokio::time::sleep(ms(1)).await;
            }
        })
        .await;
    }

    /// Polls until it holds `key`, sleeping `interval()` between attempts; returns how long
    /// that took, and when it got the key.
    async fn acquire(
        &self,
        key: &str,
        value: &str,
        interval: impl Fn() -> Duration,
    ) -> (Duration, Instant) {
        let started = Instant::now();
        loop {
            if self.try_once(key, value).await {
                return (started.elapsed(), Instant::now());
            }
            tokio::time::sleep(interval()).await;
        }
    }
}

/// Our load: three handles locking `resource` in a loop (wait for it with `wait`, hold 20–50
/// ms, release) until `stop`, each hold recorded in `history` (holders 0..3); returns the
/// number of holds.
fn our_load(
    handles: Vec<Redlock>,
    resource: &'static str,
    wait: &LockOptions,
    history: &Arc<History>,
    stop: &Arc<AtomicBool>,
) -> tokio::task::JoinHandle<u64> {
    let holds = Arc::new(AtomicU64::new(0));
    let tasks: Vec<_> = handles
        .into_iter()
        .enumerate()
        .map(|(holder, handle)| {
            let (history, stop, holds) = (history.clone(), stop.clone(), holds.clone());
            let wait = wait.clone();
            tokio::spawn(async move {
                while !stop.load(Ordering::SeqCst) {
                    let guard = handle.lock_with(resource, &wait).await.unwrap();
                    let start = Instant::now();
                    let hold = rand::rng().random_range(HOLD_MIN_MS..=HOLD_MAX_MS);
                    tokio::time::sleep(ms(hold)).await;
                    let released = Instant::now();
                    history.record(holder, start, guard.valid_until(), released);
                    holds.fetch_add(1, Ordering::SeqCst);
                    guard.release().await.unwrap();
                }
            })
        })
        .collect();
    tokio::spawn(async move {
        for task in tasks {
            task.await.unwrap();
        }
        holds.load(Ordering::SeqCst)
    })
}

/// The gaps between consecutive holds of ours (none of another holder between them), in
/// order of time: when each began, and how long it lasted.
fn gaps(history: &History, ours: usize) -> Vec<(Instant, Duration)> {
    let mut holds = history.holds();
    holds.sort_by_key(|h| h.start);
    holds
        .windows(2)
        .filter(|pair| pair[0].holder < ours && pair[1].holder < ours)
        .map(|pair| {
            (
                pair[0].end,
                pair[1].start.saturating_duration_since(pair[0].end),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_foreign_poller_gets_in_within_the_bound_while_our_waiters_keep_the_key_busy() {
    let nodes = RedisNodes::start(3);
    // Our default retry delay (200 ms + up to 100 ms): what our waiters lose after a foreign
    // hold, which wakes nobody.
    let (load, history, stop) = busy_load(&nodes, "busy", &patient()).await;
    let foreign = Foreign::connect(&nodes).await;
    let loaded = Instant::now();
    // Let the load settle into hand-overs.
    tokio::time::sleep(ms(500)).await;

    // About node-redlock's defaults (200 ms ± 100 ms between attempts), kept under 250 ms so
    // that a poll lands inside each 350 ms window even when a loaded machine delays it by
    // 100 ms; then a faster poller.
    let node_redlock = || ms(rand::rng().random_range(100..250));
    let fast = || ms(50);
    let intervals: [(&str, &dyn Fn() -> Duration); 2] = [
        ("node-redlock-like 100–250 ms", &node_redlock),
        ("50 ms", &fast),
    ];
    let mut waits = Vec::new();
    for (name, interval) in intervals {
        for round in 0..3 {
            // Start polling at a random point of our load, while one of ours holds the key.
            tokio::time::sleep(ms(rand::rng().random_range(300..1_300))).await;
            foreign.until_ours("busy").await;
            let value = format!("foreign-{round}-{}", rand::rng().random::<u64>());
            let (waited, start) = tokio::time::timeout(
                Duration::from_secs(30),
                foreign.acquire("busy", &value, interval),
            )
            .await
            .unwrap_or_else(|_| panic!("{name}: the foreign poller starved for 30 s"));
            tokio::time::sleep(ms(20)).await;
            let released = Instant::now();
            history.record(3, start, start + ms(10_000), released);
            foreign.release("busy", &value).await;
            println!("{name}: foreign client waited {waited:?}");
            waits.push((name, waited));
        }
    }
    stop.store(true, Ordering::SeqCst);
    let ours = within("our lockers to stop", load).await.unwrap();
    let secs = loaded.elapsed().as_secs_f64();
    println!(
        "our holds: {ours} in {secs:.1} s ({:.1}/s) beside {} foreign holds",
        ours as f64 / secs,
        waits.len()
    );

    assert!(
        history.overlaps().is_empty(),
        "two holders at once: {:?}",
        history.overlaps()
    );
    let limit = bound() + SLACK;
    for (name, waited) in &waits {
        assert!(
            *waited <= limit,
            "{name}: the foreign client waited {waited:?}, beyond T + hold + W = {:?} (+ {SLACK:?} slack)",
            bound()
        );
    }
    // Our own throughput stays reasonable: hand-overs every 20–50 ms would give ~25/s, windows
    // take at most a tenth of the time, and each foreign hold costs our waiters up to their
    // retry delay (a foreign release wakes nobody).
    assert!(
        ours as f64 / secs >= 8.0,
        "our throughput fell to {:.1}/s",
        ours as f64 / secs
    );
}

/// Runs our load alone on `resource` for `run` with `window`; returns holds per second and
/// the gaps between consecutive holds.
async fn load_alone(
    nodes: &RedisNodes,
    window: Duration,
    resource: &'static str,
    run: Duration,
) -> (f64, Instant, Vec<(Instant, Duration)>) {
    let mut handles = Vec::new();
    for _ in 0..3 {
        handles.push(handle(nodes, window).await);
    }
    let history = Arc::new(History::new());
    let stop = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    // A waiter left to its retry delay would show as a 2 s gap.
    let wait = LockOptions::default()
        .retry_delay(ms(2_000))
        .retry_jitter(Duration::ZERO)
        .wait_timeout(Duration::from_secs(30));
    let load = our_load(handles, resource, &wait, &history, &stop);
    tokio::time::sleep(run).await;
    stop.store(true, Ordering::SeqCst);
    let holds = within("our lockers to stop", load).await.unwrap();
    let secs = started.elapsed().as_secs_f64();
    assert!(history.overlaps().is_empty(), "{:?}", history.overlaps());
    (holds as f64 / secs, started, gaps(&history, 3))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn windows_come_every_t_and_our_waiters_resume_right_after_them() {
    let nodes = RedisNodes::start(3);
    let run = Duration::from_secs(4);
    let (without, _, _) = load_alone(&nodes, Duration::ZERO, "plain", run).await;
    let (with, started, gaps) = load_alone(&nodes, W, "windowed", run).await;
    // A gap longer than a hand-over is a window (nobody polls).
    let windows: Vec<(Instant, Duration)> =
        gaps.iter().copied().filter(|&(_, g)| g >= W / 2).collect();
    let longest = gaps.iter().map(|&(_, g)| g).max().unwrap_or_default();
    println!(
        "our holds/s: {without:.1} without windows, {with:.1} with ({:.2}x); {} windows, longest gap {longest:?}",
        with / without,
        windows.len()
    );
    // Each window opens after T + one hold at most, so a 4 s run sees at least
    // 4 s / (T + hold + W + slack) of them; without the windows there would be none.
    let cycle = bound() + SLACK;
    let expected = (run.as_secs_f64() / cycle.as_secs_f64()).floor() as usize;
    let expected = expected.max(1);
    assert!(
        windows.len() >= expected,
        "{} windows in {run:?}, expected at least {expected}",
        windows.len()
    );
    // And each comes within T + one hold + W of the one before (of the start, for the
    // first): the bound a foreign poller sees.
    let mut previous = started;
    for &(at, _) in &windows {
        let spacing = at.saturating_duration_since(previous);
        assert!(
            spacing <= cycle,
            "a window came {spacing:?} after the previous one, more than {cycle:?}"
        );
        previous = at;
    }
    // The named waiter attempts as the window ends, not on its 2 s retry delay.
    assert!(
        longest <= W + ms(250),
        "our waiters resumed {longest:?} after a window of {W:?}"
    );
    // Windows take at most a tenth of the time (T = 9 W); a loaded machine's noise aside.
    assert!(
        with >= without * 0.75,
        "windows cost too much: {with:.1}/s against {without:.1}/s"
    );
}

/// With foreign clients declared absent (`foreign_clients(false)`: nodes only our handles
/// use), no window idles the key however long our hand-overs go on: the same load that sees
/// windows every T with the defaults (the test above) sees none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_foreign_clients_off_no_window_idles_the_key() {
    let nodes = RedisNodes::start(3);
    let mut handles = Vec::new();
    for _ in 0..3 {
        let handle = Redlock::builder()
            .nodes(nodes.urls())
            .foreign_clients(false)
            .build()
            .await
            .unwrap();
        handles.push(handle);
    }
    let wait = LockOptions::default()
        .retry_delay(ms(2_000))
        .retry_jitter(Duration::ZERO)
        .wait_timeout(Duration::from_secs(30));
    let history = Arc::new(History::new());
    let stop = Arc::new(AtomicBool::new(false));
    let load = our_load(handles, "alone", &wait, &history, &stop);
    // With windows on, one would have come within T + one hold + W.
    tokio::time::sleep(bound() + ms(500)).await;
    stop.store(true, Ordering::SeqCst);
    let holds = within("our lockers to stop", load).await.unwrap();
    assert!(history.overlaps().is_empty(), "{:?}", history.overlaps());
    let windows = gaps(&history, 3)
        .iter()
        .filter(|&&(_, g)| g >= W * 3 / 4)
        .count();
    println!("{holds} holds, {windows} windows");
    assert_eq!(windows, 0, "windows opened with foreign clients off");
    assert_eq!(nodes.values(&window_key("alone")).await, vec![None; 3]);
}

/// Starts our load on `resource` (3 handles with windows of W, waiting with `wait`), and
/// returns it with its history and stop flag.
async fn busy_load(
    nodes: &RedisNodes,
    resource: &'static str,
    wait: &LockOptions,
) -> (tokio::task::JoinHandle<u64>, Arc<History>, Arc<AtomicBool>) {
    let mut handles = Vec::new();
    for _ in 0..3 {
        handles.push(handle(nodes, W).await);
    }
    let history = Arc::new(History::new());
    let stop = Arc::new(AtomicBool::new(false));
    let load = our_load(handles, resource, wait, &history, &stop);
    (load, history, stop)
}

/// Our default waiting (retry delay 200 ms + up to 100 ms), within 30 s.
fn patient() -> LockOptions {
    LockOptions::default().wait_timeout(Duration::from_secs(30))
}

/// One of our own handles with hand-over off polls like a foreign client (its waiters are
/// not queued, so hand-overs never serve it): it gets in within the bound.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handle_without_hand_over_gets_in_like_a_foreign_client() {
    let nodes = RedisNodes::start(3);
    let (load, history, stop) = busy_load(&nodes, "polled", &patient()).await;
    tokio::time::sleep(ms(500)).await;
    let poller = Redlock::builder()
        .nodes(nodes.urls())
        .handover_grace(Duration::ZERO)
        .build()
        .await
        .unwrap();
    let polling = LockOptions::default()
        .retry_delay(ms(150))
        .retry_jitter(ms(100))
        .wait_timeout(Duration::from_secs(30));
    let mut waits = Vec::new();
    for _ in 0..3 {
        tokio::time::sleep(ms(rand::rng().random_range(300..900))).await;
        let started = Instant::now();
        let guard = poller.lock_with("polled", &polling).await.unwrap();
        waits.push(started.elapsed());
        history.record(
            3,
            Instant::now(),
            guard.valid_until(),
            Instant::now() + ms(20),
        );
        tokio::time::sleep(ms(20)).await;
        guard.release().await.unwrap();
    }
    stop.store(true, Ordering::SeqCst);
    within("our lockers to stop", load).await.unwrap();
    assert!(history.overlaps().is_empty(), "{:?}", history.overlaps());
    println!("a handle without hand-over waited {waits:?}");
    let limit = bound() + SLACK;
    assert!(
        waits.iter().all(|&w| w <= limit),
        "a handle without hand-over waited {waits:?}, beyond {limit:?}"
    );
}

/// A foreign client that opens a new connection for every attempt (a script run per attempt,
/// a request per attempt) gets in within the bound too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_foreign_client_connecting_for_each_attempt_gets_in() {
    let nodes = RedisNodes::start(3);
    let (load, _history, stop) = busy_load(&nodes, "brief", &patient()).await;
    tokio::time::sleep(ms(500)).await;
    let mut waits = Vec::new();
    for round in 0..3 {
        tokio::time::sleep(ms(rand::rng().random_range(300..900))).await;
        let value = format!("foreign-{round}");
        let started = Instant::now();
        loop {
            let foreign = Foreign::connect(&nodes).await;
            let got = foreign.try_once("brief", &value).await;
            if got {
                tokio::time::sleep(ms(20)).await;
                foreign.release("brief", &value).await;
            }
            foreign.quit().await;
            if got {
                break;
            }
            assert!(started.elapsed() < Duration::from_secs(30), "starved");
            tokio::time::sleep(ms(rand::rng().random_range(100..250))).await;
        }
        waits.push(started.elapsed());
    }
    stop.store(true, Ordering::SeqCst);
    within("our lockers to stop", load).await.unwrap();
    println!("a foreign client connecting per attempt waited {waits:?}");
    let limit = bound() + SLACK;
    assert!(
        waits.iter().all(|&w| w <= limit),
        "it waited {waits:?}, beyond {limit:?}"
    );
}

/// A window refuses our queued waiters, and leaves the key to whoever polls: a foreign
/// `SET NX`, and our own single attempts, which never queue and are pollers too.
#[tokio::test]
async fn an_open_window_refuses_our_waiters_but_not_a_poller() {
    let nodes = RedisNodes::start(3);
    let ours = handle(&nodes, W).await;
    for url in nodes.urls() {
        let client = plain_client(&url).await;
        let _: () = client
            .set(
                window_key("res"),
                "1",
                Some(Expiration::PX(10_000)),
                None,
                false,
            )
            .await
            .unwrap();
    }
    // A waiter queues and stays refused while the window lasts, in every kind of request of
    // a handle that saw the key contended (elsewhere a first attempt is the spec's `SET NX`
    // alone, and takes a window as a poller does).
    let once = LockOptions::default().retry_count(0);
    let holder = Foreign::connect(&nodes).await;
    assert!(holder.try_once("res", "theirs").await);
    assert!(ours.lock_with("res", &once).await.unwrap_err().is_busy());
    holder.release("res", "theirs").await;
    holder.quit().await;
    let waiter = LockOptions::default()
        .retry_delay(ms(100))
        .retry_jitter(Duration::ZERO)
        .wait_timeout(ms(400));
    let attempts = [
        ("plain", waiter.clone(), None),
        ("fenced", waiter.clone().fencing(true), None),
        ("in a mode", waiter.clone(), Some(Mode::ProtectedRead)),
    ];
    for (name, options, mode) in &attempts {
        match lock_as(&ours, "res", *mode, options).await {
            Err(error) if error.is_busy() => {}
            other => panic!("{name}: a waiter took the key during a window: {other:?}"),
        }
    }
    // Single attempts poll: they take the key the window left free.
    for (name, options, mode) in [
        ("plain", once.clone(), None),
        ("fenced", once.clone().fencing(true), None),
        ("in a mode", once.clone(), Some(Mode::ProtectedRead)),
    ] {
        match lock_as(&ours, "res", mode, &options).await {
            Ok(guard) => assert!(guard.release().await.unwrap().was_held(), "{name}"),
            Err(error) => panic!("{name}: a single attempt refused by a window: {error}"),
        }
    }
    // The key itself is free: a foreign client takes it.
    let foreign = Foreign::connect(&nodes).await;
    assert!(foreign.try_once("res", "theirs").await);
}

#[tokio::test]
async fn with_windows_off_a_release_always_hands_over() {
    let nodes = RedisNodes::start(3);
    let (a, b) = (
        handle(&nodes, Duration::ZERO).await,
        handle(&nodes, Duration::ZERO).await,
    );
    let held = a.lock("res").await.unwrap();
    // Held past T: with windows on, this release would open one.
    tokio::time::sleep(every() + ms(50)).await;
    let wait = LockOptions::default()
        .retry_delay(ms(5_000))
        .wait_timeout(Duration::from_secs(10));
    let waiting = tokio::spawn(async move { b.lock_with("res", &wait).await });
    until_queued(&nodes, "res").await;
    let released = Instant::now();
    held.release().await.unwrap();
    let _guard = within("the waiter", waiting).await.unwrap().unwrap();
    assert!(released.elapsed() < W, "{:?}", released.elapsed());
}

#[tokio::test]
async fn a_hold_longer_than_t_ends_in_a_window_and_the_named_waiter_takes_the_key_after_it() {
    let nodes = RedisNodes::start(3);
    let (a, b) = (handle(&nodes, W).await, handle(&nodes, W).await);
    let held = a.lock("res").await.unwrap();
    tokio::time::sleep(every() + ms(50)).await;
    let wait = LockOptions::default()
        .retry_delay(ms(5_000))
        .retry_jitter(Duration::ZERO)
        .wait_timeout(Duration::from_secs(10));
    let waiting = tokio::spawn({
        let b = b.clone();
        async move { b.lock_with("res", &wait).await }
    });
    until_queued(&nodes, "res").await;
    let released = Instant::now();
    held.release().await.unwrap();
    // The releasing holder cannot take it back during the window by waiting for it.
    let waiting_again = LockOptions::default()
        .retry_delay(ms(50))
        .wait_timeout(ms(100));
    assert!(
        a.lock_with("res", &waiting_again)
            .await
            .unwrap_err()
            .is_busy()
    );
    let guard = within("the named waiter", waiting).await.unwrap().unwrap();
    let after = released.elapsed();
    assert!(
        after >= W && after < W + ms(250),
        "the named waiter took the key {after:?} after the release (window {W:?})"
    );
    assert!(guard.is_valid());
}

/// A release whose streak makes a window due decides on the view it has, without waiting for
/// the nodes: dropped right after its first poll (a caller's timeout, a cancelled request), it
/// still releases, and the waiter gets the key within a window, not after the ttl.
#[tokio::test]
async fn a_due_release_dropped_at_once_still_releases() {
    let nodes = RedisNodes::start(3);
    let (a, b) = (handle(&nodes, W).await, handle(&nodes, W).await);
    let held = a
        .lock_with(
            "dropped",
            &LockOptions::default().ttl(Duration::from_secs(20)),
        )
        .await
        .unwrap();
    // Held past T, and past the view's age: the release is due and its view is stale.
    tokio::time::sleep(every() + ms(50)).await;
    let wait = LockOptions::default()
        .retry_delay(ms(5_000))
        .retry_jitter(Duration::ZERO)
        .wait_timeout(Duration::from_secs(15));
    let waiting = tokio::spawn(async move { b.lock_with("dropped", &wait).await });
    until_queued(&nodes, "dropped").await;
    let released = Instant::now();
    let _cut_short = tokio::time::timeout(Duration::from_micros(1), held.release()).await;
    let _guard = within("the waiter", waiting).await.unwrap().unwrap();
    assert!(
        released.elapsed() < W + ms(500),
        "the waiter got the key {:?} after the release was dropped",
        released.elapsed()
    );
}

/// Waits until a waiter is queued for `key` on every node.
async fn until_queued(nodes: &RedisNodes, key: &str) {
    within("the waiter to queue", async {
        while nodes.queued(key).await.iter().any(|&q| q < 1) {
            tokio::time::sleep(ms(2)).await;
        }
    })
    .await;
}

/// A streak survives a moment free with nobody queued, taken back at once by a first attempt
/// of a handle that saw the key contended (the plain `ACQUIRE` script reads the streak there):
/// A hands over to B, B holds T/2 + 50 ms and releases with nobody queued, C (B's handle,
/// which waited for the key) takes it with its first attempt and holds T/2 + 50 ms (longer
/// than W, so the streak's key expires meanwhile) with D queued. T + 100 ms of streak is past
/// T: C's release opens a window, and D gets the key only after it. Had C counted only its
/// own hold, D would have got it at once and a foreign poller would have waited another T.
#[tokio::test]
async fn a_first_attempt_taking_a_free_key_carries_the_streak_on() {
    let nodes = RedisNodes::start(3);
    let [a, b, d] = [
        handle(&nodes, W).await,
        handle(&nodes, W).await,
        handle(&nodes, W).await,
    ];
    let c = b.clone();
    let wait = LockOptions::default()
        .retry_delay(ms(5_000))
        .retry_jitter(Duration::ZERO)
        .wait_timeout(Duration::from_secs(10));
    let held = a.lock("streak").await.unwrap();
    let b_waits = tokio::spawn({
        let wait = wait.clone();
        async move { b.lock_with("streak", &wait).await }
    });
    until_queued(&nodes, "streak").await;
    held.release().await.unwrap();
    let b_holds = within("B", b_waits).await.unwrap().unwrap();
    let half = every() / 2 + ms(50);
    tokio::time::sleep(half).await;
    b_holds.release().await.unwrap();
    let c_holds = c
        .lock_with("streak", &LockOptions::default().retry_count(0))
        .await
        .unwrap();
    let c_since = Instant::now();
    let d_waits = tokio::spawn(async move { d.lock_with("streak", &wait).await });
    until_queued(&nodes, "streak").await;
    tokio::time::sleep(half.saturating_sub(c_since.elapsed())).await;
    let released = Instant::now();
    c_holds.release().await.unwrap();
    let _d_holds = within("D", d_waits).await.unwrap().unwrap();
    let after = released.elapsed();
    assert!(
        after >= W,
        "D took the key {after:?} after C's release: no window (W = {W:?})"
    );
}

/// A release that is due finds nobody queued: no window, the key is free for anyone at once
/// (a lock held longer than T and released with nobody waiting costs our next locker nothing).
#[tokio::test]
async fn a_due_release_with_nobody_queued_opens_no_window() {
    let nodes = RedisNodes::start(3);
    let a = handle(&nodes, W).await;
    let held = a.lock("alone").await.unwrap();
    tokio::time::sleep(every() + ms(50)).await;
    held.release().await.unwrap();
    let once = LockOptions::default().retry_count(0);
    let again = a.lock_with("alone", &once).await.unwrap();
    assert_eq!(nodes.values(&window_key("alone")).await, vec![None; 3]);
    again.release().await.unwrap();
}

/// A poller of ours: one handle attempting `resource` once at a time (`retry_count(0)`),
/// every 100–250 ms, beside our busy load, 3 times; returns how long each acquisition took
/// from its first attempt.
async fn single_attempt_waits(nodes: &RedisNodes, poller: &Redlock, resource: &'static str) {
    let (load, history, stop) = busy_load(nodes, resource, &patient()).await;
    tokio::time::sleep(ms(500)).await;
    let once = LockOptions::default().retry_count(0);
    let mut waits = Vec::new();
    for _ in 0..3 {
        tokio::time::sleep(ms(rand::rng().random_range(300..900))).await;
        let started = Instant::now();
        let guard = loop {
            match poller.lock_with(resource, &once).await {
                Ok(guard) => break guard,
                Err(error) if error.is_busy() => {}
                Err(error) => panic!("{error}"),
            }
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "a single-attempt poller of ours starved for 10 s"
            );
            tokio::time::sleep(ms(rand::rng().random_range(100..250))).await;
        };
        waits.push(started.elapsed());
        history.record(
            3,
            Instant::now(),
            guard.valid_until(),
            Instant::now() + ms(20),
        );
        tokio::time::sleep(ms(20)).await;
        guard.release().await.unwrap();
    }
    stop.store(true, Ordering::SeqCst);
    within("our lockers to stop", load).await.unwrap();
    assert!(history.overlaps().is_empty(), "{:?}", history.overlaps());
    println!("a single-attempt poller of ours waited {waits:?}");
    let limit = bound() + SLACK;
    assert!(
        waits.iter().all(|&w| w <= limit),
        "a single-attempt poller of ours waited {waits:?}, beyond {limit:?}"
    );
}

/// One of our own hand-over handles polling with single attempts (a skip job, a
/// `retry_count(0)` caller in a loop) never queues, so hand-overs never serve it: it is a
/// poller like a foreign client, and gets in within the same bound, with no foreign
/// connection on the nodes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_single_attempt_poller_of_ours_gets_in_within_the_bound() {
    let nodes = RedisNodes::start(3);
    let poller = handle(&nodes, W).await;
    single_attempt_waits(&nodes, &poller, "single").await;
}

/// The same with a handle without hand-over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_single_attempt_poller_without_hand_over_gets_in_within_the_bound() {
    let nodes = RedisNodes::start(3);
    let poller = Redlock::builder()
        .nodes(nodes.urls())
        .handover_grace(Duration::ZERO)
        .build()
        .await
        .unwrap();
    single_attempt_waits(&nodes, &poller, "single-plain").await;
}
