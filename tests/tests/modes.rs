//! Lock modes (seed 002's six DLM modes) against five real redis-server processes: the whole
//! compatibility table, readers and writers under the exclusion checker, per-holder expiry,
//! minority node loss, writer starvation, fencing and auto-extension, and the plain lock
//! beside mode locks.

#![allow(clippy::unwrap_used)] // tests unwrap: a failure is the assertion

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tokio::time::Instant;

use rand::Rng;
use redlock_core::{LockError, LockOptions, Mode, Redlock};
use redlock_tests::checker::{History, Register};
use redlock_tests::{Holding, RedisNodes, RedisServer, redlock, within};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// One attempt.
fn once() -> LockOptions {
    LockOptions::default().retry_count(0)
}

/// Waiting for up to `wait`, retrying every `delay` when not woken.
fn patient(delay: Duration, wait: Duration) -> LockOptions {
    LockOptions::default()
        .retry_delay(delay)
        .retry_jitter(ms(10))
        .wait_timeout(wait)
}

/// Waiting for up to `wait`, retrying every `delay` when not woken.
fn waiting(delay: Duration, wait: Duration) -> LockOptions {
    patient(delay, wait)
}

/// Three handles over `nodes`: two holders and a third client (each its own connections).
async fn three(nodes: &RedisNodes) -> (Redlock, Redlock, Redlock) {
    (
        redlock(nodes).await,
        redlock(nodes).await,
        redlock(nodes).await,
    )
}

/// Seed 002's table, written out from the seed rather than from `Mode::compatible`: for each
/// held mode, the modes another holder may take beside it.
const SEED_002: [(&str, &[&str]); 6] = [
    ("NL", &["NL", "CR", "CW", "PR", "PW", "EX"]),
    ("CR", &["NL", "CR", "CW", "PR", "PW"]),
    ("CW", &["NL", "CR", "CW"]),
    ("PR", &["NL", "CR", "PR"]),
    ("PW", &["NL", "CR"]),
    ("EX", &["NL"]),
];

#[tokio::test]
async fn the_whole_table_pairwise_against_five_nodes() {
    let nodes = RedisNodes::start(5);
    let (a, b) = (redlock(&nodes).await, redlock(&nodes).await);
    let mut cells = Vec::new();
    for (held, row) in SEED_002 {
        for asked in Mode::ALL.map(Mode::as_str) {
            let resource = format!("table:{held}:{asked}");
            let first = a
                .lock_mode_with(&resource, held.parse().unwrap(), &once())
                .await
                .unwrap();
            let second = b
                .lock_mode_with(&resource, asked.parse().unwrap(), &once())
                .await;
            let expected = row.contains(&asked);
            match &second {
                Ok(guard) => {
                    // Both holders are recorded on the nodes, each under its own token (on a
                    // quorum at least: the last grants land after the quorum).
                    let (one, two) = (first.token().expose(), guard.token().expose());
                    let both = |h: &Holding| h.value.holds(one) && h.value.holds(two);
                    let holdings = nodes.settle(&resource, both).await;
                    let with_both = holdings.iter().filter(|h| both(h)).count();
                    assert!(with_both >= nodes.quorum(), "{holdings:?}");
                }
                Err(error) => assert!(error.is_busy(), "{held} then {asked}: {error}"),
            }
            cells.push(((held, asked), second.is_ok(), expected));
            first.release().await.unwrap();
            if let Ok(guard) = second {
                guard.release().await.unwrap();
            }
            // Holders' entries and a refused request's waiter entry are all removed.
            nodes.gone_everywhere(&resource).await;
        }
    }
    let wrong: Vec<_> = cells.iter().filter(|(_, got, want)| got != want).collect();
    assert!(wrong.is_empty(), "cells against seed 002: {wrong:?}");
    assert_eq!(cells.len(), 36);
}

/// What one client did in the readers-and-writers run.
#[derive(Default)]
struct Tally {
    holds: usize,
    busy: usize,
}

#[tokio::test]
async fn readers_share_and_writers_exclude_under_the_checker() {
    let nodes = RedisNodes::start(5);
    let store = RedisServer::start();
    let register = Register::new(&store, "rw").await;
    let history = Arc::new(History::new());
    let deadline = Instant::now() + Duration::from_secs(4);
    let mut clients = Vec::new();
    // Six readers and two writers, each with its own handle (its own connections).
    for id in 0..8 {
        let redlock = redlock(&nodes).await;
        let (history, register) = (Arc::clone(&history), register.clone());
        let mode = if id < 6 {
            Mode::ProtectedRead
        } else {
            Mode::Exclusive
        };
        clients.push(tokio::spawn(async move {
            let options = waiting(ms(50), Duration::from_secs(3)).ttl(ms(2_000));
            let mut tally = Tally::default();
            while Instant::now() < deadline {
                let guard = match redlock.lock_mode_with("rw", mode, &options).await {
                    Ok(guard) => guard,
                    Err(error) if error.is_busy() => {
                        tally.busy += 1;
                        continue;
                    }
                    Err(error) => panic!("{error}"),
                };
                let start = Instant::now();
                let pause = ms(rand::rng().random_range(1..8));
                if mode == Mode::Exclusive {
                    // Read, pause, write: a reader or writer inside at once sees or loses it.
                    register.increment(pause).await;
                } else {
                    let before = register.read().await;
                    tokio::time::sleep(pause).await;
                    assert_eq!(
                        register.read().await,
                        before,
                        "a writer wrote under a reader"
                    );
                }
                let (valid_until, released) = (guard.valid_until(), Instant::now());
                guard.release().await.unwrap();
                history.record_mode(id, Some(mode), start, valid_until, released);
                tally.holds += 1;
            }
            (mode, tally)
        }));
    }
    let mut writes = 0;
    let mut reads = 0;
    for client in clients {
        let (mode, tally) = within("a client", client).await.unwrap();
        assert!(tally.holds > 0, "a {mode} client never held the lock");
        match mode {
            Mode::Exclusive => writes += tally.holds,
            _ => reads += tally.holds,
        }
    }
    let (conflicts, shared) = history.mode_overlaps();
    assert!(
        conflicts.is_empty(),
        "incompatible holds overlapped: {conflicts:?}"
    );
    assert!(shared > 0, "readers never held together ({reads} reads)");
    assert_eq!(
        register.read().await,
        writes as i64,
        "an increment was lost"
    );
    println!("{reads} reads, {writes} writes, {shared} overlapping reader pairs, 0 conflicts");
}

#[tokio::test]
async fn one_holders_expiry_does_not_free_the_others() {
    let nodes = RedisNodes::start(5);
    let (a, b, w) = three(&nodes).await;
    let short = a
        .lock_mode_with("exp", Mode::ProtectedRead, &once().ttl(ms(300)))
        .await
        .unwrap();
    let long = b
        .lock_mode_with("exp", Mode::ProtectedRead, &once().ttl(ms(30_000)))
        .await
        .unwrap();
    let short_token = short.token().expose().to_owned();
    // The short reader's process dies: its entry is left to expire.
    std::mem::forget(short);
    tokio::time::sleep(ms(350)).await;
    let refused = w.lock_mode_with("exp", Mode::Exclusive, &once()).await;
    assert!(
        refused.unwrap_err().is_busy(),
        "the long reader still holds"
    );
    for fields in nodes.fields("exp").await {
        assert!(!fields.contains_key(&short_token), "expired entry swept");
        assert!(fields.contains_key(long.token().expose()));
    }
    // The key itself lives as long as its latest holder.
    assert!(nodes.pttls("exp").await.iter().all(|&t| t > 25_000));
    long.release().await.unwrap();
    let writer = w
        .lock_mode_with("exp", Mode::Exclusive, &once())
        .await
        .unwrap();
    writer.release().await.unwrap();
}

#[tokio::test]
async fn release_and_extension_touch_only_their_own_entry() {
    let nodes = RedisNodes::start(5);
    let (a, b, w) = three(&nodes).await;
    let first = a.read_lock("own").await.unwrap();
    let second = b.read_lock("own").await.unwrap();
    let released = first.release().await.unwrap();
    assert!(released.was_held());
    assert!(
        w.lock_mode_with("own", Mode::Exclusive, &once())
            .await
            .unwrap_err()
            .is_busy()
    );
    let before = second.valid_until();
    second.extend(ms(60_000)).await.unwrap();
    assert!(second.valid_until() > before);
    // The key's expiry follows the extended holder (on a quorum at least: the extension's
    // last calls land after it).
    let extended = |h: &Holding| h.ttl.is_some_and(|ttl| ttl > ms(50_000));
    let holdings = nodes.settle("own", extended).await;
    let longer = holdings.iter().filter(|h| extended(h)).count();
    assert!(longer >= nodes.quorum(), "{holdings:?}");
    second.release().await.unwrap();
    nodes.gone_everywhere("own").await;
}

/// Reads and a write on `resource` must keep working: readers share, the writer waits for
/// them and then holds alone.
async fn readers_then_writer(handles: &[Redlock], resource: &str) {
    let r1 = handles[0].read_lock(resource).await.unwrap();
    let r2 = handles[1].read_lock(resource).await.unwrap();
    let busy = handles[2]
        .lock_mode_with(resource, Mode::Exclusive, &once())
        .await;
    assert!(busy.unwrap_err().is_busy());
    let writer = {
        let handle = handles[2].clone();
        let resource = resource.to_owned();
        tokio::spawn(async move {
            let options = waiting(ms(100), ms(8_000));
            handle
                .lock_mode_with(&resource, Mode::Exclusive, &options)
                .await
        })
    };
    tokio::time::sleep(ms(50)).await;
    assert!(!writer.is_finished(), "the writer waits for the readers");
    r1.release().await.unwrap();
    r2.release().await.unwrap();
    let writer = within("the writer", writer).await.unwrap().unwrap();
    let reader = handles[0]
        .lock_mode_with(resource, Mode::ProtectedRead, &once())
        .await;
    // Refused (with nodes down the round may stop before a quorum answered, so the error
    // can read "unavailable": the refusals already made a quorum impossible).
    assert!(reader.is_err(), "the writer holds alone");
    writer.release().await.unwrap();
}

#[tokio::test]
async fn modes_survive_the_loss_of_a_minority() {
    let mut nodes = RedisNodes::start(5);
    let mut handles = Vec::new();
    for _ in 0..3 {
        handles.push(redlock(&nodes).await);
    }
    readers_then_writer(&handles, "before").await;
    nodes.servers[0].kill();
    nodes.servers[1].pause();
    readers_then_writer(&handles, "after").await;
    nodes.servers[1].resume();
}

#[tokio::test]
async fn a_writer_is_not_starved_by_a_stream_of_readers() {
    const READ_HOLD: Duration = Duration::from_millis(150);
    let nodes = RedisNodes::start(5);
    let stop = Arc::new(AtomicBool::new(false));
    // (asked, granted) of every read.
    let reads = Arc::new(std::sync::Mutex::new(Vec::<(Instant, Instant)>::new()));
    let mut readers = Vec::new();
    // Four readers, staggered, each re-asking as soon as it released: from the first
    // 100 ms on, some reader always holds, so without writer preference a writer never
    // finds the resource free.
    for i in 0..4u64 {
        let redlock = redlock(&nodes).await;
        let (stop, reads) = (Arc::clone(&stop), Arc::clone(&reads));
        readers.push(tokio::spawn(async move {
            tokio::time::sleep(ms(i * 40)).await;
            let options = waiting(ms(20), ms(9_000));
            while !stop.load(Ordering::SeqCst) {
                let asked = Instant::now();
                let guard = redlock
                    .lock_mode_with("stream", Mode::ProtectedRead, &options)
                    .await
                    .unwrap();
                reads.lock().unwrap().push((asked, Instant::now()));
                tokio::time::sleep(READ_HOLD).await;
                guard.release().await.unwrap();
            }
        }));
    }
    let writer = redlock(&nodes).await;
    tokio::time::sleep(ms(400)).await;
    let asked = Instant::now();
    let options = waiting(ms(20), ms(8_000));
    let guard = within(
        "the writer",
        writer.lock_mode_with("stream", Mode::Exclusive, &options),
    )
    .await
    .unwrap();
    let granted = Instant::now();
    let waited = granted - asked;
    tokio::time::sleep(ms(50)).await;
    guard.release().await.unwrap();
    stop.store(true, Ordering::SeqCst);
    for reader in readers {
        within("a reader", reader).await.unwrap();
    }
    // The bound: the writer waits for the readers that held when it asked (at most one
    // READ_HOLD) and one wake-up, not for readers that came after it.
    println!("the writer waited {waited:?} behind readers holding {READ_HOLD:?} each");
    assert!(
        waited < READ_HOLD + ms(500),
        "the writer waited {waited:?}, more than one read hold and a wake-up"
    );
    let passed: Vec<(Instant, Instant)> = reads
        .lock()
        .unwrap()
        .iter()
        .copied()
        .filter(|&(read_asked, read_granted)| read_asked > asked + ms(50) && read_granted < granted)
        .collect();
    assert!(
        passed.is_empty(),
        "{} readers who asked after the writer went first",
        passed.len()
    );
}

#[tokio::test]
async fn a_waiting_writer_is_woken_by_the_last_readers_release() {
    let nodes = RedisNodes::start(5);
    let (a, b, w) = three(&nodes).await;
    let r1 = a.read_lock("wake").await.unwrap();
    let r2 = b.read_lock("wake").await.unwrap();
    // Polling with a 10 s delay would take 10 s after the last release.
    let writer = tokio::spawn(async move {
        w.lock_mode_with("wake", Mode::Exclusive, &waiting(ms(10_000), ms(20_000)))
            .await
    });
    within("the writer's waiter entry", async {
        while !nodes
            .fields("wake")
            .await
            .iter()
            .all(|f| f.keys().any(|k| k.starts_with('~')))
        {
            tokio::time::sleep(ms(5)).await;
        }
    })
    .await;
    r1.release().await.unwrap();
    let guard = woken_by(r2.release(), "the writer", writer).await;
    assert_eq!(guard.mode(), Some(Mode::Exclusive));
    // While it holds, its waiter entry stays (a grant by too few nodes would not lose its
    // place); its release removes both, and the key with them.
    guard.release().await.unwrap();
    nodes.gone_everywhere("wake").await;
}

#[tokio::test]
async fn mode_locks_get_fencing_tokens_and_auto_extension() {
    let nodes = RedisNodes::start(5);
    let (a, b, w) = three(&nodes).await;
    let fenced = || once().fencing(true);
    let reader = a
        .lock_mode_with(
            "fx",
            Mode::ProtectedRead,
            &fenced().ttl(ms(300)).auto_extend(true),
        )
        .await
        .unwrap();
    let other = b
        .lock_mode_with("fx", Mode::ConcurrentRead, &fenced())
        .await
        .unwrap();
    let (t1, t2) = (
        reader.fencing_token().unwrap(),
        other.fencing_token().unwrap(),
    );
    assert!(
        t2 > t1,
        "fencing tokens increase across holders: {t1} then {t2}"
    );
    // Three ttls later the auto-extended reader still holds, and writers are refused.
    tokio::time::sleep(ms(900)).await;
    assert!(reader.is_valid() && !reader.lost().is_lost());
    other.release().await.unwrap();
    assert!(
        w.lock_mode_with("fx", Mode::Exclusive, &fenced())
            .await
            .unwrap_err()
            .is_busy()
    );
    reader.release().await.unwrap();
    let writer = w
        .lock_mode_with("fx", Mode::Exclusive, &fenced())
        .await
        .unwrap();
    assert!(writer.fencing_token().unwrap() > t2);
    writer.release().await.unwrap();
}

#[tokio::test]
async fn plain_and_mode_locks_on_one_resource_exclude_each_other() {
    let nodes = RedisNodes::start(5);
    let (a, b) = (redlock(&nodes).await, redlock(&nodes).await);
    let plain = a.lock("mixed").await.unwrap();
    for mode in Mode::ALL {
        let error = b.lock_mode_with("mixed", mode, &once()).await.unwrap_err();
        assert!(error.is_busy(), "{mode} beside a plain lock: {error}");
    }
    plain.release().await.unwrap();
    let reader = b.read_lock("mixed").await.unwrap();
    let busy = a
        .lock_with("mixed", &LockOptions::default().retry_count(0))
        .await;
    assert!(busy.unwrap_err().is_busy());
    reader.release().await.unwrap();

    // A plain holder whose key expired and was taken by a reader releases and extends
    // cleanly: nothing of the reader's is touched, and the nodes answer (no WRONGTYPE).
    let stale = a
        .lock_with("mixed", &LockOptions::default().ttl(ms(100)))
        .await
        .unwrap();
    tokio::time::sleep(ms(150)).await;
    let reader = b.read_lock("mixed").await.unwrap();
    assert!(matches!(
        stale.extend(ms(1_000)).await,
        Err(LockError::Lost { .. })
    ));
    let released = stale.release().await.unwrap();
    assert_eq!((released.deleted, released.answered), (0, 5));
    // The reader's entry is left where it is (a quorum at least: its last grants land after).
    let token = reader.token().expose();
    let holdings = nodes.settle("mixed", |h| h.value.holds(token)).await;
    let kept = holdings.iter().filter(|h| h.value.holds(token)).count();
    assert!(kept >= nodes.quorum(), "{holdings:?}");
    reader.release().await.unwrap();
}

/// Runs `release` and awaits `waiter`, which must get the lock less than a second after it.
async fn woken_by<R, E: std::fmt::Debug>(
    release: impl std::future::Future<Output = Result<R, E>>,
    what: &str,
    waiter: tokio::task::JoinHandle<Result<redlock_core::LockGuard, LockError>>,
) -> redlock_core::LockGuard {
    let released = Instant::now();
    release.await.unwrap();
    let guard = within(what, waiter).await.unwrap().unwrap();
    let woken_after = released.elapsed();
    assert!(
        woken_after < ms(1_000),
        "{what} woken {woken_after:?} after the release"
    );
    guard
}

#[tokio::test]
async fn plain_and_mode_waiters_are_woken_by_each_others_releases() {
    let nodes = RedisNodes::start(3);
    let (a, b) = (redlock(&nodes).await, redlock(&nodes).await);
    // Polling with a 10 s delay would take 10 s after each release.
    let (delay, wait) = (ms(10_000), ms(20_000));

    // A reader refused by a plain holder: a string has no room for its waiter entry, so its
    // two attempts (the first and its clean-up, then the one after subscribing) are counted
    // on the nodes.
    let plain = a.lock("cross").await.unwrap();
    let before = nodes.script_calls().await;
    let reader = tokio::spawn({
        let b = b.clone();
        async move {
            b.lock_mode_with("cross", Mode::ProtectedRead, &waiting(delay, wait))
                .await
        }
    });
    // A quorum of nodes waking it is what the reader needs (2 of 3): a node whose vote timed
    // out under load is not waited for.
    within("the reader's two attempts", async {
        while nodes
            .script_calls()
            .await
            .iter()
            .zip(&before)
            .filter(|&(now, then)| *now >= then + 3)
            .count()
            < 2
        {
            tokio::time::sleep(ms(5)).await;
        }
    })
    .await;
    let read = woken_by(plain.release(), "the reader", reader).await;

    // And back: a plain waiter queued behind the reader is woken by the last mode release.
    let writer = tokio::spawn(async move { a.lock_with("cross", &patient(delay, wait)).await });
    within("the plain waiter in a quorum of queues", async {
        while nodes
            .queued("cross")
            .await
            .iter()
            .filter(|&&n| n == 1)
            .count()
            < 2
        {
            tokio::time::sleep(ms(5)).await;
        }
    })
    .await;
    let guard = woken_by(read.release(), "the plain waiter", writer).await;
    assert_eq!(guard.mode(), None);
    guard.release().await.unwrap();
    nodes.gone_everywhere("cross").await;
}

#[tokio::test]
async fn a_reentrant_reader_re_enters_its_read_lock_only() {
    let nodes = RedisNodes::start(3);
    let redlock = redlock(&nodes).await;
    let options = once().reentrant(true);
    let outer = redlock
        .lock_mode_with("re", Mode::ProtectedRead, &options)
        .await
        .unwrap();
    let (inner, write) = outer
        .scope(async {
            let inner = redlock
                .lock_mode_with("re", Mode::ProtectedRead, &options)
                .await
                .unwrap();
            // No upgrade: the holder's own read lock refuses its write request.
            let write = redlock
                .lock_mode_with("re", Mode::Exclusive, &once().reentrant(true))
                .await;
            (inner, write)
        })
        .await;
    assert_eq!(outer.token(), inner.token());
    assert_eq!(outer.hold_count(), 2);
    assert!(write.unwrap_err().is_busy());
    drop(inner);
    assert_eq!(outer.hold_count(), 1);
    let released = outer.release().await.unwrap();
    assert!(released.was_held() && !released.kept);
    nodes.gone_everywhere("re").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn contended_readers_and_writers_are_woken_never_left_to_their_retry_timer() {
    const RETRY: Duration = Duration::from_secs(5);
    let nodes = RedisNodes::start(5);
    let mut lockers = Vec::new();
    // Eight lockers, each its own handle, reading and (one time in four) writing with 1 ms
    // holds back to back: split votes between incompatible requests are common. A waiter
    // left without a wake-up would sit out its 5 s retry delay.
    let mut handles = Vec::new();
    for _ in 0..8 {
        handles.push(redlock(&nodes).await);
    }
    for (id, redlock) in handles.into_iter().enumerate() {
        lockers.push(tokio::spawn(async move {
            let options = waiting(RETRY, ms(30_000));
            let mut longest = Duration::ZERO;
            for i in id..id + 40 {
                // One acquisition in four is a write.
                let mode = if i % 4 == 0 {
                    Mode::Exclusive
                } else {
                    Mode::ProtectedRead
                };
                let asked = Instant::now();
                let guard = redlock
                    .lock_mode_with("herd", mode, &options)
                    .await
                    .unwrap();
                longest = longest.max(asked.elapsed());
                tokio::time::sleep(ms(1)).await;
                guard.release().await.unwrap();
            }
            longest
        }));
    }
    let mut longest = Duration::ZERO;
    for locker in lockers {
        let waited = tokio::time::timeout(Duration::from_secs(60), locker)
            .await
            .expect("the lockers finish")
            .unwrap();
        longest = longest.max(waited);
    }
    println!("longest wait for one acquisition: {longest:?}");
    assert!(
        longest < RETRY / 2,
        "a waiter waited {longest:?}: it was not woken and sat out its retry delay"
    );
    nodes.gone_everywhere("herd").await;
}

/// `DUMP` and `PTTL` of `key` on every node, from a plain client: its exact bytes (type,
/// fields, values and their encoding) and its expiry.
async fn dumps(nodes: &RedisNodes, key: &str) -> Vec<(Vec<u8>, i64)> {
    use fred::interfaces::{ClientLike, KeysInterface};
    use fred::types::{ClusterHash, CustomCommand, Value};
    let mut out = Vec::new();
    for url in nodes.urls() {
        let client = redlock_tests::plain_client(&url).await;
        let cmd = CustomCommand::new_static("DUMP", ClusterHash::FirstKey, false);
        let dump: Value = client.custom(cmd, vec![key.to_owned()]).await.unwrap();
        let bytes = match dump {
            Value::Bytes(b) => b.to_vec(),
            Value::String(s) => s.as_bytes().to_vec(),
            other => panic!("DUMP {key:?} on {url}: {other:?} (the key is gone)"),
        };
        let pttl: i64 = client.pttl(key).await.unwrap();
        out.push((bytes, pttl));
    }
    out
}

/// Writes `fields` into the hash `key` on every node, from a plain client (another
/// application's data).
async fn foreign_hash(nodes: &RedisNodes, key: &str, fields: &[(&str, &str)]) {
    use fred::interfaces::ClientLike;
    use fred::types::{ClusterHash, CustomCommand};
    let mut args = vec![key.to_owned()];
    for (field, value) in fields {
        args.extend([(*field).to_owned(), (*value).to_owned()]);
    }
    for url in nodes.urls() {
        let client = redlock_tests::plain_client(&url).await;
        let cmd = CustomCommand::new_static("HSET", ClusterHash::FirstKey, false);
        let _: i64 = client.custom(cmd, args.clone()).await.unwrap();
    }
}

#[tokio::test]
async fn mode_locks_never_touch_a_hash_that_is_not_theirs() {
    let nodes = RedisNodes::start(5);
    // The default key prefix is empty: the application's own `catalog` hash is at the key
    // `read_lock("catalog")` uses.
    let a = redlock(&nodes).await;
    let token = "0123456789abcdef0123456789abcdef01234567";
    let cases: [(&str, Vec<(&str, &str)>); 3] = [
        ("catalog", vec![("f", "v"), ("g", "w")]),
        // Fields that look almost like ours: a token-shaped field with a mode-shaped value
        // that is not one of ours, and a waiter-shaped field with an expired-looking entry.
        (
            "catalog:almost",
            vec![
                (token, "PR 17000000000000 x"),
                ("~0123456789abcdef", "EX 1"),
            ],
        ),
        // One that parses as a live holder's entry of an unknown mode.
        ("catalog:mode", vec![(token, "ZZ 99999999999999")]),
    ];
    let quick = |options: LockOptions| options.retry_count(1).retry_delay(ms(20));
    for (key, fields) in &cases {
        foreign_hash(&nodes, key, fields).await;
        let before = dumps(&nodes, key).await;
        assert!(before.iter().all(|(_, pttl)| *pttl == -1), "{before:?}");
        let attempts: [(&str, Result<_, LockError>); 3] = [
            (
                "read_lock",
                a.lock_mode_with(key, Mode::ProtectedRead, &quick(a.options().clone()))
                    .await,
            ),
            (
                "write_lock",
                a.lock_mode_with(key, Mode::Exclusive, &quick(a.options().clone()))
                    .await,
            ),
            (
                "lock_mode(CR)",
                a.lock_mode_with(key, Mode::ConcurrentRead, &quick(a.options().clone()))
                    .await,
            ),
        ];
        for (call, result) in attempts {
            // The data first: the holder's ttl and any field dropped show here.
            let after = dumps(&nodes, key).await;
            for (node, (b, a)) in before.iter().zip(&after).enumerate() {
                assert!(
                    b == a,
                    "{call} on {key:?} changed node {node}'s hash: PTTL {} -> {}, DUMP {} -> {} bytes ({result:?})",
                    b.1,
                    a.1,
                    b.0.len(),
                    a.0.len()
                );
            }
            let error = result.expect_err(call);
            check_foreign(&error, key);
        }
        // The control: a plain lock is refused as busy, and changes nothing either.
        let plain = a.lock_with(key, &quick(a.options().clone())).await;
        let error = plain.expect_err("the plain lock");
        assert!(error.is_busy(), "{error}");
        assert_eq!(dumps(&nodes, key).await, before);
    }
    // A key prefix avoids the collision: the same calls on the same resource names work.
    let prefixed = Redlock::builder()
        .nodes(nodes.urls())
        .key_prefix("lock:")
        .build()
        .await
        .unwrap();
    prefixed
        .read_lock("catalog")
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    prefixed
        .write_lock("catalog")
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
}

/// The error a mode lock on `key`, another application's hash, returns.
fn check_foreign(error: &LockError, key: &str) {
    match error {
        LockError::ForeignKey {
            resource,
            key: named,
            outcomes,
        } => {
            assert_eq!((resource.as_str(), named.as_str()), (key, key));
            // The round stops once no quorum can be reached: at least 3 of 5 answered so.
            assert!(outcomes.foreign() >= 3, "{outcomes}");
        }
        other => panic!("expected ForeignKey, got {other}"),
    }
    let text = error.to_string();
    assert!(text.contains("key prefix"), "{text}");
    assert!(
        text.contains(key) && text.contains("not written by"),
        "{text}"
    );
}

#[tokio::test]
async fn a_node_timeout_of_duration_max_writes_readable_waiter_entries() {
    let nodes = RedisNodes::start(5);
    let handle = || {
        Redlock::builder()
            .nodes(nodes.urls())
            .node_timeout(Duration::MAX)
            .build()
    };
    let (a, b) = (handle().await.unwrap(), handle().await.unwrap());
    let holder = a.write_lock("max:timeout").await.unwrap();
    // A writer waits: refused, it leaves its waiter entry (now + the entry's life).
    let waiter = tokio::spawn(async move {
        b.lock_mode_with(
            "max:timeout",
            Mode::Exclusive,
            &waiting(ms(50), Duration::from_secs(5)),
        )
        .await
    });
    let entries = within("the waiter's entries on every node", async {
        loop {
            let all = nodes.fields("max:timeout").await;
            let entries: Vec<Option<String>> = all
                .iter()
                .map(|fields| {
                    let waiter = fields.iter().find(|(field, _)| field.starts_with('~'));
                    waiter.map(|(_, value)| value.clone())
                })
                .collect();
            if entries.iter().all(Option::is_some) || waiter.is_finished() {
                break entries;
            }
            tokio::time::sleep(ms(10)).await;
        }
    })
    .await;
    for entry in &entries {
        let entry = entry.as_deref().unwrap_or_else(|| panic!("{entries:?}"));
        let parts: Vec<&str> = entry.split(' ').collect();
        assert!(
            parts.len() == 3
                && parts[1..]
                    .iter()
                    .all(|p| p.bytes().all(|b| b.is_ascii_digit())),
            "a waiter entry the scripts cannot read: {entry:?}"
        );
    }
    holder.release().await.unwrap();
    // Woken by the release, the writer gets the lock.
    let w = within("the writer", waiter).await.unwrap().unwrap();
    w.release().await.unwrap();
}

#[tokio::test]
async fn inspect_reports_a_crashed_waiters_entry_and_a_foreign_hash_as_present() {
    use redlock_core::Holder;
    let nodes = RedisNodes::start(5);
    let a = redlock(&nodes).await;
    // A waiter in EX that crashed: its entry alone, live for a minute more.
    let expiry = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis()
        + 60_000;
    let entry = format!("EX {expiry} 1");
    foreign_hash(&nodes, "crashed", &[("~0123456789abcdef", &entry)]).await;
    let status = a.inspect("crashed").await.unwrap();
    for node in &status.nodes {
        let holding = node.read.as_ref().unwrap();
        assert_eq!(holding.holder, Holder::Modes(Vec::new()), "{holding:?}");
        assert_eq!(holding.waiters, 1);
        assert!(holding.holder.is_present(), "{holding:?}");
    }
    assert!(status.is_held());
    // It tells the truth: the plain lock is refused there.
    let plain = a
        .lock_with("crashed", &LockOptions::default().retry_count(0))
        .await;
    assert!(plain.expect_err("refused").is_busy());

    // Another application's hash: not a lock's entries.
    foreign_hash(&nodes, "catalog", &[("f", "v")]).await;
    let status = a.inspect("catalog").await.unwrap();
    for node in &status.nodes {
        let holding = node.read.as_ref().unwrap();
        let other = Holder::Other {
            kind: "hash".to_owned(),
        };
        assert_eq!(holding.holder, other, "{holding:?}");
    }
    assert!(status.is_held());
}
