//! `redlock run`: take the lock (auto-extended, fenced if asked), run the command, stop it if
//! the lock is lost, release the lock once it exited.

use std::future::IntoFuture;
use std::time::{Duration, Instant};

use redlock_core::{DEFAULT_NODE_TIMEOUT, LockError, LockGuard, LockOptions, LostReason, Redlock};

use crate::args::RunArgs;
use crate::child::{Child, exit_code};
use crate::connect::{builder, connect};
use crate::exit::CliError;
use crate::signals::Signals;

/// Runs `args.command` under the lock on `args.resource`; returns the command's exit code.
///
/// # Errors
/// Every [`CliError`] but [`CliError::TooFewAnswered`]; [`CliError::Lost`] after the command
/// was stopped.
pub(crate) async fn run(args: RunArgs) -> Result<u8, CliError> {
    let options = LockOptions::default()
        .ttl(args.ttl)
        .wait_timeout(args.wait)
        .auto_extend(true)
        .fencing(args.fencing_env.is_some());
    options
        .validate()
        .map_err(|e| CliError::Lock(LockError::Invalid(e)))?;
    let builder = builder(&args.nodes);
    // Caught from before connecting: a SIGTERM while waiting for the lock ends the wait.
    let mut signals = Signals::catch()?;
    let redlock = tokio::select! {
        redlock = connect(builder) => redlock?,
        signal = signals.recv() => return Err(CliError::Interrupted { signal }),
    };
    let acquired = tokio::select! {
        guard = redlock.lock_with(&args.resource, &options) => guard.map_err(CliError::Lock),
        signal = signals.recv() => Err(CliError::Interrupted { signal }),
    };
    let guard = match acquired {
        Ok(guard) => guard,
        Err(error) => {
            // An attempt cut short cleans up in the background (tracked by the handle): let
            // it finish before the process exits.
            redlock.shutdown(LINGER).await;
            return Err(error);
        }
    };
    let env = args
        .fencing_env
        .as_deref()
        .zip(guard.fencing_token())
        .map(|(name, token)| (name, token.to_string()));
    let outcome = match Child::spawn(&args.command, env) {
        Ok(mut child) => supervise(&mut child, &guard, &args, &mut signals).await,
        Err(error) => Err(error),
    };
    let held = !matches!(outcome, Err(CliError::Lost { .. }));
    release(&redlock, guard, held).await;
    outcome
}

/// Waits for the command while the lock holds; stops it if the lock is lost first (the lost
/// signal wins a tie: the command may have overlapped the next holder).
async fn supervise(
    child: &mut Child,
    guard: &LockGuard,
    args: &RunArgs,
    signals: &mut Signals,
) -> Result<u8, CliError> {
    let mut lost = guard.lost().into_future();
    tokio::select! {
        biased;
        () = &mut lost => {}
        status = child.wait(signals) => return status.map(exit_code),
    }
    eprintln!("redlock: the lock was lost; sending SIGTERM to the command");
    let status = child.stop(args.grace, signals).await?;
    eprintln!(
        "redlock: the command was stopped (exit code {})",
        exit_code(status)
    );
    Err(CliError::Lost {
        resource: args.resource.clone(),
        reason: guard.lost().reason().unwrap_or(LostReason::Expired),
    })
}

/// Releases the lock, then waits for the nodes the release did not wait for
/// ([`settle`]); a failure is reported (the keys then expire with their ttl) when the lock
/// was still expected to be held, not after a loss.
async fn release(redlock: &Redlock, guard: LockGuard, held: bool) {
    let resource = guard.resource().to_owned();
    match guard.release().await {
        Ok(released) if released.answered < released.nodes => settle(redlock, &resource).await,
        Ok(_) | Err(LockError::Lost { .. }) => {}
        Err(error) if held => eprintln!("redlock: warning: {error}"),
        Err(_) => {}
    }
}

/// The longest wait, before exiting, for the release commands a release decided at quorum
/// did not await (and for an interrupted attempt's clean-up). They are issued already, but by
/// tasks of this process: exiting at once would drop any not yet written, leaving the key on
/// that node until its ttl. Five node timeouts: a few reads of a loaded node.
const LINGER: Duration = DEFAULT_NODE_TIMEOUT.saturating_mul(5);

/// Waits, at most [`LINGER`], until every node answers that it holds nothing for `resource`:
/// the release commands still in flight have landed. A new holder (a waiter the key was
/// handed to) or a node that does not answer makes it wait the whole [`LINGER`].
async fn settle(redlock: &Redlock, resource: &str) {
    let deadline = Instant::now() + LINGER;
    while Instant::now() < deadline {
        match redlock.inspect(resource).await {
            Ok(status) if status.held_on() == 0 && status.answered() == status.nodes.len() => {
                return;
            }
            Ok(_) => {}
            Err(_) => return,
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}
