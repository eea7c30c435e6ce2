//! The command run under the lock: started in a process group of its own, signalled as a
//! group (so that what it started stops with it), waited for while the signals redlock gets
//! are passed on, and its exit status as a shell reports it.

use std::ffi::OsString;
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::time::Duration;

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;

use crate::exit::{CliError, signal_code};
use crate::signals::Signals;

/// A running command and its process group.
#[derive(Debug)]
pub(crate) struct Child {
    process: tokio::process::Child,
    /// Its process group: the command's own pid (it leads a new group).
    group: Pid,
}

impl Child {
    /// Starts `command` (program, then arguments) with `env` added to the environment, in a
    /// new process group, with redlock's standard input, output and error.
    ///
    /// # Errors
    /// [`CliError::Spawn`] when it cannot be started (not found, not executable).
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
        let mut builder = tokio::process::Command::new(program);
        builder.args(args).process_group(0);
        if let Some((name, value)) = env {
            builder.env(name, value);
        }
        let process = builder.spawn().map_err(spawn_error)?;
        let pid = process
            .id()
            .and_then(|id| i32::try_from(id).ok())
            .ok_or_else(|| spawn_error(std::io::ErrorKind::Other.into()))?;
        Ok(Self {
            process,
            group: Pid::from_raw(pid),
        })
    }

    /// Sends `signal` to the command's process group. A group already gone is not an error:
    /// the command is then exiting, and [`wait`](Self::wait) sees it.
    pub(crate) fn signal(&self, signal: Signal) {
        let _gone = killpg(self.group, signal);
    }

    /// Waits for the command to exit, passing on to its process group every signal
    /// `signals` receives meanwhile. Cancel-safe.
    ///
    /// # Errors
    /// [`CliError::Os`] if waiting fails.
    pub(crate) async fn wait(&mut self, signals: &mut Signals) -> Result<ExitStatus, CliError> {
        loop {
            tokio::select! {
                status = self.process.wait() => {
                    return status.map_err(|source| CliError::Os {
                        what: "could not wait for the command",
                        source,
                    });
                }
                signal = signals.recv() => self.signal(signal),
            }
        }
    }

    /// Stops the command: SIGTERM to its process group, then SIGKILL if it has not exited
    /// within `grace`; returns its exit status. Signals received meanwhile are passed on.
    ///
    /// # Errors
    /// [`CliError::Os`] if waiting fails.
    pub(crate) async fn stop(
        &mut self,
        grace: Duration,
        signals: &mut Signals,
    ) -> Result<ExitStatus, CliError> {
        self.signal(Signal::SIGTERM);
        if let Ok(status) = tokio::time::timeout(grace, self.wait(signals)).await {
            return status;
        }
        eprintln!(
            "redlock: the command did not exit within {} of SIGTERM; sending SIGKILL",
            humantime::format_duration(grace)
        );
        self.signal(Signal::SIGKILL);
        self.wait(signals).await
    }
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
}
