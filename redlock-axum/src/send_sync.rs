//! Compile-time checks that the layer, its service and response future, the extractor and
//! the shutdown handle are `Send` (and, but for the future, `Sync`), as axum's `Router` and
//! `tokio::spawn` need: a change that loses one fails to build this crate. Nothing here runs.

use axum::body::Body;
use axum::routing::Route;

use crate::{
    BodyError, HeldLock, HeldLockRejection, LockRejection, RedlockLayer, RedlockService,
    ResponseFuture, ShutdownHandle, TemplateError,
};

const fn send_sync<T: Send + Sync>() {}

const fn send_only<T: Send>() {}

const _: () = {
    send_sync::<RedlockLayer>();
    send_sync::<RedlockService<Route>>();
    // A future: moved into a task, never shared.
    send_only::<ResponseFuture<Route, Body>>();
    send_sync::<HeldLock>();
    send_sync::<HeldLockRejection>();
    send_sync::<LockRejection>();
    send_sync::<ShutdownHandle>();
    send_sync::<BodyError>();
    send_sync::<TemplateError>();
};
