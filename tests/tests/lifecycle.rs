//! Locks for long work — extension, auto-extension, the lost signal, scoped locking,
//! reentrancy, fencing tokens and the release registry — against real redis-server processes.

#![allow(clippy::unwrap_used)] // tests unwrap: a failure is the assertion

use std::future::IntoFuture;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tokio::time::Instant;

use fred::interfaces::KeysInterface;
use rand::Rng;
use redlock_core::{LockError, LockInfo, LockOptions, LostReason, Mode};
use redlock_tests::{
    DropFlag, RedisNodes, RedisServer, is_free, lock_everywhere, plain_client, redlock, within,
};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// `PTTL key` on one server.
async fn pttl(server: &RedisServer, key: &str) -> i64 {
    plain_client(&server.url()).await.pttl(key).await.unwrap()
}

#[tokio::test]
async fn extension_succeeds_with_two_of_five_down_and_not_with_three() {
    let mut nodes = RedisNodes::start(5);
    let a = redlock(&nodes).await;
    let options = LockOptions::default().ttl(ms(1_000)).lost_margin(ms(100));
    let guard = a.lock_with("res", &options).await.unwrap();
    let first = guard.valid_until();
    nodes.servers[0].kill();
    nodes.servers[1].kill();

    // 2 of 5 down: the other 3 confirm, and the validity moves forward by the new ttl.
    let until = guard.extend(ms(1_500)).await.unwrap();
    assert!(
        until >= first + ms(400),
        "validity did not move: {until:?} vs {first:?}"
    );
    assert_eq!(guard.valid_until(), until);
    for server in &nodes.servers[2..] {
        let left = pttl(server, "res").await;
        assert!(
            (1_000..=1_500).contains(&left),
            "pttl {left} after extending to 1.5 s"
        );
    }

    // 3 of 5 down: no quorum can confirm. The answer is typed and immediate (the dead nodes
    // fail fast), the lock keeps its current deadline, and its lost signal fires before it.
    nodes.servers[2].kill();
    let asked = Instant::now();
    let error = guard.extend(ms(1_500)).await.unwrap_err();
    assert!(matches!(error, LockError::Unavailable { .. }), "{error}");
    // Bounded by the round, not the lock: a round waiting for the lost deadline would take
    // ~900 ms; the slack covers a loaded 2-core machine (266 ms was seen with 3 nodes dead).
    assert!(asked.elapsed() < ms(450), "took {:?}", asked.elapsed());
    let lost = guard.lost();
    assert!(!lost.is_lost());
    within("the lost signal", lost.cancelled()).await;
    // Before the validity the nodes gave (the views say it ended once the signal fired).
    assert!(Instant::now() < lost.deadline() + options.lost_margin_in_effect());
    assert!(!guard.is_valid());
    assert_eq!(lost.reason(), Some(LostReason::Expired));
    // Once lost, the lock is not extended again, even by a quorum.
    assert!(matches!(
        guard.extend(ms(1_500)).await,
        Err(LockError::Lost { .. })
    ));
}

#[tokio::test]
async fn auto_extension_keeps_a_lock_five_times_its_ttl() {
    let nodes = RedisNodes::start(5);
    let (a, b) = (redlock(&nodes).await, redlock(&nodes).await);
    let ttl = ms(300);
    let options = LockOptions::default().ttl(ttl).auto_extend(true);
    let guard = a.lock_with("long", &options).await.unwrap();
    let acquired = Instant::now();
    let lost = guard.lost();
    let mut probes = 0;
    while acquired.elapsed() < ttl * 5 {
        assert!(
            !is_free(&b, "long").await,
            "another holder got the lock {:?} into a {ttl:?} lock",
            acquired.elapsed()
        );
        assert!(!lost.is_lost(), "lost after {:?}", acquired.elapsed());
        probes += 1;
        tokio::time::sleep(ms(25)).await;
    }
    assert!(probes >= 20, "only {probes} probes");
    assert!(guard.valid_until() > acquired + ttl * 4);
    guard.release().await.unwrap();
    assert!(is_free(&b, "long").await);
}

#[tokio::test]
async fn the_lost_signal_fires_before_the_validity_deadline_when_nodes_stop_answering() {
    let nodes = RedisNodes::start(5);
    let a = redlock(&nodes).await;
    let options = LockOptions::default().ttl(ms(1_000)).auto_extend(true);
    let guard = a.lock_with("stall", &options).await.unwrap();
    let lost = guard.lost();
    for server in &nodes.servers[..3] {
        server.pause();
    }
    within("the lost signal", lost.cancelled()).await;
    let fired = Instant::now();
    for server in &nodes.servers[..3] {
        server.resume();
    }
    // The validity the nodes gave: the views say it ended once the signal fired.
    let deadline = lost.deadline() + options.lost_margin_in_effect();
    assert!(
        fired < deadline,
        "fired {:?} after the deadline",
        fired - deadline
    );
    let margin = deadline - fired;
    println!(
        "lost signal fired {margin:?} before the validity deadline (lost margin {:?})",
        options.lost_margin_in_effect()
    );
    // It fired at the margin — not at the first failed extension, which came ~600 ms earlier.
    assert!(
        margin <= options.lost_margin_in_effect(),
        "fired {margin:?} early"
    );
    assert_eq!(lost.reason(), Some(LostReason::Expired));
}

#[tokio::test]
async fn an_extension_with_a_shorter_ttl_never_shortens_the_lock() {
    let nodes = RedisNodes::start(3);
    let (a, b) = (redlock(&nodes).await, redlock(&nodes).await);
    let single = LockOptions::default().retry_count(0);
    for mode in [None, Some(Mode::ProtectedRead)] {
        let resource = format!("shorter-{}", mode.map_or("plain", Mode::as_str));
        let options = LockOptions::default().ttl(ms(30_000));
        // On every node (no node reads -2 below).
        let guard = lock_everywhere(&a, &nodes, &resource, mode, &options).await;
        let before = guard.valid_until();
        let deadline = guard.extend(ms(2_000)).await.unwrap();
        assert_eq!(deadline, before, "{resource}: the deadline moved");
        assert_eq!(guard.valid_until(), before);
        for server in &nodes.servers {
            let left = pttl(server, &a.key_for(&resource)).await;
            assert!(
                left > 29_000,
                "{resource}: the key was shortened to {left} ms"
            );
        }
        // Past the shorter ttl (the issue's example: 30 s, extended by 2 s, a second client at
        // 3 s), the lock still excludes: no second holder (for a mode lock, a writer) while the
        // first guard claims its validity.
        tokio::time::sleep(ms(2_500)).await;
        let second = b
            .lock_mode_with(&resource, Mode::Exclusive, &single.clone())
            .await;
        assert!(
            matches!(second, Err(LockError::Busy { .. })),
            "{resource}: {second:?}"
        );
        let plain = b.lock_with(&resource, &single).await;
        assert!(
            matches!(plain, Err(LockError::Busy { .. })),
            "{resource}: {plain:?}"
        );
        assert!(guard.is_valid() && !guard.lost().is_lost());
        // A longer ttl still extends.
        let later = guard.extend(ms(60_000)).await.unwrap();
        assert!(later > before + ms(25_000), "{resource}: not extended");
        guard.release().await.unwrap();
    }
}

#[tokio::test]
async fn an_awaited_lost_signal_owns_itself_and_fires_at_its_deadline_or_release() {
    let nodes = RedisNodes::start(1);
    let a = redlock(&nodes).await;
    let options = LockOptions::default().ttl(ms(500));
    let guard = a.lock_with("owned-lost", &options).await.unwrap();
    let deadline = guard.lost().deadline();
    // The awaited signal owns itself: `'static`, so it can be spawned with no binding kept.
    let spawned = tokio::spawn(guard.lost().into_future());
    // The guide's form: the temporary signal awaited in `select!`.
    let worked = tokio::select! {
        () = guard.lost() => false,
        () = tokio::time::sleep(ms(5_000)) => true,
    };
    let fired = Instant::now();
    assert!(!worked, "the work ran past the lost deadline");
    assert!(fired >= deadline, "fired {:?} early", deadline - fired);
    let validity = deadline + options.lost_margin_in_effect();
    assert!(
        fired < validity,
        "fired {:?} after the validity deadline",
        fired - validity
    );
    within("the spawned lost signal", spawned).await.unwrap();
    assert!(Instant::now() >= deadline);

    // Long before its deadline, a release fires it too.
    let guard = a
        .lock_with("owned-lost-2", &LockOptions::default().ttl(ms(30_000)))
        .await
        .unwrap();
    let (lost, info) = (guard.lost(), guard.info());
    let released = Instant::now();
    guard.release().await.unwrap();
    within("the lost signal after release", lost).await;
    assert!(released.elapsed() < ms(1_000));
    assert_eq!(info.lost().reason(), Some(LostReason::Released));

    // An extension moves the deadline of a signal already being awaited: auto-extended past
    // three ttls, the work wins.
    let options = LockOptions::default().ttl(ms(300)).auto_extend(true);
    let guard = a.lock_with("owned-lost-3", &options).await.unwrap();
    let worked = tokio::select! {
        () = guard.lost() => false,
        () = tokio::time::sleep(ms(900)) => true,
    };
    assert!(
        worked,
        "lost while auto-extended: {:?}",
        guard.lost().reason()
    );
    guard.release().await.unwrap();
}

#[tokio::test]
async fn with_lock_stops_the_work_when_the_lock_is_lost_and_never_recreates_it() {
    let nodes = RedisNodes::start(5);
    let a = redlock(&nodes).await;
    let dropped = Arc::new(AtomicBool::new(false));
    let (started_tx, started_rx) = tokio::sync::oneshot::channel();
    let work = {
        let flag = DropFlag(Arc::clone(&dropped));
        move |lock: LockInfo| async move {
            let _flag = flag;
            let _sent = started_tx.send(lock.resource().to_owned());
            std::future::pending::<()>().await;
        }
    };
    let run = tokio::spawn({
        let a = a.clone();
        async move { a.with_lock("job", ms(600), work).await }
    });
    assert_eq!(
        within("the work to start", started_rx).await.unwrap(),
        "job"
    );
    // An operator (or eviction) deletes the lock while the work runs (once every grant
    // landed: a late one would put the key back on its node).
    nodes.settle("job", |h| h.value.token().is_some()).await;
    nodes.delete("job").await;
    let result = within("with_lock to return", run).await.unwrap();
    assert!(
        matches!(
            result,
            Err(LockError::Lost {
                reason: LostReason::Refused(_),
                ..
            })
        ),
        "{result:?}"
    );
    assert!(dropped.load(Ordering::SeqCst), "the work was not dropped");
    assert_eq!(nodes.values("job").await, vec![None; 5]);
    assert_eq!(a.held_count(), 0);
}

#[tokio::test]
async fn with_lock_returns_the_work_output_and_releases() {
    let nodes = RedisNodes::start(3);
    let (a, b) = (redlock(&nodes).await, redlock(&nodes).await);
    let output = a
        .with_lock("scoped", ms(200), |lock| {
            let b = b.clone();
            async move {
                // Longer than the ttl: auto-extension keeps it held throughout.
                tokio::time::sleep(ms(500)).await;
                (
                    is_free(&b, lock.resource()).await,
                    lock.resource().to_owned(),
                )
            }
        })
        .await
        .unwrap();
    assert_eq!(output, (false, "scoped".to_owned()));
    assert!(is_free(&b, "scoped").await);
}

#[tokio::test]
async fn an_extension_never_resurrects_a_deleted_key_nor_touches_another_holders() {
    let nodes = RedisNodes::start(5);
    let (a, b) = (redlock(&nodes).await, redlock(&nodes).await);
    let options = LockOptions::default().ttl(ms(5_000));

    // Each key is deleted once every grant landed (a late one would put it back).
    let guard = a.lock_with("gone", &options).await.unwrap();
    let token = guard.token().expose();
    nodes.settle("gone", |h| h.value.holds(token)).await;
    nodes.delete("gone").await;
    let error = guard.extend(ms(5_000)).await.unwrap_err();
    assert!(
        matches!(
            error,
            LockError::Lost {
                reason: LostReason::Refused(_),
                ..
            }
        ),
        "{error}"
    );
    assert!(guard.lost().is_lost());
    assert_eq!(nodes.values("gone").await, vec![None; 5]);

    let guard = a.lock_with("taken", &options).await.unwrap();
    let token = guard.token().expose();
    nodes.settle("taken", |h| h.value.holds(token)).await;
    nodes.delete("taken").await;
    let theirs = lock_everywhere(
        &b,
        &nodes,
        "taken",
        None,
        &LockOptions::default().ttl(ms(3_000)),
    )
    .await;
    assert!(guard.extend(ms(60_000)).await.is_err());
    for left in nodes.pttls("taken").await {
        assert!((1..=3_000).contains(&left), "their key's ttl became {left}");
    }
    let their_token = Some(theirs.token().expose().to_owned());
    assert_eq!(nodes.values("taken").await, vec![their_token; 5]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fencing_tokens_strictly_increase_over_1000_acquisitions_with_minority_restarts() {
    let mut nodes = RedisNodes::start(5);
    // Two clients take turns, as successive holders in two replicas would.
    let handles = [redlock(&nodes).await, redlock(&nodes).await];
    let options = LockOptions::default()
        .ttl(ms(2_000))
        .fencing(true)
        .wait_timeout(ms(5_000))
        .retry_delay(ms(5))
        .retry_jitter(ms(5));
    let seed: u64 = rand::rng().random();
    println!("seed {seed}");
    let mut rng = <rand::rngs::StdRng as rand::SeedableRng>::seed_from_u64(seed);
    let (mut last, mut down, mut restarts) = (0, Vec::new(), 0);
    for i in 0..1_000 {
        if i % 50 == 10 {
            // 1 or 2 of 5 lose their data (the most a fencing quorum of 4 tolerates): one
            // crashes and comes back empty 30 rounds later (a fenced lock needs 4 of 5, so
            // only one stays down), the other, if any, restarts empty at once.
            let count = rng.random_range(1..=2);
            let lost = rand::seq::index::sample(&mut rng, 5, count).into_vec();
            for &d in &lost[1..] {
                tokio::task::block_in_place(|| nodes.servers[d].restart());
                restarts += 1;
            }
            down = lost[..1].to_vec();
            nodes.servers[down[0]].kill();
        }
        if i % 50 == 40 {
            for &d in &down {
                tokio::task::block_in_place(|| nodes.servers[d].restart());
                restarts += 1;
            }
        }
        let guard = handles[i % 2]
            .lock_with("fenced", &options)
            .await
            .unwrap_or_else(|e| panic!("acquisition {i} with {down:?} down: {e}"));
        let token = guard.fencing_token().unwrap();

        assert!(
            token > last,
            "acquisition {i}: token {token} after {last} (seed {seed})"
        );
        last = token;
        guard.release().await.unwrap();
    }
    assert!(restarts >= 20);
    assert!(last >= 1_000);
}

#[tokio::test]
async fn code_in_a_guards_scope_re_enters_its_lock_and_everyone_else_waits() {
    let nodes = RedisNodes::start(3);
    let (a, b) = (redlock(&nodes).await, redlock(&nodes).await);
    let reentrant = LockOptions::default().reentrant(true).retry_count(0);
    let outer = a.lock_with("r", &reentrant).await.unwrap();
    // Outside the guard's scope, the same task is another holder.
    assert!(a.lock_with("r", &reentrant).await.unwrap_err().is_busy());
    let (inner, spawned) = outer
        .scope(async {
            let inner = within("re-entry", a.lock_with("r", &reentrant))
                .await
                .unwrap();
            // Work the body spawns runs outside the scope: another holder.
            let spawned = tokio::spawn({
                let (a, reentrant) = (a.clone(), reentrant.clone());
                async move { a.lock_with("r", &reentrant).await.map(drop) }
            });
            (inner, spawned.await.unwrap())
        })
        .await;
    assert!(spawned.unwrap_err().is_busy());
    assert_eq!(outer.hold_count(), 2);
    assert_eq!(inner.token(), outer.token());
    // Without `reentrant`, code in the scope is refused like anyone else; through another
    // handle, too.
    let once = LockOptions::default().retry_count(0);
    outer
        .scope(async {
            assert!(a.lock_with("r", &once).await.unwrap_err().is_busy());
            assert!(b.lock_with("r", &reentrant).await.unwrap_err().is_busy());
        })
        .await;

    let released = inner.release().await.unwrap();
    assert!(released.kept && released.was_held());
    assert!(!is_free(&b, "r").await, "the outer guard still holds it");
    assert!(outer.release().await.unwrap().was_held());
    assert!(is_free(&b, "r").await);
}

#[tokio::test]
async fn sibling_futures_of_one_task_are_two_holders() {
    let nodes = RedisNodes::start(3);
    let a = redlock(&nodes).await;
    let reentrant = LockOptions::default().reentrant(true).retry_count(0);
    // A holder with its scope open, and a sibling of it in the same task.
    let outer = a.lock_with("sib", &reentrant).await.unwrap();
    let (in_scope, sibling) = tokio::join!(
        outer.scope(a.lock_with("sib", &reentrant)),
        a.lock_with("sib", &reentrant)
    );
    assert!(in_scope.is_ok(), "{in_scope:?}");
    assert!(
        sibling.unwrap_err().is_busy(),
        "a sibling future entered the lock"
    );
    drop(in_scope);
    outer.release().await.unwrap();
    // Two siblings asking at once: exactly one holds.
    let (x, y) = tokio::join!(
        a.lock_with("sib2", &reentrant),
        a.lock_with("sib2", &reentrant)
    );
    assert_eq!(
        usize::from(x.is_ok()) + usize::from(y.is_ok()),
        1,
        "{x:?} {y:?}"
    );
}

#[tokio::test]
async fn auto_extension_stops_at_max_hold() {
    let nodes = RedisNodes::start(3);
    let a = redlock(&nodes).await;
    let options = LockOptions::default()
        .ttl(ms(300))
        .auto_extend(true)
        .max_hold(ms(800));
    let guard = a.lock_with("capped", &options).await.unwrap();
    let acquired = Instant::now();
    let lost = guard.lost();
    within("the lost signal", lost.cancelled()).await;
    let held = acquired.elapsed();
    assert!(held > ms(600), "lost after {held:?}: not extended");
    assert!(held <= ms(800), "held {held:?}, past max_hold");
    assert_eq!(lost.reason(), Some(LostReason::Expired));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_driver_extends_a_thousand_locks() {
    let nodes = RedisNodes::start(3);
    // A node timeout that CPU starvation of a loaded CI machine cannot reach: the shutdown
    // below must confirm all 1,000 releases, and 3,000 commands answered within 100 ms each
    // is a scheduling test, not a lock test (270 of 1,000 under two busy loops).
    let a = redlock_core::Redlock::builder()
        .nodes(nodes.urls())
        .node_timeout(Duration::from_secs(1))
        .build()
        .await
        .unwrap();
    let ttl = ms(1_500);
    let options = LockOptions::default().ttl(ttl).auto_extend(true);
    let metrics = tokio::runtime::Handle::current().metrics();
    let mut guards = vec![a.lock_with("many:0", &options).await.unwrap()];
    let tasks = metrics.num_alive_tasks();
    for i in 1..1_000 {
        guards.push(a.lock_with(&format!("many:{i}"), &options).await.unwrap());
    }
    assert_eq!(
        metrics.num_alive_tasks(),
        tasks,
        "auto-extension must not spawn a task per lock"
    );
    let acquired = Instant::now();
    tokio::time::sleep(ttl * 2).await;
    let signals: Vec<_> = guards.iter().map(|g| g.lost()).collect();
    assert!(signals.iter().all(|s| !s.is_lost()), "a lock was lost");
    assert!(guards.iter().all(|g| g.valid_until() > acquired + ttl));
    for key in ["many:0", "many:500", "many:999"] {
        assert!(nodes.pttls(key).await.iter().all(|&left| left > 0));
    }
    let report = a.shutdown(Duration::from_secs(5)).await;
    assert_eq!(report.released.len(), 1_000);
    assert!(
        signals
            .iter()
            .all(|s| s.reason() == Some(LostReason::Released))
    );
    drop(guards);
}

#[tokio::test]
async fn shutdown_reports_the_locks_it_could_not_release() {
    let mut nodes = RedisNodes::start(5);
    let a = redlock(&nodes).await;
    let options = LockOptions::default().auto_extend(true);
    let _one = a.lock_with("one", &options).await.unwrap();
    let _two = a.lock_with("two", &options).await.unwrap();
    for server in &mut nodes.servers[..3] {
        server.kill();
    }
    let report = within("shutdown", a.shutdown(Duration::from_secs(1))).await;
    let mut unconfirmed = report.unconfirmed.clone();
    unconfirmed.sort();
    assert_eq!(unconfirmed, ["one", "two"]);
    assert!(report.released.is_empty());
    assert_eq!(a.held_count(), 0);
}

#[tokio::test]
async fn work_under_with_lock_re_enters_its_lock() {
    let nodes = RedisNodes::start(3);
    let a = redlock(&nodes).await;
    let reentrant = LockOptions::default().reentrant(true).retry_count(0);
    let inner = a
        .with_lock_options("scoped", &reentrant, |_| async {
            a.lock_with("scoped", &reentrant)
                .await
                .map(|g| g.hold_count())
        })
        .await
        .unwrap();
    assert_eq!(inner.unwrap(), 2, "the work was outside the lock's scope");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_returns_once_every_node_has_the_release() {
    use redlock_tests::proxy::{Direction, Fault};
    let nodes = RedisNodes::start(5);
    let proxies = nodes.proxies();
    let redlock = redlock_core::Redlock::builder()
        .nodes(redlock_tests::proxy_urls(&proxies))
        .build()
        .await
        .unwrap();
    let guard = redlock.lock("flushed").await.unwrap();
    // Two nodes now get every command 300 ms late: the release is confirmed by the three
    // others, and a process that exited then would leave the key on the two slow ones.
    for proxy in &proxies[..2] {
        proxy.set(Direction::Request, Fault::Delay(Duration::from_millis(300)));
    }
    let started = Instant::now();
    redlock.shutdown(Duration::from_secs(3)).await;
    assert_eq!(nodes.values("flushed").await, vec![None; 5]);
    assert!(started.elapsed() >= Duration::from_millis(250));
    drop(guard);
}
