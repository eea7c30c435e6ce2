//! A `redlock run` that stops getting CPU (a paused container, an overloaded host, SIGSTOP):
//! when it resumes, the command's SIGKILL is tied to the lock's validity, not to a grace
//! counted from the loss it sees late. Against real `redis-server` nodes.

#![allow(clippy::unwrap_used)] // tests unwrap: a failure is the assertion

mod support;

use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use redlock_test::{TestNodes, redlock as handle};
use support::within;
use support::{
    KillOnDrop, Scratch, await_pid, await_state, finish, ignoring_sigterm, run_script, running,
    send, start,
};

/// Exit code of a lost lock, as documented in `redlock --help` and the README.
const LOST: i32 = 79;

/// The options of both tests: a 6 s ttl (first extension 2 s after the lock was taken) and
/// a 3 s grace, which fits in it.
const OPTIONS: &[&str] = &["--ttl", "6s", "--grace", "3s"];
const TTL: Duration = Duration::from_secs(6);
const GRACE: Duration = Duration::from_secs(3);

/// The validity of a lock taken with [`TTL`]: ttl − drift (1 % + 2 ms), counted from before
/// the command started.
fn validity() -> Duration {
    TTL - (TTL.mul_f64(0.01) + Duration::from_millis(2))
}

/// The pid of the started `redlock`.
fn pid_of(run: &tokio::process::Child) -> i32 {
    i32::try_from(run.id().unwrap()).unwrap()
}

/// Waits (at most 10 s) until process `pid` is gone or a zombie; returns when, after `since`.
async fn died_after(pid: i32, since: Instant) -> Duration {
    within("the command to be killed", async {
        while running(pid) {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        since.elapsed()
    })
    .await
}

/// `redlock` and the command's process group stopped (SIGSTOP) until past the ttl, as a
/// container pause does: the keys expire and another client takes the lock. Both continued
/// (the command first, as an unlucky scheduler may): the command, which ignores SIGTERM, is
/// killed at once, since the validity is over, not after the 3 s --grace beside the next
/// holder.
#[tokio::test]
async fn a_command_frozen_past_the_validity_is_killed_at_once_on_resume() {
    let nodes = TestNodes::start(3);
    let scratch = Scratch::new("frozen");
    let pid_file = scratch.file("pid");
    let run = start(run_script(
        &nodes,
        "f1",
        OPTIONS,
        &ignoring_sigterm(&pid_file),
    ));
    let pid = await_pid(&pid_file).await;
    // The command leads its own group.
    let group = Pid::from_raw(pid);
    let _cleanup = KillOnDrop::group_of(pid);
    // The lock was taken before the command started.
    let started = Instant::now();
    send(&run, Signal::SIGSTOP);
    killpg(group, Signal::SIGSTOP).unwrap();
    await_state(pid_of(&run), 'T').await;
    await_state(pid, 'T').await;
    tokio::time::sleep_until((started + TTL + Duration::from_millis(300)).into()).await;
    // The keys have expired: the next holder gets the lock.
    let other = handle(&nodes).await;
    let next = other.lock("f1").await.unwrap();
    killpg(group, Signal::SIGCONT).unwrap();
    send(&run, Signal::SIGCONT);
    let resumed = Instant::now();
    let died = died_after(pid, resumed).await;
    assert!(
        died < Duration::from_millis(1500),
        "the command ran on {died:?} after resuming, beside the next holder, though the \
         lock's validity was over (grace {GRACE:?})"
    );
    finish(run)
        .await
        .expect(LOST)
        .says("validity is ending; sent SIGKILL");
    next.release().await.unwrap();
}

/// `redlock` alone stopped (an overloaded host: the command runs on) from before its first
/// extension until less than --grace of the validity is left, the lock's keys deleted
/// meanwhile (as another client would, or an expiry). The loss is seen late, 4 s after the
/// start, past the lost deadline (so it is reported as expired; an extension refused comes
/// before that deadline, with more than the grace left). The command, which ignores SIGTERM,
/// must still be dead before the lock's validity ends (at most ttl − drift after the start),
/// not 3 s (--grace) after the loss.
#[tokio::test]
async fn a_loss_seen_late_kills_the_command_before_the_validity_ends() {
    let nodes = TestNodes::start(3);
    let scratch = Scratch::new("stalled");
    let pid_file = scratch.file("pid");
    let run = start(run_script(
        &nodes,
        "f2",
        OPTIONS,
        &ignoring_sigterm(&pid_file),
    ));
    let pid = await_pid(&pid_file).await;
    let _cleanup = KillOnDrop::group_of(pid);
    let started = Instant::now();
    send(&run, Signal::SIGSTOP);
    await_state(pid_of(&run), 'T').await;
    assert!(
        started.elapsed() < Duration::from_millis(1500),
        "redlock stopped {:?} after the start, maybe after its first extension (at 2 s)",
        started.elapsed()
    );
    nodes.delete("f2").await;
    tokio::time::sleep_until((started + Duration::from_secs(4)).into()).await;
    send(&run, Signal::SIGCONT);
    let died = died_after(pid, started).await;
    assert!(
        died < validity(),
        "the command was killed {died:?} after the start, after the lock's validity \
         ({:?}); the loss was seen 4 s after the start (grace {GRACE:?})",
        validity()
    );
    finish(run)
        .await
        .expect(LOST)
        .says("validity is ending; sent SIGKILL");
}
