//! Handles that lock the same keys through lists of different numbers of nodes: their
//! majorities need not overlap, so both can hold one resource at once. `build()` refuses a
//! list of another number of nodes than the one in use, and accepts the same nodes in another
//! order, under other names, or after a node restarted empty. Against real redis-server
//! processes.

#![allow(clippy::unwrap_used)] // tests unwrap: a failure is the assertion

use fred::interfaces::KeysInterface;
use redlock_core::{BuildError, LockOptions, Redlock};
use redlock_tests::{RedisNodes, foreign_set_nx};

async fn handle(urls: &[String], check: bool) -> Result<Redlock, BuildError> {
    Redlock::builder()
        .nodes(urls.iter().cloned())
        .node_set_check(check)
        .build()
        .await
}

#[tokio::test]
async fn a_handle_over_another_list_of_the_same_nodes_is_refused() {
    let nodes = RedisNodes::start(5);
    let urls = nodes.urls();
    let _five = handle(&urls, true).await.unwrap();
    // `redlock run --nodes n1,n2,n3` beside applications on n1..n5.
    let three = handle(&urls[..3], true).await;
    match three {
        Err(BuildError::NodeSetMismatch { node, ours, theirs }) => {
            assert!(urls[..3].iter().any(|url| url.ends_with(&node)), "{node}");
            assert_eq!((ours, theirs), (3, 5));
        }
        other => panic!("a handle over 3 of the 5 nodes was built: {other:?}"),
    }
    // The same nodes in another order, or reached by another name, are the same set.
    let mut reversed = urls.clone();
    reversed.reverse();
    handle(&reversed, true).await.unwrap();
    let renamed: Vec<String> = urls
        .iter()
        .map(|url| url.replace("127.0.0.1", "localhost"))
        .collect();
    handle(&renamed, true).await.unwrap();
}

#[tokio::test]
async fn a_node_restarted_empty_does_not_refuse_the_next_build() {
    let mut nodes = RedisNodes::start(3);
    let urls = nodes.urls();
    let _first = handle(&urls, true).await.unwrap();
    nodes.servers[0].restart();
    handle(&urls, true).await.unwrap();
}

/// What the check prevents, shown with it off: the five-node handle holds the resource on
/// nodes 3..5, the three-node handle takes nodes 1 and 2, a majority of its three.
#[tokio::test]
async fn without_the_check_two_lists_hold_one_resource_at_once() {
    let nodes = RedisNodes::start(5);
    let urls = nodes.urls();
    let five = handle(&urls, true).await.unwrap();
    let three = handle(&urls[..3], false).await.unwrap();
    // Nodes 1 and 2 are busy (another client) while the five-node handle locks.
    for url in &urls[..2] {
        foreign_set_nx(url, "r").await;
    }
    let once = LockOptions::default().retry_count(0);
    let first = five.lock_with("r", &once).await.unwrap();
    for url in &urls[..2] {
        redlock_tests::plain_client(url)
            .await
            .del::<i64, _>("r")
            .await
            .unwrap();
    }
    let second = three.lock_with("r", &once).await;
    assert!(
        second.is_ok() && first.is_valid(),
        "the hazard did not reproduce: {second:?}"
    );
    drop(second);
    first.release().await.unwrap();
}
