//! The command run under the lock: started in a process group of its own, signalled as a
//! group (so that what it started stops with it), waited for while the signals redlock gets
//! are passed on, its whole group ended before the lock is released, and its exit status as
//! a shell reports it.
//!
//! redlock makes itself the "child subreaper" of what the command starts (Linux
//! `PR_SET_CHILD_SUBREAPER`): processes of the group orphaned by the command's exit are
//! reparented to redlock, which reaps them, so that the group is seen empty as soon as they
//! are gone, even under an init that does not reap orphans (some containers' PID 1).

use std::ffi::OsString;
use std::io::IsTerminal as _;
use std::os::unix::process::ExitStatusExt;
use std::process::{ExitStatus, Stdio};
use std::time::Duration;
use tokio::time::Instant;

use nix::errno::Errno;
use nix::sys::signal::{Signal, killpg};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::Pid;

use crate::exit::{CliError, signal_code};
use crate::say::say;
use crate::signals::Signals;

/// How often the command's process group is probed while redlock waits for it to empty.
const PROBE_EVERY: Duration = Duration::from_millis(10);

/// How often the deadline of a process group being stopped is read again (it moves with the
/// lock's validity).
const RECHECK: Duration = Duration::from_millis(100);

/// The prefix of the variables the command does not inherit (`REDLOCK_NODES` holds the
/// nodes' passwords).
const OWN_VARIABLES: &str = "REDLOCK_";

/// A running command and its process group. Dropped before its group was seen empty (an
/// error, a panic), it kills the group with SIGKILL.
#[derive(Debug)]
pub(crate) struct Child {
    process: tokio::process::Child,
    /// Its process group: the command's own pid (it leads a new group).
    group: Pid,
    /// The command's exit status, once waited for.
    status: Option<ExitStatus>,
    /// The group was seen empty: it is never signalled again (its number may be reused).
    group_gone: bool,
}

impl Child {
    /// Starts `command` (program, then arguments) in a new process group, with redlock's
    /// environment less the `REDLOCK_*` variables, plus `env`; with redlock's standard
    /// output and error, and its standard input unless that is a terminal (then
    /// `/dev/null`: a background group reading a terminal would be stopped by it, SIGTTIN).
    ///
    /// # Errors
    /// [`CliError::Spawn`] when it cannot be started (not found, not executable);
    /// [`CliError::Os`] when redlock cannot become the reaper of its orphaned processes.
    pub(crate) fn spawn(
        command: &[OsString],
        env: Option<(&str, String)>,
    ) -> Result<Self, CliError> {
        let spawn_error = |source| CliError::Spawn {
            program: command
                .first()
                .map(|p| p.to_string_lossy().into_owned())
                .unwrap_or_default(),
            source,
        };
        let [program, args @ ..] = command else {
            return Err(spawn_error(std::io::ErrorKind::InvalidInput.into()));
        };
        become_subreaper()?;
        let mut builder = tokio::process::Command::new(program);
        builder.args(args).process_group(0);
        for (name, _) in std::env::vars_os() {
            if name
                .as_encoded_bytes()
                .starts_with(OWN_VARIABLES.as_bytes())
            {
                builder.env_remove(name);
            }
        }
        if let Some((name, value)) = env {
            builder.env(name, value);
        }
        if std::io::stdin().is_terminal() {
            builder.stdin(Stdio::null());
        }
        let process = builder.spawn().map_err(spawn_error)?;
        let group = process
            .id()
            .and_then(|id| i32::try_from(id).ok())
            .map(Pid::from_raw);
        // Without a pid the process has exited and been reaped already: nothing to signal.
        let (group, group_gone) = match group {
            Some(group) => (group, false),
            None => (Pid::from_raw(0), true),
        };
        Ok(Self {
            process,
            group,
            status: None,
            group_gone,
        })
    }

    /// Sends `signal` to the command's process group, unless it was seen empty. A group
    /// gone meanwhile is not an error: [`wait`](Self::wait) and the probes see it.
    fn signal(&self, signal: Signal) {
        if !self.group_gone {
            let _gone = killpg(self.group, signal);
        }
    }

    /// Passes `signal` on to the command's process group, then SIGCONT (as `timeout(1)`
    /// does): a group stopped (by SIGTTIN, SIGTSTP, SIGSTOP) gets it too.
    pub(crate) fn forward(&self, signal: Signal) {
        self.signal(signal);
        if !matches!(signal, Signal::SIGKILL | Signal::SIGCONT) {
            self.signal(Signal::SIGCONT);
        }
    }

    /// Waits for the command (the group's leader) to exit, passing on to its process group
    /// every signal `signals` receives meanwhile. Cancel-safe.
    ///
    /// # Errors
    /// [`CliError::Os`] if waiting fails.
    pub(crate) async fn wait(&mut self, signals: &mut Signals) -> Result<ExitStatus, CliError> {
        if let Some(status) = self.status {
            return Ok(status);
        }
        loop {
            tokio::select! {
                status = self.process.wait() => {
                    let status = status.map_err(|source| CliError::Os {
                        what: "could not wait for the command",
                        source,
                    })?;
                    self.status = Some(status);
                    return Ok(status);
                }
                signal = signals.recv() => self.forward(signal),
            }
        }
    }

    /// Waits for the command to exit, then ends what is left of its process group (what it
    /// started in the background) as [`stop`](Self::stop) does; returns the command's exit
    /// status and whether anything was left.
    ///
    /// # Errors
    /// [`CliError::Os`] if waiting fails.
    pub(crate) async fn end_group(
        &mut self,
        grace: Duration,
        kill_by: impl Fn() -> Instant,
        signals: &mut Signals,
    ) -> Result<(ExitStatus, bool), CliError> {
        let status = self.wait(signals).await?;
        if self.group_empty() {
            return Ok((status, false));
        }
        self.stop(
            grace,
            kill_by,
            signals,
            "the command exited and left processes in its group",
        )
        .await?;
        Ok((status, true))
    }

    /// Stops the command's whole process group: SIGTERM, then SIGKILL if any process of it
    /// is left after `grace`, or at `kill_by()` if that comes first (at once when it has
    /// passed); returns once none is left, with the command's exit status. `kill_by` is read
    /// again at every wake-up, and checked before anything else then: after a freeze (redlock
    /// stopped, or starved of CPU) the deadline may have passed while the group's end, or a
    /// signal, is also due. `why` is said on stderr, after the signal went out. Signals
    /// received meanwhile are passed on.
    ///
    /// # Errors
    /// [`CliError::Os`] if waiting fails.
    pub(crate) async fn stop(
        &mut self,
        grace: Duration,
        kill_by: impl Fn() -> Instant,
        signals: &mut Signals,
        why: &str,
    ) -> Result<ExitStatus, CliError> {
        self.forward(Signal::SIGTERM);
        let sent = Instant::now();
        say(format_args!(
            "{why}; sent SIGTERM to the command's process group"
        ));
        // `None`: a grace too long to count ends only with `kill_by`.
        let grace_end = sent.checked_add(grace);
        let cut_short = loop {
            let limit = kill_by();
            let kill_at = grace_end.map_or(limit, |end| end.min(limit));
            let now = Instant::now();
            if now >= kill_at {
                break grace_end.is_none_or(|end| limit < end);
            }
            let wake = now
                .checked_add(RECHECK)
                .map_or(kill_at, |at| at.min(kill_at));
            tokio::select! {
                biased;
                () = tokio::time::sleep_until(wake) => {}
                status = self.wait_all(signals, None) => return status,
            }
        };
        self.signal(Signal::SIGKILL);
        if cut_short {
            say(format_args!(
                "the lock's validity is ending; sent SIGKILL to the command's process group {} \
                 after SIGTERM, before the end of the {} grace",
                humantime::format_duration(millis(sent.elapsed())),
                humantime::format_duration(grace)
            ));
        } else {
            say(format_args!(
                "the command's process group was still running {} after SIGTERM; sent SIGKILL",
                humantime::format_duration(grace)
            ));
        }
        self.wait_all(signals, Some(Signal::SIGKILL)).await
    }

    /// Waits for the command, then until no process is left in its group, sending `again`
    /// to the group at each probe. Cancel-safe.
    async fn wait_all(
        &mut self,
        signals: &mut Signals,
        again: Option<Signal>,
    ) -> Result<ExitStatus, CliError> {
        let status = self.wait(signals).await?;
        while !self.group_empty() {
            if let Some(signal) = again {
                self.signal(signal);
            }
            tokio::select! {
                () = tokio::time::sleep(PROBE_EVERY) => {}
                signal = signals.recv() => self.forward(signal),
            }
        }
        Ok(status)
    }

    /// Whether no process is left in the command's group, once the command itself was
    /// waited for: reaps the group's processes that exited (orphans reparented to redlock),
    /// then probes the group (`killpg` with no signal).
    fn group_empty(&mut self) -> bool {
        if self.group_gone {
            return true;
        }
        if self.status.is_none() {
            return false;
        }
        // Only after the leader was waited for by tokio: this reaps any child of redlock in
        // the group, which would take the leader's status from tokio.
        let members = Pid::from_raw(-self.group.as_raw());
        while let Ok(status) = waitpid(members, Some(WaitPidFlag::WNOHANG)) {
            if status == WaitStatus::StillAlive {
                break;
            }
        }
        self.group_gone = killpg(self.group, None) == Err(Errno::ESRCH);
        self.group_gone
    }
}

impl Drop for Child {
    /// Kills the group when it was not seen empty: redlock is leaving early (an error, a
    /// panic), and the lock is about to go.
    fn drop(&mut self) {
        self.signal(Signal::SIGKILL);
    }
}

/// `duration` in whole milliseconds, as said on stderr.
fn millis(duration: Duration) -> Duration {
    Duration::from_millis(u64::try_from(duration.as_millis()).unwrap_or(u64::MAX))
}

/// Makes redlock the reaper of its descendants' orphans (Linux), so that the command's
/// orphaned processes can be waited for (see the module docs).
///
/// # Errors
/// [`CliError::Os`] if the kernel refuses.
fn become_subreaper() -> Result<(), CliError> {
    #[cfg(target_os = "linux")]
    nix::sys::prctl::set_child_subreaper(true).map_err(|errno| CliError::Os {
        what: "could not become the reaper of the command's orphaned processes",
        source: errno.into(),
    })?;
    Ok(())
}

/// The exit code a shell reports for `status`: the command's own, or 128 + the signal that
/// killed it.
pub(crate) fn exit_code(status: ExitStatus) -> u8 {
    match (status.code(), status.signal()) {
        (Some(code), _) => u8::try_from(code).unwrap_or(u8::MAX),
        (None, Some(signo)) => signal_code(signo),
        (None, None) => u8::MAX,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_map_as_a_shell_reports_them() {
        // Raw wait statuses: exit code in the high byte, the signal in the low bits.
        assert_eq!(exit_code(ExitStatus::from_raw(3 << 8)), 3);
        assert_eq!(exit_code(ExitStatus::from_raw(0)), 0);
        assert_eq!(exit_code(ExitStatus::from_raw(Signal::SIGKILL as i32)), 137);
        assert_eq!(exit_code(ExitStatus::from_raw(Signal::SIGTERM as i32)), 143);
    }

    /// A child dropped before its group was seen empty (redlock leaving on an error or a
    /// panic) kills the whole group: the command and what it started in the background.
    #[test]
    fn a_dropped_child_kills_its_group() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime");
        let group = runtime.block_on(async {
            let command = ["sh", "-c", "sleep 30 & sleep 30"].map(OsString::from);
            let child = Child::spawn(&command, None).expect("sh starts");
            let group = child.group;
            drop(child);
            group
        });
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        loop {
            // The test process is the subreaper: reap the group's processes as they die.
            while let Ok(status) =
                waitpid(Pid::from_raw(-group.as_raw()), Some(WaitPidFlag::WNOHANG))
            {
                if status == WaitStatus::StillAlive {
                    break;
                }
            }
            if killpg(group, None) == Err(Errno::ESRCH) {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the dropped child's group still runs"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}
