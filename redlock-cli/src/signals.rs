//! The signals `redlock run` catches instead of dying: SIGTERM, SIGINT and SIGHUP. While
//! waiting for the lock they end the wait; while the command runs they are passed on to it.

use nix::sys::signal::Signal;
use tokio::signal::unix::{SignalKind, signal};

use crate::exit::CliError;

/// The caught signals, as streams.
#[derive(Debug)]
pub(crate) struct Signals {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
    hup: tokio::signal::unix::Signal,
}

impl Signals {
    /// Catches the signals from now on (inside a tokio runtime).
    ///
    /// # Errors
    /// [`CliError::Os`] when a handler cannot be installed.
    pub(crate) fn catch() -> Result<Self, CliError> {
        let on = |kind| {
            signal(kind).map_err(|source| CliError::Os {
                what: "could not catch signals",
                source,
            })
        };
        Ok(Self {
            term: on(SignalKind::terminate())?,
            int: on(SignalKind::interrupt())?,
            hup: on(SignalKind::hangup())?,
        })
    }

    /// The next caught signal. Cancel-safe.
    pub(crate) async fn recv(&mut self) -> Signal {
        tokio::select! {
            Some(()) = self.term.recv() => Signal::SIGTERM,
            Some(()) = self.int.recv() => Signal::SIGINT,
            Some(()) = self.hup.recv() => Signal::SIGHUP,
            else => std::future::pending().await,
        }
    }
}
