//! [`RedlockConfig`]: every option of the builder and of [`LockOptions`] as plain data, read
//! from a file through serde (feature `serde`) or from `REDLOCK_*` environment variables.
//!
//! One list declares the options (the `options!` invocations below): from it come the structs,
//! their serde `Deserialize`, and the environment variables, so an option added to the list is
//! read from files and from the environment alike. Each option's type ([`Value`]) knows its
//! form in both.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use crate::error::BuildError;
use crate::mode::Mode;
use crate::options::LockOptions;

/// Every environment variable [`RedlockConfig::from_env`] reads starts with this, followed by
/// the option's name in upper case (`ttl` → `REDLOCK_TTL`).
pub const ENV_PREFIX: &str = "REDLOCK_";

/// Declares a configuration struct from one list: its options, each an `Option<T>` field
/// (`None` keeps the builder's value) whose `T` is a [`Value`], then its sections (nested
/// structs declared the same way, read as tables from files and flat from the environment).
/// It derives the struct (with `Deserialize` under the `serde` feature), a `Debug` that shows
/// no credential, and [`Options`]: the names and the setting from the environment's text.
macro_rules! options {
    (
        $(#[$meta:meta])*
        pub struct $name:ident {
            $( $(#[$doc:meta])* $field:ident: $ty:ty, )*
        }
        sections {
            $( $(#[$section_doc:meta])* $section:ident: $section_ty:ty, )*
        }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Default, PartialEq)]
        #[cfg_attr(feature = "serde", derive(serde::Deserialize))]
        #[cfg_attr(feature = "serde", serde(deny_unknown_fields))]
        #[non_exhaustive]
        pub struct $name {
            $(
                $(#[$doc])*
                #[cfg_attr(feature = "serde", serde(default, deserialize_with = "deserialize_option"))]
                pub $field: Option<$ty>,
            )*
            $(
                $(#[$section_doc])*
                #[cfg_attr(feature = "serde", serde(default))]
                pub $section: $section_ty,
            )*
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                let mut out = f.debug_struct(stringify!($name));
                $( out.field(stringify!($field), &self.$field.as_ref().map(Shown)); )*
                $( out.field(stringify!($section), &self.$section); )*
                out.finish()
            }
        }

        impl Options for $name {
            #[cfg(test)]
            const FIELDS: &'static [&'static str] = &[$(stringify!($field)),*];
            #[cfg(test)]
            const SECTIONS: &'static [&'static str] = &[$(stringify!($section)),*];

            fn names(out: &mut Vec<(&'static str, &'static str)>) {
                $( out.push((stringify!($field), <$ty as Value>::EXPECTED)); )*
                $( <$section_ty as Options>::names(out); )*
            }

            fn set(&mut self, name: &str, text: &str) -> Option<Result<(), String>> {
                $(
                    if name == stringify!($field) {
                        return Some(<$ty as Value>::parse(text).map(|v| self.$field = Some(v)));
                    }
                )*
                $(
                    if let Some(done) = self.$section.set(name, text) {
                        return Some(done);
                    }
                )*
                None
            }
        }
    };
}

options! {
    /// Every option of [`RedlockBuilder`](crate::RedlockBuilder), its default
    /// [`LockOptions`] in [`lock`](Self::lock), as plain data: load it from a file with serde
    /// (feature `serde`; `figment`, `config` or a format crate such as `toml`) or from the
    /// environment ([`from_env`](Self::from_env)), then give it to
    /// [`RedlockBuilder::config`](crate::RedlockBuilder::config).
    ///
    /// Every field is optional: `None` (absent from the file, unset or empty in the
    /// environment) keeps the builder's value, so configurations layer (the last one given
    /// wins, field by field). Durations are [`humantime`] strings: `"250ms"`, `"30s"`,
    /// `"1h 30m"`. Unknown fields are an error (a misspelt option is never ignored). Values
    /// are range-checked by [`build`](crate::RedlockBuilder::build), with the builder's errors
    /// ([`BuildError::Invalid`], [`BuildError::Option`]), before anything is sent.
    ///
    /// In a file (TOML here), the lock options are the table `[lock]`:
    ///
    /// ```
    /// # #[cfg(feature = "serde")]
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use std::time::Duration;
    /// use redlock_core::{Redlock, RedlockConfig, Wait};
    ///
    /// let config: RedlockConfig = toml::from_str(r#"
    ///     nodes = ["redis://10.0.0.1:6379", "redis://10.0.0.2:6379", "redis://10.0.0.3:6379"]
    ///     key_prefix = "lock:"
    ///     node_timeout = "50ms"
    ///
    ///     [lock]
    ///     ttl = "10s"
    ///     wait_timeout = "forever"
    /// "#)?;
    /// assert_eq!(config.lock.ttl, Some(Duration::from_secs(10)));
    /// assert_eq!(config.lock.wait_timeout, Some(Wait::Forever));
    /// let builder = Redlock::builder().config(config); // then `.build().await?`
    /// # Ok(()) }
    /// # #[cfg(not(feature = "serde"))]
    /// # fn main() {}
    /// ```
    ///
    /// In the environment, each option is one variable, the lock options included
    /// ([`ENV_PREFIX`] and the option's name in upper case; [`env_vars`](Self::env_vars) lists
    /// them):
    ///
    /// | variable | option | form |
    /// |---|---|---|
    /// | `REDLOCK_NODES` | [`nodes`](Self::nodes) | comma-separated node URLs |
    /// | `REDLOCK_KEY_PREFIX` | [`key_prefix`](Self::key_prefix) | text |
    /// | `REDLOCK_NODE_TIMEOUT` | [`node_timeout`](Self::node_timeout) | duration |
    /// | `REDLOCK_CONNECT_TIMEOUT` | [`connect_timeout`](Self::connect_timeout) | duration |
    /// | `REDLOCK_REQUIRE_QUORUM_AT_START` | [`require_quorum_at_start`](Self::require_quorum_at_start) | `true` or `false` |
    /// | `REDLOCK_HANDOVER_GRACE` | [`handover_grace`](Self::handover_grace) | duration |
    /// | `REDLOCK_FOREIGN_WINDOW` | [`foreign_window`](Self::foreign_window) | duration |
    /// | `REDLOCK_QUARANTINE` | [`quarantine`](Self::quarantine) | duration |
    /// | `REDLOCK_FENCING_COUNTER_TTL` | [`fencing_counter_ttl`](Self::fencing_counter_ttl) | duration |
    /// | `REDLOCK_NODE_SET_CHECK` | [`node_set_check`](Self::node_set_check) | `true` or `false` |
    /// | `REDLOCK_TLS_CA` | [`tls_ca`](Self::tls_ca) | file path, or PEM text |
    /// | `REDLOCK_TLS_CLIENT_CERT` | [`tls_client_cert`](Self::tls_client_cert) | file path, or PEM text |
    /// | `REDLOCK_TLS_CLIENT_KEY` | [`tls_client_key`](Self::tls_client_key) | file path, or PEM text |
    /// | `REDLOCK_TTL` | [`lock.ttl`](LockConfig::ttl) | duration |
    /// | `REDLOCK_RETRY_COUNT` | [`lock.retry_count`](LockConfig::retry_count) | whole number |
    /// | `REDLOCK_RETRY_DELAY` | [`lock.retry_delay`](LockConfig::retry_delay) | duration |
    /// | `REDLOCK_RETRY_JITTER` | [`lock.retry_jitter`](LockConfig::retry_jitter) | duration |
    /// | `REDLOCK_WAIT_TIMEOUT` | [`lock.wait_timeout`](LockConfig::wait_timeout) | duration, or `forever` |
    /// | `REDLOCK_DRIFT_FACTOR` | [`lock.drift_factor`](LockConfig::drift_factor) | number |
    /// | `REDLOCK_AUTO_EXTEND` | [`lock.auto_extend`](LockConfig::auto_extend) | `true` or `false` |
    /// | `REDLOCK_EXTEND_FRACTION` | [`lock.extend_fraction`](LockConfig::extend_fraction) | number |
    /// | `REDLOCK_MAX_HOLD` | [`lock.max_hold`](LockConfig::max_hold) | duration |
    /// | `REDLOCK_MAX_EXTENSIONS` | [`lock.max_extensions`](LockConfig::max_extensions) | whole number |
    /// | `REDLOCK_LOCK_AT_LEAST_FOR` | [`lock.lock_at_least_for`](LockConfig::lock_at_least_for) | duration (a `LockConfig` of one resource; as the handle's default, `build()` refuses it) |
    /// | `REDLOCK_LOST_MARGIN` | [`lock.lost_margin`](LockConfig::lost_margin) | duration |
    /// | `REDLOCK_FENCING` | [`lock.fencing`](LockConfig::fencing) | `true` or `false` |
    /// | `REDLOCK_REENTRANT` | [`lock.reentrant`](LockConfig::reentrant) | `true` or `false` |
    /// | `REDLOCK_MODE` | [`lock.mode`](LockConfig::mode) | lock mode: `read`, `write`, `NL` … `EX` (a `LockConfig` of one resource; as the handle's default, `build()` refuses it) |
    ///
    /// `Debug` shows how many node URLs there are, not the URLs (they may hold passwords),
    /// nor PEM text.
    pub struct RedlockConfig {
        /// The node URLs ([`RedlockBuilder::node`](crate::RedlockBuilder::node)): they replace
        /// the URLs given to the builder before (clients given with
        /// [`client`](crate::RedlockBuilder::client) stay).
        nodes: Vec<String>,
        /// [`RedlockBuilder::key_prefix`](crate::RedlockBuilder::key_prefix).
        key_prefix: String,
        /// [`RedlockBuilder::node_timeout`](crate::RedlockBuilder::node_timeout).
        node_timeout: Duration,
        /// [`RedlockBuilder::connect_timeout`](crate::RedlockBuilder::connect_timeout).
        connect_timeout: Duration,
        /// [`RedlockBuilder::require_quorum_at_start`](crate::RedlockBuilder::require_quorum_at_start).
        require_quorum_at_start: bool,
        /// [`RedlockBuilder::handover_grace`](crate::RedlockBuilder::handover_grace).
        handover_grace: Duration,
        /// [`RedlockBuilder::foreign_window`](crate::RedlockBuilder::foreign_window).
        foreign_window: Duration,
        /// [`RedlockBuilder::quarantine`](crate::RedlockBuilder::quarantine).
        quarantine: Duration,
        /// [`RedlockBuilder::fencing_counter_ttl`](crate::RedlockBuilder::fencing_counter_ttl).
        fencing_counter_ttl: Duration,
        /// [`RedlockBuilder::node_set_check`](crate::RedlockBuilder::node_set_check).
        node_set_check: bool,
        /// The CA certificates to trust for `rediss://` nodes, PEM
        /// (`RedlockBuilder::tls_ca_pem`, with a TLS feature). Needs the
        /// `tls-rustls` or `tls-native` feature: without one,
        /// [`build`](crate::RedlockBuilder::build) fails with [`BuildError::Option`].
        tls_ca: PemSource,
        /// The client certificate chain for `rediss://` nodes, PEM, with
        /// [`tls_client_key`](Self::tls_client_key)
        /// (`RedlockBuilder::tls_client_pem`): give
        /// both or neither ([`BuildError::Tls`] otherwise).
        tls_client_cert: PemSource,
        /// The client certificate's PKCS#8 key, PEM (see
        /// [`tls_client_cert`](Self::tls_client_cert)).
        tls_client_key: PemSource,
    }
    sections {
        /// The default lock options
        /// ([`RedlockBuilder::lock_options`](crate::RedlockBuilder::lock_options)): the
        /// options set here replace those of the builder's defaults.
        lock: LockConfig,
    }
}

options! {
    /// Every option of [`LockOptions`], as plain data: the `[lock]` table of a
    /// [`RedlockConfig`], or one of your own for the options of one resource (then
    /// [`apply`](Self::apply) it to the handle's defaults, and lock with
    /// [`Redlock::lock_with`](crate::Redlock::lock_with)). `None` keeps the value it is
    /// applied to. Checked by [`LockOptions::validate`] (at build, or when locking).
    pub struct LockConfig {
        /// [`LockOptions::ttl`].
        ttl: Duration,
        /// [`LockOptions::retry_count`].
        retry_count: u32,
        /// [`LockOptions::retry_delay`].
        retry_delay: Duration,
        /// [`LockOptions::retry_jitter`].
        retry_jitter: Duration,
        /// [`LockOptions::wait_timeout`], or [`LockOptions::wait_forever`] (`"forever"`).
        wait_timeout: Wait,
        /// [`LockOptions::drift_factor`].
        drift_factor: f64,
        /// [`LockOptions::auto_extend`].
        auto_extend: bool,
        /// [`LockOptions::extend_fraction`].
        extend_fraction: f64,
        /// [`LockOptions::max_hold`].
        max_hold: Duration,
        /// [`LockOptions::max_extensions`].
        max_extensions: u32,
        /// [`LockOptions::lock_at_least_for`]. For the options of one resource
        /// ([`apply`](Self::apply)): as the handle's default, it fails
        /// [`build`](crate::RedlockBuilder::build) with [`BuildError::Option`].
        lock_at_least_for: Duration,
        /// [`LockOptions::lost_margin`].
        lost_margin: Duration,
        /// [`LockOptions::fencing`].
        fencing: bool,
        /// [`LockOptions::reentrant`].
        reentrant: bool,
        /// [`LockOptions::mode`]: `read`, `write`, or `NL`, `CR`, `CW`, `PR`, `PW`, `EX` (or
        /// their names: see [`Mode`]). For the options of one resource
        /// ([`apply`](Self::apply)): as the handle's default, in a [`RedlockConfig`], it fails
        /// [`build`](crate::RedlockBuilder::build) with [`BuildError::Option`], since it would
        /// make every lock of the handle shared.
        mode: Mode,
    }
    sections {}
}

impl LockConfig {
    /// `options` with every option set here replacing its value.
    #[must_use]
    pub fn apply(self, options: LockOptions) -> LockOptions {
        let Self {
            ttl,
            retry_count,
            retry_delay,
            retry_jitter,
            wait_timeout,
            drift_factor,
            auto_extend,
            extend_fraction,
            max_hold,
            max_extensions,
            lock_at_least_for,
            lost_margin,
            fencing,
            reentrant,
            mode,
        } = self;
        options
            .set_if(ttl, LockOptions::ttl)
            .set_if(retry_count, LockOptions::retry_count)
            .set_if(retry_delay, LockOptions::retry_delay)
            .set_if(retry_jitter, LockOptions::retry_jitter)
            .set_if(wait_timeout, |options, wait| match wait {
                Wait::For(wait) => options.wait_timeout(wait),
                Wait::Forever => options.wait_forever(),
            })
            .set_if(drift_factor, LockOptions::drift_factor)
            .set_if(auto_extend, LockOptions::auto_extend)
            .set_if(extend_fraction, LockOptions::extend_fraction)
            .set_if(max_hold, LockOptions::max_hold)
            .set_if(max_extensions, LockOptions::max_extensions)
            .set_if(lock_at_least_for, LockOptions::lock_at_least_for)
            .set_if(lost_margin, LockOptions::lost_margin)
            .set_if(fencing, LockOptions::fencing)
            .set_if(reentrant, LockOptions::reentrant)
            .set_if(mode, LockOptions::mode)
    }
}

/// One environment variable read by [`RedlockConfig::from_env`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct EnvVar {
    /// The variable, e.g. `REDLOCK_TTL`.
    pub name: String,
    /// The option it sets, as named in [`RedlockConfig`] or [`LockConfig`], e.g. `ttl`.
    pub option: &'static str,
    /// The form its value takes, e.g. "a duration such as 250ms, 30s or 1h 30m".
    pub expected: &'static str,
}

impl RedlockConfig {
    /// The environment variables [`from_env`](Self::from_env) reads, one per option, in the
    /// order of the table above.
    pub fn env_vars() -> Vec<EnvVar> {
        let mut names = Vec::new();
        Self::names(&mut names);
        names
            .into_iter()
            .map(|(option, expected)| EnvVar {
                name: format!("{ENV_PREFIX}{}", option.to_ascii_uppercase()),
                option,
                expected,
            })
            .collect()
    }

    /// The options set in the process environment (the table above); an unset or empty
    /// variable leaves its option `None`.
    ///
    /// # Errors
    /// [`BuildError::Env`] for the first variable (in the table's order) that is malformed
    /// or not valid UTF-8. Its value is never shown.
    pub fn from_env() -> Result<Self, BuildError> {
        Self::read_env(|name| match std::env::var(name) {
            Ok(value) => Ok(Some(value)),
            Err(std::env::VarError::NotPresent) => Ok(None),
            Err(std::env::VarError::NotUnicode(_)) => Err("not valid UTF-8".to_owned()),
        })
    }

    /// [`from_env`](Self::from_env), with `lookup` giving each variable's value instead of the
    /// process environment (a map in tests, a secrets store...).
    ///
    /// # Errors
    /// [`BuildError::Env`] for the first variable that is malformed.
    pub fn from_env_with(
        mut lookup: impl FnMut(&str) -> Option<String>,
    ) -> Result<Self, BuildError> {
        Self::read_env(|name| Ok(lookup(name)))
    }

    fn read_env(
        mut lookup: impl FnMut(&str) -> Result<Option<String>, String>,
    ) -> Result<Self, BuildError> {
        let mut config = Self::default();
        for var in Self::env_vars() {
            let malformed = |reason| BuildError::Env {
                var: var.name.clone(),
                expected: var.expected,
                reason,
            };
            let Some(text) = lookup(&var.name)
                .map_err(malformed)?
                .filter(|text| !text.trim().is_empty())
            else {
                continue;
            };
            if let Some(set) = config.set(var.option, &text) {
                set.map_err(malformed)?;
            }
        }
        Ok(config)
    }
}

/// How long to wait for a busy lock ([`LockConfig::wait_timeout`]): a duration, or `"forever"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wait {
    /// [`LockOptions::wait_timeout`] with this duration.
    For(Duration),
    /// [`LockOptions::wait_forever`].
    Forever,
}

/// PEM text, or the file it is in ([`RedlockConfig::tls_ca`] and its siblings). From text, a
/// value that starts with `-----BEGIN` is the PEM itself, anything else a path. Files are read
/// when the configuration is given to the builder. `Debug` never shows the PEM (a key may be
/// in it).
#[derive(Clone, PartialEq, Eq)]
pub enum PemSource {
    /// A file holding PEM.
    File(PathBuf),
    /// The PEM text itself.
    Pem(String),
}

impl fmt::Debug for PemSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::File(path) => write!(f, "File({})", crate::error::shown_path(path)),
            Self::Pem(text) => write!(f, "Pem(<{} bytes>)", text.len()),
        }
    }
}

impl PemSource {
    /// The PEM bytes: the text, or the file's content.
    ///
    /// # Errors
    /// [`BuildError::ReadFile`] naming `option` if the file cannot be read.
    #[cfg(any(feature = "tls-rustls", feature = "tls-native"))]
    pub(crate) fn read(self, option: &'static str) -> Result<Vec<u8>, BuildError> {
        match self {
            Self::Pem(text) => Ok(text.into_bytes()),
            Self::File(path) => std::fs::read(&path).map_err(|source| BuildError::ReadFile {
                option,
                path: crate::error::ConfigPath(path),
                source,
            }),
        }
    }
}

/// The URLs in comma-separated `text`, blanks left out.
pub(crate) fn node_urls(text: &str) -> Vec<String> {
    text.split(',')
        .map(str::trim)
        .filter(|url| !url.is_empty())
        .map(str::to_owned)
        .collect()
}

/// `target`, with `setter` applied when `value` is set: a configuration's `None` keeps the
/// value.
pub(crate) trait SetIf: Sized {
    #[must_use]
    fn set_if<T>(self, value: Option<T>, setter: impl FnOnce(Self, T) -> Self) -> Self {
        match value {
            Some(value) => setter(self, value),
            None => self,
        }
    }
}

impl<S> SetIf for S {}

/// A struct declared by `options!`.
trait Options {
    /// Its own options' names, in order.
    #[cfg(test)]
    const FIELDS: &'static [&'static str];
    /// Its sections' names, in order.
    #[cfg(test)]
    const SECTIONS: &'static [&'static str];
    /// Every option's name and expected form, its sections' included, in order.
    fn names(out: &mut Vec<(&'static str, &'static str)>);
    /// Sets the option `name` (its own or a section's) from the environment's `text`; `None`
    /// if it has no such option.
    fn set(&mut self, name: &str, text: &str) -> Option<Result<(), String>>;
}

/// A type an option takes: its form in the environment and in a serde format, and how it
/// shows in `Debug`.
trait Value: Sized + fmt::Debug {
    /// The form it takes, for error messages and [`EnvVar::expected`].
    const EXPECTED: &'static str;

    /// Parses the environment's text. The reason for a failure never quotes the text.
    fn parse(text: &str) -> Result<Self, String>;

    /// Reads it from a serde format: by default a string, parsed as [`parse`](Self::parse)
    /// does.
    #[cfg(feature = "serde")]
    fn deserialize<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_str(TextVisitor(std::marker::PhantomData))
    }

    /// How it shows in the configuration's `Debug`.
    fn shown(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

/// A value shown by [`Value::shown`].
struct Shown<'a, T>(&'a T);

impl<T: Value> fmt::Debug for Shown<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.shown(f)
    }
}

impl Value for Vec<String> {
    const EXPECTED: &'static str =
        "comma-separated node URLs, e.g. redis://10.0.0.1:6379,redis://10.0.0.2:6379";

    fn parse(text: &str) -> Result<Self, String> {
        let urls = node_urls(text);
        if urls.is_empty() {
            return Err("no node URL between the commas".to_owned());
        }
        Ok(urls)
    }

    #[cfg(feature = "serde")]
    fn deserialize<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        serde::Deserialize::deserialize(deserializer)
    }

    // Node URLs may hold passwords.
    fn shown(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "<{} node URLs>", self.len())
    }
}

impl Value for String {
    const EXPECTED: &'static str = "text";

    fn parse(text: &str) -> Result<Self, String> {
        Ok(text.to_owned())
    }

    #[cfg(feature = "serde")]
    fn deserialize<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        serde::Deserialize::deserialize(deserializer)
    }
}

impl Value for Duration {
    const EXPECTED: &'static str = "a duration such as 250ms, 30s or 1h 30m";

    fn parse(text: &str) -> Result<Self, String> {
        use humantime::DurationError as E;
        humantime::parse_duration(text.trim()).map_err(|error| match error {
            E::InvalidCharacter(at) => format!("invalid character at byte {at}"),
            E::NumberExpected(at) => format!("a number expected at byte {at}"),
            E::UnknownUnit { start, .. } => format!(
                "missing or unknown time unit at byte {start} (units: ns, us, ms, s, m, h, d)"
            ),
            E::NumberOverflow => "too large".to_owned(),
            E::Empty => "empty".to_owned(),
        })
    }
}

impl Value for Wait {
    const EXPECTED: &'static str = "a duration such as 250ms, 30s or 1h 30m, or forever";

    fn parse(text: &str) -> Result<Self, String> {
        if text.trim().eq_ignore_ascii_case("forever") {
            return Ok(Wait::Forever);
        }
        Duration::parse(text).map(Wait::For)
    }
}

impl Value for u32 {
    const EXPECTED: &'static str = "a whole number from 0 to 4294967295";

    fn parse(text: &str) -> Result<Self, String> {
        text.trim()
            .parse()
            .map_err(|e: std::num::ParseIntError| e.to_string())
    }

    #[cfg(feature = "serde")]
    fn deserialize<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        serde::Deserialize::deserialize(deserializer)
    }
}

impl Value for f64 {
    const EXPECTED: &'static str = "a number such as 0.01";

    fn parse(text: &str) -> Result<Self, String> {
        text.trim()
            .parse()
            .map_err(|e: std::num::ParseFloatError| e.to_string())
    }

    #[cfg(feature = "serde")]
    fn deserialize<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        serde::Deserialize::deserialize(deserializer)
    }
}

impl Value for bool {
    const EXPECTED: &'static str = "true or false";

    fn parse(text: &str) -> Result<Self, String> {
        match text.trim().to_ascii_lowercase().as_str() {
            "true" | "1" => Ok(true),
            "false" | "0" => Ok(false),
            _ => Err("not a boolean".to_owned()),
        }
    }

    #[cfg(feature = "serde")]
    fn deserialize<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        serde::Deserialize::deserialize(deserializer)
    }
}

impl Value for Mode {
    const EXPECTED: &'static str = "a lock mode: read, write, or one of NL, CR, CW, PR, PW, EX";

    fn parse(text: &str) -> Result<Self, String> {
        text.trim()
            .parse()
            .map_err(|_| "not a lock mode".to_owned())
    }
}

impl Value for PemSource {
    const EXPECTED: &'static str = "a file path, or PEM text (-----BEGIN ...)";

    /// PEM when it holds a `-----BEGIN` line anywhere or spans lines (PEM after `Bag
    /// Attributes`, behind a quote or a byte-order mark); a path otherwise. Either way an
    /// error never quotes it when it may be a key ([`shown_path`](crate::error::shown_path)).
    fn parse(text: &str) -> Result<Self, String> {
        Ok(
            if text.contains("-----BEGIN") || text.contains(['\n', '\r']) {
                PemSource::Pem(text.to_owned())
            } else {
                PemSource::File(PathBuf::from(text))
            },
        )
    }
}

/// Reads an option's field: absent or null is `None`, anything else is read as its
/// [`Value`].
#[cfg(feature = "serde")]
fn deserialize_option<'de, D, T>(deserializer: D) -> Result<Option<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Value,
{
    struct Read<T>(T);
    impl<'de, T: Value> serde::Deserialize<'de> for Read<T> {
        fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
            T::deserialize(deserializer).map(Read)
        }
    }
    let read: Option<Read<T>> = serde::Deserialize::deserialize(deserializer)?;
    Ok(read.map(|Read(value)| value))
}

/// Reads a string with [`Value::parse`].
#[cfg(feature = "serde")]
struct TextVisitor<T>(std::marker::PhantomData<T>);

#[cfg(feature = "serde")]
impl<T: Value> serde::de::Visitor<'_> for TextVisitor<T> {
    type Value = T;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(T::EXPECTED)
    }

    fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<T, E> {
        T::parse(text)
            .map_err(|reason| E::custom(format_args!("expected {} ({reason})", T::EXPECTED)))
    }
}

#[cfg(test)]
mod tests {

    use std::collections::{BTreeSet, HashMap};

    use super::*;
    use crate::builder::RedlockBuilder;

    /// The field names at the top of a derived `Debug` (`Name { a: .., b: Inner { .. } }`).
    fn debug_fields(debug: &str) -> BTreeSet<String> {
        let body = &debug[debug.find('{').unwrap() + 1..];
        let (mut depth, mut in_value, mut token) = (0, false, String::new());
        let mut names = BTreeSet::new();
        for c in body.chars() {
            match c {
                '{' | '[' | '(' => depth += 1,
                '}' | ']' | ')' => depth -= 1,
                ':' if depth == 0 && !in_value => {
                    names.insert(token.trim().to_owned());
                    in_value = true;
                }
                ',' if depth == 0 => (in_value, token) = (false, String::new()),
                _ if depth == 0 && !in_value => token.push(c),
                _ => {}
            }
        }
        names
    }

    fn set(names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|name| (*name).to_owned()).collect()
    }

    #[test]
    fn a_key_pasted_where_a_path_goes_is_never_shown() {
        const SECRET: &str = "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7VJTUt9Us8cKj";
        let pem = format!("-----BEGIN PRIVATE KEY-----\n{SECRET}\n-----END PRIVATE KEY-----\n");
        let inputs = [
            format!("Bag Attributes\n    localKeyID: 01\n{pem}"),
            format!("\u{feff}{pem}"),
            format!("\"{pem}\""),
            SECRET.repeat(4),
            format!("\u{feff}{SECRET}"),
            // A short key on one line (an Ed25519 PKCS#8 key is 64 characters).
            SECRET.to_owned(),
            format!("/{SECRET}"),
        ];
        for input in inputs {
            let source = PemSource::parse(&input).unwrap();
            let shown = format!("{source:?}");
            assert!(!shown.contains(&SECRET[..16]), "{shown}");
            if let PemSource::File(path) = &source {
                let error = BuildError::ReadFile {
                    option: "tls_client_key",
                    path: crate::error::ConfigPath(path.clone()),
                    source: std::io::Error::other("no such file"),
                };
                assert!(!error.to_string().contains(&SECRET[..16]), "{error}");
                assert!(!format!("{error:?}").contains(&SECRET[..16]), "{error:?}");
            }
        }
        // A plain path is shown as it is.
        let error = BuildError::ReadFile {
            option: "tls_ca",
            path: crate::error::ConfigPath(PathBuf::from("/etc/redis/ca.crt")),
            source: std::io::Error::other("no such file"),
        };
        assert!(error.to_string().contains("`/etc/redis/ca.crt`"), "{error}");
        assert!(
            format!("{error:?}").contains("`/etc/redis/ca.crt`"),
            "{error:?}"
        );
    }

    #[test]
    fn every_lock_option_is_in_the_config() {
        // A field added to LockOptions fails this until LockConfig has it too.
        // The metrics label a lock's code gives, not data to configure.
        const NOT_DATA: [&str; 1] = ["resource_class"];
        let mut options = debug_fields(&format!("{:?}", LockOptions::default()));
        assert_eq!(options.len(), 16, "{options:?}");
        options.retain(|field| !NOT_DATA.contains(&field.as_str()));
        assert_eq!(options, set(LockConfig::FIELDS));
    }

    #[test]
    fn every_builder_option_is_in_the_config() {
        // A field added to RedlockBuilder fails this until RedlockConfig has it, or it is
        // listed here as not configurable from data.
        const RENAMED: [(&str, &[&str]); 4] = [
            ("urls", &["nodes"]),
            ("options", &["lock"]),
            ("require_quorum", &["require_quorum_at_start"]),
            ("tls", &["tls_ca", "tls_client_cert", "tls_client_key"]),
        ];
        const NOT_DATA: [&str; 2] = [
            "clients",  // ready fred clients: code, not data
            "deferred", // the builder's first input error
        ];
        let mut expected: BTreeSet<String> =
            debug_fields(&format!("{:?}", RedlockBuilder::default()))
                .into_iter()
                .filter(|field| !NOT_DATA.contains(&field.as_str()))
                .flat_map(
                    |field| match RENAMED.iter().find(|(from, _)| *from == field) {
                        Some((_, to)) => to.iter().map(|name| (*name).to_owned()).collect(),
                        None => vec![field],
                    },
                )
                .collect();
        // Without a TLS feature the builder has no `tls` field; the configuration keeps its
        // TLS options (refused by `build`).
        expected.extend(set(&["tls_ca", "tls_client_cert", "tls_client_key"]));
        let mut config = set(RedlockConfig::FIELDS);
        config.extend(set(RedlockConfig::SECTIONS));
        assert_eq!(expected, config);
    }

    #[test]
    fn one_env_var_per_option_all_in_the_documented_table() {
        let vars = RedlockConfig::env_vars();
        let names: Vec<&str> = vars.iter().map(|var| var.name.as_str()).collect();
        assert_eq!(
            names.len(),
            RedlockConfig::FIELDS.len() + LockConfig::FIELDS.len()
        );
        assert_eq!(names.iter().collect::<BTreeSet<_>>().len(), names.len());
        assert_eq!(names[0], crate::builder::NODES_ENV);
        assert!(
            vars.iter()
                .any(|var| var.name == "REDLOCK_TTL" && var.option == "ttl")
        );
        // The rustdoc table of RedlockConfig lists exactly these, in this order.
        let documented: Vec<&str> = include_str!("config.rs")
            .lines()
            .filter_map(|line| line.trim().strip_prefix("/// | `REDLOCK_"))
            .map(|rest| &rest[..rest.find('`').unwrap()])
            .collect();
        let ours: Vec<&str> = names.iter().map(|n| &n[ENV_PREFIX.len()..]).collect();
        assert_eq!(documented, ours);
    }

    fn from_env(vars: &[(&str, &str)]) -> Result<RedlockConfig, BuildError> {
        let vars: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        RedlockConfig::from_env_with(|name| vars.get(name).cloned())
    }

    #[test]
    fn env_values_of_every_form_are_read() {
        let config = from_env(&[
            ("REDLOCK_NODES", " redis://a:1 , redis://b:2,,"),
            ("REDLOCK_KEY_PREFIX", "lock:"),
            ("REDLOCK_NODE_TIMEOUT", "250ms"),
            ("REDLOCK_CONNECT_TIMEOUT", " 1m 30s "),
            ("REDLOCK_REQUIRE_QUORUM_AT_START", "FALSE"),
            ("REDLOCK_QUARANTINE", ""), // empty: unset
            ("REDLOCK_TLS_CA", "/etc/ca.pem"),
            (
                "REDLOCK_TLS_CLIENT_CERT",
                "-----BEGIN CERTIFICATE-----\nAA==\n",
            ),
            ("REDLOCK_TTL", "10s"),
            ("REDLOCK_RETRY_COUNT", "7"),
            ("REDLOCK_WAIT_TIMEOUT", "Forever"),
            ("REDLOCK_DRIFT_FACTOR", "0.02"),
            ("REDLOCK_FENCING", "1"),
            ("REDLOCK_MODE", "read"),
        ])
        .unwrap();
        assert_eq!(
            config.nodes,
            Some(vec!["redis://a:1".to_owned(), "redis://b:2".to_owned()])
        );
        assert_eq!(config.key_prefix.as_deref(), Some("lock:"));
        assert_eq!(config.node_timeout, Some(Duration::from_millis(250)));
        assert_eq!(config.connect_timeout, Some(Duration::from_secs(90)));
        assert_eq!(config.require_quorum_at_start, Some(false));
        assert_eq!(config.quarantine, None);
        assert_eq!(config.tls_ca, Some(PemSource::File("/etc/ca.pem".into())));
        assert!(matches!(config.tls_client_cert, Some(PemSource::Pem(_))));
        assert_eq!(config.lock.ttl, Some(Duration::from_secs(10)));
        assert_eq!(config.lock.retry_count, Some(7));
        assert_eq!(config.lock.wait_timeout, Some(Wait::Forever));
        assert_eq!(config.lock.drift_factor, Some(0.02));
        assert_eq!(config.lock.fencing, Some(true));
        assert_eq!(config.lock.mode, Some(Mode::ProtectedRead));
        assert_eq!(config.lock.max_hold, None);
        let wait = from_env(&[("REDLOCK_WAIT_TIMEOUT", "2s")]).unwrap();
        assert_eq!(
            wait.lock.wait_timeout,
            Some(Wait::For(Duration::from_secs(2)))
        );
        assert_eq!(from_env(&[]).unwrap(), RedlockConfig::default());
    }

    /// The options whose environment text is taken as it is.
    const TAKE_ANY_TEXT: [&str; 5] = [
        "nodes",
        "key_prefix",
        "tls_ca",
        "tls_client_cert",
        "tls_client_key",
    ];

    #[test]
    fn a_malformed_env_value_names_its_variable_and_form_never_the_value() {
        // A secret in each way a value can be malformed: no number first, an unknown unit,
        // a character no form takes (each a different parser error).
        for secret in ["hunter2", "5hunter2", "5s§hunter2"] {
            let mut malformed = 0;
            for var in RedlockConfig::env_vars() {
                match from_env(&[(&var.name, secret)]) {
                    // Text, URLs and PEM sources take any text; URLs are checked by `build`,
                    // which never shows their credentials.
                    Ok(_) => assert!(
                        TAKE_ANY_TEXT.contains(&var.option),
                        "{} took {secret}",
                        var.name
                    ),
                    Err(error) => {
                        malformed += 1;
                        let BuildError::Env {
                            var: name,
                            expected,
                            ..
                        } = &error
                        else {
                            panic!("{error}")
                        };
                        assert_eq!((name, *expected), (&var.name, var.expected));
                        let shown = error.to_string();
                        assert!(
                            shown.contains(&var.name) && shown.contains(var.expected),
                            "{shown}"
                        );
                        assert!(!shown.contains("hunter"), "{shown}");
                    }
                }
            }
            assert_eq!(
                malformed,
                RedlockConfig::env_vars().len() - TAKE_ANY_TEXT.len(),
                "{secret}"
            );
        }
        for (var, value, reason) in [
            ("REDLOCK_RETRY_COUNT", "-1", "invalid digit"),
            ("REDLOCK_MAX_EXTENSIONS", "4294967296", "too large"),
            ("REDLOCK_TTL", "30", "missing or unknown time unit"),
            ("REDLOCK_TTL", "30 parsecs", "missing or unknown time unit"),
            ("REDLOCK_MAX_HOLD", "99999999999999999999y", "too large"),
            ("REDLOCK_WAIT_TIMEOUT", "never", "a number expected"),
            ("REDLOCK_AUTO_EXTEND", "yes please", "not a boolean"),
            ("REDLOCK_MODE", "shared", "not a lock mode"),
        ] {
            let error = from_env(&[(var, value)]).unwrap_err().to_string();
            assert!(error.contains(var) && error.contains(reason), "{error}");
        }
        // The first malformed variable in the table's order.
        let error = from_env(&[("REDLOCK_NODES", " , ,")])
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("REDLOCK_NODES") && error.contains("no node URL"),
            "{error}"
        );
        let error = from_env(&[("REDLOCK_MODE", "x"), ("REDLOCK_TTL", "x")]).unwrap_err();
        assert!(matches!(error, BuildError::Env { var, .. } if var == "REDLOCK_TTL"));
    }

    #[test]
    fn applying_keeps_what_the_config_leaves_unset() {
        let base = LockOptions::default()
            .ttl(Duration::from_secs(5))
            .fencing(true);
        let mut config = LockConfig::default();
        assert_eq!(config.clone().apply(base.clone()), base);
        config.retry_count = Some(9);
        config.wait_timeout = Some(Wait::Forever);
        let applied = config.apply(base);
        assert_eq!(applied.get_ttl(), Duration::from_secs(5));
        assert!(applied.get_fencing());
        assert_eq!(applied.get_retry_count(), 9);
        assert_eq!(applied.get_wait_timeout(), Some(Duration::MAX));
    }

    #[test]
    fn debug_shows_no_url_nor_pem() {
        let config = from_env(&[
            ("REDLOCK_NODES", "redis://u:hunter2@a:1,redis://b:2"),
            (
                "REDLOCK_TLS_CLIENT_KEY",
                "-----BEGIN PRIVATE KEY-----\nhunter2\n",
            ),
        ])
        .unwrap();
        let shown = format!("{config:?}");
        assert!(!shown.contains("hunter2"), "{shown}");
        assert!(shown.contains("<2 node URLs>"), "{shown}");
    }

    #[cfg(feature = "serde")]
    mod serde {
        use super::*;

        fn parse(text: &str) -> Result<RedlockConfig, String> {
            toml::from_str(text).map_err(|e| e.to_string())
        }

        #[test]
        fn a_full_file_is_read() {
            let config = parse(
                r#"
                nodes = ["redis://a:1", "redis://b:2", "redis://c:3"]
                key_prefix = "lock:"
                node_timeout = "50ms"
                connect_timeout = "3s"
                require_quorum_at_start = false
                handover_grace = "0s"
                foreign_window = "1s"
                quarantine = "1h"
                tls_ca = "/etc/redis/ca.pem"

                [lock]
                ttl = "10s"
                retry_count = 3
                retry_delay = "20ms"
                retry_jitter = "5ms"
                wait_timeout = "forever"
                drift_factor = 0.02
                auto_extend = true
                extend_fraction = 0.25
                max_hold = "10m"
                max_extensions = 100
                lost_margin = "500ms"
                fencing = true
                reentrant = true
                mode = "EX"
                "#,
            )
            .unwrap();
            assert_eq!(config.nodes.as_ref().map(Vec::len), Some(3));
            assert_eq!(config.handover_grace, Some(Duration::ZERO));
            assert_eq!(config.quarantine, Some(Duration::from_secs(3600)));
            assert_eq!(
                config.tls_ca,
                Some(PemSource::File("/etc/redis/ca.pem".into()))
            );
            assert_eq!(config.lock.max_hold, Some(Duration::from_secs(600)));
            assert_eq!(config.lock.wait_timeout, Some(Wait::Forever));
            assert_eq!(config.lock.mode, Some(Mode::Exclusive));
            let options = config.lock.clone().apply(LockOptions::default());
            assert_eq!(
                options,
                LockOptions::default()
                    .ttl(Duration::from_secs(10))
                    .retry_count(3)
                    .retry_delay(Duration::from_millis(20))
                    .retry_jitter(Duration::from_millis(5))
                    .wait_forever()
                    .drift_factor(0.02)
                    .auto_extend(true)
                    .extend_fraction(0.25)
                    .max_hold(Duration::from_secs(600))
                    .max_extensions(100)
                    .lost_margin(Duration::from_millis(500))
                    .fencing(true)
                    .reentrant(true)
                    .mode(Mode::Exclusive)
            );
            // The env form and the file form of one configuration are one value.
            let from_env = from_env(&[
                ("REDLOCK_NODES", "redis://a:1,redis://b:2,redis://c:3"),
                ("REDLOCK_KEY_PREFIX", "lock:"),
                ("REDLOCK_NODE_TIMEOUT", "50ms"),
                ("REDLOCK_CONNECT_TIMEOUT", "3s"),
                ("REDLOCK_REQUIRE_QUORUM_AT_START", "false"),
                ("REDLOCK_HANDOVER_GRACE", "0s"),
                ("REDLOCK_FOREIGN_WINDOW", "1s"),
                ("REDLOCK_QUARANTINE", "1h"),
                ("REDLOCK_TLS_CA", "/etc/redis/ca.pem"),
                ("REDLOCK_TTL", "10s"),
                ("REDLOCK_RETRY_COUNT", "3"),
                ("REDLOCK_RETRY_DELAY", "20ms"),
                ("REDLOCK_RETRY_JITTER", "5ms"),
                ("REDLOCK_WAIT_TIMEOUT", "forever"),
                ("REDLOCK_DRIFT_FACTOR", "0.02"),
                ("REDLOCK_AUTO_EXTEND", "true"),
                ("REDLOCK_EXTEND_FRACTION", "0.25"),
                ("REDLOCK_MAX_HOLD", "10m"),
                ("REDLOCK_MAX_EXTENSIONS", "100"),
                ("REDLOCK_LOST_MARGIN", "500ms"),
                ("REDLOCK_FENCING", "true"),
                ("REDLOCK_REENTRANT", "true"),
                ("REDLOCK_MODE", "EX"),
            ])
            .unwrap();
            assert_eq!(from_env, config);
        }

        #[test]
        fn every_field_is_optional() {
            assert_eq!(parse("").unwrap(), RedlockConfig::default());
            assert_eq!(parse("[lock]").unwrap(), RedlockConfig::default());
            let pem = parse("tls_client_key = \"-----BEGIN PRIVATE KEY-----\\nAA==\\n\"").unwrap();
            assert!(matches!(pem.tls_client_key, Some(PemSource::Pem(_))));
        }

        #[test]
        fn unknown_fields_are_refused() {
            for (text, field) in [
                ("node_timout = \"1s\"", "node_timout"),
                ("ttl = \"1s\"", "ttl"), // a lock option belongs in [lock]
                ("[lock]\nretries = 3", "retries"),
                ("[locks]\nttl = \"1s\"", "locks"),
            ] {
                let error = parse(text).unwrap_err();
                assert!(
                    error.contains("unknown field") && error.contains(field),
                    "{text}: {error}"
                );
            }
        }

        #[test]
        fn malformed_values_say_what_is_expected() {
            for (text, expected) in [
                ("node_timeout = \"fast\"", Duration::EXPECTED),
                ("node_timeout = 100", Duration::EXPECTED),
                ("[lock]\nwait_timeout = \"always\"", Wait::EXPECTED),
                ("[lock]\nmode = \"shared\"", Mode::EXPECTED),
                ("[lock]\nretry_count = -1", "u32"),
                ("[lock]\nfencing = \"yes\"", "a boolean"),
                ("nodes = \"redis://a:1\"", "a sequence"),
            ] {
                let error = parse(text).unwrap_err();
                assert!(error.contains(expected), "{text}: {error}");
            }
        }
    }
}
