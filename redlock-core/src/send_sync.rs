//! Compile-time checks that the public handles, guards and signals are `Send + Sync`, and that
//! the future of every public async fn (and [`LostFuture`]) is `Send`: each may be moved into `tokio::spawn`, held
//! across an `.await` in an axum handler, or shared behind an `Arc`. A change that loses one
//! of these bounds fails to build this crate, not a user's code later. Nothing here runs.

use std::future::Future;
use std::time::Duration;

use crate::{
    BuildError, DetachedLock, ForceReleased, Holder, Leader, LeaderElection, LeaderWatch,
    LockError, LockGuard, LockInfo, LockOptions, LostFuture, LostReason, LostSignal, Mode,
    ModeHolder, NodeHolding, NodeStatus, Outcomes, Redlock, RedlockBuilder, ReleaseAllReport,
    Released, ResourceStatus, Semaphore, Term, Token,
};

const fn send_sync<T: Send + Sync>() {}

const fn send_only<T: Send>() {}

fn send<F: Future + Send>(_: F) {}

fn send_only_value<T: Send>(_: T) {}

const _: () = {
    send_sync::<Redlock>();
    send_sync::<RedlockBuilder>();
    send_sync::<LockGuard>();
    send_sync::<LockInfo>();
    send_sync::<LostSignal>();
    // A future: moved into a task, never shared.
    send_only::<LostFuture>();
    send_sync::<LostReason>();
    send_sync::<LockError>();
    send_sync::<BuildError>();
    send_sync::<LockOptions>();
    send_sync::<Semaphore>();
    send_sync::<LeaderElection>();
    send_sync::<Term>();
    send_sync::<Leader>();
    send_sync::<LeaderWatch>();
    send_sync::<DetachedLock>();
    send_sync::<Token>();
    send_sync::<Released>();
    send_sync::<ReleaseAllReport>();
    send_sync::<ForceReleased>();
    send_sync::<ResourceStatus>();
    send_sync::<NodeStatus>();
    send_sync::<NodeHolding>();
    send_sync::<Holder>();
    send_sync::<ModeHolder>();
    send_sync::<Outcomes>();
};

/// Type-checked, never called: every public async fn's future is `Send`.
#[allow(dead_code, clippy::too_many_arguments)]
fn futures_are_send(
    redlock: &Redlock,
    builder: RedlockBuilder,
    guard: LockGuard,
    info: &LockInfo,
    lost: &LostSignal,
    semaphore: &Semaphore,
    election: LeaderElection,
    term: &Term,
    detached: DetachedLock,
) {
    let options = LockOptions::default();
    let ttl = Duration::from_secs(1);
    send(builder.build());
    send(redlock.lock("r"));
    send(redlock.lock_with("r", &options));
    send(redlock.try_lock("r"));
    send(redlock.try_lock_with("r", &options));
    send(redlock.lock_many(&["a", "b"]));
    send(redlock.lock_many_with(&["a", "b"], &options));
    send(redlock.with_lock("r", ttl, |_| async {}));
    send(redlock.with_lock_options("r", &options, |_| async {}));
    send(redlock.lock_mode("r", Mode::ProtectedRead, ttl));
    send(redlock.lock_mode_with("r", Mode::ProtectedRead, &options));
    send(redlock.read_lock("r"));
    send(redlock.write_lock("r"));
    send(redlock.inspect("r"));
    send(redlock.inspect_permits("r", 2));
    send(redlock.force_release("r"));
    send(redlock.resume(&detached));
    send(redlock.resume_with(&detached, &options));
    send(redlock.release_all());
    send(redlock.shutdown(ttl));
    send(semaphore.acquire());
    send(semaphore.acquire_with(&options));
    send(guard.until_lost(async {}));
    send(guard.scope(async {}));
    send(guard.extend(ttl));
    send(guard.downgrade(Mode::ProtectedRead));
    send(info.lost().cancelled());
    send(lost.cancelled());
    send(lost.clone().into_error());
    send(election.leader());
    let mut watch = election.watch();
    send(watch.changed());
    send_only_value(watch.into_stream());
    send(term.ended());
    send(election.run(|_term| async {}));
    send(guard.release());
    send(redlock.release_detached(detached));
}
