//! `build` refuses nodes that are not distinct, independent masters — cluster mode, replicas,
//! one replication group, an eviction policy that can drop lock keys — and Sentinel URLs,
//! against real redis-server processes.

#![allow(clippy::unwrap_used)] // tests unwrap: a failure is the assertion

use std::time::{Duration, Instant};

use fred::clients::Client;
use fred::interfaces::ClientLike;
use fred::types::{ClusterHash, CustomCommand};
use redlock_core::{BuildError, LockOptions, Redlock};
use redlock_tests::{RedisServer, free_port, plain_client, within};

/// `host:port`, the label a node URL of `server` gets.
fn label(server: &RedisServer) -> String {
    format!("127.0.0.1:{}", server.port())
}

/// Builds a handle over `servers`, in order.
async fn build(servers: &[&RedisServer]) -> Result<Redlock, BuildError> {
    within(
        "build",
        Redlock::builder()
            .nodes(servers.iter().map(|s| s.url()))
            .build(),
    )
    .await
}

/// `command args...` on `client`.
async fn run(client: &Client, command: &'static str, args: &[&str]) -> String {
    let cmd = CustomCommand::new_static(command, ClusterHash::FirstKey, false);
    client
        .custom(cmd, args.iter().map(|a| (*a).to_owned()).collect())
        .await
        .unwrap()
}

/// The value of `field` in `INFO section` of `client`'s server.
async fn info_field(client: &Client, section: &str, field: &str) -> String {
    let text = run(client, "INFO", &[section]).await;
    text.lines()
        .find_map(|line| line.strip_prefix(field)?.strip_prefix(':'))
        .unwrap_or_else(|| panic!("no {field} in INFO {section}: {text}"))
        .trim()
        .to_owned()
}

/// Waits (at most 10 s) until `client`'s server is a replica in sync with its master.
async fn in_sync(client: &Client) {
    within("the replica's first sync", async {
        while info_field(client, "replication", "master_link_status").await != "up" {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
}

/// Waits (at most 10 s) until `client` is the only one connected to its server: a refused
/// build closed its connections.
async fn only_client(client: &Client) {
    within("the refused build's connections to close", async {
        while info_field(client, "clients", "connected_clients").await != "1" {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
}

#[tokio::test]
async fn a_healthy_set_of_three_masters_builds() {
    let servers = [
        RedisServer::start(),
        RedisServer::start(),
        RedisServer::start_with(&["--maxmemory", "100mb", "--maxmemory-policy", "noeviction"]),
    ];
    let redlock = build(&servers.iter().collect::<Vec<_>>()).await.unwrap();
    // Redis 7 takes the four sections in one INFO: none failed (no fall-back to `INFO`).
    for server in &servers {
        let stats = run(
            &plain_client(&server.url()).await,
            "INFO",
            &["commandstats"],
        )
        .await;
        let info = stats
            .lines()
            .find(|line| line.starts_with("cmdstat_info:"))
            .unwrap_or_else(|| panic!("no INFO was sent: {stats}"));
        assert!(info.contains("rejected_calls=0,failed_calls=0"), "{info}");
    }
    let guard = redlock.lock("healthy").await.unwrap();
    guard.release().await.unwrap();
}

#[tokio::test]
async fn a_cluster_enabled_node_is_refused_by_name_and_disconnected() {
    let healthy = RedisServer::start();
    // Each server runs in its own directory, so `nodes.conf` is its own.
    let clustered = RedisServer::start_with(&[
        "--cluster-enabled",
        "yes",
        "--cluster-config-file",
        "nodes.conf",
    ]);
    let other = RedisServer::start();
    let probe = plain_client(&healthy.url()).await;

    let error = build(&[&healthy, &clustered, &other]).await.unwrap_err();
    assert!(
        matches!(&error, BuildError::ClusterEnabled { node } if *node == label(&clustered)),
        "{error:?}"
    );
    let message = error.to_string();
    for expected in [
        label(&clustered).as_str(),
        "cluster-enabled no",
        "CROSSSLOT",
    ] {
        assert!(message.contains(expected), "{expected:?} not in: {message}");
    }
    only_client(&probe).await;
}

#[tokio::test]
async fn a_replica_is_refused_and_so_is_a_promoted_one_beside_its_master() {
    let master = RedisServer::start_with(&["--repl-diskless-sync-delay", "0"]);
    let port = master.port().to_string();
    let replica = RedisServer::start_with(&["--replicaof", "127.0.0.1", &port]);
    let other = RedisServer::start();

    // A replica is refused by its role, before and after its first sync.
    let error = build(&[&master, &replica, &other]).await.unwrap_err();
    assert!(
        matches!(&error, BuildError::Replica { node, master: Some(of) }
            if *node == label(&replica) && *of == label(&master)),
        "{error:?}"
    );
    let client = plain_client(&replica.url()).await;
    in_sync(&client).await;
    let error = build(&[&replica, &other, &master]).await.unwrap_err();
    assert!(
        matches!(&error, BuildError::Replica { node, .. } if *node == label(&replica)),
        "{error:?}"
    );
    assert!(error.to_string().contains("READONLY"), "{error}");

    // Promoted, it answers as a master, but keeps its master's replication id as its previous
    // one (and the keys it copied): one replication group.
    let master_replid = info_field(
        &plain_client(&master.url()).await,
        "replication",
        "master_replid",
    )
    .await;
    run(&client, "REPLICAOF", &["NO", "ONE"]).await;
    assert_eq!(
        info_field(&client, "replication", "master_replid2").await,
        master_replid
    );
    let error = build(&[&master, &other, &replica]).await.unwrap_err();
    assert!(
        matches!(&error, BuildError::SameReplicationGroup { node, other, replid }
            if *node == label(&replica) && *other == label(&master) && *replid == master_replid),
        "{error:?}"
    );
    // Without its former master, it is an independent master again.
    build(&[&replica, &other]).await.unwrap();
}

#[tokio::test]
async fn eviction_policies_that_can_drop_lock_keys_are_refused() {
    let a = RedisServer::start();
    let b = RedisServer::start();
    for policy in ["allkeys-lru", "volatile-lru"] {
        let evicting =
            RedisServer::start_with(&["--maxmemory", "100mb", "--maxmemory-policy", policy]);
        let error = build(&[&a, &evicting, &b]).await.unwrap_err();
        assert!(
            matches!(&error, BuildError::EvictionPolicy { node, policy: p, maxmemory: 104_857_600 }
                if *node == label(&evicting) && p == policy),
            "{error:?}"
        );
        let message = error.to_string();
        for expected in [
            label(&evicting).as_str(),
            policy,
            "maxmemory-policy noeviction",
            "maxmemory 0",
        ] {
            assert!(message.contains(expected), "{expected:?} not in: {message}");
        }
    }
}

#[tokio::test]
async fn noeviction_or_no_maxmemory_is_accepted() {
    let a = RedisServer::start();
    let b = RedisServer::start();
    for settings in [
        ["--maxmemory", "100mb", "--maxmemory-policy", "noeviction"],
        ["--maxmemory", "0", "--maxmemory-policy", "allkeys-lru"],
    ] {
        let server = RedisServer::start_with(&settings);
        build(&[&a, &server, &b])
            .await
            .unwrap_or_else(|e| panic!("{settings:?}: {e}"));
    }
}

#[tokio::test]
async fn sentinel_urls_are_refused_before_anything_is_sent() {
    let healthy = RedisServer::start();
    let probe = plain_client(&healthy.url()).await;
    let connections = || info_field(&probe, "stats", "total_connections_received");
    let before = connections().await;
    // Nothing listens there: connecting would fail or wait, not refuse by scheme.
    let silent = free_port();
    for scheme in [
        "redis-sentinel",
        "rediss-sentinel",
        "valkey-sentinel",
        "valkeys-sentinel",
    ] {
        let started = Instant::now();
        let error = Redlock::builder()
            .node(healthy.url())
            .node(format!(
                "{scheme}://user:s3cret@127.0.0.1:{silent}/mymaster"
            ))
            .lock_options(LockOptions::default())
            .build()
            .await
            .unwrap_err();
        assert!(started.elapsed() < Duration::from_millis(200), "{scheme}");
        let shown = format!("{scheme}://***@127.0.0.1:{silent}/mymaster");
        assert!(
            matches!(&error, BuildError::SentinelNotSupported { index: 1, node } if *node == shown),
            "{error:?}"
        );
        let message = error.to_string();
        for expected in ["failover", "fencing counters", "quarantine", "redis://"] {
            assert!(message.contains(expected), "{expected:?} not in: {message}");
        }
        assert!(!message.contains("s3cret"), "{message}");
    }
    assert_eq!(
        connections().await,
        before,
        "a refused build connected to the healthy node"
    );
}

/// Three nodes 150 ms away (another region): with the handle's 100 ms limit every
/// acquisition fails for want of a quorum; raising the limit of one node is not enough (the
/// quorum-th round trip decides); raising two of them, it is granted. A URL that is not a
/// node's is refused at build, without its password.
#[tokio::test]
async fn a_node_timeout_per_node_lets_distant_nodes_answer() {
    use redlock_tests::RedisNodes;
    use redlock_tests::proxy::{Direction, Fault};

    let nodes = RedisNodes::start(3);
    let proxies = nodes.proxies();
    for proxy in &proxies {
        proxy.set(Direction::Request, Fault::Delay(Duration::from_millis(150)));
    }
    let urls: Vec<String> = proxies.iter().map(|p| p.url()).collect();
    let options = LockOptions::default()
        .ttl(Duration::from_secs(10))
        .retry_count(0);
    let handle = |limits: &[(usize, u64)]| {
        let mut builder = Redlock::builder()
            .nodes(urls.clone())
            .lock_options(options.clone());
        for &(node, ms) in limits {
            builder = builder.node_timeout_for(urls[node].clone(), Duration::from_millis(ms));
        }
        builder.build()
    };
    for (limits, granted) in [
        (&[][..], false),
        (&[(1, 500)][..], false),
        (&[(1, 500), (2, 500)][..], true),
    ] {
        let redlock = within("build", handle(limits)).await.unwrap();
        let resource = format!("distant:{}", limits.len());
        let attempt = within("the lock", redlock.lock(&resource)).await;
        match attempt {
            Ok(guard) => {
                assert!(granted, "granted with limits {limits:?}");
                guard.release().await.unwrap();
            }
            Err(error) => {
                assert!(!granted, "limits {limits:?}: {error}");
                assert!(error.is_unavailable(), "{error}");
            }
        }
    }

    let refused = Redlock::builder()
        .nodes(urls.clone())
        .node_timeout_for("redis://user:secret@elsewhere:6379", Duration::from_secs(1))
        .build()
        .await
        .unwrap_err();
    assert!(
        matches!(
            refused,
            BuildError::Option {
                name: "node_timeout_for",
                ..
            }
        ),
        "{refused}"
    );
    assert!(!refused.to_string().contains("secret"), "{refused}");
    let zero = Redlock::builder()
        .nodes(urls)
        .node_timeout_for(proxies[1].url(), Duration::ZERO)
        .build()
        .await
        .unwrap_err();
    assert!(zero.to_string().contains("more than zero"), "{zero}");
}

/// With one of three nodes down, `build` returns once the other two (a quorum) have
/// connected and a short grace has passed, not after the connect timeout; the lock works at
/// once, and the node that was down joins when it comes up.
#[tokio::test]
async fn build_returns_once_a_quorum_connected_and_a_late_node_joins() {
    use fred::interfaces::KeysInterface as _;
    let (a, b) = (RedisServer::start(), RedisServer::start());
    let mut late = RedisServer::start();
    late.kill();
    let started = Instant::now();
    let redlock = within(
        "build",
        Redlock::builder()
            .node(a.url())
            .node(b.url())
            .node(late.url())
            .connect_timeout(Duration::from_secs(5))
            .build(),
    )
    .await
    .unwrap();
    let took = started.elapsed();
    assert!(
        took < Duration::from_millis(2_500),
        "build waited {took:?} for a node the quorum does not need"
    );
    redlock.lock("job").await.unwrap().release().await.unwrap();
    // The third node comes up: the handle's client connects to it in the background, and
    // the lock is then taken there too.
    late.restart();
    let probe = plain_client(&late.url()).await;
    let key = redlock.key_for("late");
    within("the late node to take part", async {
        loop {
            let guard = redlock.lock("late").await.unwrap();
            let held: Option<String> = probe.get(&key).await.unwrap();
            guard.release().await.unwrap();
            if held.is_some() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
}
