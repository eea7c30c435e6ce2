//! The edges of handing a lock on and of breaking it, over real nodes: a resumption after a
//! node came back from an older snapshot, a resumption dropped in its extension round or
//! completed during shutdown, a fenced lock resumed, and a force-release whose delete reaches
//! a node late.

#![allow(clippy::unwrap_used)] // tests unwrap: a failure is the assertion

use std::time::{Duration, Instant};

use fred::interfaces::ClientLike;
use fred::types::{ClusterHash, CustomCommand, Value};
use redlock_core::{LockError, LockOptions, Redlock};
use redlock_tests::proxy::{Direction, Fault, Proxy};
use redlock_tests::{RedisNodes, plain_client, proxy_urls, redlock, within};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// The ttl of the locks of the quarantine scenario, and the quarantine that covers it: long
/// enough for the scenario's steps (a lock, a snapshot, a resumption, a restart, a new handle)
/// on a loaded machine.
const TTL: Duration = Duration::from_secs(8);

/// A handle over `urls`, quarantining nodes for [`TTL`] when `quarantine`.
async fn handle(urls: Vec<String>, quarantine: bool, node_timeout: Duration) -> Redlock {
    Redlock::builder()
        .nodes(urls)
        .node_timeout(node_timeout)
        .quarantine(if quarantine { TTL } else { Duration::ZERO })
        .lock_options(LockOptions::default().ttl(TTL))
        .build()
        .await
        .unwrap()
}

/// Waits until a probe lock lands on every node through `redlock` (every node past the
/// quarantine a fresh server starts in).
async fn past_quarantine(redlock: &Redlock, nodes: &RedisNodes) {
    let key = redlock.key_for("probe");
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        if let Ok(guard) = redlock.lock("probe").await {
            let token = guard.token().expose().to_owned();
            let everywhere = nodes
                .settle(&key, |h| h.value.holds(&token))
                .await
                .iter()
                .all(|h| h.value.holds(&token));
            guard.release().await.unwrap();
            if everywhere {
                return;
            }
        }
        assert!(Instant::now() < deadline, "a node stayed in quarantine");
        tokio::time::sleep(ms(100)).await;
    }
}

/// Runs `command` on node `i` from the outside.
async fn on_node(nodes: &RedisNodes, i: usize, command: &'static str) {
    let client = plain_client(&nodes.urls()[i]).await;
    let cmd = CustomCommand::new_static(command, ClusterHash::FirstKey, false);
    let _: Value = client.custom(cmd, Vec::<Value>::new()).await.unwrap();
}

/// Which nodes hold `token` at `key`, now.
async fn holding(nodes: &RedisNodes, key: &str, token: &str) -> Vec<bool> {
    nodes
        .holdings(key)
        .await
        .iter()
        .map(|h| h.value.holds(token))
        .collect()
}

/// Waits (at most 5 s) until at least `count` nodes hold `token` at `key`.
async fn wait_held_on(nodes: &RedisNodes, key: &str, token: &str, count: usize) {
    within(&format!("{token} on {count} nodes"), async {
        while holding(nodes, key, token)
            .await
            .iter()
            .filter(|held| **held)
            .count()
            < count
        {
            tokio::time::sleep(ms(5)).await;
        }
    })
    .await;
}

/// A detached lock is resumed through proxies that cut nodes 3 and 4 off, so the first
/// resumption swaps the token on nodes 0–2 only; node 2 had saved a snapshot while it still
/// held the detached token, and is killed and started again from it. A second delivery of the
/// same `DetachedLock` then finds the detached token on nodes 2, 3 and 4. Returns the first
/// resumption's guard and what the second got.
async fn resumed_after_an_old_snapshot(
    quarantine: bool,
) -> (
    redlock_core::LockGuard,
    Result<redlock_core::LockGuard, LockError>,
) {
    let mut nodes = RedisNodes::start(5);
    let a = handle(nodes.urls(), quarantine, ms(100)).await;
    let proxies = nodes.proxies();
    let b = handle(proxy_urls(&proxies), quarantine, ms(300)).await;
    if quarantine {
        past_quarantine(&a, &nodes).await;
        past_quarantine(&b, &nodes).await;
    }
    let held =
        redlock_tests::lock_everywhere(&a, &nodes, "job", None, &LockOptions::default().ttl(TTL))
            .await;
    let detached = held.detach().unwrap();
    // Node 2's snapshot, while it holds the detached token.
    on_node(&nodes, 2, "SAVE").await;
    for proxy in &proxies[3..] {
        proxy.set(Direction::Request, Fault::Blackhole);
    }
    let first = b.resume(&detached).await.unwrap();
    let key = detached.key().to_owned();
    wait_held_on(&nodes, &key, first.token().expose(), 3).await;
    // Node 2 comes back from its older snapshot, the detached token with it.
    nodes.servers[2].kill();
    nodes.servers[2].start_again();
    assert!(holding(&nodes, &key, detached.token().expose()).await[2]);
    // The second delivery, through a handle connected after the restart.
    let c = handle(nodes.urls(), quarantine, ms(100)).await;
    let second = c.resume(&detached).await;
    assert!(first.is_valid(), "the first resumer's validity ran out");
    (first, second)
}

/// A node restarted from a snapshot taken before the first resumption is in quarantine: it
/// does not help a second resumption of the same lock to a quorum. At most one resumption
/// holds it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_back_from_an_older_snapshot_does_not_help_a_second_resumption() {
    let (first, second) = resumed_after_an_old_snapshot(true).await;
    match second {
        Err(LockError::Lost { .. } | LockError::Unavailable { .. }) => {}
        Err(other) => panic!("{other:?}"),
        Ok(guard) => panic!(
            "two holders: {} and {} both resumed it",
            first.token().expose(),
            guard.token().expose()
        ),
    }
    assert!(first.is_valid());
}

/// The negative control: without the quarantine, the same restart lets the second delivery
/// resume it beside the first (the distlock spec's "delayed restarts" are what prevents it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_quarantine_a_node_back_from_an_old_snapshot_lets_a_second_resumer_in() {
    let (first, second) = resumed_after_an_old_snapshot(false).await;
    let second = second.unwrap();
    assert!(first.is_valid() && second.is_valid());
}

/// A handle over `proxies` whose replies arrive `delay` late (node timeout 5 s, so that the
/// rounds still decide).
async fn slow_replies(proxies: &[Proxy], delay: Duration) -> Redlock {
    let redlock = handle(proxy_urls(proxies), false, Duration::from_secs(5)).await;
    for proxy in proxies {
        proxy.set(Direction::Reply, Fault::Delay(delay));
    }
    redlock
}

/// A resumption dropped in its extension round gives the lock back: the swap landed, the
/// extension landed, the future is dropped awaiting the extension's replies; the detached
/// token holds the lock again and another handle resumes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resumption_dropped_in_its_extension_round_gives_the_lock_back() {
    let nodes = RedisNodes::start(3);
    let a = redlock(&nodes).await;
    let proxies = nodes.proxies();
    let b = slow_replies(&proxies, ms(1000)).await;
    let options = LockOptions::default().ttl(Duration::from_secs(10));
    let held = redlock_tests::lock_everywhere(&a, &nodes, "job", None, &options).await;
    let detached = held.detach().unwrap();
    let key = detached.key().to_owned();
    // A longer ttl than the keys have left: the resumption extends after its swap.
    let longer = LockOptions::default().ttl(Duration::from_secs(30));
    let resuming = {
        let (b, detached) = (b.clone(), detached.clone());
        tokio::spawn(async move { b.resume_with(&detached, &longer).await })
    };
    // The swap and then the extension land on a quorum (the keys then live past 10 s);
    // the future awaits the extension's replies.
    within("the extension on a quorum", async {
        loop {
            let holdings = nodes.holdings(&key).await;
            let pttls = nodes.pttls(&key).await;
            let extended = holdings
                .iter()
                .zip(&pttls)
                .filter(|(h, pttl)| !h.value.holds(detached.token().expose()) && **pttl > 10_500)
                .count();
            if extended >= 2 {
                break;
            }
            tokio::time::sleep(ms(5)).await;
        }
    })
    .await;
    resuming.abort();
    assert!(resuming.await.unwrap_err().is_cancelled());
    // The give-back: the detached token is back on a quorum, with the expiry it had (not the
    // extension's 30 s), and another handle resumes it.
    wait_held_on(&nodes, &key, detached.token().expose(), 2).await;
    let holdings = nodes.holdings(&key).await;
    let pttls = nodes.pttls(&key).await;
    for (holding, pttl) in holdings.iter().zip(&pttls) {
        if holding.value.holds(detached.token().expose()) {
            assert!(*pttl <= 10_000, "given back with {pttl} ms left");
        }
    }
    let again = a.resume(&detached).await.unwrap();
    assert!(again.is_valid());
    again.release().await.unwrap();
}

/// A resumption that completes while the handle shuts down is refused and gives the lock
/// back: nothing stays held by a guard that `shutdown` did not release.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resumption_completing_during_shutdown_gives_the_lock_back() {
    let nodes = RedisNodes::start(3);
    let a = redlock(&nodes).await;
    let proxies = nodes.proxies();
    let b = slow_replies(&proxies, ms(800)).await;
    let options = LockOptions::default().ttl(Duration::from_secs(10));
    let held = redlock_tests::lock_everywhere(&a, &nodes, "job", None, &options).await;
    let detached = held.detach().unwrap();
    let (key, old) = (
        detached.key().to_owned(),
        detached.token().expose().to_owned(),
    );
    let resuming = {
        let (b, detached) = (b.clone(), detached.clone());
        tokio::spawn(async move { b.resume(&detached).await })
    };
    // The swap has landed on a quorum; its replies are on their way.
    within("the swap on a quorum", async {
        while holding(&nodes, &key, &old)
            .await
            .iter()
            .filter(|held| !**held)
            .count()
            < 2
        {
            tokio::time::sleep(ms(5)).await;
        }
    })
    .await;
    let report = b.shutdown(Duration::from_secs(10)).await;
    assert!(report.released.is_empty(), "{report:?}");
    // `shutdown` waited for the resumption and its give-back: when it returns, the detached
    // token holds the lock again on a quorum (a process exits here, and drops what is left).
    let back = holding(&nodes, &key, &old).await;
    assert!(
        back.iter().filter(|held| **held).count() >= 2,
        "shutdown returned before the give-back: {back:?}"
    );
    let resumed = within("the resumption", resuming).await.unwrap();
    assert!(
        matches!(resumed, Err(LockError::ShuttingDown)),
        "a resumption completed during shutdown: {resumed:?}"
    );
    // Given back: the detached token holds it again, and another handle resumes it.
    wait_held_on(&nodes, &key, &old, 2).await;
    let again = a.resume(&detached).await.unwrap();
    again.release().await.unwrap();
}

/// A resumer is a new holder: a fenced lock resumed gets a larger fencing token than the one
/// it was detached with, so storage refuses a late write of the detaching holder.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fenced_lock_resumed_gets_a_larger_fencing_token() {
    let nodes = RedisNodes::start(5);
    let (a, b) = (redlock(&nodes).await, redlock(&nodes).await);
    let fenced = LockOptions::default()
        .ttl(Duration::from_secs(10))
        .fencing(true);
    for _ in 0..3 {
        let held = a.lock_with("fenced", &fenced).await.unwrap();
        let before = held.fencing_token().unwrap();
        let detached = held.detach().unwrap();
        assert_eq!(detached.fencing_token(), Some(before));
        let resumed = b.resume_with(&detached, &fenced).await.unwrap();
        let after = resumed.fencing_token().unwrap();
        assert!(
            after > before,
            "resumed with {after}, detached with {before}"
        );
        // And the next holder's is larger still.
        resumed.release().await.unwrap();
        let next = a.lock_with("fenced", &fenced).await.unwrap();
        assert!(next.fencing_token().unwrap() > after);
        next.release().await.unwrap();
    }
}

/// A force-release whose delete reaches one node late (its connection there 8 s slow)
/// removes only the holder its read found: the next holder, which took that node meanwhile,
/// keeps its key there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_force_release_leaves_the_next_holder_alone() {
    let nodes = RedisNodes::start(3);
    let (a, next) = (redlock(&nodes).await, redlock(&nodes).await);
    let proxies = nodes.proxies();
    // A node timeout of 1 s: the two pass-through nodes answer within it on a loaded machine.
    let operator = Redlock::builder()
        .nodes(proxy_urls(&proxies))
        .node_timeout(Duration::from_secs(1))
        .build()
        .await
        .unwrap();
    let options = LockOptions::default().ttl(Duration::from_secs(20));
    let stuck = redlock_tests::lock_everywhere(&a, &nodes, "stuck", None, &options).await;
    let key = stuck.key().to_owned();
    // 8 s: the delete, sent when the read's 1 s timeout passed, is late by 7 s after the
    // force-release returns; the next holder must take every node within that, and each retry
    // of `lock_everywhere` (a grant that missed a node on a loaded machine) costs its 2 s
    // settle. With 4 s, two retries (or one and a stall) let the delete land first.
    proxies[2].set(Direction::Request, Fault::Delay(ms(8000)));
    let report = operator.force_release("stuck").await.unwrap();
    assert_eq!((report.removed, report.answered), (2, 2), "{report:?}");
    // Node 2 still holds the old holder's key (its delete is on its way): free it there as
    // its expiry would, and let the next holder take every node.
    {
        let client = plain_client(&nodes.urls()[2]).await;
        let _: i64 = fred::interfaces::KeysInterface::del(&client, &key)
            .await
            .unwrap();
    }
    let taken = redlock_tests::lock_everywhere(&next, &nodes, "stuck", None, &options).await;
    // The late delete lands: the operator's shutdown waits until every node answered every
    // command sent to it.
    assert!(
        proxies[2].held(Direction::Request) > 0,
        "the delete was not late"
    );
    operator.shutdown(Duration::from_secs(10)).await;
    let held = holding(&nodes, &key, taken.token().expose()).await;
    assert_eq!(
        held,
        [true, true, true],
        "the next holder's key was deleted"
    );
    assert!(taken.release().await.unwrap().was_held());
    drop(stuck);
}
