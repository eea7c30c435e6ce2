//! `redlock run`: take the lock (auto-extended, fenced if asked), or with `--resume` take up a
//! detached one, run the command, stop its process group if the lock is lost, and release the
//! lock once nothing of the group is left.

use std::future::IntoFuture;
use std::time::Duration;
use tokio::time::Instant;

use redlock_core::{
    DEFAULT_NODE_TIMEOUT, InvalidInput, LockError, LockGuard, LockOptions, LostReason, MAX_TTL,
    Redlock,
};

use crate::args::RunArgs;
use crate::child::{Child, exit_code};
use crate::connect::{builder, connect};
use crate::detached;
use crate::exit::CliError;
use crate::say::say;
use crate::signals::Signals;

/// Runs `args.command` under the lock on `args.resource` (or the detached lock in
/// `args.resume`); returns the command's exit code.
///
/// # Errors
/// Every [`CliError`] but [`CliError::TooFewAnswered`] and [`CliError::CannotWrite`];
/// [`CliError::DetachedGone`] for a detached lock gone before it was resumed (nothing ran);
/// [`CliError::Lost`] after the
/// command's group was stopped; [`CliError::GoneAtRelease`] when the release found the lock
/// gone.
pub(crate) async fn run(args: RunArgs) -> Result<u8, CliError> {
    let mut args = args;
    // --resume: the detached lock, read before anything is sent; its resource and ttl are
    // the lock's (the acquisition's flags conflict with it).
    let detached = args.resume.as_deref().map(detached::read).transpose()?;
    if let Some(detached) = &detached {
        args.resource = Some(detached.resource().to_owned());
        args.ttl = detached.ttl();
    }
    let resource = args.resource.clone().unwrap_or_default();
    let options = lock_options(&args)?;
    let builder = builder(&args.nodes);
    // Caught from before connecting: a SIGTERM while waiting for the lock ends the wait.
    let mut signals = Signals::catch()?;
    let redlock = tokio::select! {
        redlock = connect(builder) => redlock?,
        signal = signals.recv() => return Err(CliError::Interrupted { signal }),
    };
    // With --resume, the detached lock taken up; with --permits, one permit of the
    // resource's semaphore instead of its lock.
    let acquire = async {
        match (&detached, args.permits, args.mode) {
            (Some(detached), _, _) => redlock
                .resume_with(detached, &options)
                .await
                .map_err(|error| resume_error(&resource, error)),
            // Refused by the arguments already (`--permits` conflicts with `--mode`).
            (None, Some(_), Some(_)) => Err(CliError::Lock(LockError::Invalid(
                InvalidInput::PermitsWith { option: "mode" },
            ))),
            (None, Some(permits), None) => {
                let semaphore = redlock.semaphore(resource.as_str(), permits);
                semaphore
                    .acquire_with(&options)
                    .await
                    .map_err(CliError::Lock)
            }
            (None, None, Some(mode)) => redlock
                .lock_mode_with(resource.as_str(), mode, &options)
                .await
                .map_err(CliError::Lock),
            (None, None, None) => redlock
                .lock_with(&resource, &options)
                .await
                .map_err(CliError::Lock),
        }
    };
    let acquired = tokio::select! {
        guard = acquire => guard,
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
    // The child is dropped (its group killed if anything of it is left) before the release.
    let outcome = match Child::spawn(&args.command, env) {
        Ok(mut child) => supervise(&mut child, &guard, &args, &mut signals).await,
        Err(error) => Err(error),
    };
    let held = !matches!(outcome, Err(CliError::Lost { .. }));
    let still_held = release(&redlock, guard, held).await;
    match outcome {
        Ok(code) if !still_held => Err(CliError::GoneAtRelease { resource, code }),
        outcome => outcome,
    }
}

/// A resumption's error: [`CliError::DetachedGone`] when the detached lock no longer holds a
/// quorum (expired, released, resumed already) or has too little time left to be valid;
/// otherwise the lock's error as an acquisition's.
fn resume_error(resource: &str, error: LockError) -> CliError {
    match error {
        LockError::Lost { .. } | LockError::NoValidity { .. } => CliError::DetachedGone {
            resource: resource.to_owned(),
            action: "resumed",
            source: Some(error),
        },
        error => CliError::Lock(error),
    }
}

/// The lock's options: the ttl, the wait, auto-extension, fencing if asked, and a lost margin
/// of `--grace` plus the default margin, so that a command that ignores SIGTERM is killed
/// before the lock's validity ends.
///
/// # Errors
/// [`CliError::GraceTooLong`] when the grace does not fit in the ttl, with the shortest ttl
/// that fits; [`CliError::Lock`] (usage) for a ttl that is bad on its own.
fn lock_options(args: &RunArgs) -> Result<LockOptions, CliError> {
    let plain = plain_options(args);
    plain
        .validate()
        .map_err(|e| CliError::Lock(LockError::Invalid(e)))?;
    let options = with_grace(plain, args.grace);
    match options.validate() {
        Ok(()) => Ok(options),
        Err(InvalidInput::LostMargin { .. } | InvalidInput::ExtendFraction { .. }) => {
            Err(CliError::GraceTooLong {
                grace: args.grace,
                ttl: args.ttl,
                min_ttl: min_ttl(args.grace).map(round_up),
            })
        }
        Err(error) => Err(CliError::Lock(LockError::Invalid(error))),
    }
}

/// The lock's options before the grace is added: the ttl, the wait, auto-extension, fencing,
/// and a minimum hold if asked (the lock's validation refuses what does not go together; the
/// mode and the permits are entry points, in `run`).
fn plain_options(args: &RunArgs) -> LockOptions {
    let mut options = LockOptions::default()
        .ttl(args.ttl)
        .wait_timeout(args.wait)
        .auto_extend(true)
        .fencing(args.fencing_env.is_some());
    if let Some(at_least) = args.lock_at_least_for {
        options = options.lock_at_least_for(at_least);
    }
    options
}

/// The default lost margin of the lock (`min(ttl / 10, 1 s)`): the time left, between SIGKILL
/// going out and the lock's validity ending, for the group to die.
fn default_margin(args: &RunArgs) -> Duration {
    plain_options(args).lost_margin_in_effect()
}

/// `options` with a lost margin of `grace` plus their default margin (`min(ttl / 10, 1 s)`,
/// the time between the lost signal and SIGKILL actually going out): with no extension
/// confirmed, SIGTERM goes out `grace` + that margin before the validity ends, and SIGKILL
/// `grace` later, still before it ends.
fn with_grace(options: LockOptions, grace: Duration) -> LockOptions {
    let margin = grace.saturating_add(options.lost_margin_in_effect());
    options.lost_margin(margin)
}

/// The shortest ttl (whole milliseconds, at most [`MAX_TTL`]) that `grace` fits in, by
/// bisection over the lock's own validation (which only gets easier as the ttl grows).
fn min_ttl(grace: Duration) -> Option<Duration> {
    let fits = |millis: u64| {
        with_grace(
            LockOptions::default()
                .ttl(Duration::from_millis(millis))
                .auto_extend(true),
            grace,
        )
        .validate()
        .is_ok()
    };
    let mut high = u64::try_from(MAX_TTL.as_millis()).unwrap_or(u64::MAX);
    if !fits(high) {
        return None;
    }
    let mut low = 0; // does not fit
    while high - low > 1 {
        let middle = low + (high - low) / 2;
        if fits(middle) {
            high = middle;
        } else {
            low = middle;
        }
    }
    Some(Duration::from_millis(high))
}

/// `ttl` rounded up to a tenth of a second (at most [`MAX_TTL`]), as advice reads best.
fn round_up(ttl: Duration) -> Duration {
    let tenths = ttl.as_millis().div_ceil(100);
    Duration::from_millis(u64::try_from(tenths * 100).unwrap_or(u64::MAX)).min(MAX_TTL)
}

/// Waits for the command while the lock holds, then ends what is left of its process group;
/// stops the whole group if the lock is lost first (the lost signal wins a tie: the command
/// may have overlapped the next holder), or while what the command left is being stopped.
///
/// A group being stopped gets SIGKILL `--grace` after SIGTERM, or when the lock's validity
/// less the default margin ends ([`kill_by`]) if that comes first: a loss seen late (redlock
/// frozen, or starved of CPU, past its lost deadline) leaves less than the grace before the
/// next holder may get in, or none.
async fn supervise(
    child: &mut Child,
    guard: &LockGuard,
    args: &RunArgs,
    signals: &mut Signals,
) -> Result<u8, CliError> {
    let (info, signal) = (guard.info(), guard.lost());
    let margin = default_margin(args);
    let lost_margin = with_grace(plain_options(args), args.grace).lost_margin_in_effect();
    // Until when the nodes keep the key. A lock lost by its lost deadline (or not lost) is
    // kept until the validity they gave, which the views stop reporting once the signal
    // fired: the lost deadline plus the margin. A refused or released one ends where the
    // views say (when it was seen): another holder may have it now.
    let validity = move || match signal.reason() {
        None | Some(LostReason::Expired) => signal
            .deadline()
            .checked_add(lost_margin)
            .unwrap_or_else(|| info.valid_until()),
        Some(_) => info.valid_until(),
    };
    let deadline = || kill_by(validity(), margin);
    let mut lost = guard.lost().into_future();
    let exited = tokio::select! {
        biased;
        () = &mut lost => false,
        status = child.wait(signals) => status.map(|_| true)?,
    };
    if exited {
        let (status, left_over) = child.end_group(args.grace, deadline, signals).await?;
        if !(left_over && guard.lost().is_lost()) {
            return Ok(exit_code(status));
        }
    } else {
        let status = child
            .stop(args.grace, deadline, signals, "the lock was lost")
            .await?;
        say(format_args!(
            "the command was stopped (exit code {})",
            exit_code(status)
        ));
    }
    Err(CliError::Lost {
        resource: guard.resource().to_owned(),
        reason: guard.lost().reason().unwrap_or(LostReason::Expired),
    })
}

/// The latest instant the command's process group may run, for a lock valid until
/// `valid_until` (the lease's monotonic deadline, which keeps counting while redlock is
/// stopped): `margin` before it, the time SIGKILL takes to go out and the group to die. Now,
/// for a deadline too close to the clock's origin to count back from.
fn kill_by(valid_until: Instant, margin: Duration) -> Instant {
    valid_until.checked_sub(margin).unwrap_or_else(Instant::now)
}

/// Releases the lock, then waits for the nodes the release did not wait for
/// (`Redlock::shutdown`: every node has answered every command sent to it); a
/// failure is reported (the keys then expire with their ttl) when the lock was still
/// expected to be held, not after a loss. Returns `false` when the release found the lock
/// held by fewer than a quorum (expired or taken over), `true` otherwise (an unconfirmed
/// release tells nothing).
async fn release(redlock: &Redlock, guard: LockGuard, held: bool) -> bool {
    match guard.release().await {
        Ok(released) => {
            redlock.shutdown(LINGER).await;
            released.was_held()
        }
        Err(LockError::Lost { .. }) => false,
        Err(error) => {
            if held {
                say(format_args!("warning: {error}"));
            }
            true
        }
    }
}

/// The longest wait, before exiting, for the release commands a release decided at quorum
/// did not await (and for an interrupted attempt's clean-up): `Redlock::shutdown` waits until
/// every node answered what was sent to it. They are issued already, but by tasks of this
/// process: exiting at once would drop any not yet written, leaving the key on that node
/// until its ttl. Five of the default node timeouts (500 ms), reached only when a node does
/// not answer.
pub(crate) const LINGER: Duration = DEFAULT_NODE_TIMEOUT.saturating_mul(5);

#[cfg(test)]
mod tests {
    use super::*;

    /// The shortest ttl a grace fits in is the boundary of the lock's own validation.
    #[test]
    fn the_shortest_ttl_for_a_grace_is_exact() {
        for grace in [
            Duration::ZERO,
            Duration::from_millis(500),
            Duration::from_secs(10),
        ] {
            let ttl = min_ttl(grace).unwrap_or_else(|| panic!("{grace:?}"));
            let options =
                |ttl| with_grace(LockOptions::default().ttl(ttl).auto_extend(true), grace);
            assert_eq!(options(ttl).validate(), Ok(()), "{grace:?}");
            assert!(
                options(ttl - Duration::from_millis(1)).validate().is_err(),
                "{grace:?}"
            );
        }
        assert_eq!(min_ttl(Duration::MAX), None);
        // The defaults fit, and the README's figure for the default ttl holds.
        assert!(min_ttl(Duration::from_secs(10)) <= Some(Duration::from_secs(30)));
        assert!(min_ttl(Duration::from_secs(18)) <= Some(Duration::from_secs(30)));
        assert!(min_ttl(Duration::from_secs(19)) > Some(Duration::from_secs(30)));
        assert_eq!(
            round_up(Duration::from_millis(16_755)),
            Duration::from_millis(16_800)
        );
    }
}
