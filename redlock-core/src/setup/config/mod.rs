//! [`RedlockConfig`]: every option of the builder and of [`LockOptions`] as plain data, read
//! from a file through serde (feature `serde`) or from `REDLOCK_*` environment variables.
//!
//! One list declares the options of each struct (the `options!` invocation below for the
//! builder's, the `lock_options!` one in `lock.rs` for the lock options'): from it come the
//! structs, their serde `Deserialize`, and the environment variables, so an option added to
//! the list is read from files and from the environment alike. Each option's type (`Value`,
//! in `parse.rs`) knows its form in both.
//!
//! - `declare.rs`: the `options!` macro, which turns a list into a struct.
//! - `lock.rs`: [`LockConfig`], the list of lock options.
//! - `parse.rs`: the value types, read from text and from serde; [`PemSource`].
//! - `env.rs`: the environment variables.

use std::time::Duration;

#[cfg(any(test, doc))]
use crate::error::BuildError;
#[cfg(doc)]
use crate::options::LockOptions;

pub(crate) mod declare;
mod env;
mod lock;
pub(crate) mod parse;

use declare::options;
pub(crate) use env::NODES_ENV;
pub use env::{ENV_PREFIX, EnvVar};
pub use lock::LockConfig;
pub use parse::PemSource;
pub(crate) use parse::node_urls;

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
    /// use redlock_core::{Redlock, RedlockConfig};
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
    /// assert_eq!(config.lock.wait_timeout, Some(Duration::MAX));
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
    /// | `REDLOCK_NODE_TIMEOUTS` | [`node_timeouts`](Self::node_timeouts) | comma-separated `URL=duration` pairs |
    /// | `REDLOCK_CONNECT_TIMEOUT` | [`connect_timeout`](Self::connect_timeout) | duration |
    /// | `REDLOCK_REQUIRE_QUORUM_AT_START` | [`require_quorum_at_start`](Self::require_quorum_at_start) | `true` or `false` |
    /// | `REDLOCK_HANDOVER_GRACE` | [`handover_grace`](Self::handover_grace) | duration |
    /// | `REDLOCK_FOREIGN_WINDOW` | [`foreign_window`](Self::foreign_window) | duration |
    /// | `REDLOCK_FOREIGN_CLIENTS` | [`foreign_clients`](Self::foreign_clients) | `true` or `false` |
    /// | `REDLOCK_QUARANTINE` | [`quarantine`](Self::quarantine) | duration |
    /// | `REDLOCK_FENCING_COUNTER_TTL` | [`fencing_counter_ttl`](Self::fencing_counter_ttl) | duration |
    /// | `REDLOCK_NODE_SET_CHECK` | [`node_set_check`](Self::node_set_check) | `true` or `false` |
    /// | `REDLOCK_OWNER` | [`owner`](Self::owner) | text |
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
        /// A time limit per node URL
        /// ([`RedlockBuilder::node_timeout_for`](crate::RedlockBuilder::node_timeout_for)): in a
        /// file a table (`[node_timeouts]`, `"redis://10.1.0.1:6379" = "300ms"`), in the
        /// environment `URL=duration` pairs separated by commas.
        node_timeouts: Vec<(String, Duration)>,
        /// [`RedlockBuilder::connect_timeout`](crate::RedlockBuilder::connect_timeout).
        connect_timeout: Duration,
        /// [`RedlockBuilder::require_quorum_at_start`](crate::RedlockBuilder::require_quorum_at_start).
        require_quorum_at_start: bool,
        /// [`RedlockBuilder::handover_grace`](crate::RedlockBuilder::handover_grace).
        handover_grace: Duration,
        /// [`RedlockBuilder::foreign_window`](crate::RedlockBuilder::foreign_window).
        foreign_window: Duration,
        /// [`RedlockBuilder::foreign_clients`](crate::RedlockBuilder::foreign_clients).
        foreign_clients: bool,
        /// [`RedlockBuilder::quarantine`](crate::RedlockBuilder::quarantine).
        quarantine: Duration,
        /// [`RedlockBuilder::fencing_counter_ttl`](crate::RedlockBuilder::fencing_counter_ttl).
        fencing_counter_ttl: Duration,
        /// [`RedlockBuilder::node_set_check`](crate::RedlockBuilder::node_set_check).
        node_set_check: bool,
        /// [`RedlockBuilder::owner`](crate::RedlockBuilder::owner).
        owner: String,
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

/// The field names at the top of a derived `Debug` (`Name { a: .., b: Inner { .. } }`).
#[cfg(test)]
fn debug_fields(debug: &str) -> std::collections::BTreeSet<String> {
    let body = &debug[debug.find('{').unwrap() + 1..];
    let (mut depth, mut in_value, mut token) = (0, false, String::new());
    let mut names = std::collections::BTreeSet::new();
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

/// `names` as a set.
#[cfg(test)]
fn set(names: &[&str]) -> std::collections::BTreeSet<String> {
    names.iter().map(|name| (*name).to_owned()).collect()
}

/// The configuration the environment `vars` give.
#[cfg(test)]
fn from_env(vars: &[(&str, &str)]) -> Result<RedlockConfig, BuildError> {
    let vars: std::collections::HashMap<String, String> = vars
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    RedlockConfig::from_env_with(|name| vars.get(name).cloned())
}

/// The configuration in the TOML `text`, or the error shown.
#[cfg(all(test, feature = "serde"))]
fn from_toml(text: &str) -> Result<RedlockConfig, String> {
    toml::from_str(text).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::declare::Options;
    use super::*;
    use crate::setup::builder::RedlockBuilder;

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
        const NOT_DATA: [&str; 3] = [
            "clients",    // ready fred clients: code, not data
            "transports", // transports of the user's: code, not data
            "deferred",   // the builder's first input error
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
    fn node_timeouts_come_as_pairs_from_the_environment_and_as_a_table_from_a_file() {
        let ms = Duration::from_millis;
        let config = from_env(&[(
            "REDLOCK_NODE_TIMEOUTS",
            "redis://a:1=300ms, redis://u:hunter2@b:2/0?x=y=1s",
        )])
        .unwrap();
        let expected = vec![
            ("redis://a:1".to_owned(), ms(300)),
            ("redis://u:hunter2@b:2/0?x=y".to_owned(), ms(1_000)),
        ];
        assert_eq!(config.node_timeouts.as_ref(), Some(&expected));
        assert!(!format!("{config:?}").contains("hunter2"), "{config:?}");
        let builder = RedlockBuilder::default().config(config);
        assert!(!format!("{builder:?}").contains("hunter2"), "{builder:?}");
        for bad in ["redis://a:1", "redis://a:1=fast", ","] {
            let error = from_env(&[("REDLOCK_NODE_TIMEOUTS", bad)]).unwrap_err();
            assert!(!error.to_string().contains("redis://a:1"), "{error}");
        }
        #[cfg(feature = "serde")]
        {
            let file = from_toml(
                "[node_timeouts]\n\"redis://a:1\" = \"300ms\"\n\"redis://u:hunter2@b:2/0?x=y\" = \"1s\"\n",
            )
            .unwrap();
            assert_eq!(file.node_timeouts, Some(expected));
            assert!(from_toml("[node_timeouts]\n\"redis://a:1\" = \"fast\"\n").is_err());
        }
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
        use crate::options::LockOptions;
        use crate::setup::config::from_toml as parse;

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
            assert_eq!(config.lock.wait_timeout, Some(Duration::MAX));
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
    }
}
