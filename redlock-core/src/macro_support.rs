//! What `#[redlock]` expands to: not public API (the path is `#[doc(hidden)]`), kept out of
//! the crate root as tokio keeps its macro support.

/// Reports the outcome of the release after a `#[redlock]` body.
pub fn released(resource: &str, result: Result<crate::Released, crate::LockError>) {
    match result {
        Ok(released) if !released.was_held() => tracing::warn!(
            resource,
            deleted = released.deleted,
            "the lock had expired before the function returned; its work may have overlapped another holder"
        ),
        Ok(_) => {}
        Err(error) => tracing::warn!(resource, %error, "release after #[redlock] body failed"),
    }
}

/// Implemented by the return types `#[redlock]` accepts: `Result<T, E>` with
/// `E: From<LockError>`.
#[diagnostic::on_unimplemented(
    message = "a `#[redlock]` function must return `Result<_, E>` with `E: From<redlock_core::LockError>`, not `{Self}`",
    label = "the lock error is returned through this type",
    note = "use `Result<T, redlock_core::LockError>`, a `Result<T, E>` whose `E` implements `From<LockError>`, or `redlock_axum::LockRejection` in axum handlers"
)]
pub trait LockResult {
    /// Turns a lock error into this return type.
    fn from_lock_error(error: crate::LockError) -> Self;
}

impl<T, E: From<crate::LockError>> LockResult for Result<T, E> {
    fn from_lock_error(error: crate::LockError) -> Self {
        Err(E::from(error))
    }
}

/// Implemented by the return types `#[redlock(on_busy = "skip")]` accepts: `Result<T, E>`
/// with `T: Default` and `E: From<LockError>`. One impl covers both shapes the attribute
/// documents: `Result<Option<T>, E>` skips with `Ok(None)` (`Option`'s default), any other
/// `Result<T, E>` with `Ok(T::default())`. The compiler picks the value from the type, so a
/// type alias or the `Default` of the user's own type works as well as the spelled-out shape;
/// a success type without `Default` is reported at the return type.
#[diagnostic::on_unimplemented(
    message = "`on_busy = \"skip\"` needs a return type with a value for a skipped call: `Result<Option<T>, E>` or `Result<T, E>` with `T: Default`, not `{Self}`",
    label = "a skipped call returns `Ok(Default::default())` through this type",
    note = "return `Result<Option<T>, E>` (a skipped call gives `Ok(None)`) or `Result<T, E>` with `T: Default`, or leave `on_busy` out to get the busy error"
)]
pub trait SkipResult: LockResult {
    /// `on_busy = "skip"` with a busy resource (the expansion checks `LockError::is_busy`;
    /// other lock errors are returned as the function's error): logs a debug event and
    /// returns the skipped value.
    fn skipped(resource: &str, error: &crate::LockError) -> Self;
}

impl<T: Default, E: From<crate::LockError>> SkipResult for Result<T, E> {
    fn skipped(resource: &str, error: &crate::LockError) -> Self {
        tracing::debug!(
            resource,
            %error,
            "resource busy: #[redlock(on_busy = \"skip\")] skipped the body"
        );
        Ok(T::default())
    }
}

/// One Lua script as the lock sends it to a node, for the test that loads every script into a
/// real server and compares the SHA-1 the server returns with the one the code sends. Not
/// public API.
#[doc(hidden)]
#[derive(Debug, Clone, Copy)]
pub struct SentScript {
    /// What it is: `"dispatch"` (every script of the lock, batched) or `"inspect"`.
    pub name: &'static str,
    /// Its text, as sent with `EVAL` or `SCRIPT LOAD`.
    pub source: &'static str,
    /// The SHA-1 the code sends it by with `EVALSHA`; `None` for a script only sent with
    /// `EVAL`.
    pub sha1: Option<&'static str>,
}

/// Every script the lock sends to a node: the dispatch script, which holds every script of the
/// lock and their shared helpers, and the read-only inspect script. Not public API.
#[doc(hidden)]
pub fn sent_scripts() -> [SentScript; 2] {
    let batch: &'static crate::node::scripts::Batch = &crate::node::scripts::BATCH;
    [
        SentScript {
            name: "dispatch",
            source: batch.source.as_str(),
            sha1: Some(batch.sha1.as_str()),
        },
        SentScript {
            name: "inspect",
            source: crate::admin::inspect::INSPECT,
            sha1: None,
        },
    ]
}

/// A batched call's head in the dispatch script's layout: one number for its script's id, its
/// number of keys and its number of arguments; `None` for a call too large for one, which the
/// lock sends alone. For the in-memory nodes and the tests that build batches. Not public API.
#[doc(hidden)]
pub fn batch_head(script: usize, keys: usize, args: usize) -> Option<i64> {
    crate::node::scripts::batch_head(script, keys, args)
}
