//! Every feature under the least-privilege ACL the README lists ("Pointing it at your own
//! nodes"): plain locks, extension, the minimum hold, fencing, the waiter queue and its
//! wake-ups, windows, lock modes, the holder's remaining ttl and the quarantine, each shown to work, not only to
//! fail soft (the scripts run their optional commands under `pcall` and degrade quietly
//! without them). With one of the listed commands left out, the feature that needs it shows
//! it: the oracle can fail.

#![allow(clippy::unwrap_used)] // tests unwrap: a failure is the assertion

use std::time::{Duration, Instant};

use redlock_core::{LockOptions, Mode, Redlock};
use redlock_tests::{RedisServer, within};

/// The README's list of commands for an ACL user ("Pointing it at your own nodes", from "The
/// lock needs these commands" to the end of that paragraph), read from the README itself so
/// that the two cannot drift apart.
fn readme_commands() -> Vec<String> {
    let readme = include_str!("../../README.md");
    let start = readme
        .find("The lock needs these commands")
        .expect("the README's ACL paragraph");
    let paragraph = readme[start..].split("\n\n").next().unwrap();
    let mut commands: Vec<String> = paragraph
        .split(|c: char| c.is_whitespace() || c == '`')
        .filter(|word| word.len() > 1 && word.starts_with('+'))
        .map(|word| word.trim_end_matches([',', ';', ')', '.']).to_owned())
        .collect();
    commands.sort();
    commands.dedup();
    commands
}

#[test]
fn the_readme_lists_the_commands_each_feature_needs() {
    let commands = readme_commands();
    for needed in [
        "+set",
        "+eval",
        "+evalsha",
        "+script|load",
        "+zadd",
        "+publish",
        "+pttl",
        "+info",
    ] {
        assert!(
            commands.iter().any(|c| c == needed),
            "{needed} missing: {commands:?}"
        );
    }
    assert!(
        commands.iter().all(|c| c[1..]
            .chars()
            .all(|ch| ch.is_ascii_lowercase() || ch == '|')),
        "{commands:?}"
    );
}

/// Three servers whose only user is `locker`, allowed `commands` on `lock:*` keys and
/// channels.
fn servers(commands: &[String]) -> Vec<RedisServer> {
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

/// How long a waiter whose retry delay is [`PATIENCE`] waits for a lock released once it is
/// queued: well under a second when the release's message wakes it.
async fn wake_up_wait(a: &Redlock, b: &Redlock, resource: &str) -> Duration {
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
    // Released once the waiter is queued (read through the ACL user, as `redlock status`
    // does), so that it is a release that wakes it, however slow the machine.
    within("the waiter to queue", async {
        loop {
            let status = a.inspect(resource).await.unwrap();
            if status
                .nodes
                .iter()
                .any(|node| matches!(&node.read, Ok(holding) if holding.waiters > 0))
            {
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
async fn every_feature_works_under_the_readme_acl() {
    let servers = servers(&readme_commands());
    // The quarantine first, while the servers are younger than it: the acquire script reads
    // their uptime (INFO) and refuses.
    // Redis counts uptime in whole seconds: the servers are younger than 3 s for at least
    // 2 s after they started, time enough to build a handle and attempt.
    let quarantine = Duration::from_secs(3);
    let c = handle_with(&servers, quarantine).await;
    let short = LockOptions::default()
        .ttl(Duration::from_secs(1))
        .retry_count(0);
    assert_eq!(c.options().get_ttl(), Duration::from_secs(1));
    let refused = c.lock_with("acl:quarantine", &short).await.unwrap_err();
    assert!(refused.is_unavailable(), "{refused}");
    assert!(refused.to_string().contains("quarantine"), "{refused}");
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
    let second = a.lock_with("acl:fenced", &fenced).await.unwrap();
    assert!(second.fencing_token().unwrap() > t1);
    second.release().await.unwrap();

    // The waiter queue: woken by the release's message, not the 10 s retry delay.
    let waited = wake_up_wait(&a, &b, "acl:queue").await;
    assert!(waited < Duration::from_secs(2), "{waited:?}");

    // Modes: readers share, a writer is refused while they hold, then gets it.
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
    r1.release().await.unwrap();
    r2.release().await.unwrap();
    let w = b.lock_with("acl:modes", &writer).await.unwrap();
    w.extend(Duration::from_secs(5)).await.unwrap();
    w.release().await.unwrap();

    // Once the servers are older than the quarantine, it grants.
    let patient = short.clone().wait_timeout(Duration::from_secs(5));
    let granted = within(
        "the quarantine's end",
        c.lock_with("acl:quarantine", &patient),
    )
    .await;
    granted.unwrap().release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_publish_waiters_fall_back_to_their_delay_and_releases_still_work() {
    // The same list without PUBLISH: no release can wake the waiter (its scripts run PUBLISH
    // under pcall, so they still release); it attempts again only after its retry delay.
    let mut without = readme_commands();
    without.retain(|c| c != "+publish");
    let servers = servers(&without);
    let (a, b) = (handle(&servers).await, handle(&servers).await);
    let waited = wake_up_wait(&a, &b, "acl:noqueue").await;
    assert!(
        waited >= PATIENCE - Duration::from_millis(100),
        "{waited:?}"
    );
}
