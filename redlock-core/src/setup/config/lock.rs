//! [`LockConfig`]: the lock options as plain data, declared from the one list of lock options.
//!
//! The `lock_options!` invocation below is where each lock option is written once for the
//! configuration: its name, its type, the [`LockOptions`] setter that applies it, and its
//! doc. From that list come `LockConfig`'s fields, its
//! serde `Deserialize` (the `[lock]` table's keys), its `REDLOCK_*` variables
//! ([`RedlockConfig::env_vars`](super::RedlockConfig::env_vars)) and [`LockConfig::apply`].
//! The rest is bound by tests, which fail until an option added to one place is added to
//! all: `LockOptions`'s fields (`every_lock_option_is_in_the_config`), its setters
//! (`each_option_sets_its_own_field`), the environment table in
//! [`RedlockConfig`](super::RedlockConfig)'s docs, and the arguments of `#[redlock]`
//! (redlock-macros, `every_lock_option_is_an_argument_or_left_out_on_purpose`).

use std::time::Duration;

use super::SetIf;
use super::declare::options;
use crate::options::LockOptions;

/// Declares [`LockConfig`] from its list of options, each
/// `name: Type => setter;`: the field `name: Option<Type>` (through `options!`), and the
/// `setter` [`apply`](LockConfig::apply) calls with its value (a function of
/// `(LockOptions, Type)`); the tests check that it sets `LockOptions`' field of the same
/// name.
macro_rules! lock_options {
    (
        $(#[$meta:meta])*
        pub struct LockConfig {
            $( $(#[$doc:meta])* $field:ident: $ty:ty => $set:expr; )*
        }
    ) => {
        options! {
            $(#[$meta])*
            pub struct LockConfig {
                $( $(#[$doc])* $field: $ty, )*
            }
            sections {}
        }

        impl LockConfig {
            /// `options` with every option set here replacing its value.
            #[must_use]
            pub fn apply(self, options: LockOptions) -> LockOptions {
                let Self { $($field),* } = self;
                options $( .set_if($field, $set) )*
            }

            /// For each option, its name and a configuration that sets it alone, to a value
            /// other than its default.
            #[cfg(test)]
            fn each_alone() -> Vec<(&'static str, Self)> {
                vec![$((
                    stringify!($field),
                    Self {
                        $field: Some(<$ty as tests::Sample>::SAMPLE),
                        ..Self::default()
                    },
                )),*]
            }

            /// For each option, its name and the field of the same name in `options`, shown.
            #[cfg(test)]
            fn read_back(options: &LockOptions) -> Vec<(&'static str, String)> {
                vec![$((stringify!($field), format!("{:?}", options.$field))),*]
            }
        }
    };
}

lock_options! {
    /// Every option of [`LockOptions`], as plain data: the `[lock]` table of a
    /// [`RedlockConfig`](crate::RedlockConfig), or one of your own for the options of one
    /// resource (then [`apply`](Self::apply) it to the handle's defaults, and lock with
    /// [`Redlock::lock_with`](crate::Redlock::lock_with)). `None` keeps the value it is
    /// applied to. Checked by [`LockOptions::validate`] (at build, or when locking).
    pub struct LockConfig {
        /// [`LockOptions::ttl`].
        ttl: Duration => LockOptions::ttl;
        /// [`LockOptions::retry_count`].
        retry_count: u32 => LockOptions::retry_count;
        /// [`LockOptions::retry_delay`].
        retry_delay: Duration => LockOptions::retry_delay;
        /// [`LockOptions::retry_jitter`].
        retry_jitter: Duration => LockOptions::retry_jitter;
        /// [`LockOptions::wait_timeout`], or [`LockOptions::wait_forever`] (`"forever"`).
        wait_timeout: Duration => LockOptions::wait_timeout;
        /// [`LockOptions::drift_factor`].
        drift_factor: f64 => LockOptions::drift_factor;
        /// [`LockOptions::auto_extend`].
        auto_extend: bool => LockOptions::auto_extend;
        /// [`LockOptions::extend_fraction`].
        extend_fraction: f64 => LockOptions::extend_fraction;
        /// [`LockOptions::max_hold`].
        max_hold: Duration => LockOptions::max_hold;
        /// [`LockOptions::max_extensions`].
        max_extensions: u32 => LockOptions::max_extensions;
        /// [`LockOptions::lock_at_least_for`]. For the options of one resource
        /// ([`apply`](Self::apply)): as the handle's default, it fails
        /// [`build`](crate::RedlockBuilder::build) with
        /// [`BuildError::Option`](crate::BuildError::Option).
        lock_at_least_for: Duration =>
            LockOptions::lock_at_least_for;
        /// [`LockOptions::lost_margin`].
        lost_margin: Duration => LockOptions::lost_margin;
        /// [`LockOptions::fencing`].
        fencing: bool => LockOptions::fencing;
        /// [`LockOptions::reentrant`].
        reentrant: bool => LockOptions::reentrant;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::setup::config::declare::Options;
    use crate::setup::config::{debug_fields, set};

    /// A value of each option type other than the default of any option of that type.
    pub(super) trait Sample {
        const SAMPLE: Self;
    }

    impl Sample for Duration {
        const SAMPLE: Self = Duration::from_secs(7);
    }

    impl Sample for u32 {
        const SAMPLE: Self = 7;
    }

    impl Sample for f64 {
        const SAMPLE: Self = 0.25;
    }

    impl Sample for bool {
        const SAMPLE: Self = true;
    }

    #[test]
    fn every_lock_option_is_in_the_config() {
        // A field added to LockOptions fails this until LockConfig has it too.
        // The metrics label a lock's code gives, not data to configure.
        const NOT_DATA: [&str; 1] = ["resource_class"];
        let mut options = debug_fields(&format!("{:?}", LockOptions::default()));
        assert_eq!(options.len(), 15, "{options:?}");
        options.retain(|field| !NOT_DATA.contains(&field.as_str()));
        assert_eq!(options, set(LockConfig::FIELDS));
    }

    #[test]
    fn each_option_sets_its_own_field() {
        // A setter in the list that sets another field than its own (or none, or more)
        // fails this; a field missing from LockOptions fails to compile.
        let default = LockOptions::default();
        let before = LockConfig::read_back(&default);
        assert_eq!(before.len(), LockConfig::FIELDS.len());
        for (name, config) in LockConfig::each_alone() {
            let applied = config.apply(default.clone());
            let after = LockConfig::read_back(&applied);
            let changed: Vec<&str> = before
                .iter()
                .zip(&after)
                .filter(|(before, after)| before != after)
                .map(|((option, _), _)| *option)
                .collect();
            assert_eq!(changed, [name], "{name} set these fields of LockOptions");
        }
    }

    #[test]
    fn applying_keeps_what_the_config_leaves_unset() {
        let base = LockOptions::default()
            .ttl(Duration::from_secs(5))
            .fencing(true);
        let mut config = LockConfig::default();
        assert_eq!(config.clone().apply(base.clone()), base);
        config.retry_count = Some(9);
        config.wait_timeout = Some(Duration::MAX);
        let applied = config.apply(base);
        assert_eq!(applied.ttl, Duration::from_secs(5));
        assert!(applied.fencing);
        assert_eq!(applied.retry_count, 9);
        assert_eq!(applied.wait_timeout, Some(Duration::MAX));
    }
}
