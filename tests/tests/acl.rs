//! Each command list the guide gives for an ACL user (redlock-core's guide, "ACL users"), alone:
//! the base list by itself (acquire, extend, auto-extension, release, the minimum hold, fencing,
//! a busy error's remaining ttl), and each feature's row with the base list and nothing else,
//! each feature shown to work, not only to fail soft (the scripts run their optional commands
//! under `pcall` and degrade quietly without them). With one of a row's commands left out, the
//! feature that needs it shows it: the oracles can fail.

#![allow(clippy::unwrap_used)] // tests unwrap: a failure is the assertion

use std::time::{Duration, Instant};

use redlock_core::{BuildError, Holder, LockOptions, Mode, Redlock};
use redlock_tests::{RedisServer, within};

/// The guide's table of commands for an ACL user (`redlock-core/src/guide/configuration.md`),
/// read from the guide itself so that the two cannot drift apart: each row's feature and its whole list
/// (`base and …` adds the base list, `the row above and …` the row above's whole list).
fn readme_lists() -> Vec<(String, Vec<String>)> {
    let readme = include_str!("../../redlock-core/src/guide/configuration.md");
    let start = readme
        .find("The lock needs these commands")
        .expect("the guide's ACL paragraph");
    let mut rows: Vec<(String, Vec<String>)> = Vec::new();
    for line in readme[start..]
        .lines()
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .skip(2)
    {
        let cells: Vec<&str> = line.trim_matches('|').split(" | ").collect();
        let [feature, commands] = cells[..] else {
            panic!("a row of two cells: {line}")
        };
        let mut list: Vec<String> = if commands.starts_with("base and") {
            rows[0].1.clone()
        } else if commands.starts_with("the row above and") {
            rows.last().unwrap().1.clone()
        } else {
            Vec::new()
        };
        list.extend(
            commands
                .replace("\\|", "|")
                .split(|c: char| c.is_whitespace() || c == '`')
                .filter(|word| word.len() > 1 && word.starts_with('+'))
                .map(str::to_owned),
        );
        list.sort();
        list.dedup();
        rows.push((feature.trim().to_owned(), list));
    }
    rows
}

/// The whole list of the guide's row whose feature starts with `feature`.
fn list(feature: &str) -> Vec<String> {
    readme_lists()
        .into_iter()
        .find(|(f, _)| f.starts_with(feature))
        .unwrap_or_else(|| panic!("no guide row for {feature:?}"))
        .1
}

#[test]
fn the_readme_lists_the_commands_each_feature_needs() {
    let rows = readme_lists();
    let features: Vec<&str> = rows.iter().map(|(f, _)| f.as_str()).collect();
    assert_eq!(rows.len(), 12, "{features:?}");
    let base = list("Base");
    for needed in [
        "+set",
        "+get",
        "+del",
        "+pexpire",
        "+pttl",
        "+eval",
        "+evalsha",
        "+script|load",
    ] {
        assert!(
            base.iter().any(|c| c == needed),
            "{needed} missing: {base:?}"
        );
    }
    assert!(!base.iter().any(|c| c == "+info"), "{base:?}");
    assert!(list("The quarantine").iter().any(|c| c == "+info"));
    assert!(list("Waking waiters").iter().any(|c| c == "+publish"));
    let windows = list("Windows");
    assert!(windows.iter().any(|c| c == "+zadd") && windows.iter().any(|c| c == "+time"));
    for needed in ["+client|list", "+client|setname", "+info"] {
        assert!(windows.iter().any(|c| c == needed), "{needed}: {windows:?}");
    }
    for (_, commands) in &rows {
        assert!(
            commands.iter().all(|c| c[1..]
                .chars()
                .all(|ch| ch.is_ascii_lowercase() || ch == '|')),
            "{commands:?}"
        );
    }
}

/// Three servers whose only user is `locker`, allowed `commands` on `lock:*` keys and
/// channels.
fn servers(commands: &[String]) -> Vec<RedisServer> {
    servers_with(commands, &[])
}

/// [`servers`], with `extra` server arguments.
fn servers_with(commands: &[String], extra: &[&str]) -> Vec<RedisServer> {
    let mut acl = vec![
        "--user",
        "locker",
        "on",
        ">s3cret",
        "~lock:*",
        "resetchannels",
        "&lock:*",
        "-@all",
    ];
    acl.extend(commands.iter().map(String::as_str));
    acl.extend(["--user", "default", "off"]);
    acl.extend(extra);
    (0..3).map(|_| RedisServer::start_with(&acl)).collect()
}

/// A handle as `locker`, with the key prefix the ACL allows and `quarantine` (its default ttl
/// is 1 s, which a quarantine must cover).
async fn handle_with(servers: &[RedisServer], quarantine: Duration) -> Redlock {
    Redlock::builder()
        .nodes(
            servers
                .iter()
                .map(|s| format!("redis://locker:s3cret@127.0.0.1:{}", s.port())),
        )
        .key_prefix("lock:")
        .quarantine(quarantine)
        .lock_options(LockOptions::default().ttl(Duration::from_secs(1)))
        .build()
        .await
        .unwrap()
}

async fn handle(servers: &[RedisServer]) -> Redlock {
    handle_with(servers, Duration::ZERO).await
}

/// The retry delay of [`wake_up_wait`]'s waiter.
const PATIENCE: Duration = Duration::from_secs(4);

/// The locker's URLs of `servers`.
fn urls(servers: &[RedisServer]) -> Vec<String> {
    servers
        .iter()
        .map(|s| format!("redis://locker:s3cret@127.0.0.1:{}", s.port()))
        .collect()
}

/// `command args` on every server, as the locker.
async fn on_each(
    servers: &[RedisServer],
    command: &'static str,
    args: &[&str],
) -> Vec<fred::types::Value> {
    use fred::interfaces::ClientLike;
    use fred::types::{ClusterHash, CustomCommand, Value};
    let mut out = Vec::new();
    for url in urls(servers) {
        let client = redlock_tests::plain_client(&url).await;
        let cmd = CustomCommand::new_static(command, ClusterHash::FirstKey, false);
        let args: Vec<Value> = args.iter().map(|a| Value::from(*a)).collect();
        out.push(client.custom(cmd, args).await.unwrap());
    }
    out
}

/// How long a waiter whose retry delay is [`PATIENCE`] waits for a lock released once it is
/// queued: well under a second when the release's message wakes it.
async fn wake_up_wait(
    servers: &[RedisServer],
    a: &Redlock,
    b: &Redlock,
    resource: &str,
) -> Duration {
    let guard = a.lock(resource).await.unwrap();
    let patient = LockOptions::default()
        .retry_count(2)
        .retry_delay(PATIENCE)
        .retry_jitter(Duration::ZERO);
    let (b, resource_owned) = (b.clone(), resource.to_owned());
    let waiter = tokio::spawn(async move {
        let started = Instant::now();
        let guard = b.lock_with(&resource_owned, &patient).await.unwrap();
        let waited = started.elapsed();
        guard.release().await.unwrap();
        waited
    });
    // Released once the waiter is queued (`ZCARD` of the queue, as the locker), so that it
    // is a release that wakes it, however slow the machine.
    let queue = redlock_tests::waiters_key(&a.key_for(resource));
    within("the waiter to queue", async {
        loop {
            let queued = on_each(servers, "ZCARD", &[&queue]).await;
            if queued.iter().any(|n| n.as_i64().unwrap_or(0) > 0) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    guard.release().await.unwrap();
    within("the waiter", waiter).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_base_list_alone_locks_extends_auto_extends_and_releases() {
    let servers = servers(&list("Base"));
    let (a, b) = (handle(&servers).await, handle(&servers).await);
    let once = LockOptions::default()
        .retry_count(0)
        .retry_delay(Duration::ZERO);

    // Plain lock, extension and release.
    let guard = a.lock("acl:plain").await.unwrap();
    assert_eq!(guard.key(), "lock:acl:plain");
    guard.extend(Duration::from_secs(20)).await.unwrap();
    // The holder's remaining ttl (PTTL under pcall): about the extension's 20 s.
    let busy = b.lock_with("acl:plain", &once).await.unwrap_err();
    assert!(busy.is_busy(), "{busy}");
    let after = busy.retry_after().expect("PTTL allowed");
    assert!(after > Duration::from_secs(15), "{after:?}");
    assert!(guard.release().await.unwrap().was_held());
    b.lock_with("acl:plain", &once)
        .await
        .unwrap()
        .release()
        .await
        .unwrap();

    // Several resources at once (GET to see a key, SET, PEXPIRE, DEL), extended and released.
    let many = a.lock_many(&["acl:x", "acl:y"]).await.unwrap();
    many.extend(Duration::from_secs(20)).await.unwrap();
    let busy = b.lock_with("acl:y", &once).await.unwrap_err();
    assert!(busy.is_busy(), "{busy}");
    assert!(many.release().await.unwrap().was_held());
    b.lock_many_with(&["acl:x", "acl:y"], &once)
        .await
        .unwrap()
        .release()
        .await
        .unwrap();

    // Detach and resume (the swap: GET, SET KEEPTTL, PTTL), then release by the new token.
    let detached = a.lock("acl:handed").await.unwrap().detach().unwrap();
    let resumed = b.resume(&detached).await.unwrap();
    assert!(resumed.release().await.unwrap().was_held());

    // Auto-extension: a 1 s lock held for 2.5 s, another handle refused all along.
    let auto = LockOptions::default()
        .ttl(Duration::from_secs(1))
        .auto_extend(true);
    let guard = a.lock_with("acl:auto", &auto).await.unwrap();
    for _ in 0..5 {
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert!(guard.is_valid() && !guard.lost().is_lost());
        let busy = b.lock_with("acl:auto", &once).await.unwrap_err();
        assert!(busy.is_busy(), "{busy}");
    }
    assert!(guard.release().await.unwrap().was_held());

    // The minimum hold (KEEP: GET, then SET PX): released at once, the key stays.
    let min_hold = LockOptions::default()
        .ttl(Duration::from_secs(5))
        .lock_at_least_for(Duration::from_secs(3));
    let guard = a.lock_with("acl:min-hold", &min_hold).await.unwrap();
    assert!(guard.release().await.unwrap().was_held());
    let busy = b.lock_with("acl:min-hold", &once).await.unwrap_err();
    assert!(busy.is_busy(), "{busy}");

    // Fencing: tokens go up.
    let fenced = LockOptions::default().fencing(true);
    let first = a.lock_with("acl:fenced", &fenced).await.unwrap();
    let t1 = first.fencing_token().unwrap();
    first.release().await.unwrap();
    let second = b.lock_with("acl:fenced", &fenced).await.unwrap();
    assert!(second.fencing_token().unwrap() > t1);
    second.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_node_checks_need_their_row() {
    // Nodes that can evict lock keys: only INFO shows it.
    let evicting = ["--maxmemory", "100mb", "--maxmemory-policy", "allkeys-lru"];
    let servers = servers_with(&list("The node checks"), &evicting);
    let built = Redlock::builder()
        .nodes(urls(&servers))
        .key_prefix("lock:")
        .build()
        .await;
    let error = built.expect_err("refused");
    assert!(
        matches!(error, BuildError::EvictionPolicy { .. }),
        "{error}"
    );
    // The control: the base list alone cannot see it (skipped with a warning).
    let servers = servers_with(&list("Base"), &evicting);
    let built = Redlock::builder()
        .nodes(urls(&servers))
        .key_prefix("lock:")
        .build()
        .await;
    assert!(built.is_ok());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_quarantine_works_with_its_row() {
    let servers = servers(&list("The quarantine"));
    // Nodes no handle with the quarantine has seen sit out one quarantine, from the build.
    let quarantine = Duration::from_secs(2);
    let c = handle_with(&servers, quarantine).await;
    let short = LockOptions::default()
        .ttl(Duration::from_secs(1))
        .retry_count(0);
    let refused = c.lock_with("acl:quarantine", &short).await.unwrap_err();
    assert!(refused.is_unavailable(), "{refused}");
    assert!(refused.to_string().contains("in quarantine"), "{refused}");
    // Once it has passed, it grants.
    let patient = short.clone().wait_timeout(Duration::from_secs(5));
    let granted = within(
        "the quarantine's end",
        c.lock_with("acl:quarantine", &patient),
    )
    .await;
    granted.unwrap().release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_are_woken_with_their_row() {
    let servers = servers(&list("Waking waiters"));
    let (a, b) = (handle(&servers).await, handle(&servers).await);
    // Woken by the release's message, not the 4 s retry delay.
    let waited = wake_up_wait(&servers, &a, &b, "acl:queue").await;
    assert!(waited < Duration::from_secs(2), "{waited:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_publish_waiters_fall_back_to_their_delay_and_releases_still_work() {
    // The same row without PUBLISH: no release can wake the waiter (its scripts run PUBLISH
    // under pcall, so they still release); it attempts again only after its retry delay.
    let mut without = list("Waking waiters");
    without.retain(|c| c != "+publish");
    let servers = servers(&without);
    let (a, b) = (handle(&servers).await, handle(&servers).await);
    let waited = wake_up_wait(&servers, &a, &b, "acl:noqueue").await;
    assert!(
        waited >= PATIENCE - Duration::from_millis(100),
        "{waited:?}"
    );
}

/// Two handles hand `resource` over to each other for `run` (20 ms holds, each queued while
/// the other holds) while a foreign client polls it with `SET NX PX` every 10 ms, as the
/// locker; how many times the foreign client got it.
async fn foreign_gets_in(servers: &[RedisServer], run: Duration) -> usize {
    let handle = || {
        Redlock::builder()
            .nodes(urls(servers))
            .key_prefix("lock:")
            .foreign_window(Duration::from_millis(60))
            .lock_options(LockOptions::default().ttl(Duration::from_secs(1)))
            .build()
    };
    let (a, b) = (handle().await.unwrap(), handle().await.unwrap());
    let key = a.key_for("acl:windows");
    let until = Instant::now() + run;
    let holder = move |redlock: Redlock| async move {
        let patient = LockOptions::default()
            .ttl(Duration::from_secs(1))
            .retry_delay(Duration::from_millis(500))
            .wait_timeout(Duration::from_secs(5));
        while Instant::now() < until {
            let guard = redlock.lock_with("acl:windows", &patient).await.unwrap();
            tokio::time::sleep(Duration::from_millis(20)).await;
            guard.release().await.unwrap();
        }
    };
    let holders = tokio::spawn(async move { tokio::join!(holder(a), holder(b)) });
    let mut got = 0;
    while Instant::now() < until {
        let replies = on_each(servers, "SET", &[&key, "foreign", "NX", "PX", "30"]).await;
        if replies
            .iter()
            .filter(|r| r.as_str().is_some_and(|s| s == "OK"))
            .count()
            >= 2
        {
            got += 1;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    within("the holders", holders).await.unwrap();
    got
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn windows_open_for_foreign_clients_with_their_row() {
    let servers = servers(&list("Windows"));
    let got = foreign_gets_in(&servers, Duration::from_millis(1_500)).await;
    assert!(got > 0, "the foreign client never got the key");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_modes_work_with_their_row() {
    let servers = servers(&list("Lock modes"));
    let (a, b) = (handle(&servers).await, handle(&servers).await);
    let once = LockOptions::default().retry_count(0);
    // Readers share, a writer is refused while they hold, then gets it.
    let ttl = Duration::from_secs(5);
    let r1 = a
        .lock_mode("acl:modes", Mode::ProtectedRead, ttl)
        .await
        .unwrap();
    let r2 = b
        .lock_mode("acl:modes", Mode::ProtectedRead, ttl)
        .await
        .unwrap();
    let writer = once.clone().mode(Mode::Exclusive);
    let refused = b.lock_with("acl:modes", &writer).await.unwrap_err();
    assert!(refused.is_busy(), "{refused}");
    r1.extend(Duration::from_secs(5)).await.unwrap();
    assert!(r1.release().await.unwrap().was_held());
    assert!(r2.release().await.unwrap().was_held());
    let w = b.lock_with("acl:modes", &writer).await.unwrap();
    w.extend(Duration::from_secs(5)).await.unwrap();
    w.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn semaphores_work_with_their_row() {
    let servers = servers(&list("Counting semaphores"));
    let (a, b) = (handle(&servers).await, handle(&servers).await);
    let permits = LockOptions::default()
        .permits(2)
        .ttl(Duration::from_secs(5));
    let first = a.lock_with("acl:sem", &permits).await.unwrap();
    let second = b.lock_with("acl:sem", &permits).await.unwrap();
    let once = permits.clone().retry_count(0);
    let refused = b.lock_with("acl:sem", &once).await.unwrap_err();
    assert!(refused.is_busy(), "{refused}");
    second.extend(Duration::from_secs(5)).await.unwrap();
    // A waiter queued on every node is woken by a release, not its 4 s retry delay.
    let patient = permits
        .clone()
        .retry_count(2)
        .retry_delay(PATIENCE)
        .retry_jitter(Duration::ZERO);
    let waiter = {
        let b = b.clone();
        tokio::spawn(async move {
            let started = Instant::now();
            let guard = b.lock_with("acl:sem", &patient).await.unwrap();
            let waited = started.elapsed();
            guard.release().await.unwrap();
            waited
        })
    };
    let queue = format!("{}\0redlock:permit-waiters", a.key_for("acl:sem"));
    within("the waiter to queue", async {
        loop {
            let queued = on_each(&servers, "ZCARD", &[&queue]).await;
            if queued.iter().all(|n| n.as_i64().unwrap_or(0) > 0) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    assert!(first.release().await.unwrap().was_held());
    let waited = within("the waiter", waiter).await.unwrap();
    assert!(waited < Duration::from_secs(2), "{waited:?}");
    assert!(second.release().await.unwrap().was_held());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspect_works_with_its_row() {
    let servers = servers(&list("`Redlock::inspect`"));
    let a = handle(&servers).await;
    let guard = a.lock("acl:inspect").await.unwrap();
    let status = a.inspect("acl:inspect").await.unwrap();
    // Every node answers with the row's commands. The lock returned at a quorum, so the
    // third node's grant may still be on its way (another connection): a quorum holds it.
    let mut holding_nodes = 0;
    for node in &status.nodes {
        let holding = node.read.as_ref().unwrap();
        if holding.holder == Holder::Plain {
            assert!(holding.ttl.is_some(), "{holding:?}");
            holding_nodes += 1;
        } else {
            assert_eq!(holding.holder, Holder::None, "{holding:?}");
        }
    }
    assert!(holding_nodes >= 2, "{status:?}");
    assert!(status.is_held());
    guard.release().await.unwrap();
}

/// Force-release with its row's commands: a holder removed on every node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_force_release_row_breaks_a_lock() {
    let servers = servers(&list("Force-release"));
    let (a, operator) = (handle(&servers).await, handle(&servers).await);
    let guard = a.lock("acl:stuck").await.unwrap();
    let report = operator.force_release("acl:stuck").await.unwrap();
    // The lock returned at a quorum: the third node's grant may land after the force-release
    // (another connection), so a quorum at least.
    assert!(report.removed >= 2 && report.answered == 3, "{report:?}");
    drop(guard);
}
