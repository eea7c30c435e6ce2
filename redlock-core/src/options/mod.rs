//! Per-acquisition options: ttl, retries, wait deadline and drift factor. Here: the defaults
//! and limits, [`LockOptions`] as plain data with its consuming setters; in `validate.rs`:
//! its checks, and the ttl and drift as the nodes see them.
//!
//! # Adding a lock option
//!
//! A lock option lives in four places, and the compiler or a test stops the change until it
//! is in all of them:
//!
//! 1. here: the public field, its default and its setter (and its check in
//!    [`LockOptions::validate`], in `validate.rs`, if it has a range);
//! 2. the list of lock options in `config/lock.rs` (`lock_options!`): one entry (name, type,
//!    setter, doc) gives the [`LockConfig`](crate::LockConfig) field, the `[lock]` key of a
//!    configuration file, the `REDLOCK_<NAME>` variable and
//!    [`LockConfig::apply`](crate::LockConfig::apply). `every_lock_option_is_in_the_config`
//!    fails until a new field is listed there; `each_option_sets_its_own_field` checks that
//!    the setter named in the entry sets the field of the same name;
//! 3. the table of variables in [`RedlockConfig`](crate::RedlockConfig)'s docs (a test
//!    compares it with the variables read);
//! 4. `#[redlock(...)]` (redlock-macros): an argument (`args.rs`, `expand.rs` and the table
//!    of arguments in its crate docs), or an entry in its list of lock options left to the
//!    handle's defaults (`lock_options.rs`), whose test
//!    `every_lock_option_is_an_argument_or_left_out_on_purpose` fails until it is one or the
//!    other.
//!
//! Two tests outside the crate then ask for the new variable: the guide's table of
//! variables (`guide/configuration.md`; redlock-tests, `config.rs`) and the `redlock` command's choice of the variables
//! it reads (redlock-cli, `connect.rs`).
//!
//! The only option outside the list is `resource_class`, a metrics label the
//! code gives (never configuration data), which `#[redlock]` and redlock-axum set from their
//! templates.

use std::sync::Arc;
use std::time::Duration;

#[cfg(doc)]
use crate::error::InvalidInput;
#[cfg(doc)]
use crate::timing;

mod validate;

/// Default lock ttl: 30 s (Yii2's `expire`; Hyperf's annotation uses 60 s).
pub const DEFAULT_TTL: Duration = Duration::from_secs(30);
/// The longest ttl accepted: one day. Anything longer is almost certainly a unit mistake.
pub const MAX_TTL: Duration = Duration::from_secs(24 * 60 * 60);
/// Default number of retries after the first attempt: 1, so 2 tries in all (RedLock-Hyperf's
/// `retryCount = 2` tries).
pub const DEFAULT_RETRY_COUNT: u32 = 1;
/// Default base delay between attempts: 200 ms (RedLock-Hyperf's `retryDelay`).
pub const DEFAULT_RETRY_DELAY: Duration = Duration::from_millis(200);
/// Default random extra added to each retry delay: up to 100 ms.
pub const DEFAULT_RETRY_JITTER: Duration = Duration::from_millis(100);
/// Default clock drift factor: 1 % of the ttl (plus [`timing::DRIFT_FLOOR`]).
pub const DEFAULT_DRIFT_FACTOR: f64 = 0.01;
/// Default share of the ttl after which an auto-extended lock is extended: 1/3, so two
/// extensions can fail before the validity runs out (Redisson's watchdog uses the same share).
pub const DEFAULT_EXTEND_FRACTION: f64 = 1.0 / 3.0;
/// The longest default lost-signal margin: 1 s (the default is `min(ttl / 10, 1 s)`).
pub(crate) const MAX_DEFAULT_LOST_MARGIN: Duration = Duration::from_secs(1);
/// The most entries a resource's waiter queue takes on one node; a waiter left out is woken
/// by its retry timer instead of by name. Waiters leave the queue when they are granted, give
/// up, or their future is dropped; one that died without leaving (a crashed process) is popped
/// by the next release, at the cost of one hand-over grace. The cap bounds what such entries
/// can cost, however many accumulate.
pub const MAX_QUEUED_WAITERS: usize = 1024;

/// The most permits a semaphore may have ([`Redlock::semaphore`](crate::Redlock::semaphore)):
/// each attempt reads every slot's key on each node.
pub const MAX_PERMITS: u32 = 1024;

/// How one acquisition behaves: how long the lock lives, how often and how long to retry.
///
/// Build it from [`LockOptions::default`] (or a [`Redlock`](crate::Redlock)'s defaults) with the
/// consuming setters; [`Redlock::lock_with`](crate::Redlock::lock_with) validates it before
/// anything is sent to a node.
///
/// ```
/// use std::time::Duration;
/// use redlock_core::LockOptions;
///
/// let options = LockOptions::default()
///     .ttl(Duration::from_secs(10))
///     .retry_count(5)
///     .retry_delay(Duration::from_millis(50));
/// assert_eq!(options.ttl, Duration::from_secs(10));
/// ```
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct LockOptions {
    /// The lock's time to live on each node, sent as `PX` in whole milliseconds (default 30 s).
    pub ttl: Duration,
    /// Retries after the first failed attempt (default 1); unused with a `wait_timeout`.
    pub retry_count: u32,
    /// Base delay between attempts (default 200 ms).
    pub retry_delay: Duration,
    /// Upper bound of the random extra added to each retry delay (default 100 ms).
    pub retry_jitter: Duration,
    /// Keep retrying until this much time has passed since the call started (default none: `retry_count` decides).
    pub wait_timeout: Option<Duration>,
    /// Share of the ttl allowed for clock drift, in `[0, 0.5)` (default 0.01).
    pub drift_factor: f64,
    /// Extended by the handle's driver while held (default off).
    pub auto_extend: bool,
    /// Share of the ttl after which an auto-extended lock is extended, in `(0, 1)` (default 1/3).
    pub extend_fraction: f64,
    /// The longest an auto-extended lock is held (default none).
    pub max_hold: Option<Duration>,
    /// The minimum hold of the plain lock: a release before it keeps the key until then (default none).
    pub lock_at_least_for: Option<Duration>,
    /// The `resource_class` metrics label (default: the resource up to its first `:`).
    pub resource_class: Option<Arc<str>>,
    /// The most auto-extensions (default none).
    pub max_extensions: Option<u32>,
    /// How long before the validity ends the lost signal fires (default none: `min(ttl / 10, 1 s)`, see [`lost_margin_in_effect`](Self::lost_margin_in_effect)).
    pub lost_margin: Option<Duration>,
    /// Take a fencing token with the lock (default off).
    pub fencing: bool,
    /// Re-enter the lock held by the caller's scope (default off).
    pub reentrant: bool,
}

impl Default for LockOptions {
    fn default() -> Self {
        Self {
            ttl: DEFAULT_TTL,
            retry_count: DEFAULT_RETRY_COUNT,
            retry_delay: DEFAULT_RETRY_DELAY,
            retry_jitter: DEFAULT_RETRY_JITTER,
            wait_timeout: None,
            drift_factor: DEFAULT_DRIFT_FACTOR,
            auto_extend: false,
            extend_fraction: DEFAULT_EXTEND_FRACTION,
            max_hold: None,
            lock_at_least_for: None,
            resource_class: None,
            max_extensions: None,
            lost_margin: None,
            fencing: false,
            reentrant: false,
        }
    }
}

impl LockOptions {
    /// The lock's time to live on each node, sent as `PX` in milliseconds (default 30 s, at most
    /// [`MAX_TTL`]). The lock is *valid* for less: `ttl − elapsed − drift` ([`drift`](Self::drift)).
    #[must_use]
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }

    /// Retries after the first failed attempt (default 1: two tries in all; 0: a single try).
    /// Ignored when a [`wait_timeout`](Self::wait_timeout) is set.
    #[must_use]
    pub fn retry_count(mut self, retries: u32) -> Self {
        self.retry_count = retries;
        self
    }

    /// Base delay between attempts (default 200 ms). Each wait adds a uniformly random extra
    /// of up to [`retry_jitter`](Self::retry_jitter), so that contending clients desynchronise
    /// (distlock spec, "Retry on failure"). Whatever the delay (`Duration::MAX` included), a
    /// waiter attempts at least once a minute; a release wakes it earlier.
    #[must_use]
    pub fn retry_delay(mut self, delay: Duration) -> Self {
        self.retry_delay = delay;
        self
    }

    /// Upper bound of the random extra added to each retry delay (default 100 ms).
    #[must_use]
    pub fn retry_jitter(mut self, jitter: Duration) -> Self {
        self.retry_jitter = jitter;
        self
    }

    /// Keep retrying until this much time has passed since the call started, then fail (Yii2's
    /// mutex `timeout`). When set, it replaces [`retry_count`](Self::retry_count).
    /// `Duration::MAX` (or any wait the clock cannot reach) waits until the lock is taken or
    /// the handle shuts down: see [`wait_forever`](Self::wait_forever).
    #[must_use]
    pub fn wait_timeout(mut self, wait: Duration) -> Self {
        self.wait_timeout = Some(wait);
        self
    }

    /// Keep retrying until the lock is taken (node-redlock's `retryCount: -1`; leader
    /// election), or until [`Redlock::begin_shutdown`](crate::Redlock::begin_shutdown), which
    /// ends the wait with [`LockError::ShuttingDown`](crate::LockError::ShuttingDown). The
    /// same as `wait_timeout(Duration::MAX)`. Drop the future to stop waiting earlier.
    #[must_use]
    pub fn wait_forever(self) -> Self {
        self.wait_timeout(Duration::MAX)
    }

    /// Share of the ttl allowed for clock drift between client and nodes (default 0.01); the
    /// drift is `ttl × factor + 2 ms`. Must be in `[0, 0.5)`.
    #[must_use]
    pub fn drift_factor(mut self, factor: f64) -> Self {
        self.drift_factor = factor;
        self
    }

    /// Keep the lock while its guard lives: the handle's background driver extends it each
    /// time [`extend_fraction`](Self::extend_fraction) of the ttl has passed since the last
    /// confirmed validity, until the guard is released, [`max_hold`](Self::max_hold) or
    /// [`max_extensions`](Self::max_extensions) is reached, or an extension shows the lock lost
    /// (then the guard's [`lost`](crate::LockGuard::lost) signal fires). Default off.
    #[must_use]
    pub fn auto_extend(mut self, on: bool) -> Self {
        self.auto_extend = on;
        self
    }

    /// Share of the ttl after which an auto-extended lock is extended (default 1/3). Must be in
    /// `(0, 1)` and leave the extension time to complete before the lost-signal margin.
    #[must_use]
    pub fn extend_fraction(mut self, fraction: f64) -> Self {
        self.extend_fraction = fraction;
        self
    }

    /// Longest time an auto-extended lock is held, counted from acquisition (distlock spec:
    /// "limit the number of lock reacquisition attempts"). The last extension is shortened to
    /// end there; the lost signal then fires as the validity runs out. Default: no cap.
    #[must_use]
    pub fn max_hold(mut self, max: Duration) -> Self {
        self.max_hold = Some(max);
        self
    }

    /// Most extensions the auto-extension makes. Default: no cap.
    #[must_use]
    pub fn max_extensions(mut self, max: u32) -> Self {
        self.max_extensions = Some(max);
        self
    }

    /// How long before the validity deadline the lost signal fires if no extension was
    /// confirmed by then (default `min(ttl / 10, 1 s)`). It covers the time between the signal
    /// and the work actually stopping; it must be shorter than `ttl − drift`.
    #[must_use]
    pub fn lost_margin(mut self, margin: Duration) -> Self {
        self.lost_margin = Some(margin);
        self
    }

    /// Issue a fencing token with the lock ([`LockGuard::fencing_token`]): a number that
    /// strictly increases across successive holders of the resource. Costs one more round trip
    /// at acquisition, and needs a fencing quorum of nodes (4 of 5,
    /// [`Redlock::fencing_quorum`](crate::Redlock::fencing_quorum)) rather than a majority: with
    /// fewer reachable, the lock fails [`LockError::Unavailable`](crate::LockError::Unavailable).
    /// See the crate docs, "Fencing tokens", for the scheme and its fault model. Default off.
    ///
    /// [`LockGuard::fencing_token`]: crate::LockGuard::fencing_token
    #[must_use]
    pub fn fencing(mut self, on: bool) -> Self {
        self.fencing = on;
        self
    }

    /// Reentrant locking: when the caller runs inside the scope of a guard holding the
    /// resource through this handle in the same mode, return a guard sharing that lock (hold
    /// count + 1) instead of waiting for it. The lock is released when the last guard goes.
    /// Default off.
    ///
    /// "The same holder" is the call chain, not the task: the future given to
    /// [`LockGuard::scope`](crate::LockGuard::scope) (`#[redlock]`, `with_lock` and the axum
    /// layer put the locked body there) and everything it awaits. Sibling futures of one task
    /// (`join!`, `select!`, `for_each_concurrent`) are different holders and exclude each
    /// other; so is work the body hands to `tokio::spawn`, which runs outside the scope.
    #[must_use]
    pub fn reentrant(mut self, on: bool) -> Self {
        self.reentrant = on;
        self
    }

    /// Keep the lock at least this long after it was acquired, even when it is released
    /// sooner (ShedLock's `lockAtLeastFor`): a release before then does not delete the key:
    /// where it still holds the token, it is overwritten with a marker that holds no token and
    /// expires at the end of the minimum hold (compare-and-`SET PX` on every node, decided at
    /// quorum like a release; an extension or a release of the holder still in flight no
    /// longer matches it), so that a replica whose schedule fires a little
    /// later does not run the same job again. Counted from the start of the attempt that took
    /// the lock (monotonic clock), so the key lives at least this long. Waiters are not woken
    /// by such a release: they take the key when it expires (their retry delay). A release
    /// after the minimum hold deletes the key as usual. Default: none.
    ///
    /// Must not be longer than the ttl ([`InvalidInput::AtLeastAboveTtl`]); the plain lock
    /// only ([`InvalidInput::AtLeastWithMode`]).
    #[must_use]
    pub fn lock_at_least_for(mut self, at_least: Duration) -> Self {
        self.lock_at_least_for = Some(at_least);
        self
    }

    /// The resource class this lock's metrics are labelled by (the `metrics` feature), instead
    /// of [`resource_class`](crate::resource_class)'s: the resource up to its first `:`, which
    /// is client data when the resource starts with it. `#[redlock]` and redlock-axum's
    /// template layers set it from the template (`order:{id}` → `order`; `{tenant}:sync` →
    /// the template itself), so a class always comes from the code. Classes given here are
    /// used as they are, outside [`MAX_RESOURCE_CLASSES`](crate::MAX_RESOURCE_CLASSES): give
    /// a fixed name, never one built from input. Default: none.
    #[must_use]
    pub fn resource_class(mut self, class: impl Into<Arc<str>>) -> Self {
        self.resource_class = Some(class.into());
        self
    }

    /// The lost-signal margin: the one set, or `min(ttl / 10, 1 s)`.
    pub fn lost_margin_in_effect(&self) -> Duration {
        self.lost_margin
            .unwrap_or_else(|| (self.sent_ttl() / 10).min(MAX_DEFAULT_LOST_MARGIN))
    }
}
