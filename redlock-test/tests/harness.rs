//! The harness's own views and errors, against real servers.

#![allow(clippy::unwrap_used)] // tests unwrap: a failure is the assertion

use std::time::Duration;

use redlock_core::{LockOptions, Mode};
use redlock_test::{
    HeldValue, ServerKind, ServerOptions, StartError, TestNodes, TestServer, foreign_set_nx,
    redlock,
};

#[tokio::test]
async fn holdings_show_tokens_mode_holders_foreign_values_and_dead_nodes() {
    let mut nodes = TestNodes::start(3);
    let lock = redlock(&nodes).await;
    assert_eq!(nodes.quorum(), 2);
    assert!(nodes.is_free("a").await);
    assert_eq!(nodes.holder("a").await, None);

    // A lock in a mode: a hash of holders on every node, no single token.
    let read = LockOptions::default();
    let guard = lock
        .lock_mode_with("a", Mode::ProtectedRead, &read)
        .await
        .unwrap();
    // The lock returned at a quorum: the last grants land after it (or, cut by the node
    // timeout, never: those nodes stay free).
    let token = guard.token().expose();
    let holdings = nodes.settle("a", |h| h.value.holds(token)).await;
    let mut holders = 0;
    for holding in &holdings {
        match &holding.value {
            HeldValue::Holders(fields) => {
                assert!(fields.contains_key(token), "{fields:?}");
                assert!(holding.ttl.is_some());
                holders += 1;
            }
            HeldValue::Free => {}
            other => panic!("{other:?}"),
        }
    }
    assert!(holders >= nodes.quorum(), "{holdings:?}");
    assert_eq!(nodes.holder("a").await, None);
    assert!(!nodes.is_free("a").await);
    guard.release().await.unwrap();
    assert!(nodes.wait_free("a", Duration::from_secs(2)).await.is_some());

    // Another client's key on one node only: not a quorum, still free.
    foreign_set_nx(&nodes.servers[0].url(), "b").await;
    let holdings = nodes.holdings("b").await;
    assert_eq!(holdings[0].value, HeldValue::Token("theirs".into()));
    assert_eq!(holdings[1].value, HeldValue::Free);
    assert!(nodes.is_free("b").await);
    assert_eq!(nodes.holder("b").await, None);

    // A killed node is down, and counts as not free.
    nodes.servers[1].kill();
    let holdings = nodes.holdings("b").await;
    assert_eq!(holdings[1].value, HeldValue::Down);
    assert!(
        !nodes.is_free("b").await,
        "1 free node of 3 is not a quorum"
    );
    nodes.servers[1].start_again();
    assert!(nodes.is_free("b").await);
}

#[test]
fn a_server_says_what_it_runs() {
    let mut server = TestServer::start();
    assert!(server.is_running());
    assert_ne!(server.version(), "unknown");
    assert_eq!(server.url(), format!("redis://127.0.0.1:{}", server.port()));
    eprintln!(
        "{} {} at {}",
        server.kind(),
        server.version(),
        server.binary().display()
    );
    server.kill();
    assert!(!server.is_running());
}

#[test]
fn start_errors_say_why() {
    let missing =
        TestServer::try_start(ServerOptions::default().binary("/nonexistent/redis-server"))
            .unwrap_err();
    assert!(matches!(missing, StartError::Spawn { .. }), "{missing:?}");
    assert!(
        std::error::Error::source(&missing).is_some(),
        "the io error is kept"
    );

    let refused =
        TestServer::try_start(ServerOptions::default().arg("--no-such-directive")).unwrap_err();
    match &refused {
        StartError::Exited { stderr, .. } => {
            assert!(stderr.contains("no-such-directive"), "{stderr}");
        }
        other => panic!("{other:?}"),
    }

    let kind = ServerKind::Valkey;
    let message = StartError::NotFound {
        program: kind.program(),
        env_var: kind.env_var(),
    }
    .to_string();
    assert!(message.contains("valkey-server") && message.contains("VALKEY_SERVER_BIN"));
}

/// `held_everywhere` waits for the last nodes, and refuses a key held on a quorum only;
/// `settle` returns what the nodes hold at its limit without refusing it.
#[tokio::test]
async fn held_everywhere_waits_for_every_node_and_refuses_a_quorum_alone() {
    let nodes = TestNodes::start(3);
    for server in &nodes.servers[..2] {
        foreign_set_nx(&server.url(), "partly").await;
    }
    // The third node's value lands after the wait began.
    let late = nodes.servers[2].url();
    let landing = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(200)).await;
        foreign_set_nx(&late, "partly").await;
    });
    let holdings = nodes.held_everywhere("partly", "theirs").await;
    let theirs = HeldValue::Token("theirs".to_owned());
    assert!(holdings.iter().all(|h| h.value == theirs), "{holdings:?}");
    landing.await.unwrap();

    for server in &nodes.servers[..2] {
        foreign_set_nx(&server.url(), "quorum").await;
    }
    let unsettled = nodes.settle("quorum", |h| h.value.holds("theirs")).await;
    let free: Vec<bool> = unsettled
        .iter()
        .map(|h| h.value == HeldValue::Free)
        .collect();
    assert_eq!(free, [false, false, true]);
    let nodes = std::sync::Arc::new(nodes);
    for (key, token) in [("quorum", "theirs"), ("partly", "mine")] {
        let nodes = nodes.clone();
        let waited = tokio::spawn(async move {
            nodes.held_everywhere(key, token).await;
        });
        let refused = waited.await.unwrap_err().into_panic();
        let text = refused.downcast_ref::<String>().unwrap();
        assert!(
            text.contains(&format!("{key} not held by the token on every node")),
            "{text}"
        );
    }
}
