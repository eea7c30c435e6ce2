//! [`LockedBody`]: a response body sent under the request's lock, and [`BodyError`], the
//! error it ends with when the lock is lost.

use std::fmt;
use std::pin::Pin;
use std::task::{Context, Poll};

use axum::BoxError;
use futures_util::future::BoxFuture;
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;
use redlock_core::{LockError, LockGuard};

/// Why [`RedlockLayer`](crate::RedlockLayer) ended a response body with an error.
///
/// The server gets it in place of the body's next frame and aborts the response (hyper closes
/// the connection, so the client sees a body cut short, never a complete one). Reach it from
/// the body's error with `downcast_ref::<BodyError>()`.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BodyError {
    /// The request's lock was lost while its response body was being sent (an extension was
    /// refused, the validity ran out unextended, or [`max_hold`](crate::RedlockLayer::max_hold)
    /// came): the rest of the body is not sent, as it would no longer be sent under the lock.
    /// The source is the [`LockError::Lost`] that says which lock and why.
    #[error("the request's lock was lost while its response body was sent; the rest is not sent")]
    LockLost(#[source] LockError),
}

/// Completes when the request's lock is lost, with the error that says so.
pub(crate) type Lost = BoxFuture<'static, LockError>;

/// The lost signal of `guard`, as a future the body or the response future keeps pinned.
pub(crate) fn lost(guard: &LockGuard) -> Lost {
    Box::pin(guard.lost().into_error())
}

pin_project! {
    /// Wraps a response body, sends it while the request's lock is held, and releases the
    /// lock when the body ends, fails, or is dropped (e.g. the client disconnected), in the
    /// shape of tower-http's in-flight request and timeout bodies.
    ///
    /// Each poll first checks the lock's lost signal: once it has fired, the body yields
    /// [`BodyError::LockLost`] instead of polling the wrapped body again, and then ends.
    pub(crate) struct LockedBody<B> {
        #[pin]
        inner: B,
        guard: Option<LockGuard>,
        // The guard's lost signal; `None` once the body has ended or failed.
        lost: Option<Lost>,
        // Set once the lost error was yielded: the body is over.
        failed: bool,
    }
}

impl<B> LockedBody<B> {
    /// `inner`, sent under `guard` until `lost` fires (both `None` when the lock was released
    /// with the response head).
    pub(crate) fn new(inner: B, guard: Option<LockGuard>, lost: Option<Lost>) -> Self {
        Self {
            inner,
            guard,
            lost,
            failed: false,
        }
    }
}

// By hand: `pin_project!` hides the struct from `missing_debug_implementations`.
impl<B: fmt::Debug> fmt::Debug for LockedBody<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockedBody")
            .field("inner", &self.inner)
            .field("guard", &self.guard)
            .field("failed", &self.failed)
            .finish_non_exhaustive()
    }
}

impl<B> Body for LockedBody<B>
where
    B: Body,
    B::Error: Into<BoxError>,
{
    type Data = B::Data;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let this = self.project();
        if *this.failed {
            return Poll::Ready(None);
        }
        // Before the next frame: a frame produced after the loss is never sent.
        if let Some(Poll::Ready(error)) = this.lost.as_mut().map(|l| l.as_mut().poll(cx)) {
            tracing::warn!(%error, "lock lost while the response body was sent; aborting it");
            *this.failed = true;
            *this.lost = None;
            // The guard's drop sends the release from a tracked background task (the lock
            // is no longer ours; the release deletes only our own token).
            this.guard.take();
            return Poll::Ready(Some(Err(Box::new(BodyError::LockLost(error)))));
        }
        let mut inner = this.inner;
        let polled = inner.as_mut().poll_frame(cx);
        let finished = match &polled {
            Poll::Ready(None | Some(Err(_))) => true,
            Poll::Ready(Some(Ok(_))) => inner.is_end_stream(),
            Poll::Pending => false,
        };
        if finished {
            // The signal first: the release fires it, and the body is over.
            *this.lost = None;
            this.guard.take();
        }
        polled.map(|frame| frame.map(|result| result.map_err(Into::into)))
    }

    fn is_end_stream(&self) -> bool {
        self.failed || self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
