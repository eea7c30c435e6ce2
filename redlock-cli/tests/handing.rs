//! Shell workflows end to end against real `redis-server` nodes: `redlock hold` hands a lock
//! to a later `redlock run --resume` or `redlock release --detached`; `redlock locks` lists
//! what is held under a prefix; `redlock status --json` is one JSON object. None of them
//! prints a token, except `hold`, whose output is the detached lock itself.

#![allow(clippy::unwrap_used)] // tests unwrap: a failure is the assertion

mod support;

use std::os::unix::fs::PermissionsExt as _;
use std::time::{Duration, Instant};

use redlock_test::{TestNodes, redlock as handle};
use support::{
    Scratch, await_line, finish, held_everywhere, lines, output, redlock, start, tokens,
};

/// Waits (at most 10 s) until no node holds anything at `resource`.
async fn freed_everywhere(nodes: &TestNodes, resource: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let values = nodes.values(resource).await;
        if values.iter().all(Option::is_none) {
            return;
        }
        assert!(Instant::now() < deadline, "still held: {values:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// `hold --out FILE` leaves the lock held on every node after it exits, in a file only its
/// owner can read (replacing a file readable by others, never following a link);
/// `run --resume FILE` runs the command under that very lock (a second locker stays out) and
/// releases it at the end; a second resume exits 80 without running anything.
#[tokio::test]
async fn a_held_lock_is_resumed_by_a_later_run_and_released_at_its_end() {
    let nodes = TestNodes::start(3);
    let scratch = Scratch::new("hold-resume");
    let file = scratch.file("nightly.lock");
    let journal = scratch.file("journal");

    // A file already there, readable by all, and a link planted where the file goes: the
    // file is replaced by one only its owner reads, and the link's target is not touched.
    std::fs::write(&file, "old").unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
    let target = scratch.file("target");
    std::fs::write(&target, "someone's").unwrap();
    let linked = scratch.file("linked.lock");
    std::os::unix::fs::symlink(&target, &linked).unwrap();
    for out in [&linked, &file] {
        let hold = output(redlock(
            Some(&nodes),
            &[
                "hold", "nightly", "--ttl", "60s", "--wait", "0s", "--out", out,
            ],
        ))
        .await;
        if out == &linked {
            // A first lock, held to check the link only: released, then held again.
            hold.expect(0);
            let released = output(redlock(Some(&nodes), &["release", "--detached", out])).await;
            released.expect(0);
            continue;
        }
        hold.expect(0);
        assert!(hold.stdout.is_empty(), "{hold:#?}");
    }
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "someone's");
    assert!(!std::fs::symlink_metadata(&linked).unwrap().is_symlink());
    for path in [&file, &linked] {
        let mode = std::fs::metadata(path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "{path}");
    }
    let held = held_everywhere(&nodes, "nightly").await;
    assert_eq!(held.len(), 3, "{held:?}");
    assert!(std::fs::read_to_string(&file).unwrap().contains(&held[0]));

    // Nobody else takes it while it is handed on.
    let other = handle(&nodes).await;
    assert!(other.try_lock("nightly").await.unwrap().is_none());

    // The resumed run holds the lock while its command runs (under a token of its own: a
    // resumption swaps it, so that the file cannot be resumed twice).
    let go = scratch.file("go");
    let script = format!("echo ran >> {journal}; while [ ! -e {go} ]; do sleep 0.05; done");
    let resumed = start(redlock(
        Some(&nodes),
        &["run", "--resume", &file, "--", "sh", "-c", &script],
    ));
    await_line(&journal, "ran").await;
    let during = held_everywhere(&nodes, "nightly").await;
    assert_eq!(during.len(), 3, "{during:?}");
    assert!(other.try_lock("nightly").await.unwrap().is_none());
    std::fs::write(&go, "").unwrap();
    let resumed = finish(resumed).await;
    resumed.expect(0);
    assert_eq!(lines(&journal), ["ran"]);
    assert!(!resumed.stdout.contains(&during[0]), "{resumed:#?}");
    assert!(!resumed.stderr.contains(&during[0]), "{resumed:#?}");
    assert!(!resumed.stdout.contains(&held[0]), "{resumed:#?}");
    assert!(!resumed.stderr.contains(&held[0]), "{resumed:#?}");
    freed_everywhere(&nodes, "nightly").await;

    // The lock is gone: a second resume runs nothing.
    let again = output(redlock(
        Some(&nodes),
        &[
            "run",
            "--resume",
            &file,
            "--",
            "sh",
            "-c",
            "echo again >> /dev/null",
        ],
    ))
    .await;
    again.expect(80);
    assert_eq!(lines(&journal), ["ran"]);
}

/// `hold` without `--out` prints the detached lock on stdout; `release --detached` frees it
/// on every node, and exits 80 the second time; a file that is not a detached lock is refused
/// with a message and nothing is touched.
#[tokio::test]
async fn a_held_lock_is_released_from_its_file_and_a_bad_file_is_refused() {
    let nodes = TestNodes::start(3);
    let scratch = Scratch::new("hold-release");
    let file = scratch.file("report.lock");

    let hold = output(redlock(Some(&nodes), &["hold", "report"])).await;
    hold.expect(0);
    let json: serde_json::Value = serde_json::from_str(&hold.stdout).unwrap();
    assert_eq!(json["resource"], "report", "{json:#}");
    let held = held_everywhere(&nodes, "report").await;
    assert_eq!(held.len(), 3);
    assert!(hold.stdout.contains(&held[0]));
    std::fs::write(&file, &hold.stdout).unwrap();

    let bad = scratch.file("bad.lock");
    std::fs::write(&bad, "{\"resource\": \"report\"}").unwrap();
    let refused = output(redlock(Some(&nodes), &["release", "--detached", &bad])).await;
    assert_ne!(refused.code, Some(0), "{refused:#?}");
    refused.says(&bad);
    assert_eq!(tokens(&nodes.values("report").await).len(), 3);

    let released = output(redlock(Some(&nodes), &["release", "--detached", &file])).await;
    released.expect(0);
    freed_everywhere(&nodes, "report").await;
    let again = output(redlock(Some(&nodes), &["release", "--detached", &file])).await;
    again.expect(80);
}

/// `hold` on a busy resource with `--wait 0s` exits 75 and prints nothing.
#[tokio::test]
async fn holding_a_busy_resource_exits_75() {
    let nodes = TestNodes::start(3);
    let holder = handle(&nodes).await;
    let guard = holder.lock("busy").await.unwrap();
    let hold = output(redlock(Some(&nodes), &["hold", "busy", "--wait", "0s"])).await;
    hold.expect(75);
    assert!(hold.stdout.is_empty(), "{hold:#?}");
    guard.release().await.unwrap();
}

/// `locks PREFIX` lists the resources held under the prefix, with their owner labels and
/// permits, and nothing outside it; `--json` says the same as one object; no token is
/// printed.
#[tokio::test]
async fn locks_lists_what_is_held_under_a_prefix_without_tokens() {
    let nodes = TestNodes::start(3);
    let labelled = redlock_core::Redlock::builder()
        .nodes(nodes.urls())
        .owner("billing@web-1")
        .build()
        .await
        .unwrap();
    let plain = handle(&nodes).await;
    let charge = labelled.lock("jobs:charge").await.unwrap();
    let rebuild = plain.lock("jobs:rebuild").await.unwrap();
    let elsewhere = plain.lock("other:cache").await.unwrap();
    let permit = plain.semaphore("jobs:export", 2).acquire().await.unwrap();
    // The rest of the nodes' grants and the label land after the quorum: wait for them.
    for resource in ["jobs:charge", "jobs:rebuild"] {
        held_everywhere(&nodes, resource).await;
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    let text = loop {
        let listed = output(redlock(Some(&nodes), &["locks", "jobs:"])).await;
        listed.expect(0);
        if listed.stdout.contains("by billing@web-1; on 3 of 3") {
            break listed;
        }
        assert!(Instant::now() < deadline, "{listed:#?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let lines: Vec<&str> = text.stdout.lines().collect();
    assert_eq!(lines.len(), 3, "{text:#?}");
    assert!(
        lines[0].starts_with("jobs:charge: held by billing@web-1; on 3 of 3 nodes, quorum 2"),
        "{text:#?}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("jobs:export: ") && l.contains("1 of 2 permits held"))
    );
    assert!(lines.iter().any(|l| l.starts_with("jobs:rebuild: held")));
    assert!(!text.stdout.contains("other:cache"), "{text:#?}");

    let json = output(redlock(Some(&nodes), &["locks", "jobs:", "--json"])).await;
    json.expect(0);
    let value: serde_json::Value = serde_json::from_str(&json.stdout).unwrap();
    assert_eq!(value["complete"], true, "{value:#}");
    let locks = value["locks"].as_array().unwrap();
    let names: Vec<&str> = locks
        .iter()
        .map(|l| l["resource"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["jobs:charge", "jobs:export", "jobs:rebuild"]);
    assert_eq!(locks[0]["owner"], "billing@web-1");
    assert_eq!(locks[0]["is_held"], true);

    for token in [
        charge.token(),
        rebuild.token(),
        elsewhere.token(),
        permit.token(),
    ] {
        for out in [&text.stdout, &text.stderr, &json.stdout, &json.stderr] {
            assert!(!out.contains(token.expose()), "token printed: {out}");
        }
    }
    charge.release().await.unwrap();
    rebuild.release().await.unwrap();
    elsewhere.release().await.unwrap();
    permit.release().await.unwrap();
}

/// `status --json` is one JSON object with the holder per node, and no token.
#[tokio::test]
async fn status_json_shows_the_holder_per_node_without_the_token() {
    let nodes = TestNodes::start(3);
    let holder = handle(&nodes).await;
    let guard = holder.lock("nightly").await.unwrap();
    held_everywhere(&nodes, "nightly").await;
    let status = output(redlock(Some(&nodes), &["status", "nightly", "--json"])).await;
    status.expect(0);
    let value: serde_json::Value = serde_json::from_str(&status.stdout).unwrap();
    assert_eq!(value["resource"], "nightly", "{value:#}");
    assert_eq!(value["quorum"], 2);
    assert_eq!(value["lock"]["is_held"], true);
    assert_eq!(value["lock"]["held_on"], 3);
    let nodes_json = value["lock"]["nodes"].as_array().unwrap();
    assert_eq!(nodes_json.len(), 3);
    for node in nodes_json {
        assert!(node["ttl_ms"].as_u64().unwrap() > 0, "{node:#}");
    }
    assert!(!status.stdout.contains(guard.token().expose()));
    assert!(!status.stderr.contains(guard.token().expose()));
    guard.release().await.unwrap();
}
