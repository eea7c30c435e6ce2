//! Node URLs: checking them and turning them into `fred` configurations, and the label a node
//! is named by, never echoing credentials (a value of the handle's configuration, below the
//! connecting itself in [`connect`](crate::setup::connect)).

use fred::types::config::{Config, ServerConfig};

use crate::error::BuildError;

/// The label of a node given as a `fred` client (`index` among all nodes), refusing Cluster
/// and Sentinel configurations as their URLs are.
pub(crate) fn server_label(index: usize, server: &ServerConfig) -> Result<String, BuildError> {
    let hosts = |hosts: &[fred::types::config::Server]| {
        hosts
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(",")
    };
    match server {
        ServerConfig::Centralized { server } => Ok(server.to_string()),
        ServerConfig::Clustered { hosts: servers, .. } => Err(BuildError::ClusterNotSupported {
            node: hosts(servers),
        }),
        ServerConfig::Sentinel {
            hosts: sentinels,
            service_name,
            ..
        } => Err(BuildError::SentinelNotSupported {
            index,
            node: format!("service {service_name} via {}", hosts(sentinels)),
        }),
        #[cfg(feature = "unix-sockets")]
        ServerConfig::Unix { path } => Ok(path.display().to_string()),
    }
}

/// Checks a node URL and turns it into a fred `Config`, without ever echoing credentials.
pub(crate) fn parse_url(index: usize, raw: &str) -> Result<(String, Config), BuildError> {
    let invalid = |reason: String| BuildError::InvalidUrl {
        index,
        node: redacted(raw),
        reason,
    };
    let Some((scheme, _)) = raw.split_once("://") else {
        // `host:6379` would parse as a URL of scheme `host`; `127.0.0.1:6379` not at all.
        return Err(invalid(scheme_hint(raw)));
    };
    if matches!(
        scheme.to_ascii_lowercase().as_str(),
        "redis-sentinel" | "rediss-sentinel" | "valkey-sentinel" | "valkeys-sentinel"
    ) {
        return Err(BuildError::SentinelNotSupported {
            index,
            node: redacted(raw),
        });
    }
    let url = url::Url::parse(raw).map_err(|e| invalid(e.to_string()))?;
    let label = match url.host_str() {
        Some(host) if !host.is_empty() => {
            format!(
                "{}:{}",
                host.to_ascii_lowercase(),
                url.port().unwrap_or(6379)
            )
        }
        _ => url.path().to_owned(),
    };
    match url.scheme() {
        "redis" | "valkey" if url.host_str().is_none_or(str::is_empty) => {
            return Err(invalid(format!("{}:// needs a host", url.scheme())));
        }
        "redis" | "valkey" => {}
        "rediss" | "valkeys" => {
            if !cfg!(any(feature = "tls-rustls", feature = "tls-native")) {
                return Err(BuildError::TlsNotEnabled { node: label });
            }
        }
        "redis+unix" | "valkey+unix" | "unix" => {
            if !cfg!(feature = "unix-sockets") {
                return Err(BuildError::UnixSocketsNotEnabled { node: label });
            }
        }
        "redis-cluster" | "valkey-cluster" => {
            return Err(BuildError::ClusterNotSupported { node: label });
        }
        other => {
            return Err(invalid(format!(
                "unknown scheme `{other}`; use redis://, rediss:// or redis+unix:// (valkey:// alike), one URL per independent master"
            )));
        }
    }
    let config = Config::from_url(raw).map_err(|e| invalid(e.details().to_owned()))?;
    Ok((label, config))
}

/// Node URLs as given, which may hold credentials: their `Debug` shows each one
/// [`redacted`], so that a builder printed with `{:?}` never shows a password.
#[derive(Default, Clone)]
pub(crate) struct NodeUrls(pub(crate) Vec<String>);

impl std::fmt::Debug for NodeUrls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.0.iter().map(|url| redacted(url)))
            .finish()
    }
}

/// Per-node time limits ([`RedlockBuilder::node_timeout_for`](crate::RedlockBuilder::node_timeout_for)),
/// by node URL; `Debug` redacts the URLs' credentials as [`NodeUrls`] does.
#[derive(Default)]
pub(crate) struct NodeTimeouts(pub(crate) Vec<(String, std::time::Duration)>);

impl std::fmt::Debug for NodeTimeouts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.0.iter().map(|(url, timeout)| (redacted(url), timeout)))
            .finish()
    }
}

impl std::ops::Deref for NodeUrls {
    type Target = Vec<String>;

    fn deref(&self) -> &Vec<String> {
        &self.0
    }
}

impl std::ops::DerefMut for NodeUrls {
    fn deref_mut(&mut self) -> &mut Vec<String> {
        &mut self.0
    }
}

/// `raw` with whatever may be a credential replaced by `***`, for error messages: everything
/// before the last `@` (a password may hold `/`, `?` or `#` unencoded), or a `user:password`
/// without `@` (an entry of `REDLOCK_NODES` cut at a `,` inside a password).
pub(crate) fn redacted(raw: &str) -> String {
    let (scheme, rest) = raw.split_at(raw.find("://").map_or(0, |i| i + 3));
    if let Some(at) = rest.rfind('@') {
        return format!("{scheme}***{}", &rest[at..]);
    }
    let authority = &rest[..rest.find(['/', '?', '#']).unwrap_or(rest.len())];
    match authority.rsplit_once(':') {
        Some((_, port))
            if !authority.starts_with('[') && !port.bytes().all(|b| b.is_ascii_digit()) =>
        {
            format!("{scheme}***")
        }
        _ => raw.to_owned(),
    }
}

/// What to write instead of an entry without `://`.
fn scheme_hint(raw: &str) -> String {
    let shown = redacted(raw);
    if raw.starts_with('/') {
        format!("it has no scheme (write redis+unix://{shown})")
    } else if raw.contains(":/") {
        "its scheme must be followed by `://`".to_owned()
    } else {
        format!("it has no scheme (write redis://{shown})")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reason(result: Result<(String, Config), BuildError>) -> String {
        result.map(|_| ()).unwrap_err().to_string()
    }

    #[test]
    fn node_urls_never_show_a_password_in_debug() {
        let urls = NodeUrls(vec![
            "redis://user:s3cret@10.0.0.1:6379".to_owned(),
            "rediss://:p%40ss@db:6380/0".to_owned(),
            "redis://10.0.0.2:6379".to_owned(),
        ]);
        let shown = format!("{urls:?}");
        assert!(
            !shown.contains("s3cret") && !shown.contains("p%40ss"),
            "{shown}"
        );
        assert!(
            shown.contains("10.0.0.1:6379") && shown.contains("redis://10.0.0.2:6379"),
            "{shown}"
        );
    }

    #[test]
    fn urls_are_checked_without_echoing_credentials() {
        let bad = reason(parse_url(0, "redis://user:s3cret@:6379"));
        assert!(!bad.contains("s3cret"), "{bad}");
        assert!(matches!(
            parse_url(1, "not a url"),
            Err(BuildError::InvalidUrl { index: 1, .. })
        ));
        assert!(matches!(
            parse_url(0, "http://127.0.0.1:6379"),
            Err(BuildError::InvalidUrl { .. })
        ));
        assert!(matches!(
            parse_url(0, "redis-cluster://127.0.0.1:7000"),
            Err(BuildError::ClusterNotSupported { .. })
        ));
        let (label, _) = parse_url(0, "redis://user:pw@LocalHost").unwrap();
        assert_eq!(label, "localhost:6379");
    }

    #[test]
    fn a_malformed_url_is_named_with_an_example_and_no_credentials() {
        for (raw, shown, hint) in [
            (
                "127.0.0.1:6379",
                "`127.0.0.1:6379`",
                "write redis://127.0.0.1:6379",
            ),
            (
                "localhost:6379",
                "`localhost:6379`",
                "write redis://localhost:6379",
            ),
            (
                "u:s3cret@db:6379",
                "`***@db:6379`",
                "write redis://***@db:6379",
            ),
            (
                "http://u:s3cret@db:1/",
                "`http://***@db:1/`",
                "unknown scheme `http`",
            ),
            (
                "redis://u:s3cret@[::1",
                "`redis://***@[::1`",
                "invalid IPv6 address",
            ),
            // Unencoded `/`, `#`, `?` in a password, and one cut at a `,` by REDLOCK_NODES.
            (
                "redis://u:s3/cret@db:6379",
                "`redis://***@db:6379`",
                "invalid port",
            ),
            ("redis://u:s3#cret@db:6379", "`redis://***@db:6379`", "#2"),
            ("redis://u:s3?cret@db:6379", "`redis://***@db:6379`", "#2"),
            (
                "u:s3/cret@db:6379",
                "`***@db:6379`",
                "write redis://***@db:6379",
            ),
            ("redis://u:s3cret", "`redis://***`", "#2"),
            (
                "/tmp/redis.sock",
                "`/tmp/redis.sock`",
                "write redis+unix:///tmp/redis.sock",
            ),
            ("redis:/db:6379", "`redis:/db:6379`", "followed by `://`"),
        ] {
            let message = reason(parse_url(2, raw));
            for expected in [shown, hint, "#2", "e.g. redis://127.0.0.1:6379"] {
                assert!(message.contains(expected), "{expected:?} not in: {message}");
            }
            assert!(!message.contains("cret"), "{message}");
        }
        assert_eq!(redacted("redis://[::1]:6379/0"), "redis://[::1]:6379/0");
        assert_eq!(redacted("redis://db:6379"), "redis://db:6379");
    }

    #[test]
    fn every_sentinel_scheme_is_refused_without_credentials() {
        for scheme in [
            "redis-sentinel",
            "rediss-sentinel",
            "valkey-sentinel",
            "valkeys-sentinel",
            "Redis-Sentinel",
        ] {
            let error = parse_url(3, &format!("{scheme}://u:s3cret@127.0.0.1:26379/mymaster"))
                .map(|_| ())
                .unwrap_err();
            let shown = format!("{scheme}://***@127.0.0.1:26379/mymaster");
            assert!(
                matches!(&error, BuildError::SentinelNotSupported { index: 3, node } if *node == shown),
                "{error:?}"
            );
            let message = error.to_string();
            for expected in ["#3", "failover", "quarantine", "redis://", "independent"] {
                assert!(message.contains(expected), "{expected:?} not in: {message}");
            }
            assert!(!message.contains("s3cret"), "{message}");
        }
        // Refused by scheme, whatever follows.
        assert!(matches!(
            parse_url(0, "redis-sentinel://u:pw@[::1"),
            Err(BuildError::SentinelNotSupported { .. })
        ));
        let unknown = reason(parse_url(0, "sentinel://127.0.0.1:26379"));
        assert!(!unknown.contains("sentinel://,"), "{unknown}");
    }

    #[test]
    fn clients_for_sentinel_or_cluster_are_refused() {
        let sentinel = ServerConfig::new_sentinel(vec![("10.0.0.1", 26379)], "mymaster");
        let error = server_label(4, &sentinel).unwrap_err();
        assert!(
            matches!(&error, BuildError::SentinelNotSupported { index: 4, node }
                if node == "service mymaster via 10.0.0.1:26379"),
            "{error:?}"
        );
        let cluster = ServerConfig::new_clustered(vec![("10.0.0.1", 7000), ("10.0.0.2", 7000)]);
        assert!(matches!(
            server_label(0, &cluster),
            Err(BuildError::ClusterNotSupported { node }) if node == "10.0.0.1:7000,10.0.0.2:7000"
        ));
        let master = ServerConfig::new_centralized("10.0.0.1", 6379);
        assert_eq!(server_label(0, &master).unwrap(), "10.0.0.1:6379");
    }

    #[test]
    fn tls_without_a_tls_feature_is_refused() {
        if cfg!(any(feature = "tls-rustls", feature = "tls-native")) {
            return;
        }
        let error = reason(parse_url(0, "rediss://user:pw@example.com:6380"));
        assert!(error.contains("tls-rustls"), "{error}");
        assert!(!error.contains("pw@"), "{error}");
    }
}
