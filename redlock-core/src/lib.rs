#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod builder;
pub mod error;
mod extension;
mod guard;
mod holders;
mod keys;
mod lease;
mod mode;
mod node;
pub mod options;
pub mod outcome;
mod quorum;
mod redlock;
mod reentrant;
pub mod registry;
mod scoped;
mod server_info;
pub mod timing;
mod token;
mod waiters;
mod watchdog;

pub use builder::RedlockBuilder;
pub use error::{BuildError, InvalidInput, LockError, LostReason};
pub use guard::LockGuard;
pub use keys::BOOKKEEPING_SEPARATOR;
pub use lease::{LockInfo, LostFuture, LostSignal};
pub use mode::{Mode, ParseModeError};
pub use options::LockOptions;
pub use outcome::{NodeError, NodeOutcome, NodeVote, Outcomes};
pub use redlock::{
    DEFAULT_FOREIGN_WINDOW, FOREIGN_WINDOW_EVERY, MAX_FOREIGN_WINDOW, RELEASE_ROUNDS, Redlock,
    ReleaseAllReport, Released,
};
pub use reentrant::Scoped;
pub use token::{TOKEN_BYTES, Token};

#[cfg(feature = "macros")]
pub use redlock_macros::redlock;

/// Support for the code `#[redlock]` expands to. Not public API.
#[doc(hidden)]
pub mod __private {
    pub use crate::registry::get as registered;

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
}
