//! `redlock hold RESOURCE`: take the lock, detach it
//! ([`LockGuard::detach`](redlock_core::LockGuard::detach)) and print it as JSON (or write it
//! to `--out FILE`, mode 0600): the one place a token leaves redlock. The lock then lives
//! until its ttl unless `redlock run --resume` takes it up.

use redlock_core::{LockError, LockOptions, Redlock};

use crate::args::HoldArgs;
use crate::connect::{builder, connect};
use crate::detached;
use crate::exit::CliError;
use crate::print::print;
use crate::run::LINGER;
use crate::signals::Signals;

/// Takes the lock on `args.resource`, detaches it and hands it out; returns 0.
///
/// # Errors
/// [`CliError::Build`], [`CliError::Lock`] (busy, unavailable, bad ttl) and
/// [`CliError::Interrupted`] as `redlock run` has them, before anything is held;
/// [`CliError::CannotWrite`] (`--out`) or [`CliError::Os`] (stdout) when the detached lock
/// cannot be handed out: it is then released.
pub(crate) async fn hold(args: HoldArgs) -> Result<u8, CliError> {
    let options = LockOptions::default().ttl(args.ttl).wait_timeout(args.wait);
    options
        .validate()
        .map_err(|e| CliError::Lock(LockError::Invalid(e)))?;
    // Caught from before connecting: a SIGTERM while waiting for the lock ends the wait.
    let mut signals = Signals::catch()?;
    let redlock = tokio::select! {
        redlock = connect(builder(&args.nodes)) => redlock?,
        signal = signals.recv() => return Err(CliError::Interrupted { signal }),
    };
    let acquired = tokio::select! {
        guard = redlock.lock_with(&args.resource, &options) => guard.map_err(CliError::Lock),
        signal = signals.recv() => Err(CliError::Interrupted { signal }),
    };
    let handed = match acquired {
        Ok(guard) => hand_out(&redlock, guard.detach().map_err(CliError::Lock), &args).await,
        Err(error) => Err(error),
    };
    // An attempt cut short cleans up in the background: let it finish. The detached lock is
    // out of the handle's hands: shutting down does not release it.
    redlock.shutdown(LINGER).await;
    handed.map(|()| 0)
}

/// Writes `detached` to `--out` or stdout; releases it when that fails, so that nobody is
/// left holding a lock no one can resume.
async fn hand_out(
    redlock: &Redlock,
    detached: Result<redlock_core::DetachedLock, CliError>,
    args: &HoldArgs,
) -> Result<(), CliError> {
    let detached = detached?;
    let written = detached::to_json(&detached).and_then(|json| match &args.out {
        Some(path) => detached::write(path, &json),
        None => print(&json, "could not write the detached lock; it was released"),
    });
    if written.is_err() {
        // Best effort: if it is not confirmed, the keys expire with their ttl.
        let _released = redlock.release_detached(detached).await;
    }
    written
}
