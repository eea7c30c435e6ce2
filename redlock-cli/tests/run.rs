//! `redlock run` end to end against real `redis-server` nodes: mutual exclusion between
//! processes, busy and unavailable exit codes, a lost lock stopping the command (SIGTERM,
//! then SIGKILL after the grace when the lock expired, at once when an extension was
//! refused), the command's status passed through, the fencing token, and
//! signals passed on.

#![allow(clippy::unwrap_used)] // tests unwrap: a failure is the assertion

mod support;

use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use redlock_test::{TestNodes, redlock as handle};
use support::within;
use support::{
    KillOnDrop, SHORT_TTL, Scratch, await_line, await_pid, exists, finish, held_everywhere, lines,
    noting_sigterm, output, redlock, run_args, run_script, running, send, start, take_over,
    term_and_death, until_sigterm,
};

/// Exit codes, as documented in `redlock --help` and the README.
const UNAVAILABLE: i32 = 69;
const BUSY: i32 = 75;
const LOST: i32 = 79;

/// Four `redlock run` at once on one resource, each command appending `enter N`, pausing,
/// then `leave N` to one journal: the journal must read enter/leave pairs of one command at a
/// time, all four (each waited for the one before).
#[tokio::test]
async fn concurrent_runs_on_one_resource_never_overlap() {
    let nodes = TestNodes::start(3);
    let scratch = Scratch::new("overlap");
    let journal = scratch.file("journal");
    let script = format!("echo enter $N >> {journal}; sleep 0.3; echo leave $N >> {journal}");
    let runs: Vec<_> = (0..4)
        .map(|n| {
            let mut command = run_script(&nodes, "nightly", &["--wait", "20s"], &script);
            command.env("N", n.to_string());
            start(command)
        })
        .collect();
    for run in runs {
        finish(run).await.expect(0);
    }
    let journal = lines(&journal);
    assert_eq!(journal.len(), 8, "{journal:?}");
    let mut seen = Vec::new();
    for pair in journal.chunks(2) {
        let enter = pair[0].strip_prefix("enter ").unwrap();
        assert_eq!(pair[1], format!("leave {enter}"), "overlap: {journal:?}");
        seen.push(enter.to_owned());
    }
    seen.sort();
    assert_eq!(seen, ["0", "1", "2", "3"], "{journal:?}");
}

/// `--wait 0s` on a held resource: one attempt, exit code 75, the command never runs; once
/// the holder released it, the same command runs.
#[tokio::test]
async fn a_busy_resource_with_no_wait_exits_75_without_running_the_command() {
    let nodes = TestNodes::start(3);
    let scratch = Scratch::new("busy");
    let marker = scratch.file("ran");
    let script = format!("touch {marker}");
    let args = run_args("report", &["--wait", "0s"], &script);
    let holder = handle(&nodes).await;
    let guard = holder.lock("report").await.unwrap();
    let busy = output(redlock(Some(&nodes), &args)).await;
    busy.expect(BUSY).says("busy");
    assert!(
        !exists(&marker),
        "the command ran while the resource was busy"
    );
    guard.release().await.unwrap();
    output(redlock(Some(&nodes), &args)).await.expect(0);
    assert!(exists(&marker));
}

/// One node of three killed: a quorum remains and the command runs. Two killed: exit code 69
/// within the bound (the connect timeout), and the command never runs.
#[tokio::test]
async fn a_killed_node_is_tolerated_and_a_lost_quorum_exits_69() {
    let mut nodes = TestNodes::start(3);
    let urls = nodes.urls().join(",");
    let scratch = Scratch::new("killed");
    let marker = scratch.file("ran");
    let script = format!("echo ran >> {marker}");
    let args = run_args("job", &["--nodes", &urls], &script);
    nodes.servers[0].kill();
    output(redlock(None, &args)).await.expect(0);
    assert_eq!(lines(&marker), ["ran"]);
    nodes.servers[1].kill();
    let started = Instant::now();
    let unavailable = output(redlock(None, &args)).await;
    unavailable.expect(UNAVAILABLE);
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "took {:?}",
        started.elapsed()
    );
    unavailable.says("reachable");
    assert_eq!(lines(&marker), ["ran"], "the command ran without a quorum");
}

/// A command that stops on SIGTERM, under a lock whose keys another client deletes and then
/// takes: the next extension is refused, the command is stopped at once (SIGTERM, then
/// SIGKILL without waiting for the grace: the keys are another holder's already, so its trap
/// may not get to run), and `redlock` exits with 79.
#[tokio::test]
async fn a_lost_lock_sends_sigterm_to_the_command_and_exits_79() {
    let nodes = TestNodes::start(3);
    let scratch = Scratch::new("lost");
    let journal = scratch.file("journal");
    let script = until_sigterm(&journal, 0, None);
    let run = start(run_script(&nodes, "sync", SHORT_TTL, &script));
    await_line(&journal, "start").await;
    // A quorum at least: a grant the node timeout cut on a loaded machine never lands on the
    // third node, and the take-over below writes every node.
    assert!(held_everywhere(&nodes, "sync").await.len() >= 2);
    take_over(&nodes, "sync").await;
    finish(run).await.expect(LOST).says("lost");
    let journal = lines(&journal);
    assert!(
        journal == ["start"] || journal == ["start", "term"],
        "{journal:?}"
    );
    // The other client's keys are left alone.
    assert_eq!(
        nodes.values("sync").await,
        vec![Some("theirs".to_owned()); 3]
    );
}

/// The lock options of the tests of a command that ignores SIGTERM: a 6 s ttl (extended
/// every 2 s), a 3 s grace, which fits in it.
const SLOW_TO_DIE: &[&str] = &["--ttl", "6s", "--grace", "3s"];
const TTL: Duration = Duration::from_secs(6);
const GRACE: Duration = Duration::from_secs(3);

/// The validity a lock taken with [`TTL`] is given: ttl − drift (1 % + 2 ms).
fn validity() -> Duration {
    TTL - (TTL.mul_f64(0.01) + Duration::from_millis(2))
}

/// A command that ignores SIGTERM, under a lock another client takes over (deletes its keys,
/// sets its own): the next extension, a third of the ttl after the lock was taken, is refused
/// by a majority. That ends the validity there, since the keys are another holder's: the
/// command gets SIGKILL right after SIGTERM, not after the 3 s --grace beside the new holder,
/// and `redlock` exits with 79.
#[tokio::test]
async fn a_refused_extension_kills_a_command_ignoring_sigterm_at_once() {
    let nodes = TestNodes::start(3);
    let scratch = Scratch::new("refused");
    let journal = scratch.file("journal");
    let pid_file = scratch.file("pid");
    let launched = Instant::now();
    let run = start(run_script(
        &nodes,
        "sync",
        SLOW_TO_DIE,
        &noting_sigterm(&journal, &pid_file),
    ));
    let pid = await_pid(&pid_file).await;
    let _cleanup = KillOnDrop::group_of(pid);
    take_over(&nodes, "sync").await;
    let taken = Instant::now();
    // Before the first extension (2 s after the lock was taken, itself after the launch).
    assert!(
        taken - launched < Duration::from_millis(1500),
        "taken over {:?} after the launch, maybe after the first extension",
        taken - launched
    );
    let (term, died) = term_and_death(pid, &journal, taken).await;
    println!("after the take-over: SIGTERM noted at {term:?}, the command dead at {died:?}");
    // The refusal comes at most an extension period (2 s) after the take-over; SIGKILL must
    // follow it within 1 s. Waiting out the grace would kill the grace after the refusal:
    // 5 s after the lock was taken, so more than 3.5 s after the take-over (at most 1.5 s
    // after the lock was taken), past this bound.
    let bound = TTL / 3 + Duration::from_secs(1);
    assert!(
        bound < TTL / 3 + GRACE - Duration::from_millis(1500),
        "the old behaviour would pass"
    );
    assert!(
        died < bound,
        "the command ran on {died:?} after the take-over (SIGTERM noted at {term:?}), \
         beside the new holder: more than an extension period ({:?}) plus 1 s; an extension \
         refused must not wait out the {GRACE:?} grace",
        TTL / 3
    );
    finish(run)
        .await
        .expect(LOST)
        .says("refused by a majority")
        .says("validity is ending; sent SIGKILL");
    assert!(!running(pid), "the command is still running");
    // The other client's keys are left alone.
    assert_eq!(
        nodes.values("sync").await,
        vec![Some("theirs".to_owned()); 3]
    );
}

/// A command that ignores SIGTERM, under a lock no extension of which is confirmed: two of
/// the three nodes stalled (SIGSTOP), the extensions time out without being refused, and the
/// lock is lost by its lost deadline (expired), --grace + min(ttl / 10, 1 s) before its
/// validity ends. The command gets SIGTERM then, and SIGKILL the grace later, still before
/// the validity ends; `redlock` exits with 79.
#[tokio::test]
async fn a_command_ignoring_sigterm_is_killed_after_the_grace() {
    let nodes = TestNodes::start(3);
    let scratch = Scratch::new("grace");
    let journal = scratch.file("journal");
    let pid_file = scratch.file("pid");
    // Before the lock was taken: the validity ends at most `validity()` after this.
    let launched = Instant::now();
    let run = start(run_script(
        &nodes,
        "sync",
        SLOW_TO_DIE,
        &noting_sigterm(&journal, &pid_file),
    ));
    let pid = await_pid(&pid_file).await;
    let _cleanup = KillOnDrop::group_of(pid);
    nodes.servers[0].pause();
    nodes.servers[1].pause();
    assert!(
        launched.elapsed() < Duration::from_millis(1500),
        "nodes stalled {:?} after the launch, maybe after the first extension",
        launched.elapsed()
    );
    let (term, died) = term_and_death(pid, &journal, launched).await;
    nodes.servers[0].resume();
    nodes.servers[1].resume();
    let term = term.unwrap_or_else(|| panic!("no SIGTERM before SIGKILL (killed at {died:?})"));
    println!("after the launch: SIGTERM noted at {term:?}, the command dead at {died:?}");
    // SIGKILL is due the grace after the lost deadline, SIGTERM goes out a moment after that
    // deadline: allow that moment, and the shell's note of it.
    let slack = Duration::from_millis(100);
    assert!(
        died - term + slack >= GRACE,
        "SIGTERM noted {term:?} after the launch, the command killed at {died:?}: before the \
         {GRACE:?} grace"
    );
    assert!(
        died < validity(),
        "the command was killed {died:?} after the launch, after the lock's validity \
         ({:?})",
        validity()
    );
    finish(run)
        .await
        .expect(LOST)
        .says("its validity ran out with no confirmed extension")
        .says("SIGKILL");
}

/// The command's own exit status: its code, 128 + N when killed by signal N, 127 for a
/// command not found and 126 for one that cannot be run.
#[tokio::test]
async fn the_command_exit_status_is_passed_through() {
    let nodes = TestNodes::start(3);
    let scratch = Scratch::new("status");
    let not_executable = scratch.file("plain-file");
    std::fs::write(&not_executable, "not a program").unwrap();
    let cases: [(&[&str], i32); 5] = [
        (&["true"], 0),
        (&["sh", "-c", "exit 3"], 3),
        (&["sh", "-c", "kill -USR1 $$"], 128 + Signal::SIGUSR1 as i32),
        (&["/nonexistent/program"], 127),
        (&[&not_executable], 126),
    ];
    for (command, code) in cases {
        let mut args = vec!["run", "--resource", "exit", "--"];
        args.extend_from_slice(command);
        output(redlock(Some(&nodes), &args)).await.expect(code);
        // Released every time, whatever the status.
        nodes.gone_everywhere("exit").await;
    }
}

/// `--fencing-env FENCE` hands each holder a larger fencing token than the one before; without
/// it the variable is not set.
#[tokio::test]
async fn fencing_env_passes_an_increasing_token() {
    let nodes = TestNodes::start(3);
    let scratch = Scratch::new("fencing");
    let journal = scratch.file("tokens");
    let script = format!("echo \"${{FENCE-unset}}\" >> {journal}");
    for _ in 0..3 {
        output(run_script(
            &nodes,
            "ledger",
            &["--fencing-env", "FENCE"],
            &script,
        ))
        .await
        .expect(0);
    }
    let fenced: Vec<u64> = lines(&journal).iter().map(|t| t.parse().unwrap()).collect();
    assert_eq!(fenced.len(), 3);
    assert!(fenced.windows(2).all(|w| w[0] < w[1]), "{fenced:?}");
    output(run_script(&nodes, "ledger", &[], &script))
        .await
        .expect(0);
    assert_eq!(lines(&journal).last().map(String::as_str), Some("unset"));
}

/// SIGTERM to `redlock run` reaches the command; `redlock` exits with the command's status
/// and releases the lock on every node before exiting.
#[tokio::test]
async fn sigterm_is_passed_on_and_the_lock_released_on_every_node() {
    let nodes = TestNodes::start(3);
    let scratch = Scratch::new("forward");
    let journal = scratch.file("journal");
    let script = until_sigterm(&journal, 5, None);
    let run = start(run_script(&nodes, "deploy", &[], &script));
    await_line(&journal, "start").await;
    send(&run, Signal::SIGTERM);
    finish(run).await.expect(5);
    assert_eq!(lines(&journal), ["start", "term"]);
    // Sent to every node before the exit: a command still unsent then would leave the key
    // there for its 30 s ttl.
    nodes.gone_everywhere("deploy").await;
}

/// SIGINT while waiting for a busy resource: the wait ends with 130 (128 + SIGINT), the
/// command never runs, and the waiter leaves the nodes' queues before `redlock` exits.
#[tokio::test]
async fn sigint_while_waiting_ends_the_wait_and_leaves_the_queue() {
    let nodes = TestNodes::start(3);
    let scratch = Scratch::new("interrupt");
    let marker = scratch.file("ran");
    let holder = handle(&nodes).await;
    let guard = holder.lock("deploy").await.unwrap();
    let script = format!("touch {marker}");
    let run = start(run_script(&nodes, "deploy", &["--wait", "30s"], &script));
    within("the run to queue as a waiter", async {
        while nodes.queued("deploy").await.iter().all(|&n| n == 0) {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    send(&run, Signal::SIGINT);
    let interrupted = finish(run).await;
    interrupted.expect(128 + Signal::SIGINT as i32);
    assert!(!exists(&marker));
    assert_eq!(nodes.queued("deploy").await, vec![0; 3]);
    guard.release().await.unwrap();
}

/// Two of three nodes killed while the command runs: no extension can be confirmed, the lost
/// signal fires before the validity runs out, and the command is stopped (79).
#[tokio::test]
async fn losing_the_quorum_while_running_stops_the_command() {
    let mut nodes = TestNodes::start(3);
    let scratch = Scratch::new("quorum");
    let journal = scratch.file("journal");
    let script = until_sigterm(&journal, 0, None);
    let run = start(run_script(&nodes, "sync", SHORT_TTL, &script));
    await_line(&journal, "start").await;
    nodes.servers[0].kill();
    nodes.servers[1].kill();
    finish(run).await.expect(LOST);
    assert_eq!(lines(&journal), ["start", "term"]);
}

/// The keys deleted while the command runs (a long ttl: no extension comes before the
/// command exits): the release finds the lock gone, `redlock` says so and exits with 79
/// instead of the command's 0, since the command may have overlapped another holder.
#[tokio::test]
async fn a_lock_found_gone_at_release_exits_79() {
    let nodes = TestNodes::start(3);
    let scratch = Scratch::new("gone");
    let journal = scratch.file("journal");
    let go = scratch.file("go");
    let script =
        format!("echo start >> {journal}; while [ ! -e {go} ]; do sleep 0.02; done; exit 0");
    let run = start(run_script(&nodes, "gone", &[], &script));
    await_line(&journal, "start").await;
    nodes.delete("gone").await;
    std::fs::write(&go, "").unwrap();
    finish(run)
        .await
        .expect(LOST)
        .says("found gone")
        .says("exit code 0");
}

/// The command does not inherit the `REDLOCK_*` variables (`REDLOCK_NODES` holds the nodes'
/// passwords); the rest of the environment and `--fencing-env` reach it.
#[tokio::test]
async fn the_command_does_not_inherit_the_redlock_variables() {
    let nodes = TestNodes::start(3);
    let scratch = Scratch::new("env");
    let seen = scratch.file("env");
    let script = format!("env > {seen}");
    let mut command = run_script(&nodes, "env", &["--fencing-env", "FENCE"], &script);
    command.env("KEPT", "1");
    output(command).await.expect(0);
    let env = lines(&seen);
    let inherited: Vec<_> = env.iter().filter(|l| l.starts_with("REDLOCK_")).collect();
    assert!(inherited.is_empty(), "the command saw {inherited:?}");
    assert!(env.iter().any(|l| l == "KEPT=1"), "{env:?}");
    assert!(env.iter().any(|l| l.starts_with("FENCE=")), "{env:?}");
}

/// The applications' lock options in the environment (`REDLOCK_MODE`, which a handle refuses
/// as no longer an option, `REDLOCK_LOCK_AT_LEAST_FOR`, which it refuses as its default; a `REDLOCK_TTL` that
/// is not a duration, or a short one) are not `redlock`'s: each alone, `run` and `status`
/// ignore them. `run` takes its plain exclusive lock with its own `--ttl`. The handle's own
/// variables are still read: a bad `REDLOCK_NODE_TIMEOUT` is refused (64), naming it.
#[tokio::test]
async fn the_applications_lock_variables_are_ignored() {
    let nodes = TestNodes::start(3);
    let scratch = Scratch::new("app-env");
    let journal = scratch.file("journal");
    let go = scratch.file("go");
    let app_vars = [
        ("REDLOCK_MODE", "read"),
        ("REDLOCK_FENCING", "maybe"),
        ("REDLOCK_LOCK_AT_LEAST_FOR", "1m"),
        ("REDLOCK_TTL", "soon"),
        ("REDLOCK_AUTO_EXTEND", "maybe"),
    ];
    for (var, value) in app_vars {
        let mut run = run_script(&nodes, "app-env", &[], "true");
        run.env(var, value);
        let ran = output(run).await;
        assert_eq!(ran.code, Some(0), "{var}={value}: {ran:#?}");
        let mut status = redlock(Some(&nodes), &["status", "app-env"]);
        status.env(var, value);
        let shown = output(status).await;
        assert_eq!(shown.code, Some(0), "{var}={value}: {shown:#?}");
    }
    // All at once, and a 1 s REDLOCK_TTL: the lock is plain, with the 20 s of --ttl.
    let script = format!("echo start >> {journal}; while [ ! -e {go} ]; do sleep 0.02; done");
    let mut command = run_script(&nodes, "app-env", &["--ttl", "20s"], &script);
    command.envs(app_vars).env("REDLOCK_TTL", "1s");
    let run = start(command);
    await_line(&journal, "start").await;
    // On a quorum at least (a grant the node timeout cut never lands), each with the 20 s.
    assert!(held_everywhere(&nodes, "app-env").await.len() >= 2);
    let pttls = nodes.pttls("app-env").await;
    let long = pttls.iter().filter(|&&ms| ms > 10_000).count();
    assert!(
        long >= 2 && pttls.iter().all(|&ms| ms > 10_000 || ms == -2),
        "{pttls:?}"
    );
    std::fs::write(&go, "").unwrap();
    finish(run).await.expect(0);
    nodes.gone_everywhere("app-env").await;
    let mut bad = run_script(&nodes, "app-env", &[], "true");
    bad.env("REDLOCK_NODE_TIMEOUT", "soon");
    output(bad).await.expect(64).says("REDLOCK_NODE_TIMEOUT");
}

/// `--lock-at-least-for`: a command that exits at once leaves the lock held until the minimum
/// hold ends, so that a replica firing a little later skips (75); after it, the lock is free.
#[tokio::test]
async fn a_minimum_hold_keeps_a_quick_job_locked_until_it_ends() {
    let nodes = TestNodes::start(3);
    let started = Instant::now();
    output(redlock(
        Some(&nodes),
        &run_args(
            "tick",
            // A --grace that fits in the ttl (the default 10 s does not fit in 10 s: 64).
            &["--ttl", "10s", "--grace", "1s", "--lock-at-least-for", "2s"],
            "true",
        ),
    ))
    .await
    .expect(0);
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "the run waited out its hold"
    );
    // A later replica, within the hold: skipped.
    output(redlock(
        Some(&nodes),
        &run_args("tick", &["--wait", "0s"], "true"),
    ))
    .await
    .expect(BUSY);
    // After it: free again.
    tokio::time::sleep(
        Duration::from_secs(2).saturating_sub(started.elapsed()) + Duration::from_millis(300),
    )
    .await;
    output(redlock(
        Some(&nodes),
        &run_args("tick", &["--wait", "0s"], "true"),
    ))
    .await
    .expect(0);
    // A minimum hold longer than the ttl is a usage error, before anything is sent.
    output(redlock(
        Some(&nodes),
        &run_args(
            "tick",
            &[
                "--ttl",
                "1s",
                "--grace",
                "100ms",
                "--lock-at-least-for",
                "2s",
            ],
            "true",
        ),
    ))
    .await
    .expect(64)
    .says("lock_at_least_for")
    .says("longer than the ttl");
}
