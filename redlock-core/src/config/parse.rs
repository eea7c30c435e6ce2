//! The types an option takes ([`Value`]): how each is read from the environment's text and
//! from a serde format (a file), what form it expects, and how it shows in `Debug`; with
//! [`PemSource`], the form of the TLS options.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use super::Wait;
#[cfg(any(test, feature = "tls-rustls", feature = "tls-native"))]
use crate::error::BuildError;
use crate::mode::Mode;

/// PEM text, or the file it is in ([`RedlockConfig::tls_ca`](super::RedlockConfig::tls_ca) and its siblings). From text, a
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

/// A type an option takes: its form in the environment and in a serde format, and how it
/// shows in `Debug`.
pub(crate) trait Value: Sized + fmt::Debug {
    /// The form it takes, for error messages and [`EnvVar::expected`](super::EnvVar::expected).
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
pub(crate) fn deserialize_option<'de, D, T>(deserializer: D) -> Result<Option<T>, D::Error>
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
    use super::*;

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

    #[cfg(feature = "serde")]
    mod serde {
        use super::*;
        use crate::config::{RedlockConfig, from_env};
        use crate::options::LockOptions;

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
