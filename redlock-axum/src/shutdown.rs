//! [`ShutdownHandle`]: graceful shutdown that releases every held lock.

use std::future::Future;
use std::time::Duration;

use redlock_core::{Redlock, ReleaseAllReport};
use tokio_util::sync::CancellationToken;

/// Ties a [`Redlock`] to axum's graceful shutdown.
///
/// 1. Pass [`signal`](Self::signal) to `axum::serve(..).with_graceful_shutdown(..)`.
/// 2. Call [`trigger_on_signals`](Self::trigger_on_signals) (SIGTERM, which Kubernetes and
///    systemd send, and Ctrl-C), or [`trigger`](Self::trigger) yourself, or
///    [`trigger_on`](Self::trigger_on) any future: new acquisitions are refused (`503` from
///    [`RedlockLayer`](crate::RedlockLayer), a
///    [`LockError::ShuttingDown`](redlock_core::LockError::ShuttingDown) from `#[redlock]`)
///    and axum stops accepting connections while in-flight requests finish.
/// 3. After `serve` returns (or a grace deadline passes), await
///    [`release_all`](Self::release_all): every lock still held is released by quorum
///    compare-and-delete — never someone else's — before the process exits.
///
/// ```no_run
/// # async fn run(redlock: redlock_core::Redlock, app: axum::Router, listener: tokio::net::TcpListener) -> std::io::Result<()> {
/// use std::time::Duration;
/// use redlock_axum::ShutdownHandle;
///
/// let shutdown = ShutdownHandle::new(redlock);
/// shutdown.trigger_on_signals()?;
/// let serve = axum::serve(listener, app).with_graceful_shutdown(shutdown.signal());
/// // Give in-flight requests 5 s after the signal, then release what is still held.
/// let _ = shutdown.drain(serve.into_future(), Duration::from_secs(5)).await;
/// let report = shutdown.release_all(Duration::from_secs(2)).await;
/// assert!(report.unconfirmed.is_empty());
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct ShutdownHandle {
    redlock: Redlock,
    token: CancellationToken,
}

impl ShutdownHandle {
    /// A handle for `redlock` (and every clone of it).
    pub fn new(redlock: Redlock) -> Self {
        Self {
            redlock,
            token: CancellationToken::new(),
        }
    }

    /// Starts the shutdown: refuses new acquisitions and resolves [`signal`](Self::signal).
    pub fn trigger(&self) {
        tracing::info!("shutdown: refusing new lock acquisitions");
        self.redlock.begin_shutdown();
        self.token.cancel();
    }

    /// Spawns a task that calls [`trigger`](Self::trigger) when `signal` completes (e.g.
    /// `tokio::signal::ctrl_c()` or a SIGTERM stream).
    pub fn trigger_on<F>(&self, signal: F)
    where
        F: Future + Send + 'static,
    {
        let this = self.clone();
        tokio::spawn(async move {
            signal.await;
            this.trigger();
        });
    }

    /// Spawns a task that calls [`trigger`](Self::trigger) on the first SIGTERM (what
    /// Kubernetes, systemd and `docker stop` send) or Ctrl-C (SIGINT). On other platforms than
    /// unix, on Ctrl-C only. The handlers are installed before this returns, so a signal
    /// that comes just after is not missed; from then on those signals no longer end the
    /// process by themselves: the shutdown you run after [`signal`](Self::signal) does.
    ///
    /// Call it inside a Tokio runtime (it spawns a task).
    ///
    /// # Errors
    /// The OS error if a signal handler cannot be installed.
    pub fn trigger_on_signals(&self) -> std::io::Result<()> {
        let signal = signals()?;
        self.trigger_on(async move {
            let name = signal.await;
            tracing::info!(signal = name, "shutdown: signal received");
        });
        Ok(())
    }

    /// Resolves once the shutdown has been triggered; for `with_graceful_shutdown`.
    ///
    /// # Cancel safety
    /// Cancel safe: it only waits for the signal.
    pub fn signal(&self) -> impl Future<Output = ()> + Send + 'static {
        self.token.clone().cancelled_owned()
    }

    /// `true` once triggered.
    pub fn is_triggered(&self) -> bool {
        self.token.is_cancelled()
    }

    /// Runs `serve` until it finishes, or until `grace` has passed since the shutdown was
    /// triggered; returns `None` in the latter case (requests still in flight are abandoned
    /// and their locks released by [`release_all`](Self::release_all)).
    ///
    /// # Cancel safety
    /// Dropping the future drops `serve` (the server stops at once) and leaves the held locks to
    /// [`release_all`](Self::release_all) or their guards.
    pub async fn drain<F: Future>(&self, serve: F, grace: Duration) -> Option<F::Output> {
        let deadline = async {
            self.token.cancelled().await;
            tokio::time::sleep(grace).await;
        };
        tokio::select! {
            output = serve => Some(output),
            () = deadline => {
                tracing::warn!(?grace, "shutdown: grace period over with requests in flight");
                None
            }
        }
    }

    /// Triggers the shutdown if needed, releases every lock still held by quorum, and waits up
    /// to `timeout` for releases started by dropped guards.
    ///
    /// # Cancel safety
    /// As [`redlock_core::Redlock::release_all`]: the releases are handed to the nodes at once, and
    /// dropping the future does not bring a lock back.
    pub async fn release_all(&self, timeout: Duration) -> ReleaseAllReport {
        if !self.is_triggered() {
            self.trigger();
        }
        self.redlock.shutdown(timeout).await
    }
}

/// The first of SIGTERM and SIGINT, by name; the handlers are installed before this returns.
#[cfg(unix)]
fn signals() -> std::io::Result<impl Future<Output = &'static str> + Send + 'static> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate())?;
    let mut interrupt = signal(SignalKind::interrupt())?;
    Ok(async move {
        tokio::select! {
            _ = term.recv() => "SIGTERM",
            _ = interrupt.recv() => "SIGINT",
        }
    })
}

/// Ctrl-C; a failure to listen is logged, and then nothing triggers.
#[cfg(not(unix))]
fn signals() -> std::io::Result<impl Future<Output = &'static str> + Send + 'static> {
    Ok(async {
        match tokio::signal::ctrl_c().await {
            Ok(()) => "Ctrl-C",
            Err(error) => {
                tracing::warn!(%error, "shutdown: cannot listen for Ctrl-C");
                std::future::pending().await
            }
        }
    })
}
