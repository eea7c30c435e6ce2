//! The types an option takes ([`Value`]): how each is read from the environment's text and
//! from a serde format (a file), what form it expects, and how it shows in `Debug`; with
//! [`PemSource`], the form of the TLS options.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

#[cfg(any(test, feature = "tls-rustls", feature = "tls-native"))]
use crate::error::BuildError;

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
    const EXPECTED: &'static str = "a duration such as 250ms, 30s or 1h 30m, or forever";

    /// A duration, or `forever`: `Duration::MAX`, the API's own "forever"
    /// ([`LockOptions::wait_forever`](crate::LockOptions::wait_forever)).
    fn parse(text: &str) -> Result<Self, String> {
        use humantime::DurationError as E;
        if text.trim().eq_ignore_ascii_case("forever") {
            return Ok(Duration::MAX);
        }
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

/// Per-node time limits ([`RedlockBuilder::node_timeout_for`](crate::RedlockBuilder::node_timeout_for)):
/// node URL and duration pairs.
impl Value for Vec<(String, Duration)> {
    const EXPECTED: &'static str =
        "comma-separated URL=duration pairs, e.g. redis://10.1.0.1:6379=300ms";

    /// Each pair is cut at its last `=` (a duration holds none).
    fn parse(text: &str) -> Result<Self, String> {
        let pairs: Result<Self, String> = node_urls(text)
            .into_iter()
            .enumerate()
            .map(|(i, pair)| {
                let (url, duration) = pair
                    .rsplit_once('=')
                    .ok_or_else(|| format!("pair {} has no `=` before its duration", i + 1))?;
                let duration = <Duration as Value>::parse(duration)
                    .map_err(|reason| format!("pair {}: {reason}", i + 1))?;
                Ok((url.trim().to_owned(), duration))
            })
            .collect();
        match pairs? {
            pairs if pairs.is_empty() => Err("no URL=duration pair".to_owned()),
            pairs => Ok(pairs),
        }
    }

    /// A table of node URL to duration.
    #[cfg(feature = "serde")]
    fn deserialize<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Pairs;
        impl<'de> serde::de::Visitor<'de> for Pairs {
            type Value = Vec<(String, Duration)>;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(
                    "a table of node URL = duration, e.g. \"redis://10.1.0.1:6379\" = \"300ms\"",
                )
            }

            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<Self::Value, A::Error> {
                let mut pairs = Vec::new();
                while let Some((url, text)) = map.next_entry::<String, String>()? {
                    let duration = <Duration as Value>::parse(&text).map_err(|reason| {
                        serde::de::Error::custom(format_args!(
                            "expected {} ({reason})",
                            <Duration as Value>::EXPECTED
                        ))
                    })?;
                    pairs.push((url, duration));
                }
                Ok(pairs)
            }
        }
        deserializer.deserialize_map(Pairs)
    }

    // Node URLs may hold passwords.
    fn shown(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "<{} node timeouts>", self.len())
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
        use crate::setup::config::from_toml as parse;

        #[test]
        fn malformed_values_say_what_is_expected() {
            for (text, expected) in [
                ("node_timeout = \"fast\"", Duration::EXPECTED),
                ("node_timeout = 100", Duration::EXPECTED),
                ("[lock]\nwait_timeout = \"always\"", Duration::EXPECTED),
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
