//! What the `redlock` binary's tests share: starting it against real nodes, awaiting it within
//! a bound, a scratch directory for what the commands it runs write, and a journal those
//! commands append to.

#![allow(dead_code, unreachable_pub)] // each test binary uses its own part of this module

use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use redlock_test::{TestNodes, foreign_set_nx};

/// The binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_redlock");

/// `redlock args...` with `REDLOCK_NODES` set to `nodes` (or unset, for `None`), its output
/// piped.
pub fn redlock(nodes: Option<&TestNodes>, args: &[&str]) -> tokio::process::Command {
    let mut command = tokio::process::Command::new(BIN);
    command
        .args(args)
        .env_remove("REDLOCK_NODES")
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    if let Some(nodes) = nodes {
        command.env("REDLOCK_NODES", nodes.urls().join(","));
    }
    command
}

/// `run` options for a lock that a loss ends soon: a 2 s ttl, and a 500 ms grace that fits
/// in it.
pub const SHORT_TTL: &[&str] = &["--ttl", "2s", "--grace", "500ms"];

/// The arguments of `redlock run --resource RESOURCE OPTIONS... -- sh -c SCRIPT`.
pub fn run_args<'a>(resource: &'a str, options: &[&'a str], script: &'a str) -> Vec<&'a str> {
    let mut args = vec!["run", "--resource", resource];
    args.extend_from_slice(options);
    args.extend_from_slice(&["--", "sh", "-c", script]);
    args
}

/// `redlock run --resource RESOURCE OPTIONS... -- sh -c SCRIPT` with `REDLOCK_NODES` set to
/// `nodes`, as [`redlock`] makes it.
pub fn run_script(
    nodes: &TestNodes,
    resource: &str,
    options: &[&str],
    script: &str,
) -> tokio::process::Command {
    redlock(Some(nodes), &run_args(resource, options, script))
}

/// Starts `command` (a `redlock`).
pub fn start(mut command: tokio::process::Command) -> tokio::process::Child {
    command
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {BIN}: {e}"))
}

/// Runs `command` to its end, at most 20 s.
pub async fn output(command: tokio::process::Command) -> Finished {
    finish(start(command)).await
}

/// Sends `signal` to the started `redlock` `child`.
#[track_caller]
pub fn send(child: &tokio::process::Child, signal: Signal) {
    let pid = Pid::from_raw(
        i32::try_from(child.id().unwrap_or_else(|| panic!("{BIN} exited")))
            .unwrap_or_else(|e| panic!("pid: {e}")),
    );
    kill(pid, signal).unwrap_or_else(|e| panic!("{signal} to {pid}: {e}"));
}

/// Awaits a started `redlock`, at most 20 s.
pub async fn finish(child: tokio::process::Child) -> Finished {
    let output = tokio::time::timeout(Duration::from_secs(20), child.wait_with_output())
        .await
        .unwrap_or_else(|_| panic!("redlock did not exit within 20 s"))
        .unwrap_or_else(|e| panic!("waiting for redlock: {e}"));
    Finished::from(output)
}

/// A finished `redlock`: its exit code and its output as text.
#[derive(Debug)]
pub struct Finished {
    /// The exit code (`None`: killed by a signal).
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

impl From<Output> for Finished {
    fn from(output: Output) -> Self {
        Self {
            code: output.status.code(),
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        }
    }
}

impl Finished {
    /// Asserts the exit code, showing the output otherwise; no run may panic.
    #[track_caller]
    pub fn expect(&self, code: i32) -> &Self {
        assert_eq!(self.code, Some(code), "{self:#?}");
        assert!(!self.stderr.contains("panicked"), "{self:#?}");
        self
    }

    /// Asserts that stderr says `text`, showing the output otherwise.
    #[track_caller]
    pub fn says(&self, text: &str) -> &Self {
        assert!(self.stderr.contains(text), "{self:#?}");
        self
    }
}

/// A command for `sh -c` that appends `term` to `journal` and exits with `code` on SIGTERM,
/// after writing its pid to `pid_file` (if any) and appending `start` to `journal`; until
/// then it runs.
pub fn until_sigterm(journal: &str, code: i32, pid_file: Option<&str>) -> String {
    let pid = pid_file.map_or_else(String::new, |pid_file| format!("echo $$ > {pid_file}; "));
    format!(
        "trap 'echo term >> {journal}; exit {code}' TERM; {pid}echo start >> {journal}; \
         while :; do sleep 0.05; done"
    )
}

/// A command for `sh -c` that ignores SIGTERM, writes its pid to `pid_file` and runs until
/// killed.
pub fn ignoring_sigterm(pid_file: &str) -> String {
    format!("trap '' TERM; echo $$ > {pid_file}; while :; do sleep 0.05; done")
}

/// A command for `sh -c` that does not stop on SIGTERM but notes it: appends `term` to
/// `journal` at each one (the `sleep` in its group dies of it, so the note comes at once),
/// after writing its pid to `pid_file` and appending `start` to `journal`; it runs until
/// killed.
pub fn noting_sigterm(journal: &str, pid_file: &str) -> String {
    format!(
        "trap 'echo term >> {journal}' TERM; echo $$ > {pid_file}; echo start >> {journal}; \
         while :; do sleep 0.05; done"
    )
}

/// When, after `since`, the command `pid` started by [`noting_sigterm`] noted its first
/// SIGTERM in `journal` (`None`: killed before it could) and when it died (gone, or a
/// zombie); each seen within 5 ms, at most 20 s.
pub async fn term_and_death(
    pid: i32,
    journal: &str,
    since: Instant,
) -> (Option<Duration>, Duration) {
    let deadline = since + Duration::from_secs(20);
    let mut term = None;
    loop {
        let alive = running(pid);
        if term.is_none() && lines(journal).iter().any(|l| l == "term") {
            term = Some(since.elapsed());
        }
        if !alive {
            return (term, since.elapsed());
        }
        assert!(
            Instant::now() < deadline,
            "process {pid} still runs after 20 s"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Another client takes `resource` from its holder: deletes its keys, then sets its own
/// (`theirs`) on every node.
pub async fn take_over(nodes: &TestNodes, resource: &str) {
    nodes.delete(resource).await;
    for url in nodes.urls() {
        assert_eq!(foreign_set_nx(&url, resource).await.as_deref(), Some("OK"));
    }
}

/// A fresh scratch directory for one test, removed on drop.
#[derive(Debug)]
pub struct Scratch(PathBuf);

impl Scratch {
    pub fn new(test: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("redlock-cli-{test}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        Self(dir)
    }

    /// A path inside, as a string for the commands' shell scripts.
    pub fn file(&self, name: &str) -> String {
        self.0.join(name).to_string_lossy().into_owned()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The lines of the file at `path` (none if it does not exist).
pub fn lines(path: &str) -> Vec<String> {
    std::fs::read_to_string(path)
        .map(|text| text.lines().map(str::to_owned).collect())
        .unwrap_or_default()
}

/// Waits (at most 10 s) until the file at `path` has a line equal to `line`.
pub async fn await_line(path: &str, line: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !lines(path).iter().any(|l| l == line) {
        assert!(
            Instant::now() < deadline,
            "no line {line:?} in {path} within 10 s: {:?}",
            lines(path)
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Whether `path` exists.
pub fn exists(path: &str) -> bool {
    Path::new(path).exists()
}

/// The tokens at `resource` once every node holds one (at most 2 s, then whatever the nodes
/// hold): `redlock run` returned from its acquisition at a quorum, and the other nodes'
/// grants land just after.
pub async fn held_everywhere(nodes: &TestNodes, resource: &str) -> Vec<String> {
    let looks_like_a_token = |holding: &redlock_test::Holding| {
        holding
            .value
            .token()
            .is_some_and(|t| tokens(&[Some(t.to_owned())]).len() == 1)
    };
    nodes.settle(resource, looks_like_a_token).await;
    tokens(&nodes.values(resource).await)
}

/// The 40-hex-digit tokens among `values` (what the nodes hold at a lock key).
pub fn tokens(values: &[Option<String>]) -> Vec<String> {
    values
        .iter()
        .flatten()
        .filter(|v| v.len() == 40 && v.bytes().all(|b| b.is_ascii_hexdigit()))
        .cloned()
        .collect()
}

/// The state letter of process `pid` (`/proc/PID/stat`: `R`, `S`, `T` stopped, `Z` zombie...),
/// `None` once it is gone.
pub fn state(pid: i32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, after_name) = stat.rsplit_once(')')?;
    after_name.trim_start().chars().next()
}

/// Whether process `pid` is running: it exists and is not a zombie.
pub fn running(pid: i32) -> bool {
    state(pid).is_some_and(|state| !matches!(state, 'Z' | 'X'))
}

/// Waits (at most 10 s) until a command wrote a pid on the first line of `path`; returns it.
pub async fn await_pid(path: &str) -> i32 {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(pid) = lines(path).first().and_then(|l| l.parse().ok()) {
            return pid;
        }
        assert!(Instant::now() < deadline, "no pid in {path} within 10 s");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Waits (at most 10 s) until process `pid` is in state `wanted` (e.g. `T`: stopped).
pub async fn await_state(pid: i32, wanted: char) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while state(pid) != Some(wanted) {
        assert!(
            Instant::now() < deadline,
            "process {pid} not in state {wanted} within 10 s: {:?}",
            state(pid)
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Kills the process group of a command `redlock` started (each leads a group of its own)
/// with SIGKILL when dropped: what a failed test left running.
#[derive(Debug)]
pub struct KillOnDrop(nix::unistd::Pid);

impl KillOnDrop {
    /// For the group of process `pid` (found now, while it runs).
    pub fn group_of(pid: i32) -> Self {
        let pid = nix::unistd::Pid::from_raw(pid);
        let group = nix::unistd::getpgid(Some(pid))
            .unwrap_or_else(|e| panic!("no process group for {pid}: {e}"));
        assert_ne!(
            group,
            nix::unistd::getpgrp(),
            "{pid} is in the test's own group"
        );
        Self(group)
    }
}

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = nix::sys::signal::killpg(self.0, nix::sys::signal::Signal::SIGKILL);
    }
}

/// Awaits `future` for at most 10 s; panics with `what` if it takes longer, so that a bug fails
/// the test instead of hanging it.
#[allow(dead_code)] // not every test file waits this way
pub async fn within<F: std::future::IntoFuture>(what: &str, future: F) -> F::Output {
    tokio::time::timeout(Duration::from_secs(10), future)
        .await
        .unwrap_or_else(|_| panic!("timed out after 10 s waiting for {what}"))
}
