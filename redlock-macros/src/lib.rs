//! `#[redlock(resource = "...")]`: hold a Redlock around an async fn.
//!
//! The attribute mirrors RedLock-Hyperf's `@RedLockAnnotation`. It takes the lock before the
//! body runs and releases it after, on every exit: return, `?`, panic, and the future being
//! dropped. If the lock cannot be taken, the body does not run and the function returns the
//! [`LockError`](https://docs.rs/redlock-core/latest/redlock_core/enum.LockError.html)
//! converted into its error type.
//!
//! Use it through `redlock_core::redlock` (the `macros` feature, on by default).
//!
//! # Arguments
//!
//! | argument | meaning | default |
//! |---|---|---|
//! | `resource = "order:{id}"` | the resource; `{name}` / `{name.field}` interpolate arguments, including names bound by patterns such as `Path(id): Path<u64>` | required, or `resources` |
//! | `resources = ["account:{from}", "account:{to}"]` | several resources taken together, all or none (`Redlock::lock_many`: no deadlock whatever the overlap with other sets); each a template as for `resource`; not with `mode`, `fencing`, `permits`, `lock_at_least_for` or `reentrant = true` (refused at compile time), and never re-entered | instead of `resource` |
//! | `ttl = "30s"` | lock ttl (`"30s"`, `"200ms"`, `"1m"`, or an integer of ms); refused at compile time: zero, above 24 h (`MAX_TTL`), or not longer than the drift allowance `ttl × drift_factor + 2 ms` (with the `drift_factor` given here, else 0), e.g. `"2ms"` | the handle's |
//! | `retry_count = 3` | retries after the first attempt | the handle's |
//! | `retry_delay = "200ms"` | base delay between attempts; refused at compile time: zero together with a zero `retry_jitter` when retries can happen (`retry_count` not 0, or `wait_timeout` given) | the handle's |
//! | `retry_jitter = "100ms"` | maximum random extra per delay | the handle's |
//! | `wait_timeout = "5s"` | retry until this deadline instead of `retry_count` times; zero is refused at compile time (use `retry_count = 0` for a single attempt) | none |
//! | `drift_factor = 0.01` | clock drift share of the ttl | the handle's |
//! | `auto_extend` | keep the lock extended while the body runs; if it is lost anyway, the body is stopped (dropped at its next `.await`) and `LockError::Lost` is returned | off |
//! | `max_hold = "10m"` | with `auto_extend`: longest hold, after which the lock runs out; zero is refused at compile time | none |
//! | `lock_at_least_for = "30s"` | keep the lock at least this long after it was taken, even when the body ends sooner (ShedLock's `lockAtLeastFor`; the key is set to expire then instead of being deleted), so that a replica whose schedule fires a little later skips the job; longer than the `ttl` given here, or with `mode`, is refused at compile time | none |
//! | `fencing` | issue a fencing token (read it through `guard`) | off |
//! | `mode = "read"` | lock mode: `"read"` (shared with readers), `"write"` (alone), or a DLM mode `"NL"`, `"CR"`, `"CW"`, `"PR"`, `"PW"`, `"EX"` (see `redlock_core::Mode`) | the plain exclusive lock |
//! | `on_busy = "skip"` | when the resource is busy (other holders kept it on every attempt: `LockError::is_busy`), skip the body and return `Ok(None)` for `Result<Option<T>, E>`, or `Ok(T::default())` for `Result<T, E>` with `T: Default` (a debug event is logged); every other lock error (unavailable, invalid, shutting down) is still returned. A success type without `Default` is a compile error at the return type; `"error"` returns `LockError::Busy` | `"error"` |
//! | `guard = lock` | binds `lock: LockInfo` in the body: fencing token, validity, lost signal | — |
//! | `reentrant = false` | by default an annotated fn awaited inside the body of another that holds the resource (in the same mode, through the same handle) shares that lock (hold count) instead of waiting for itself; sibling calls of one task (`join!`) and spawned tasks are other holders. `false` treats the nested call as any other holder | `true` |
//! | `permits = 3` | take one of this many permits of a counting semaphore on the resource instead of its lock: at most that many bodies run at once across every process (see redlock-core's `guide::semaphore`); not with `mode`, `fencing` or `reentrant = true` (refused at compile time), and re-entry is off by default with it | none |
//! | `pool = "name"` | a handle registered with `redlock_core::registry::register` (Hyperf's `poolName`) | `"default"` |
//! | `redlock = expr` | the handle as an expression in scope (`state.redlock`, an argument) | — |
//! | `crate = "path"` | where redlock-core is, if re-exported | `::redlock_core` |
//!
//! Durations are never negative. The compile-time checks refuse two kinds of literals: those
//! `LockOptions::validate` refuses whatever the handle's options (a zero or too short ttl, one
//! over the cap, a zero `max_hold`), and those that are meaningless although they would run (a
//! zero `wait_timeout`, retries spaced by neither a delay nor a jitter, which would send every
//! retry at once). The rest, e.g. the lost margin, which the handle's options may set, is
//! checked when the lock is taken.
//!
//! The function must be `async` and return `Result<_, E>` with `E: From<LockError>`.
//!
//! # The resource template
//!
//! `{{` and `}}` are literal braces; a placeholder `{name}` (whitespace around the name is
//! ignored) names an argument, or a field of one: `{job.name}`, `{pair.0}`. Its first
//! identifier must be bound by the function's arguments, through any pattern
//! (`Path(id): Path<u64>`). An empty template, a `}` that closes nothing, a `{` never closed or
//! inside a placeholder, and an empty `{}` are compile errors. redlock-axum's
//! `RedlockLayer::from_template` reads the same grammar with the same parser (the
//! redlock-template crate), except that its names are path parameters (any text without
//! braces); redlock-template's docs give the full grammar, and both are tested against its
//! shared cases.
//!
//! ```
//! use redlock_core::{LockError, Redlock, redlock};
//!
//! // A handle registered at start-up under "default" (Hyperf's `poolName`).
//! #[redlock(resource = "order:{order_id}", ttl = "10s", retry_count = 3)]
//! async fn pay(order_id: u64) -> Result<(), LockError> {
//!     // runs on one replica at a time per order
//!     Ok(())
//! }
//!
//! // A handle in scope, and a resource built from a field.
//! struct Job { name: String }
//!
//! #[redlock(resource = "job:{job.name}", redlock = redlock, wait_timeout = "5s")]
//! async fn run(redlock: &Redlock, job: Job) -> Result<String, LockError> {
//!     Ok(job.name)
//! }
//!
//! // Long work: extended while it runs, stopped if the lock is lost, with a fencing token for
//! // storage. The nested call on the same resource re-enters the held lock.
//! #[redlock(resource = "report:{day}", ttl = "10s", auto_extend, max_hold = "1h", fencing, guard = lock)]
//! async fn build_report(day: u32) -> Result<u64, LockError> {
//!     let token = lock.fencing_token().unwrap_or_default();
//!     publish(day).await?;
//!     Ok(token)
//! }
//!
//! #[redlock(resource = "report:{day}")]
//! async fn publish(day: u32) -> Result<(), LockError> {
//!     Ok(())
//! }
//!
//! // A cron job run by every replica: the one that gets the lock runs it, the others skip
//! // it (`Ok(None)`) instead of failing. Unavailable nodes are still an error.
//! #[redlock(resource = "cron:cleanup", retry_count = 0, on_busy = "skip")]
//! async fn cleanup() -> Result<Option<u64>, LockError> {
//!     Ok(Some(42)) // rows removed
//! }
//! ```

mod args;
mod expand;
#[cfg(test)]
mod lock_options;
mod template;

use proc_macro::TokenStream;

/// Holds a Redlock on `resource` while the async fn's body runs. See the crate docs.
#[proc_macro_attribute]
pub fn redlock(attr: TokenStream, item: TokenStream) -> TokenStream {
    let item = proc_macro2::TokenStream::from(item);
    match expand::redlock(attr.into(), item.clone()) {
        Ok(tokens) => tokens.into(),
        // Emit the function unchanged beside the error, so that one typo in the attribute
        // does not turn every call site into "function not found" (tokio-macros does this).
        Err(error) => {
            let error = error.into_compile_error();
            quote::quote!(#item #error).into()
        }
    }
}
