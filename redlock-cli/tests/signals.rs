//! Signals and the terminal, against real `redis-server` nodes: SIGTSTP (Ctrl-Z) does not
//! stop `redlock` (the lock stays extended while the command runs); SIGQUIT, SIGUSR1 and
//! SIGUSR2 are passed on; a stopped command gets SIGCONT after a signal passed on; a command
//! under a terminal gets `/dev/null` as standard input, any other standard input is its own;
//! a `redlock` run as a background job writes to a `tostop` terminal without being stopped.

#![allow(clippy::unwrap_used)] // tests unwrap: a failure is the assertion

mod support;

use std::process::Stdio;
use std::time::Duration;

use nix::sys::signal::Signal;
use redlock_test::TestNodes;
use support::within;
use support::{
    BIN, KillOnDrop, SHORT_TTL, Scratch, await_line, await_pid, await_state, finish, lines, output,
    run_script, send, start, until_sigterm,
};
use tokio::io::AsyncWriteExt as _;

/// SIGTSTP to `redlock` (in a process group of its own, as a shell's job): it is not stopped,
/// and the lock is extended twice more (a stopped redlock would let it expire while the
/// command runs); SIGTERM then ends the command as usual.
#[tokio::test]
async fn sigtstp_is_ignored_and_the_lock_stays_extended() {
    let nodes = TestNodes::start(3);
    let scratch = Scratch::new("tstp");
    let journal = scratch.file("journal");
    let pid_file = scratch.file("pid");
    let script = until_sigterm(&journal, 4, Some(&pid_file));
    let mut command = run_script(&nodes, "tstp", SHORT_TTL, &script);
    command.process_group(0);
    let run = start(command);
    let _cleanup = KillOnDrop::group_of(await_pid(&pid_file).await);
    await_line(&journal, "start").await;
    send(&run, Signal::SIGTSTP);
    within("two extensions after SIGTSTP", async {
        let mut extensions = 0;
        let mut last = nodes.pttls("tstp").await[0];
        while extensions < 2 {
            tokio::time::sleep(Duration::from_millis(20)).await;
            let pttl = nodes.pttls("tstp").await[0];
            extensions += usize::from(pttl > last);
            last = pttl;
        }
    })
    .await;
    send(&run, Signal::SIGTERM);
    finish(run).await.expect(4).says("SIGTSTP ignored");
    assert_eq!(lines(&journal), ["start", "term"]);
}

/// SIGUSR1, SIGUSR2 and SIGQUIT sent to `redlock` reach the command; it exits on SIGQUIT and
/// `redlock` exits with its status.
#[tokio::test]
async fn sigquit_sigusr1_and_sigusr2_are_passed_on() {
    let nodes = TestNodes::start(3);
    let scratch = Scratch::new("usr");
    let journal = scratch.file("journal");
    let pid_file = scratch.file("pid");
    let script = format!(
        "trap 'echo usr1 >> {journal}' USR1; trap 'echo usr2 >> {journal}' USR2; \
         trap 'echo quit >> {journal}; exit 6' QUIT; \
         echo $$ > {pid_file}; echo start >> {journal}; while :; do sleep 0.05; done"
    );
    let run = start(run_script(&nodes, "usr", &[], &script));
    let _cleanup = KillOnDrop::group_of(await_pid(&pid_file).await);
    await_line(&journal, "start").await;
    send(&run, Signal::SIGUSR1);
    await_line(&journal, "usr1").await;
    send(&run, Signal::SIGUSR2);
    await_line(&journal, "usr2").await;
    send(&run, Signal::SIGQUIT);
    finish(run).await.expect(6);
    assert_eq!(lines(&journal), ["start", "usr1", "usr2", "quit"]);
    nodes.gone_everywhere("usr").await;
}

/// A command that stopped (as a background group reading the terminal is, by SIGTTIN):
/// SIGINT to `redlock` reaches it, followed by SIGCONT, so that it handles it and exits.
#[tokio::test]
async fn a_stopped_command_is_continued_after_a_signal_passed_on() {
    let nodes = TestNodes::start(3);
    let scratch = Scratch::new("stopped");
    let pid_file = scratch.file("pid");
    let journal = scratch.file("journal");
    let script = format!(
        "trap 'echo int >> {journal}; exit 3' INT; echo $$ > {pid_file}; kill -STOP $$; \
         while :; do sleep 0.05; done"
    );
    let run = start(run_script(&nodes, "stopped", &[], &script));
    let pid = await_pid(&pid_file).await;
    let _cleanup = KillOnDrop::group_of(pid);
    await_state(pid, 'T').await;
    send(&run, Signal::SIGINT);
    finish(run).await.expect(3);
    assert_eq!(lines(&journal), ["int"]);
}

/// `redlock` with a terminal (a pseudo-terminal) as standard input runs the command with
/// `/dev/null` instead; with a pipe, the command reads the pipe.
#[tokio::test]
async fn a_terminal_is_not_the_commands_standard_input() {
    let nodes = TestNodes::start(3);
    let scratch = Scratch::new("tty");
    let journal = scratch.file("journal");
    let script = format!("if [ -t 0 ]; then echo tty; else echo not a tty; fi >> {journal}");
    let pty = nix::pty::openpty(None, None).unwrap();
    let mut command = run_script(&nodes, "tty", &[], &script);
    command.stdin(Stdio::from(pty.slave));
    output(command).await.expect(0);
    assert_eq!(lines(&journal), ["not a tty"]);
    drop(pty.master);

    let copy = scratch.file("copy");
    let cat = format!("cat > {copy}");
    let mut command = run_script(&nodes, "tty", &[], &cat);
    command.stdin(Stdio::piped());
    let mut run = start(command);
    let mut stdin = run.stdin.take().unwrap();
    stdin.write_all(b"piped\n").await.unwrap();
    drop(stdin);
    finish(run).await.expect(0);
    assert_eq!(lines(&copy), ["piped"]);
}

/// A session whose controlling terminal (a pseudo-terminal) is set to `tostop`, with job
/// control: `redlock` runs as a background job and writes a line to the terminal (the
/// process its command left running gets SIGTERM). It is not stopped by SIGTTOU (which would
/// let the lock expire while the command runs): the job exits 0.
#[tokio::test]
async fn a_background_redlock_is_not_stopped_by_writing_to_the_terminal() {
    let nodes = TestNodes::start(3);
    let scratch = Scratch::new("tostop");
    let code = scratch.file("code");
    let job = format!(
        "stty tostop; set -m; {BIN} run --resource tostop -- sh -c 'sleep 5 &' & \
         wait $!; echo $? > {code}"
    );
    let pty = nix::pty::openpty(None, None).unwrap();
    let terminal = || Stdio::from(pty.slave.try_clone().unwrap());
    let mut session = tokio::process::Command::new("setsid");
    session
        .args(["--ctty", "sh", "-c", &job])
        .env("REDLOCK_NODES", nodes.urls().join(","))
        .stdin(terminal())
        .stdout(terminal())
        .stderr(terminal())
        .kill_on_drop(true);
    let mut session = session.spawn().unwrap();
    within("the background job's exit code", async {
        while lines(&code).is_empty() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    assert_eq!(lines(&code), ["0"], "128 + 22 is SIGTTOU");
    session.wait().await.unwrap();
    drop(pty);
}
