//! Setting the builder from data: a [`RedlockConfig`] (a file through serde) or the
//! environment's `REDLOCK_*` variables.

use super::RedlockBuilder;
use crate::error::BuildError;
#[cfg(doc)]
use crate::options::LockOptions;
use crate::setup::config::{NODES_ENV, RedlockConfig, SetIf, node_urls};
use crate::setup::node_url::NodeUrls;

impl RedlockBuilder {
    /// Sets every option given in the environment: `REDLOCK_NODES` (comma-separated URLs)
    /// and one `REDLOCK_<OPTION>` variable per other option of the builder and of its default
    /// [`LockOptions`] (`REDLOCK_TTL`, `REDLOCK_RETRY_COUNT`...: the table is on
    /// [`RedlockConfig`]). An unset or empty variable keeps the builder's value; the others
    /// replace it, as [`config`](Self::config) does (`REDLOCK_NODES` replaces the URLs given
    /// before). Call it last for the environment to override the rest.
    ///
    /// # Errors
    /// [`build`](Self::build) fails with [`BuildError::Env`], naming the variable and the form
    /// expected (never its value), for the first malformed variable; with
    /// [`BuildError::MissingEnv`] if `REDLOCK_NODES` is unset or empty and no node was given
    /// before; and as [`config`](Self::config) does for values out of range.
    pub fn from_env(self) -> Self {
        self.read_env(RedlockConfig::from_env())
    }

    /// [`from_env`](Self::from_env), with `lookup` giving each variable's value instead of
    /// the process environment.
    ///
    /// ```
    /// use std::collections::HashMap;
    /// use redlock_core::Redlock;
    ///
    /// let vars = HashMap::from([
    ///     ("REDLOCK_NODES", "redis://10.0.0.1:6379,redis://10.0.0.2:6379,redis://10.0.0.3:6379"),
    ///     ("REDLOCK_TTL", "10s"),
    ///     ("REDLOCK_WAIT_TIMEOUT", "forever"),
    /// ]);
    /// let builder = Redlock::builder().from_env_with(|name| vars.get(name).map(|v| v.to_string()));
    /// ```
    pub fn from_env_with(self, lookup: impl FnMut(&str) -> Option<String>) -> Self {
        self.read_env(RedlockConfig::from_env_with(lookup))
    }

    fn read_env(self, config: Result<RedlockConfig, BuildError>) -> Self {
        match config {
            Err(error) => self.defer(error),
            Ok(config) => {
                let no_nodes =
                    config.nodes.is_none() && self.urls.is_empty() && self.clients.is_empty();
                let builder = self.config(config);
                if no_nodes {
                    builder.defer(BuildError::MissingEnv {
                        var: NODES_ENV.to_owned(),
                    })
                } else {
                    builder
                }
            }
        }
    }

    /// Sets every option `config` gives (those `None` keep their value): its
    /// [`nodes`](RedlockConfig::nodes) replace the URLs given before, its
    /// [`lock`](RedlockConfig::lock) options replace those of the default
    /// [`LockOptions`], and TLS certificates given as paths are read now.
    ///
    /// # Errors
    /// [`build`](Self::build) fails as it does for the same values given to the setters
    /// ([`BuildError::Invalid`], [`BuildError::Option`], [`BuildError::Tls`]...), and with
    /// [`BuildError::ReadFile`] for a certificate or key file that cannot be read.
    pub fn config(self, config: RedlockConfig) -> Self {
        let RedlockConfig {
            nodes,
            key_prefix,
            node_timeout,
            node_timeouts,
            connect_timeout,
            require_quorum_at_start,
            handover_grace,
            foreign_window,
            foreign_clients,
            quarantine,
            fencing_counter_ttl,
            node_set_check,
            owner,
            tls_ca,
            tls_client_cert,
            tls_client_key,
            lock,
        } = config;
        let mut builder = self
            .set_if(nodes, |builder, urls| Self {
                urls: NodeUrls(urls),
                ..builder
            })
            .set_if(key_prefix, Self::key_prefix)
            .set_if(node_timeout, Self::node_timeout)
            .set_if(node_timeouts, |builder, pairs| {
                pairs.into_iter().fold(builder, |builder, (url, timeout)| {
                    builder.node_timeout_for(url, timeout)
                })
            })
            .set_if(connect_timeout, Self::connect_timeout)
            .set_if(require_quorum_at_start, Self::require_quorum_at_start)
            .set_if(handover_grace, Self::handover_grace)
            .set_if(foreign_window, Self::foreign_window)
            .set_if(foreign_clients, Self::foreign_clients)
            .set_if(quarantine, Self::quarantine)
            .set_if(fencing_counter_ttl, Self::fencing_counter_ttl)
            .set_if(node_set_check, Self::node_set_check)
            .set_if(owner, Self::owner);
        builder.options = lock.apply(builder.options);
        builder.tls_config(tls_ca, tls_client_cert, tls_client_key)
    }

    /// Adds the masters listed in the environment variable `var` (comma-separated URLs), and
    /// only those: [`from_env`](Self::from_env) reads every option.
    ///
    /// # Errors
    /// [`build`](Self::build) fails with [`BuildError::MissingEnv`] if `var` is unset or
    /// holds no URL.
    pub fn from_env_var(mut self, var: &str) -> Self {
        let urls = node_urls(&std::env::var(var).unwrap_or_default());
        if urls.is_empty() {
            self.deferred.get_or_insert(BuildError::MissingEnv {
                var: var.to_owned(),
            });
        }
        self.nodes(urls)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::options::LockOptions;
    use crate::setup::builder::{CERT, KEY, lookup};

    /// For every option, a value other than its default, as its environment text.
    const SAMPLES: [(&str, &str); 30] = [
        ("nodes", "redis://127.0.0.1:2"),
        ("key_prefix", "lock:"),
        ("node_timeout", "1s"),
        ("node_timeouts", "redis://127.0.0.1:1=1s"),
        ("connect_timeout", "1s"),
        ("require_quorum_at_start", "false"),
        ("handover_grace", "1s"),
        ("foreign_window", "1s"),
        ("foreign_clients", "false"),
        ("quarantine", "1h"),
        ("fencing_counter_ttl", "1h"),
        ("node_set_check", "false"),
        ("owner", "web-1"),
        ("tls_ca", CERT),
        ("tls_client_cert", CERT),
        ("tls_client_key", KEY),
        ("ttl", "1s"),
        ("retry_count", "5"),
        ("retry_delay", "1s"),
        ("retry_jitter", "1s"),
        ("wait_timeout", "forever"),
        ("drift_factor", "0.1"),
        ("auto_extend", "true"),
        ("extend_fraction", "0.5"),
        ("max_hold", "1h"),
        ("max_extensions", "5"),
        ("lock_at_least_for", "1s"),
        ("lost_margin", "1s"),
        ("fencing", "true"),
        ("reentrant", "true"),
    ];

    #[test]
    fn every_config_option_reaches_the_builder() {
        // An option read from the environment (or a file) but not applied by `config` fails
        // this: the builder would not change.
        let base = || RedlockBuilder::default().node("redis://127.0.0.1:1");
        let unchanged = format!("{:?}", base());
        let vars = RedlockConfig::env_vars();
        assert_eq!(vars.len(), SAMPLES.len());
        for var in vars {
            let (_, sample) = SAMPLES
                .iter()
                .find(|(option, _)| *option == var.option)
                .unwrap_or_else(|| panic!("no sample for {}", var.option));
            let mut given = vec![(var.name.as_str(), *sample)];
            // The client certificate and its key go together.
            match var.option {
                "tls_client_cert" => given.push(("REDLOCK_TLS_CLIENT_KEY", KEY)),
                "tls_client_key" => given.push(("REDLOCK_TLS_CLIENT_CERT", CERT)),
                _ => {}
            }
            let builder = base().from_env_with(lookup(&given));
            let tls = var.option.starts_with("tls_");
            if cfg!(any(feature = "tls-rustls", feature = "tls-native")) || !tls {
                assert!(
                    builder.deferred.is_none(),
                    "{}: {:?}",
                    var.name,
                    builder.deferred
                );
                assert_ne!(
                    format!("{builder:?}"),
                    unchanged,
                    "{} had no effect",
                    var.name
                );
            } else {
                assert!(
                    matches!(builder.deferred, Some(BuildError::Option { name, .. }) if name.starts_with("tls_")),
                    "{}: {:?}",
                    var.name,
                    builder.deferred
                );
            }
        }
    }

    #[test]
    fn the_environment_layers_over_what_was_given_before() {
        let builder = RedlockBuilder::default()
            .nodes(["redis://127.0.0.1:1", "redis://127.0.0.1:2"])
            .key_prefix("code:")
            .lock_options(
                LockOptions::default()
                    .ttl(Duration::from_secs(5))
                    .fencing(true),
            )
            .from_env_with(lookup(&[
                ("REDLOCK_NODES", "redis://127.0.0.1:3"),
                ("REDLOCK_RETRY_COUNT", "4"),
                ("REDLOCK_KEY_PREFIX", ""), // empty: unset
            ]));
        assert!(builder.deferred.is_none());
        assert_eq!(*builder.urls, ["redis://127.0.0.1:3"]);
        assert_eq!(builder.key_prefix, "code:");
        assert_eq!(builder.options.ttl, Duration::from_secs(5));
        assert!(builder.options.fencing);
        assert_eq!(builder.options.retry_count, 4);
        // REDLOCK_NODES may be left out when the nodes were given before, not otherwise.
        let given = RedlockBuilder::default()
            .node("redis://127.0.0.1:1")
            .from_env_with(lookup(&[]));
        assert!(given.deferred.is_none());
        let missing = RedlockBuilder::default().from_env_with(lookup(&[("REDLOCK_TTL", "1s")]));
        assert!(matches!(
            missing.deferred,
            Some(BuildError::MissingEnv { var }) if var == NODES_ENV
        ));
    }
}
