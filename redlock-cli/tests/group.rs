//! `redlock run` and the command's whole process group, against real `redis-server` nodes:
//! what the command leaves running is ended before the lock is released, after a normal exit
//! and after a loss; a command that ignores SIGTERM is killed before the lock's validity
//! ends; a --grace that does not fit in the ttl is refused; stderr that cannot be written
//! does not keep the command from being stopped.

#![allow(clippy::unwrap_used)] // tests unwrap: a failure is the assertion

mod support;

use std::fs::OpenOptions;
use std::time::{Duration, Instant};

use redlock_test::TestNodes;
use support::within;
use support::{
    KillOnDrop, SHORT_TTL, Scratch, await_line, await_pid, finish, ignoring_sigterm, lines, output,
    redlock, run_args, run_script, running, start, take_over, until_sigterm,
};

/// Exit codes, as documented in `redlock --help` and the README.
const USAGE: i32 = 64;
const BUSY: i32 = 75;
const LOST: i32 = 79;

/// Makes the test process the reaper of orphans below it, and never reaps them, like the
/// PID 1 of some containers: `redlock` must reap the processes the command leaves itself, or
/// their zombies would keep its process group alive.
fn stand_for_an_init_that_does_not_reap() {
    nix::sys::prctl::set_child_subreaper(true).unwrap();
}

/// A command that exits at once, leaving two background processes: one exits on SIGTERM, the
/// other ignores it. They get SIGTERM, the second SIGKILL after --grace, before `redlock`
/// releases the lock and exits. Meanwhile every other `redlock run --wait 0s` on the
/// resource is busy, and none that gets the lock finds the second running.
#[tokio::test]
async fn what_the_command_leaves_running_is_killed_before_the_lock_is_released() {
    stand_for_an_init_that_does_not_reap();
    let nodes = TestNodes::start(3);
    let scratch = Scratch::new("leftover");
    let pid_file = scratch.file("pid");
    let journal = scratch.file("journal");
    let terms = scratch.file("terms");
    let ready = scratch.file("ready");
    // Each leftover says it is ready once its trap is set (the first by a file, the second by
    // writing its own pid), and the command exits only then: a SIGTERM from redlock can never
    // come before a trap.
    let script = format!(
        "(trap 'echo term >> {terms}; exit 0' TERM; touch {ready}; while :; do sleep 0.05; done) & \
         sh -c 'trap \"\" TERM; echo $$ > {pid_file}; exec sleep 30' & \
         while [ ! -e {ready} ] || [ ! -s {pid_file} ]; do sleep 0.01; done"
    );
    let mut run = start(run_script(&nodes, "g1", &["--grace", "3s"], &script));
    let left = await_pid(&pid_file).await;
    let _cleanup = KillOnDrop::group_of(left);
    // A second holder records whether the left process still runs while it holds the lock.
    let probe = format!(
        "case $(sed 's/.*) //' /proc/{left}/stat 2>/dev/null | cut -c1) in \
         ''|Z|X) echo clear ;; *) echo overlap ;; esac >> {journal}"
    );
    let probe_args = run_args("g1", &["--wait", "0s"], &probe);
    let mut busy = 0;
    within("the first run to exit", async {
        while run.try_wait().unwrap().is_none() {
            let was_running = running(left);
            let second = output(redlock(Some(&nodes), &probe_args)).await;
            if second.code == Some(BUSY) {
                busy += usize::from(was_running);
            } else {
                second.expect(0);
            }
        }
    })
    .await;
    // Before reading its output: processes left running would hold its pipes open.
    assert!(
        !lines(&journal).iter().any(|l| l == "overlap"),
        "a second holder got the lock while the left process ran: {:?}",
        lines(&journal)
    );
    assert!(!running(left), "the left process outlived redlock");
    assert_eq!(lines(&terms), ["term"], "no SIGTERM before SIGKILL");
    assert!(busy > 0, "no second run was tried while the process ran");
    finish(run)
        .await
        .expect(0)
        .says("left processes")
        .says("SIGKILL");
    // Released once it was gone.
    nodes.gone_everywhere("g1").await;
}

/// A lost lock, a command that exits on SIGTERM and a background process of its group that
/// ignores it: the process gets SIGKILL after --grace, before `redlock` exits with 79.
#[tokio::test]
async fn a_lost_lock_kills_the_whole_group_even_after_the_command_exited() {
    stand_for_an_init_that_does_not_reap();
    let nodes = TestNodes::start(3);
    let scratch = Scratch::new("lost-group");
    let pid_file = scratch.file("pid");
    let script = format!("(trap '' TERM; exec sleep 30) & echo $! > {pid_file}; wait");
    let mut run = start(run_script(&nodes, "g2", SHORT_TTL, &script));
    let left = await_pid(&pid_file).await;
    let _cleanup = KillOnDrop::group_of(left);
    take_over(&nodes, "g2").await;
    within("redlock to exit", async {
        while run.try_wait().unwrap().is_none() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    // Before reading its output: processes left running would hold its pipes open.
    assert!(!running(left), "the group's process outlived redlock");
    finish(run).await.expect(LOST).says("SIGKILL");
}

/// No extension confirmed (two of three nodes killed right after the lock was taken, before
/// the first extension) and a command that ignores SIGTERM: SIGTERM goes out --grace plus
/// the default margin before the lock's validity ends, and the command is dead before the
/// validity ends (the validity is at most ttl − drift from when the command started).
#[tokio::test]
async fn a_command_ignoring_sigterm_is_killed_before_the_validity_ends() {
    let mut nodes = TestNodes::start(3);
    let scratch = Scratch::new("validity");
    let pid_file = scratch.file("pid");
    let script = ignoring_sigterm(&pid_file);
    let ttl = Duration::from_secs(6);
    let run = start(run_script(
        &nodes,
        "g3",
        &["--ttl", "6s", "--grace", "2s"],
        &script,
    ));
    let pid = await_pid(&pid_file).await;
    let _cleanup = KillOnDrop::group_of(pid);
    // The lock was taken before the command started: its validity ends before this + ttl.
    let started = Instant::now();
    nodes.servers[0].kill();
    nodes.servers[1].kill();
    // The first extension is due a third of the ttl (2 s) after the lock was taken.
    assert!(
        started.elapsed() < Duration::from_millis(1500),
        "nodes killed {:?} after the start, maybe after an extension",
        started.elapsed()
    );
    let died = within("the command to be killed", async {
        while running(pid) {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        started.elapsed()
    })
    .await;
    let drift = ttl.mul_f64(0.01) + Duration::from_millis(2);
    assert!(
        died < ttl - drift,
        "killed {died:?} after the start, after the lock's validity ({:?})",
        ttl - drift
    );
    finish(run).await.expect(LOST).says("SIGKILL");
}

/// A --grace that does not fit in the ttl is refused with exit code 64 and the shortest ttl
/// that fits, before anything is sent; the defaults fit.
#[tokio::test]
async fn a_grace_that_does_not_fit_in_the_ttl_is_refused() {
    let refused = output(redlock(
        None,
        &[
            "run",
            "--resource",
            "r",
            "--ttl",
            "2s",
            "--nodes",
            "redis://127.0.0.1:9",
            "--",
            "true",
        ],
    ))
    .await;
    refused
        .expect(USAGE)
        .says("--grace 10s does not fit in --ttl 2s")
        .says("give a --ttl of at least 16s 800ms");
    let nodes = TestNodes::start(3);
    output(redlock(
        Some(&nodes),
        &["run", "--resource", "r", "--", "true"],
    ))
    .await
    .expect(0);
}

/// stderr that cannot be written (`2>/dev/full`) when the lock is lost: the command is still
/// stopped and `redlock` exits with 79, not a panic.
#[tokio::test]
async fn a_full_stderr_does_not_keep_the_command_running() {
    let nodes = TestNodes::start(3);
    let scratch = Scratch::new("full");
    let journal = scratch.file("journal");
    let pid_file = scratch.file("pid");
    let script = until_sigterm(&journal, 0, Some(&pid_file));
    let mut command = run_script(&nodes, "g4", SHORT_TTL, &script);
    command.stderr(OpenOptions::new().write(true).open("/dev/full").unwrap());
    let run = start(command);
    let _cleanup = KillOnDrop::group_of(await_pid(&pid_file).await);
    await_line(&journal, "start").await;
    take_over(&nodes, "g4").await;
    finish(run).await.expect(LOST);
    // Stopped at once (another holder has the keys): its trap may not get to run.
    let journal = lines(&journal);
    assert!(
        journal == ["start"] || journal == ["start", "term"],
        "{journal:?}"
    );
}
