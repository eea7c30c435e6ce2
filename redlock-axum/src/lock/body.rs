//! [`LockedBody`]: a response body that holds the lock until it ends.

use std::fmt;
use std::pin::Pin;
use std::task::{Context, Poll};

use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;
use redlock_core::LockGuard;

pin_project! {
    /// Wraps a response body and releases the request's lock when the body ends, fails, or is
    /// dropped (e.g. the client disconnected), in the shape of tower-http's in-flight
    /// request body.
    pub(crate) struct LockedBody<B> {
        #[pin]
        inner: B,
        guard: Option<LockGuard>,
    }
}

impl<B> LockedBody<B> {
    pub(crate) fn new(inner: B, guard: Option<LockGuard>) -> Self {
        Self { inner, guard }
    }
}

// By hand: `pin_project!` hides the struct from `missing_debug_implementations`.
impl<B: fmt::Debug> fmt::Debug for LockedBody<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockedBody")
            .field("inner", &self.inner)
            .field("guard", &self.guard)
            .finish()
    }
}

impl<B: Body> Body for LockedBody<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let this = self.project();
        let mut inner = this.inner;
        let polled = inner.as_mut().poll_frame(cx);
        let finished = match &polled {
            Poll::Ready(None | Some(Err(_))) => true,
            Poll::Ready(Some(Ok(_))) => inner.is_end_stream(),
            Poll::Pending => false,
        };
        if finished {
            // The guard's drop sends the release from a tracked background task.
            this.guard.take();
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
