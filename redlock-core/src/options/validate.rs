//! The checks of [`LockOptions::validate`], and the ttl and drift as the nodes see them.

use std::time::Duration;

use super::{LockOptions, MAX_TTL};
use crate::error::InvalidInput;
use crate::timing;

impl LockOptions {
    /// Checks the options on their own, before anything is sent.
    ///
    /// # Errors
    /// [`InvalidInput`] when the ttl is zero, above [`MAX_TTL`], or too short to leave any
    /// validity after the drift; when the drift factor is outside `[0, 0.5)`; when the lost
    /// margin is not shorter than `ttl − drift`; when the extension share is outside `(0, 1)`
    /// or leaves no time to extend before the margin; when `max_hold` is zero; when
    /// `lock_at_least_for` is longer than the ttl. What depends on the entry point (a minimum
    /// hold in a mode, a semaphore's permits) is checked there.
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
        let margin = self.lost_margin_in_effect();
        let validity = ttl - drift;
        if margin >= validity {
            return Err(InvalidInput::LostMargin { margin, validity });
        }
        if self.auto_extend {
            let fraction = self.extend_fraction;
            if !(fraction > 0.0 && fraction < 1.0 && ttl.mul_f64(fraction) < validity - margin) {
                return Err(InvalidInput::ExtendFraction {
                    fraction,
                    ttl,
                    margin,
                });
            }
        }
        if self.max_hold == Some(Duration::ZERO) {
            return Err(InvalidInput::ZeroMaxHold);
        }
        if let Some(at_least) = self.lock_at_least_for
            && at_least > ttl
        {
            return Err(InvalidInput::AtLeastAboveTtl { at_least, ttl });
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

    /// The clock drift allowance of a lock taken with these options: `ttl × drift_factor`
    /// plus [`DRIFT_FLOOR`](crate::DRIFT_FLOOR) (2 ms), from the ttl sent to the nodes. A lock's
    /// validity is `ttl − elapsed − drift` (distlock spec, steps 3–4, "Safety arguments":
    /// `CLOCK_DRIFT`). A drift factor that is not a number, negative or too large (which
    /// [`validate`](Self::validate) refuses) gives `Duration::MAX`: no validity.
    pub fn drift(&self) -> Duration {
        timing::drift(self.sent_ttl(), self.drift_factor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::options::MAX_DEFAULT_LOST_MARGIN;

    #[test]
    fn a_drift_factor_that_validate_refuses_never_panics_the_drift() {
        for factor in [f64::NAN, -0.5, f64::INFINITY, f64::MAX] {
            let options = LockOptions::default().drift_factor(factor);
            assert!(options.validate().is_err(), "{factor}");
            assert_eq!(options.drift(), Duration::MAX, "{factor}");
        }
    }

    #[test]
    fn waiting_forever_is_a_wait_of_duration_max_and_valid() {
        let forever = LockOptions::default().wait_forever();
        assert_eq!(forever.wait_timeout, Some(Duration::MAX));
        assert_eq!(forever.validate(), Ok(()));
    }

    #[test]
    fn defaults_are_valid_and_mirror_hyperf() {
        let options = LockOptions::default();
        options.validate().unwrap();
        assert_eq!(options.retry_count + 1, 2);
        assert_eq!(options.retry_delay, Duration::from_millis(200));
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
    fn lifecycle_options_are_checked() {
        let base = LockOptions::default().ttl(Duration::from_secs(1));
        assert_eq!(base.lost_margin_in_effect(), Duration::from_millis(100));
        assert_eq!(
            LockOptions::default().lost_margin_in_effect(),
            MAX_DEFAULT_LOST_MARGIN
        );
        assert!(matches!(
            base.clone().lost_margin(Duration::from_secs(1)).validate(),
            Err(InvalidInput::LostMargin { .. })
        ));
        for fraction in [0.0, 0.95, 1.0, f64::NAN] {
            assert!(matches!(
                base.clone()
                    .auto_extend(true)
                    .extend_fraction(fraction)
                    .validate(),
                Err(InvalidInput::ExtendFraction { .. })
            ));
            // Only checked when the lock is auto-extended.
            base.clone().extend_fraction(fraction).validate().unwrap();
        }
        base.clone().auto_extend(true).validate().unwrap();
        assert_eq!(
            base.max_hold(Duration::ZERO).validate(),
            Err(InvalidInput::ZeroMaxHold)
        );
    }
}
