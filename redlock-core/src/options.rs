//! Per-acquisition options: ttl, retries, wait deadline and drift factor.

use std::time::Duration;

use crate::error::InvalidInput;
use crate::timing;

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
/// The longest resource name accepted, in bytes.
pub const MAX_RESOURCE_LEN: usize = 1024;

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
/// assert_eq!(options.get_ttl(), Duration::from_secs(10));
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct LockOptions {
    ttl: Duration,
    retry_count: u32,
    retry_delay: Duration,
    retry_jitter: Duration,
    wait_timeout: Option<Duration>,
    drift_factor: f64,
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
        }
    }
}

impl LockOptions {
    /// The lock's time to live on each node, sent as `PX` in milliseconds (default 30 s, at most
    /// [`MAX_TTL`]). The lock is *valid* for less: see [`timing::validity`].
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

    /// Base delay between attempts (default 200 ms). Each wait adds a uniformly random extra of
    /// up to [`retry_jitter`](Self::retry_jitter), so that contending clients desynchronise
    /// (distlock spec, "Retry on failure").
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
    #[must_use]
    pub fn wait_timeout(mut self, wait: Duration) -> Self {
        self.wait_timeout = Some(wait);
        self
    }

    /// Share of the ttl allowed for clock drift between client and nodes (default 0.01); the
    /// drift is `ttl × factor + 2 ms`. Must be in `[0, 0.5)`.
    #[must_use]
    pub fn drift_factor(mut self, factor: f64) -> Self {
        self.drift_factor = factor;
        self
    }

    /// The ttl.
    pub fn get_ttl(&self) -> Duration {
        self.ttl
    }

    /// Retries after the first attempt.
    pub fn get_retry_count(&self) -> u32 {
        self.retry_count
    }

    /// Base retry delay.
    pub fn get_retry_delay(&self) -> Duration {
        self.retry_delay
    }

    /// Maximum random extra per retry delay.
    pub fn get_retry_jitter(&self) -> Duration {
        self.retry_jitter
    }

    /// The wait deadline, if any.
    pub fn get_wait_timeout(&self) -> Option<Duration> {
        self.wait_timeout
    }

    /// The clock drift factor.
    pub fn get_drift_factor(&self) -> f64 {
        self.drift_factor
    }

    /// Checks the options on their own, before anything is sent.
    ///
    /// # Errors
    /// [`InvalidInput`] when the ttl is zero, above [`MAX_TTL`], or too short to leave any
    /// validity after the drift; or when the drift factor is outside `[0, 0.5)`.
    pub fn validate(&self) -> Result<(), InvalidInput> {
        if !(0.0..0.5).contains(&self.drift_factor) {
            return Err(InvalidInput::DriftFactor(self.drift_factor));
        }
        if self.ttl_millis() == 0 {
            return Err(InvalidInput::ZeroTtl);
        }
        if self.ttl > MAX_TTL {
            return Err(InvalidInput::TtlAboveCap {
                ttl: self.ttl,
                max: MAX_TTL,
            });
        }
        let ttl = self.sent_ttl();
        let drift = timing::drift(ttl, self.drift_factor);
        if ttl <= drift {
            return Err(InvalidInput::TtlTooShort { ttl, drift });
        }
        Ok(())
    }

    /// The ttl in whole milliseconds, as sent with `PX` (rounded down; at least 1 after
    /// [`validate`](Self::validate)).
    pub(crate) fn ttl_millis(&self) -> u64 {
        u64::try_from(self.ttl.as_millis()).unwrap_or(u64::MAX)
    }

    /// The ttl the nodes actually get: [`ttl_millis`](Self::ttl_millis) as a `Duration`. The
    /// validity is computed from it, never from sub-millisecond digits the nodes never saw.
    pub(crate) fn sent_ttl(&self) -> Duration {
        Duration::from_millis(self.ttl_millis())
    }
}

/// Checks a resource name: not empty, at most [`MAX_RESOURCE_LEN`] bytes.
///
/// # Errors
/// [`InvalidInput::EmptyResource`] or [`InvalidInput::ResourceTooLong`].
pub fn validate_resource(resource: &str) -> Result<(), InvalidInput> {
    if resource.is_empty() {
        return Err(InvalidInput::EmptyResource);
    }
    if resource.len() > MAX_RESOURCE_LEN {
        return Err(InvalidInput::ResourceTooLong {
            len: resource.len(),
            max: MAX_RESOURCE_LEN,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_mirror_hyperf() {
        let options = LockOptions::default();
        options.validate().unwrap();
        assert_eq!(options.get_retry_count() + 1, 2);
        assert_eq!(options.get_retry_delay(), Duration::from_millis(200));
    }

    #[test]
    fn bad_ttls_and_factors_are_rejected() {
        let base = LockOptions::default();
        for zero in [Duration::ZERO, Duration::from_micros(999)] {
            assert_eq!(
                base.clone().ttl(zero).validate(),
                Err(InvalidInput::ZeroTtl)
            );
        }
        assert!(matches!(
            base.clone()
                .ttl(MAX_TTL + Duration::from_millis(1))
                .validate(),
            Err(InvalidInput::TtlAboveCap { .. })
        ));
        assert!(matches!(
            base.clone().ttl(Duration::from_millis(2)).validate(),
            Err(InvalidInput::TtlTooShort { .. })
        ));
        base.clone()
            .ttl(Duration::from_millis(3))
            .validate()
            .unwrap();
        assert!(matches!(
            base.clone().drift_factor(0.5).validate(),
            Err(InvalidInput::DriftFactor(_))
        ));
        assert!(matches!(
            base.drift_factor(f64::NAN).validate(),
            Err(InvalidInput::DriftFactor(_))
        ));
    }

    #[test]
    fn resources_must_be_non_empty_and_bounded() {
        assert_eq!(validate_resource(""), Err(InvalidInput::EmptyResource));
        assert!(validate_resource(&"x".repeat(MAX_RESOURCE_LEN)).is_ok());
        assert!(matches!(
            validate_resource(&"x".repeat(MAX_RESOURCE_LEN + 1)),
            Err(InvalidInput::ResourceTooLong { .. })
        ));
    }
}
