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
