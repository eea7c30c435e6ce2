//! The signals `redlock run` catches instead of dying or stopping.
//!
//! SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2: while waiting for the lock they end
//! the wait; while the command runs they are passed on to its process group (then SIGCONT,
//! as `timeout(1)` does, so that a stopped command gets them too).
//!
//! SIGTSTP (Ctrl-Z) is ignored, with a line on stderr: a stopped redlock could not extend the
//! lock while the command, in a process group of its own, went on running; stopping the
//! command with it would keep the lock held by a command that does nothing. For the same
//! reason SIGTTOU is blocked: a redlock run as a background job writes its lines to a
//! terminal set to `tostop` instead of being stopped. SIGKILL and SIGSTOP cannot be caught:
//! a redlock killed with SIGKILL leaves the command running without the lock (see the
//! README, "Command line").

use std::future::poll_fn;
use std::task::Poll;

use nix::sys::signal::{SigSet, Signal};
use tokio::signal::unix::{SignalKind, signal};

use crate::exit::CliError;
use crate::say::say;

/// The signals passed on to the command (or ending the wait for the lock).
const PASSED_ON: [Signal; 6] = [
    Signal::SIGTERM,
    Signal::SIGINT,
    Signal::SIGHUP,
    Signal::SIGQUIT,
    Signal::SIGUSR1,
    Signal::SIGUSR2,
];

/// The caught signals, as streams.
#[derive(Debug)]
pub(crate) struct Signals {
    /// Those in [`PASSED_ON`], then SIGTSTP.
    streams: Vec<(Signal, tokio::signal::unix::Signal)>,
}

impl Signals {
    /// Catches the signals from now on (inside a tokio runtime).
    ///
    /// # Errors
    /// [`CliError::Os`] when a handler cannot be installed.
    pub(crate) fn catch() -> Result<Self, CliError> {
        let streams = PASSED_ON
            .into_iter()
            .chain([Signal::SIGTSTP])
            .map(|caught| {
                signal(SignalKind::from_raw(caught as i32))
                    .map(|stream| (caught, stream))
                    .map_err(|source| CliError::Os {
                        what: "could not catch signals",
                        source,
                    })
            })
            .collect::<Result<_, _>>()?;
        Ok(Self { streams })
    }

    /// The next caught signal to pass on (one of [`PASSED_ON`]); a SIGTSTP received
    /// meanwhile is ignored with a line on stderr. Cancel-safe.
    pub(crate) async fn recv(&mut self) -> Signal {
        loop {
            let caught = poll_fn(|cx| {
                for (caught, stream) in &mut self.streams {
                    if let Poll::Ready(Some(())) = stream.poll_recv(cx) {
                        return Poll::Ready(*caught);
                    }
                }
                Poll::Pending
            })
            .await;
            if caught != Signal::SIGTSTP {
                return caught;
            }
            say(format_args!(
                "SIGTSTP ignored: a stopped redlock could not keep the lock while the command \
                 runs; stop it with Ctrl-C (SIGINT) or SIGTERM"
            ));
        }
    }
}

/// Blocks SIGTTOU in the calling thread, and so in the threads it starts afterwards (call it
/// before the runtime's): a background redlock then writes to a terminal set to `tostop`
/// instead of being stopped. The command does not inherit the mask: the standard library
/// clears it in the child before `exec`.
///
/// # Errors
/// [`CliError::Os`] if the mask cannot be changed.
pub(crate) fn write_from_the_background() -> Result<(), CliError> {
    let mut blocked = SigSet::empty();
    blocked.add(Signal::SIGTTOU);
    blocked.thread_block().map_err(|errno| CliError::Os {
        what: "could not block SIGTTOU",
        source: errno.into(),
    })
}
