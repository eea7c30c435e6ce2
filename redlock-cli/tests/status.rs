//! `redlock status` end to end against real `redis-server` nodes: a holder and its ttl per
//! node, never the token; holders in lock modes; free resources; nodes that do not answer.

#![allow(clippy::unwrap_used)] // tests unwrap: a failure is the assertion

mod support;

use nix::sys::signal::Signal;
use redlock_test::{TestNodes, redlock as handle};
use support::{
    Scratch, await_line, finish, held_everywhere, output, redlock, run_script, send, start, tokens,
};

/// While `redlock run` holds a resource, `status` says it is held, with each node's label
/// and ttl, and neither its output nor its errors hold the token the nodes keep.
#[tokio::test]
async fn status_shows_the_holder_and_ttl_per_node_but_never_the_token() {
    let nodes = TestNodes::start(3);
    let scratch = Scratch::new("status-held");
    let journal = scratch.file("journal");
    let script = format!("echo start >> {journal}; exec sleep 30");
    let run = start(run_script(&nodes, "nightly-report", &[], &script));
    await_line(&journal, "start").await;
    let held = held_everywhere(&nodes, "nightly-report").await;
    assert_eq!(held.len(), 3);

    // Labelled `<host>/<pid>` of the `redlock run` that holds it.
    let host = nix::unistd::gethostname().unwrap().into_string().unwrap();
    let owner = format!("{host}/{}", run.id().unwrap());

    // The labels are written beside the grants, not awaited: asked until every node shows
    // one (at most 5 s).
    let labelled = |status: &support::Finished| {
        status.stdout.lines().skip(1).count() == 3
            && status
                .stdout
                .lines()
                .skip(1)
                .all(|line| line.contains(&format!("held by {owner}, ttl ")))
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    let status = loop {
        let status = output(redlock(Some(&nodes), &["status", "nightly-report"])).await;
        if labelled(&status) || std::time::Instant::now() > deadline {
            break status;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    };
    status.expect(0);
    for token in &held {
        assert!(
            !status.stdout.contains(token.as_str()),
            "token printed: {status:#?}"
        );
        assert!(
            !status.stderr.contains(token.as_str()),
            "token printed: {status:#?}"
        );
    }
    let lines: Vec<&str> = status.stdout.lines().collect();
    let summary = format!("nightly-report: held by {owner}; holder on 3 of 3 nodes");
    assert!(lines[0].starts_with(&summary), "{status:#?}");
    for (line, url) in lines[1..].iter().zip(nodes.urls()) {
        let label = url.trim_start_matches("redis://");
        assert!(line.contains(label), "{status:#?}");
        assert!(
            line.contains(&format!("held by {owner}, ttl ")),
            "{status:#?}"
        );
    }
    assert_eq!(lines.len(), 4, "{status:#?}");

    // Stopped with SIGTERM (passed on: `sleep` dies of it), released: free everywhere.
    send(&run, Signal::SIGTERM);
    finish(run).await.expect(128 + Signal::SIGTERM as i32);
    let free = output(redlock(Some(&nodes), &["status", "nightly-report"])).await;
    free.expect(0);
    assert!(
        free.stdout.starts_with("nightly-report: free;"),
        "{free:#?}"
    );
    assert_eq!(free.stdout.matches(" free\n").count(), 3, "{free:#?}");
}

/// Readers holding a resource in a lock mode show as such, with the mode and the ttl of
/// each holder's entry; `--key-prefix` finds a key an application locks under its prefix.
#[tokio::test]
async fn status_shows_holders_in_lock_modes_and_honours_the_key_prefix() {
    let nodes = TestNodes::start(3);
    let readers = redlock_core::Redlock::builder()
        .nodes(nodes.urls())
        .key_prefix("lock:")
        .build()
        .await
        .unwrap();
    let labelled = redlock_core::Redlock::builder()
        .nodes(nodes.urls())
        .key_prefix("lock:")
        .owner("exporter@web-2")
        .build()
        .await
        .unwrap();
    let first = readers.read_lock("catalog").await.unwrap();
    let second = labelled.read_lock("catalog").await.unwrap();
    // The label is written beside the grant, not awaited by it: wait until every node has it.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let status = labelled.inspect("catalog").await.unwrap();
        let labelled_on = status
            .nodes
            .iter()
            .filter(|node| {
                matches!(&node.read.as_ref().unwrap().holder,
                    redlock_core::Holder::Modes(holders) if holders.iter().any(|h| h.owner.is_some()))
            })
            .count();
        if labelled_on == 3 {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{status:#?}");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let status = output(redlock(
        Some(&nodes),
        &["status", "catalog", "--key-prefix", "lock:"],
    ))
    .await;
    status.expect(0);
    assert!(status.stdout.starts_with("catalog: held;"), "{status:#?}");
    assert_eq!(
        status.stdout.matches("held in modes: PR ttl ").count(),
        3,
        "{status:#?}"
    );
    assert_eq!(
        status.stdout.matches("PR by exporter@web-2 ttl ").count(),
        3,
        "{status:#?}"
    );
    for token in [first.token().expose(), second.token().expose()] {
        assert!(!status.stdout.contains(token), "token printed: {status:#?}");
    }
    // Without the prefix it is another key: free.
    let other = output(redlock(Some(&nodes), &["status", "catalog"])).await;
    assert!(other.stdout.starts_with("catalog: free;"), "{other:#?}");
    // The prefix can come from REDLOCK_KEY_PREFIX, and the flag wins over it; `--nodes` wins
    // over REDLOCK_NODES (here a node list that would not connect).
    let mut from_env = redlock(Some(&nodes), &["status", "catalog"]);
    from_env.env("REDLOCK_KEY_PREFIX", "lock:");
    let from_env = output(from_env).await;
    assert!(
        from_env.stdout.starts_with("catalog: held;"),
        "{from_env:#?}"
    );
    let nodes_flag = nodes.urls().join(",");
    let mut flag = redlock(
        None,
        &[
            "status",
            "catalog",
            "--key-prefix",
            "",
            "--nodes",
            &nodes_flag,
        ],
    );
    flag.env("REDLOCK_KEY_PREFIX", "lock:")
        .env("REDLOCK_NODES", "redis://127.0.0.1:1");
    let flag = output(flag).await;
    assert!(flag.stdout.starts_with("catalog: free;"), "{flag:#?}");
    first.release().await.unwrap();
    second.release().await.unwrap();
}

/// A node that does not answer is shown as such; with a quorum answering, `status` still
/// exits 0; with fewer, 69 after printing what it could read.
#[tokio::test]
async fn status_shows_nodes_that_do_not_answer() {
    let mut nodes = TestNodes::start(3);
    let urls = nodes.urls().join(",");
    let holder = handle(&nodes).await;
    let guard = holder.lock("job").await.unwrap();
    nodes.servers[2].kill();
    let status = output(redlock(None, &["status", "job", "--nodes", &urls])).await;
    status.expect(0);
    assert!(
        status
            .stdout
            .starts_with("job: held; holder on 2 of 3 nodes, 2 answered"),
        "{status:#?}"
    );
    assert!(status.stdout.contains("no answer: "), "{status:#?}");
    nodes.servers[1].kill();
    let status = output(redlock(None, &["status", "job", "--nodes", &urls])).await;
    status.expect(69);
    assert!(status.stdout.contains("1 answered"), "{status:#?}");
    status.says("only 1 of 3 nodes answered");
    drop(guard);
}

/// Two of a semaphore's 3 permits held: `status --permits 3` shows both, permit by permit,
/// never a token; the resource's lock itself is free, and `release --force` says its lock
/// had no holder, not that nothing holds the resource, and leaves the permits held.
#[tokio::test]
async fn status_with_permits_shows_each_permit_held() {
    let nodes = TestNodes::start(3);
    let (a, b) = (handle(&nodes).await, handle(&nodes).await);
    let permit = redlock_core::LockOptions::default().ttl(std::time::Duration::from_secs(30));
    let first = a
        .semaphore("export", 3)
        .acquire_with(&permit)
        .await
        .unwrap();
    let second = b
        .semaphore("export", 3)
        .acquire_with(&permit)
        .await
        .unwrap();
    let status = output(redlock(
        Some(&nodes),
        &["status", "--permits", "3", "export"],
    ))
    .await;
    status.expect(0);
    let lines: Vec<&str> = status.stdout.lines().collect();
    assert_eq!(lines[0], "export: 2 of 3 permits held", "{status:#?}");
    let summaries: Vec<&&str> = lines
        .iter()
        .filter(|l| l.starts_with("export permit "))
        .collect();
    assert_eq!(summaries.len(), 3, "{status:#?}");
    let held = summaries.iter().filter(|l| l.contains(": held; ")).count();
    let free = summaries.iter().filter(|l| l.contains(": free; ")).count();
    assert_eq!((held, free), (2, 1), "{status:#?}");
    // A summary line and 3 node lines per permit.
    assert_eq!(lines.len(), 1 + 3 * 4, "{status:#?}");
    for token in [first.token().expose(), second.token().expose()] {
        assert!(!status.stdout.contains(token), "token printed: {status:#?}");
    }
    // The resource's lock is another key: free; then the permits, from the number the
    // nodes store.
    let lock = output(redlock(Some(&nodes), &["status", "export"])).await;
    assert!(lock.stdout.starts_with("export: free;"), "{lock:#?}");
    assert!(
        lock.stdout.contains("\nexport: 2 of 3 permits held\n"),
        "{lock:#?}"
    );
    let forced = output(redlock(Some(&nodes), &["release", "--force", "export"])).await;
    forced.expect(0);
    assert!(
        forced.stdout.contains(
            "no holder of its lock found on the 3 nodes that answered; 2 semaphore permits' holders removed"
        ),
        "{forced:#?}"
    );
    // The permits are gone.
    let after = output(redlock(
        Some(&nodes),
        &["status", "--permits", "3", "export"],
    ))
    .await;
    assert!(
        after.stdout.starts_with("export: 0 of 3 permits held"),
        "{after:#?}"
    );
    let bad = output(redlock(
        Some(&nodes),
        &["status", "--permits", "0", "export"],
    ))
    .await;
    bad.expect(64);
    first.release().await.unwrap();
    second.release().await.unwrap();
}

/// Output that cannot be written (`>/dev/full`): exit code 71 and a message, not a panic.
#[tokio::test]
async fn status_output_that_cannot_be_written_exits_71() {
    let nodes = TestNodes::start(3);
    let mut command = redlock(Some(&nodes), &["status", "free"]);
    command.stdout(
        std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/full")
            .unwrap(),
    );
    let full = output(command).await;
    full.expect(71).says("could not write the status");
}

/// `release --force` breaks a running holder's lock: every node cleared, the report on
/// stdout, a warning on stderr (never the token); the holder's next extension is refused and
/// its command is stopped (exit 79). Without `--force` nothing is sent (usage, 64); a key of
/// other data is left as it was.
#[tokio::test]
async fn release_force_breaks_the_lock_and_the_holder_stops() {
    let nodes = TestNodes::start(3);
    let scratch = Scratch::new("release-force");
    let journal = scratch.file("journal");
    let script = format!("echo start >> {journal}; exec sleep 30");
    // A 3 s ttl: extended every second, so the holder learns of the break within about one.
    let run = start(run_script(
        &nodes,
        "stuck-report",
        &["--ttl", "3s", "--grace", "500ms"],
        &script,
    ));
    await_line(&journal, "start").await;
    let held = held_everywhere(&nodes, "stuck-report").await;
    assert_eq!(held.len(), 3);

    let refused = output(redlock(Some(&nodes), &["release", "stuck-report"])).await;
    refused.expect(64).says("--force");
    assert_eq!(tokens(&nodes.values("stuck-report").await), held);

    let forced = output(redlock(
        Some(&nodes),
        &["release", "--force", "stuck-report"],
    ))
    .await;
    forced.expect(0);
    assert!(
        forced
            .stdout
            .starts_with("stuck-report: force-released; a holder removed on 3 of 3 nodes"),
        "{forced:#?}"
    );
    assert!(forced.stderr.contains("force-released"), "{forced:#?}");
    for token in &held {
        assert!(!forced.stdout.contains(token.as_str()), "{forced:#?}");
        assert!(!forced.stderr.contains(token.as_str()), "{forced:#?}");
    }
    assert!(
        nodes
            .values("stuck-report")
            .await
            .iter()
            .all(Option::is_none)
    );
    // The holder's next extension is refused: its command is stopped, and it says so.
    finish(run).await.expect(79).says("lost");

    // Another application's list of the same name is not a lock.
    for url in nodes.urls() {
        use redlock_core::fred::interfaces::ClientLike;
        use redlock_core::fred::types::{ClusterHash, CustomCommand};
        let client = redlock_test::plain_client(&url).await;
        let rpush = CustomCommand::new_static("RPUSH", ClusterHash::FirstKey, false);
        let args = vec!["app-list".to_owned(), "item".to_owned()];
        let _: i64 = client.custom(rpush, args).await.unwrap();
        let _ = client.quit().await;
    }
    let other = output(redlock(Some(&nodes), &["release", "--force", "app-list"])).await;
    other.expect(0);
    assert!(
        other.stdout.contains("no holder of its lock found"),
        "{other:#?}"
    );
    assert!(
        other.stdout.contains("on 3 nodes the key holds other data"),
        "{other:#?}"
    );
    for holding in nodes.holdings("app-list").await {
        assert_eq!(
            holding.value,
            redlock_test::HeldValue::Other("list".to_owned())
        );
    }
}
