//! Exit codes, and the errors that end `redlock` with one of them.
//!
//! The codes are sysexits(3)'s where one fits (from the `sysexits` crate), the shell's for a
//! command that cannot run or was killed by a signal, 79 (right after sysexits' range) for a
//! lost lock, 80 for a detached lock found gone, and Rust's 101 for a panic (a bug: the command's process group is killed as
//! redlock unwinds).

use std::io;
use std::path::PathBuf;
use std::time::Duration;

use redlock_core::{BuildError, LockError, LostReason};
use sysexits::ExitCode as Sysexit;

/// Bad usage or configuration (sysexits `EX_USAGE`): arguments, durations, node URLs, no
/// nodes, nodes that are not independent masters.
pub(crate) const USAGE: u8 = Sysexit::Usage as u8;
/// Redis unavailable (sysexits `EX_UNAVAILABLE`): fewer than a quorum of nodes reachable or
/// answering, or a split vote that nobody won (unlike busy, nobody runs the command).
pub(crate) const UNAVAILABLE: u8 = Sysexit::Unavailable as u8;
/// Internal error (sysexits `EX_SOFTWARE`).
pub(crate) const SOFTWARE: u8 = Sysexit::Software as u8;
/// An operating system error (sysexits `EX_OSERR`): a signal handler or the runtime could not
/// be set up, waiting for the command failed, no entropy for a token.
pub(crate) const OS_ERROR: u8 = Sysexit::OsErr as u8;
/// The resource is busy (sysexits `EX_TEMPFAIL`: try again later); the command did not run.
pub(crate) const BUSY: u8 = Sysexit::TempFail as u8;
/// The lock was lost while the command ran (the command was stopped), or found gone when it
/// was released after the command exited.
pub(crate) const LOST: u8 = 79;
/// A detached lock's file is not a detached lock (sysexits `EX_DATAERR`): not JSON, or not
/// what `redlock hold` writes.
pub(crate) const DATA_ERROR: u8 = Sysexit::DataErr as u8;
/// A detached lock's file cannot be read (sysexits `EX_NOINPUT`).
pub(crate) const NO_INPUT: u8 = Sysexit::NoInput as u8;
/// `redlock hold --out FILE` cannot write the file (sysexits `EX_CANTCREAT`).
pub(crate) const CANNOT_CREATE: u8 = Sysexit::CantCreat as u8;
/// A detached lock is gone (expired, released, or resumed already) when resumed or released
/// (80, after [`LOST`]): nothing ran.
pub(crate) const GONE: u8 = 80;
/// The command was found but could not be run (as shells and `timeout(1)` answer).
pub(crate) const CANNOT_EXECUTE: u8 = 126;
/// The command was not found (as shells and `timeout(1)` answer).
pub(crate) const NOT_FOUND: u8 = 127;

/// The exit codes, as `--help` shows them (the README's table says the same).
pub(crate) const EXIT_CODES_HELP: &str = "\
Exit codes of `redlock run`:
  the command's own   the command ran and exited (128 + N if killed by signal N)
  64                  bad usage or configuration (arguments, durations, a --grace that does
                      not fit in the --ttl, node URLs, no nodes)
  69                  Redis unavailable: fewer than a quorum of nodes reachable; or a split
                      vote nobody won (contenders at the same moment, none with a quorum,
                      after the attempts made after a split): nobody ran the command
  70                  internal error (an unexpected error from the lock)
  71                  operating system error (signal handlers, the runtime, waiting for the
                      command, no entropy for a token)
  75                  busy: another holder kept the resource for the whole --wait
  79                  the lock was lost while the command ran; the command's process group was
                      stopped (SIGTERM, then SIGKILL after --grace); or the lock was found gone
                      when released after the command exited (it may have overlapped another
                      holder)
  80                  --resume: the detached lock is gone (expired, released, or resumed
                      already); the command did not run
  65, 66              --resume: the file is not a detached lock (65), or cannot be read (66)
  101                 a panic in redlock (a bug); the command's process group was killed
  126, 127            the command could not be run, or was not found
  128 + N             redlock itself got signal N while waiting for the lock
`redlock status`, `redlock locks` and `redlock release --force` exit 0 once a quorum of nodes
answered (held or not; for `locks`, were scanned), 69 if fewer did (after printing what they
read), 71 if their output cannot be written, 64 for bad usage.
`redlock hold` exits 0 once the detached lock is written, 75 busy, 69 unavailable, 73 if --out
cannot be written, 71 if stdout cannot (the lock is then released).
`redlock release --detached` exits 0 once released, 80 if the lock was gone already, 69 if
fewer than a quorum answered, 65 or 66 for a file that is not a detached lock or cannot be
read.";

/// Why `redlock` stopped without a status of the command's own.
#[derive(Debug, thiserror::Error)]
pub(crate) enum CliError {
    /// The handle could not be built: bad node list (usage), or too few nodes reachable.
    #[error(transparent)]
    Build(BuildError),
    /// The lock could not be taken.
    #[error(transparent)]
    Lock(LockError),
    /// The lock was lost while the command ran; the command was stopped.
    #[error("the lock on `{resource}` was lost: {reason}; the command was stopped")]
    Lost {
        /// The resource.
        resource: String,
        /// Why.
        reason: LostReason,
    },
    /// The lock was found gone when released after the command exited: it expired or was
    /// taken over while the command ran, which may then have overlapped another holder.
    #[error(
        "the lock on `{resource}` was found gone when it was released after the command exited \
         (exit code {code}): it expired or was taken over while the command ran, which may have \
         overlapped another holder"
    )]
    GoneAtRelease {
        /// The resource.
        resource: String,
        /// The command's exit code.
        code: u8,
    },
    /// `--grace` does not fit in `--ttl`: the command could not be killed before the lock's
    /// validity ends while leaving time to extend the lock.
    #[error(
        "--grace {} does not fit in --ttl {}: without a confirmed extension the command gets SIGTERM \
         --grace before the lock's validity ends (plus a margin), and the lock is extended every \
         third of the ttl; {}",
        humantime::format_duration(*grace),
        humantime::format_duration(*ttl),
        fits_with(*min_ttl),
    )]
    GraceTooLong {
        /// `--grace`.
        grace: Duration,
        /// `--ttl`.
        ttl: Duration,
        /// The shortest ttl that fits this grace, if any does.
        min_ttl: Option<Duration>,
    },
    /// The command could not be started.
    #[error("could not run `{program}`")]
    Spawn {
        /// The program, as given.
        program: String,
        /// What the OS said.
        #[source]
        source: io::Error,
    },
    /// An OS facility failed: signal handlers, the runtime, waiting for the command.
    #[error("{what}")]
    Os {
        /// What failed.
        what: &'static str,
        /// What the OS said.
        #[source]
        source: io::Error,
    },
    /// Signal `signal` arrived while waiting for the lock; nothing was run.
    #[error("stopped by {signal} while waiting for the lock; the command did not run")]
    Interrupted {
        /// The signal.
        signal: nix::sys::signal::Signal,
    },
    /// A detached lock's file could not be read.
    #[error("could not read the detached lock in {}", path.display())]
    DetachedUnreadable {
        /// The file.
        path: PathBuf,
        /// What the OS said.
        #[source]
        source: io::Error,
    },
    /// A detached lock's file is not what `redlock hold` writes.
    #[error("{} does not hold a detached lock (as `redlock hold` writes it)", path.display())]
    DetachedInvalid {
        /// The file.
        path: PathBuf,
        /// What the JSON parser said (never the file's text).
        #[source]
        source: serde_json::Error,
    },
    /// The detached lock is gone: it expired, was released, or was resumed already.
    #[error(
        "the detached lock on `{resource}` could not be {action}: it is gone (expired, released, \
         or resumed already)"
    )]
    DetachedGone {
        /// The resource.
        resource: String,
        /// `resumed` or `released`.
        action: &'static str,
        /// The lock's error, when there is one.
        #[source]
        source: Option<LockError>,
    },
    /// `redlock hold --out FILE` could not write the file; the lock was released.
    #[error("could not write the detached lock to {}; the lock was released", path.display())]
    CannotWrite {
        /// The file.
        path: PathBuf,
        /// What the OS said.
        #[source]
        source: io::Error,
    },
    /// Fewer than a quorum of nodes answered a status read.
    #[error("only {answered} of {nodes} nodes answered, {quorum} needed to tell")]
    TooFewAnswered {
        /// Nodes that answered.
        answered: usize,
        /// Nodes in all.
        nodes: usize,
        /// The quorum.
        quorum: usize,
    },
}

impl CliError {
    /// The process exit code for this error.
    pub(crate) fn exit_code(&self) -> u8 {
        match self {
            CliError::Build(BuildError::TooFewReachable { .. }) => UNAVAILABLE,
            CliError::Build(_) => USAGE,
            CliError::Lock(error) => lock_code(error),
            CliError::Lost { .. } | CliError::GoneAtRelease { .. } => LOST,
            CliError::GraceTooLong { .. } => USAGE,
            CliError::Spawn { source, .. } if source.kind() == io::ErrorKind::NotFound => NOT_FOUND,
            CliError::Spawn { .. } => CANNOT_EXECUTE,
            CliError::Os { .. } => OS_ERROR,
            CliError::Interrupted { signal } => signal_code(*signal as i32),
            CliError::TooFewAnswered { .. } => UNAVAILABLE,
            CliError::DetachedUnreadable { .. } => NO_INPUT,
            CliError::DetachedInvalid { .. } => DATA_ERROR,
            CliError::DetachedGone { .. } => GONE,
            CliError::CannotWrite { .. } => CANNOT_CREATE,
        }
    }

    /// The error, then each source the text so far does not already say, `: `-separated:
    /// the line `redlock` prints before exiting.
    pub(crate) fn with_sources(&self) -> String {
        let mut text = self.to_string();
        let mut source = std::error::Error::source(self);
        while let Some(cause) = source {
            let said = cause.to_string();
            if !text.contains(&said) {
                text = format!("{text}: {said}");
            }
            source = cause.source();
        }
        text
    }
}

/// The advice of [`CliError::GraceTooLong`].
fn fits_with(min_ttl: Option<Duration>) -> String {
    match min_ttl {
        Some(ttl) => format!(
            "give a --ttl of at least {} or a shorter --grace",
            humantime::format_duration(ttl)
        ),
        None => "give a shorter --grace".to_owned(),
    }
}

/// The exit code for a lock that could not be taken.
fn lock_code(error: &LockError) -> u8 {
    if error.is_busy() {
        BUSY
    } else if error.is_unavailable() || matches!(error, LockError::SplitVote { .. }) {
        UNAVAILABLE
    } else {
        match error {
            LockError::Invalid(_) => USAGE,
            LockError::Entropy(_) => OS_ERROR,
            _ => SOFTWARE,
        }
    }
}

/// A shell's code for a process killed by signal `signo`: 128 + `signo`.
pub(crate) fn signal_code(signo: i32) -> u8 {
    u8::try_from(128 + signo).unwrap_or(u8::MAX)
}
