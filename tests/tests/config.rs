//! `RedlockConfig` against real nodes: a TOML file and `REDLOCK_*` variables configure a
//! handle, and the options show on the servers (the key prefix in the key, the ttl in its
//! `PTTL`, the retry count in a busy acquisition's attempts, fencing in the guard); TLS
//! certificates given as a file path and as PEM text in the environment.

#![allow(clippy::unwrap_used)] // tests unwrap: a failure is the assertion

use std::collections::HashMap;
use std::time::Duration;

use redlock_core::{LockError, Redlock, RedlockConfig};
use redlock_tests::{RedisNodes, within};

/// `[..]` items of `urls` for a TOML array.
fn toml_array(urls: &[String]) -> String {
    let quoted: Vec<String> = urls.iter().map(|url| format!("{url:?}")).collect();
    format!("[{}]", quoted.join(", "))
}

/// A lookup over `vars`, for `from_env_with` (no process-wide `set_var`).
fn lookup(vars: HashMap<&'static str, String>) -> impl FnMut(&str) -> Option<String> {
    move |name| vars.get(name).cloned()
}

/// Checks that `redlock` was built with `prefix`, `ttl`, `retry_count` and fencing: a lock on
/// `resource` is the key `prefix + resource` on every node (and nothing at the bare
/// resource), its `PTTL` is within the last second of `ttl`, its guard has a fencing token,
/// and a second acquisition while it is held is busy after `retry_count + 1` attempts.
async fn configured_as(
    redlock: &Redlock,
    nodes: &RedisNodes,
    prefix: &str,
    ttl: Duration,
    retry_count: u32,
) {
    let resource = "report";
    let key = format!("{prefix}{resource}");
    let held = within("the lock", redlock.lock(resource)).await.unwrap();
    let token = held.token().expose().to_owned();
    nodes.held_everywhere(&key, &token).await;
    assert_eq!(nodes.values(resource).await, vec![None; 3]);
    let ttl_ms = i64::try_from(ttl.as_millis()).unwrap();
    for pttl in nodes.pttls(&key).await {
        assert!(
            pttl <= ttl_ms && pttl > ttl_ms - 1000,
            "PTTL {pttl} for a {ttl_ms} ms ttl"
        );
    }
    assert!(held.fencing_token().is_some());
    match within("the busy acquisition", redlock.lock(resource)).await {
        Err(LockError::Busy { attempts, .. }) => assert_eq!(attempts, retry_count + 1),
        other => panic!("expected Busy, got {other:?}"),
    }
    held.release().await.unwrap();
    nodes.gone_everywhere(&key).await;
}

#[tokio::test]
async fn a_toml_file_configures_the_handle() {
    let nodes = RedisNodes::start(3);
    let file = format!(
        r#"
        nodes = {}
        key_prefix = "file:"
        node_timeout = "500ms"
        connect_timeout = "5s"

        [lock]
        ttl = "7s"
        retry_count = 2
        retry_delay = "10ms"
        retry_jitter = "0ms"
        fencing = true
        "#,
        toml_array(&nodes.urls())
    );
    let config: RedlockConfig = toml::from_str(&file).unwrap();
    let redlock = Redlock::builder().config(config).build().await.unwrap();
    configured_as(&redlock, &nodes, "file:", Duration::from_secs(7), 2).await;
}

#[tokio::test]
async fn environment_variables_configure_the_handle_and_override_a_file() {
    let nodes = RedisNodes::start(3);
    let vars = HashMap::from([
        ("REDLOCK_NODES", nodes.urls().join(",")),
        ("REDLOCK_KEY_PREFIX", "env:".to_owned()),
        ("REDLOCK_NODE_TIMEOUT", "500ms".to_owned()),
        ("REDLOCK_TTL", "9s".to_owned()),
        ("REDLOCK_RETRY_COUNT", "3".to_owned()),
        ("REDLOCK_RETRY_DELAY", "10ms".to_owned()),
        ("REDLOCK_RETRY_JITTER", "0s".to_owned()),
        ("REDLOCK_FENCING", "true".to_owned()),
    ]);
    let redlock = Redlock::builder()
        .from_env_with(lookup(vars.clone()))
        .build()
        .await
        .unwrap();
    configured_as(&redlock, &nodes, "env:", Duration::from_secs(9), 3).await;

    // A file with other nodes, prefix and ttl, then the environment: the environment wins
    // where it is set, the file elsewhere (its retry count).
    let file = r#"
        nodes = ["redis://127.0.0.1:1"]
        key_prefix = "file:"
        [lock]
        ttl = "2s"
        retry_count = 1
    "#;
    let mut vars = vars;
    vars.remove("REDLOCK_RETRY_COUNT");
    let layered = Redlock::builder()
        .config(toml::from_str(file).unwrap())
        .from_env_with(lookup(vars))
        .build()
        .await
        .unwrap();
    configured_as(&layered, &nodes, "env:", Duration::from_secs(9), 1).await;
}

#[test]
fn the_readme_table_lists_every_environment_variable() {
    let readme = include_str!("../../redlock-core/src/guide/configuration.md");
    let documented: Vec<&str> = readme
        .lines()
        .filter_map(|line| line.strip_prefix("| `"))
        .filter(|rest| rest.starts_with(redlock_core::ENV_PREFIX))
        .map(|rest| &rest[..rest.find('`').unwrap()])
        .collect();
    let ours: Vec<String> = RedlockConfig::env_vars()
        .into_iter()
        .map(|var| var.name)
        .collect();
    assert_eq!(documented, ours);
}

#[cfg(any(feature = "tls-rustls", feature = "tls-native"))]
mod tls {
    use std::sync::Arc;

    use redlock_tests::ServerOptions;
    use redlock_tests::tls::Certificates;

    use super::*;

    /// 3 servers requiring a client certificate the test CA signed.
    fn mutual_tls_nodes(certificates: &Arc<Certificates>) -> RedisNodes {
        RedisNodes::start_opts(3, |_| {
            ServerOptions::default().tls(Arc::clone(certificates), true)
        })
    }

    async fn locks(redlock: &Redlock, nodes: &RedisNodes) {
        let held = within("the lock", redlock.lock("tls")).await.unwrap();
        assert_eq!(
            nodes.holder("tls").await.as_deref(),
            Some(held.token().expose())
        );
        held.release().await.unwrap();
        nodes.gone_everywhere("tls").await;
    }

    #[tokio::test]
    async fn certificates_as_files_in_a_file_and_as_pem_in_the_environment() {
        let certificates = Arc::new(Certificates::generate());
        let nodes = mutual_tls_nodes(&certificates);
        let (cert, key) = (
            certificates.dir.join("client.crt"),
            certificates.dir.join("client.key"),
        );
        std::fs::write(&cert, &certificates.client_pem).unwrap();
        std::fs::write(&key, &certificates.client_key_pem).unwrap();
        let file = format!(
            "nodes = {}\ntls_ca = {:?}\ntls_client_cert = {:?}\ntls_client_key = {:?}\n",
            toml_array(&nodes.tls_urls()),
            certificates.dir.join("ca.crt"),
            cert,
            key,
        );
        let config: RedlockConfig = toml::from_str(&file).unwrap();
        let redlock = Redlock::builder().config(config).build().await.unwrap();
        locks(&redlock, &nodes).await;

        let vars = HashMap::from([
            ("REDLOCK_NODES", nodes.tls_urls().join(",")),
            ("REDLOCK_TLS_CA", certificates.ca_pem.clone()),
            ("REDLOCK_TLS_CLIENT_CERT", certificates.client_pem.clone()),
            (
                "REDLOCK_TLS_CLIENT_KEY",
                certificates.client_key_pem.clone(),
            ),
        ]);
        let redlock = Redlock::builder()
            .from_env_with(lookup(vars))
            .build()
            .await
            .unwrap();
        locks(&redlock, &nodes).await;
    }
}
