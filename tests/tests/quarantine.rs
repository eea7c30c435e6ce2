//! Data loss without a restart: `FLUSHALL` on a node that granted a lock, with the quarantine
//! on. The node's `uptime_in_seconds` does not move, so only a per-node witness of its data
//! (the quarantine's witness key) can tell that it forgot the holder's key. A second client
//! must not get the lock while the first still counts on its validity; without the
//! quarantine (the negative control) it does.

#![allow(clippy::unwrap_used)] // tests unwrap: a failure is the assertion

use std::time::Duration;
use tokio::time::Instant;

use redlock_core::{LockOptions, Redlock};
use redlock_tests::proxy::Proxy;
use redlock_tests::{RedisNodes, plain_client, proxy_urls};

const TTL: Duration = Duration::from_secs(2);

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// A handle over its own proxies, quarantining nodes for the ttl when `quarantine`.
async fn client(nodes: &RedisNodes, quarantine: bool) -> (Redlock, Vec<Proxy>) {
    let proxies = nodes.proxies();
    let redlock = Redlock::builder()
        .nodes(proxy_urls(&proxies))
        .node_timeout(ms(100))
        .quarantine(if quarantine { TTL } else { Duration::ZERO })
        .lock_options(LockOptions::default().ttl(TTL))
        .build()
        .await
        .unwrap();
    (redlock, proxies)
}

/// Waits until a lock on a probe resource lands on every node through `redlock` (every node
/// past its quarantine: a fresh server is in quarantine at first).
async fn reach_all(redlock: &Redlock, nodes: &RedisNodes) {
    let key = redlock.key_for("probe");
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        if let Ok(guard) = redlock.lock("probe").await {
            tokio::time::sleep(ms(20)).await;
            let everywhere = nodes.values(&key).await.iter().all(Option::is_some);
            guard.release().await.unwrap();
            if everywhere {
                return;
            }
        }
        assert!(Instant::now() < deadline, "a node stayed in quarantine");
        tokio::time::sleep(ms(100)).await;
    }
}

/// `FLUSHALL` on node `i`, from the outside (an operator, a test fixture, a re-sync).
async fn flushall(nodes: &RedisNodes, i: usize) {
    use fred::interfaces::ClientLike;
    use fred::types::{ClusterHash, CustomCommand, Value};
    let client = plain_client(&nodes.urls()[i]).await;
    let cmd = CustomCommand::new_static("FLUSHALL", ClusterHash::FirstKey, false);
    let _: Value = client.custom(cmd, Vec::<Value>::new()).await.unwrap();
}

/// A holds `resource` on nodes {0, 1, 2} (3 and 4 cut off from A); the nodes in `flushed`
/// (granting nodes) are flushed; B, which reaches every node but those in `b_cut`, tries for
/// all of A's validity. Returns how long before A's validity ended B got the lock, if it did.
/// Both handles quarantine when `quarantine`.
async fn scenario(
    resource: &str,
    flushed: &[usize],
    b_cut: &[usize],
    quarantine: bool,
) -> Option<Duration> {
    let nodes = RedisNodes::start(5);
    let (a, pa) = client(&nodes, quarantine).await;
    let (b, pb) = client(&nodes, quarantine).await;
    reach_all(&a, &nodes).await;
    reach_all(&b, &nodes).await;
    pa[3].partition();
    pa[4].partition();
    let guard = a
        .lock_with(resource, &a.options().clone().retry_count(0))
        .await
        .unwrap();
    let key = a.key_for(resource);
    // The round returns at quorum: the others land just after.
    tokio::time::sleep(ms(20)).await;
    let values = nodes.values(&key).await;
    assert!(
        values[..3].iter().all(Option::is_some) && values[3..].iter().all(Option::is_none),
        "{values:?}"
    );
    for &n in flushed {
        flushall(&nodes, n).await;
    }
    b_cut.iter().for_each(|&n| pb[n].partition());
    let valid_until = guard.valid_until();
    let tries = b
        .options()
        .clone()
        .retry_delay(ms(20))
        .retry_jitter(ms(5))
        .wait_timeout(valid_until.saturating_duration_since(Instant::now()));
    let b_result = b.lock_with(resource, &tries).await;
    let got = Instant::now();
    let early = match &b_result {
        Ok(_) if got < valid_until => Some(valid_until - got),
        _ => None,
    };
    if let Ok(b_guard) = b_result {
        b_guard.release().await.unwrap();
    } else {
        // Refused because the flushed nodes sat out, not for another reason.
        let error = b_result.err().unwrap();
        let quarantined = error.to_string().matches("in quarantine").count();
        assert_eq!(quarantined, flushed.len(), "{error}");
        // Liveness: once the quarantine has passed, B gets the lock.
        guard.release().await.unwrap();
        let patient = b
            .options()
            .clone()
            .retry_delay(ms(100))
            .wait_timeout(Duration::from_secs(8));
        let later = tokio::time::timeout(Duration::from_secs(12), b.lock_with(resource, &patient))
            .await
            .expect("B's wait is bounded");
        later.unwrap().release().await.unwrap();
    }
    early
}

/// Awaits a scenario for at most 40 s.
async fn bounded<T>(future: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(40), future)
        .await
        .expect("the scenario took over 40 s")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flushed_granting_node_sits_out_the_quarantine() {
    // B reaches {2, 3, 4}: with node 2 flushed, only its vote could complete a quorum.
    let early = bounded(scenario("flush:one", &[2], &[0, 1], true)).await;
    assert_eq!(
        early, None,
        "B got the lock {early:?} before A's validity ended"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_flushed_granting_nodes_sit_out_the_quarantine() {
    // B reaches {1, 2, 3, 4}: nodes 1 and 2 flushed.
    let early = bounded(scenario("flush:two", &[1, 2], &[0], true)).await;
    assert_eq!(
        early, None,
        "B got the lock {early:?} before A's validity ended"
    );
}

/// The negative control: without the quarantine, the same flush lets B in while A still
/// counts on its validity, so the scenario can see a second holder.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_quarantine_a_flushed_node_lets_a_second_holder_in() {
    let early = bounded(scenario("flush:control", &[2], &[0, 1], false)).await;
    assert!(early.is_some(), "B never got in: the scenario cannot fail");
}

/// Handles of one key prefix with different quarantines: after a loss, the first handle to
/// see it would start the quarantine with its own length, too short for the other's keys. So
/// a node refuses every handle whose quarantine is not the one its witness records: here the
/// short-quarantine handle, which reaches the flushed node first, never gets a vote anywhere
/// else, and the long one is refused on the flushed node until its own quarantine has passed.
#[tokio::test]
async fn handles_with_different_quarantines_are_refused_not_trusted() {
    let nodes = RedisNodes::start(3);
    let build = |quarantine: Duration| {
        Redlock::builder()
            .nodes(nodes.urls())
            .node_timeout(ms(200))
            .quarantine(quarantine)
            .lock_options(LockOptions::default().ttl(ms(500)))
            .build()
    };
    let long = build(ms(1_000)).await.unwrap();
    reach_all(&long, &nodes).await;
    let short = build(ms(600)).await.unwrap();
    let once = LockOptions::default().ttl(ms(500)).retry_count(0);
    let refused = short.lock_with("r", &once).await.unwrap_err();
    assert!(
        refused.to_string().contains("quarantine of another length"),
        "{refused}"
    );
    // The long handle holds r; node 0 is flushed; the short handle touches it first.
    let guard = long.lock_with("r", &once).await.unwrap();
    flushall(&nodes, 0).await;
    let _ = short.lock_with("r", &once).await;
    tokio::time::sleep(ms(700)).await;
    // Past the short quarantine: node 0 still refuses the long handle (its witness records
    // the short one), and the short handle is still refused by nodes 1 and 2.
    let again = short.lock_with("r2", &once).await.unwrap_err();
    assert!(
        again.to_string().contains("quarantine of another length"),
        "{again}"
    );
    drop(guard);
}
