//! The options in the environment: one `REDLOCK_<OPTION>` variable per option of
//! [`RedlockConfig`] and its [`LockConfig`](super::LockConfig), named from the declared lists
//! ([`RedlockConfig::env_vars`]), so that no variable is named by hand.

use super::RedlockConfig;
use super::declare::Options;
use crate::error::BuildError;

/// Every environment variable [`RedlockConfig::from_env`] reads starts with this, followed by
/// the option's name in upper case (`ttl` → `REDLOCK_TTL`).
pub const ENV_PREFIX: &str = "REDLOCK_";

/// The environment variable of the node URLs, read by
/// [`RedlockBuilder::from_env`](crate::RedlockBuilder::from_env) with the other options'.
pub(crate) const NODES_ENV: &str = "REDLOCK_NODES";

/// One environment variable read by [`RedlockConfig::from_env`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct EnvVar {
    /// The variable, e.g. `REDLOCK_TTL`.
    pub name: String,
    /// The option it sets, as named in [`RedlockConfig`] or
    /// [`LockConfig`](super::LockConfig), e.g. `ttl`.
    pub option: &'static str,
    /// The form its value takes, e.g. "a duration such as 250ms, 30s or 1h 30m".
    pub expected: &'static str,
}

/// Variables of the lock options that are entry points now: set, they are refused rather
/// than ignored (a `REDLOCK_PERMITS=3` ignored would take the plain lock, one holder).
const RETIRED: [(&str, &str); 2] = [
    (
        "REDLOCK_MODE",
        "it unset: a lock mode is an entry point (Redlock::lock_mode_with, read_lock, write_lock)",
    ),
    (
        "REDLOCK_PERMITS",
        "it unset: a semaphore is its own type (Redlock::semaphore)",
    ),
];

impl RedlockConfig {
    /// The environment variables [`from_env`](Self::from_env) reads, one per option, in the
    /// order of [`RedlockConfig`]'s table.
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

    /// The options set in the process environment ([`RedlockConfig`]'s table); an unset or empty
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
        for (var, expected) in RETIRED {
            let set = lookup(var).ok().flatten();
            if set.is_some_and(|text| !text.trim().is_empty()) {
                return Err(BuildError::Env {
                    var: var.to_owned(),
                    expected,
                    reason: "no longer an option".to_owned(),
                });
            }
        }
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

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;
    use std::time::Duration;

    use super::*;
    use crate::setup::config::{LockConfig, PemSource, from_env};

    #[test]
    fn one_env_var_per_option_all_in_the_documented_table() {
        let vars = RedlockConfig::env_vars();
        let names: Vec<&str> = vars.iter().map(|var| var.name.as_str()).collect();
        assert_eq!(
            names.len(),
            RedlockConfig::FIELDS.len() + LockConfig::FIELDS.len()
        );
        assert_eq!(names.iter().collect::<BTreeSet<_>>().len(), names.len());
        assert_eq!(names[0], NODES_ENV);
        assert!(
            vars.iter()
                .any(|var| var.name == "REDLOCK_TTL" && var.option == "ttl")
        );
        // The rustdoc table of RedlockConfig lists exactly these, in this order.
        let documented: Vec<&str> = include_str!("mod.rs")
            .lines()
            .filter_map(|line| line.trim().strip_prefix("/// | `REDLOCK_"))
            .map(|rest| &rest[..rest.find('`').unwrap()])
            .collect();
        let ours: Vec<&str> = names.iter().map(|n| &n[ENV_PREFIX.len()..]).collect();
        assert_eq!(documented, ours);
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
        assert_eq!(config.lock.wait_timeout, Some(Duration::MAX));
        assert_eq!(config.lock.drift_factor, Some(0.02));
        assert_eq!(config.lock.fencing, Some(true));
        assert_eq!(config.lock.max_hold, None);
        let wait = from_env(&[("REDLOCK_WAIT_TIMEOUT", "2s")]).unwrap();
        assert_eq!(wait.lock.wait_timeout, Some(Duration::from_secs(2)));
        assert_eq!(from_env(&[]).unwrap(), RedlockConfig::default());
    }

    /// The options whose environment text is taken as it is.
    const TAKE_ANY_TEXT: [&str; 6] = [
        "nodes",
        "key_prefix",
        "owner",
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
            ("REDLOCK_MODE", "read", "no longer an option"),
            ("REDLOCK_PERMITS", "3", "no longer an option"),
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
        let error = from_env(&[("REDLOCK_FENCING", "x"), ("REDLOCK_TTL", "x")]).unwrap_err();
        assert!(matches!(error, BuildError::Env { var, .. } if var == "REDLOCK_TTL"));
    }
}
