//! Fencing tokens under composed faults (issue 15): nodes restarted empty, with quarantine on,
//! combined with minority partitions placed where they hurt most, against 5 real nodes behind
//! fault proxies. The oracle is the storage's fencing check (`checker::Fenced`): each holder
//! writes with its token, and a token that is not strictly greater than the highest one seen
//! from a *different* holder is a violation.
//!
//! Fault model (redlock-core's docs, "Fencing tokens"): a token is confirmed by a fencing
//! quorum F (4 of 5), so the confirmations of two holders share 2F − N = 3 nodes; tokens
//! strictly increase as long as fewer than 3 of those lose their data between the two holders.
//! The negative control restarts 3 nodes and must see a token issued twice.

#![allow(clippy::unwrap_used, clippy::print_stderr)] // tests unwrap and report figures

use std::time::Duration;

use futures_util::future::join_all;
use redlock_core::{LockError, LockOptions, Mode, Redlock};
use redlock_tests::checker::{Fenced, Register};
use redlock_tests::clock::ClockOffset;
use redlock_tests::proxy::{Direction, Fault, Proxy};
use redlock_tests::{
    RedisNodes, RedisServer, ServerOptions, fencing_key, plain_client, proxy_urls, redlock,
};

const TTL: Duration = Duration::from_secs(1);
/// A fencing counter ttl that outlives every test.
const KEPT: Duration = Duration::from_secs(600);
/// A fencing counter ttl far shorter than the time between two holders of an episode.
const EXPIRING: Duration = Duration::from_millis(300);
/// A node votes once its quarantine (`TTL`, from the handle's build or from the first
/// acquisition after a restart) has passed; this is a good margin more.
const PAST_QUARANTINE: Duration = Duration::from_millis(2_300);

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// A client with its own proxies, quarantining restarted nodes for the ttl.
struct Client {
    redlock: Redlock,
    proxies: Vec<Proxy>,
}

impl Client {
    /// Fencing counters expire after `counter_ttl`.
    async fn new(nodes: &RedisNodes, counter_ttl: Duration) -> Self {
        let proxies = nodes.proxies();
        let redlock = Redlock::builder()
            .nodes(proxy_urls(&proxies))
            .node_timeout(ms(100))
            .quarantine(TTL)
            .fencing_counter_ttl(counter_ttl)
            .lock_options(LockOptions::default().ttl(TTL))
            .build()
            .await
            .unwrap();
        Self { redlock, proxies }
    }

    /// Waits (up to 10 s) until a plain lock on a probe resource lands on every node: each of
    /// this client's connections is up (a restarted node's comes back with a back-off) and
    /// past its quarantine. The probe never touches a fencing counter.
    async fn reach_all(&self, nodes: &RedisNodes) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        let key = self.redlock.key_for("probe");
        loop {
            if let Ok(guard) = self.redlock.lock("probe").await {
                // The round returns at quorum; the other nodes' commands land just after.
                tokio::time::sleep(ms(20)).await;
                let everywhere = nodes.values(&key).await.iter().all(Option::is_some);
                let _ = guard.release().await;
                if everywhere {
                    return;
                }
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "a node stayed unreachable for 10 s"
            );
            tokio::time::sleep(ms(50)).await;
        }
    }

    /// Takes a fenced lock on `resource` with the nodes in `cut` unreachable, writes to the
    /// register with its token as holder `holder`, and releases. The token, or the error.
    async fn fenced_write(
        &self,
        resource: &str,
        cut: &[usize],
        register: &Register,
        holder: u64,
    ) -> Result<(u64, Fenced), LockError> {
        cut.iter().for_each(|&n| self.proxies[n].partition());
        // Retries for a while: a client reconnects to a restarted node with a back-off of up
        // to 2 s.
        let options = LockOptions::default()
            .ttl(TTL)
            .fencing(true)
            .retry_count(u32::MAX)
            .retry_delay(ms(100))
            .wait_timeout(Duration::from_secs(5));
        let result = self.redlock.lock_with(resource, &options).await;
        cut.iter().for_each(|&n| self.proxies[n].heal());
        let guard = result?;
        let token = guard.fencing_token().unwrap();
        let verdict = register.write_fenced(1, token, holder).await;
        let _ = guard.release().await;
        Ok((token, verdict))
    }
}

/// What one composed episode produced.
#[derive(Debug)]
struct Episode {
    /// P's token and the storage's verdict, or P's error.
    p: Result<(u64, Fenced), LockError>,
    /// Q's, after the restarts.
    q: Result<(u64, Fenced), LockError>,
    /// R's, with every node reachable again.
    r: Result<(u64, Fenced), LockError>,
}

/// Four fenced holders warm the counter up to 4 on every node; then P locks with the nodes
/// in `cut_p` cut off, the nodes in `restart` are killed and restarted empty, Q locks (once
/// their quarantine has passed) with the nodes in `cut_q` cut off and the replies of `slow_q`
/// delayed by half the node timeout (so Q's read misses that node, but its write-back hears
/// it), and last R locks with every node reachable. Each writes to the fenced register with
/// its token. Fencing counters expire after `counter_ttl`, but the warm-up's after
/// `warm_ttl`.
async fn episode(
    resource: &str,
    cut_p: &[usize],
    restart: &[usize],
    cut_q: &[usize],
    slow_q: Option<usize>,
    (warm_ttl, counter_ttl): (Duration, Duration),
) -> Episode {
    let mut nodes = RedisNodes::start(5);
    let warm = Client::new(&nodes, warm_ttl).await;
    let p = Client::new(&nodes, counter_ttl).await;
    let store = RedisServer::start();
    let register = Register::new(&store, resource).await;
    // The fresh nodes are in quarantine themselves at first.
    tokio::time::sleep(PAST_QUARANTINE).await;
    for warm_up in 0..4 {
        let (token, verdict) = warm
            .fenced_write(resource, &[], &register, warm_up)
            .await
            .unwrap();
        assert_eq!((token, verdict), (warm_up + 1, Fenced::Accepted));
    }
    let p_result = p.fenced_write(resource, cut_p, &register, 100).await;
    for &n in restart {
        nodes.servers[n].restart();
    }
    // Q connects after the restarts, so that its first attempt reaches every node it is not
    // cut off from (an attempt while a connection is still coming back raises the counters
    // it reaches, and Q's next one goes above them).
    let q = Client::new(&nodes, counter_ttl).await;
    tokio::time::sleep(PAST_QUARANTINE).await;
    q.reach_all(&nodes).await;
    if let Some(n) = slow_q {
        q.proxies[n].set(Direction::Reply, Fault::Delay(ms(50)));
    }
    let q_result = q.fenced_write(resource, cut_q, &register, 200).await;
    if let Some(n) = slow_q {
        q.proxies[n].heal();
    }
    let r_result = q.fenced_write(resource, &[], &register, 300).await;
    Episode {
        p: p_result,
        q: q_result,
        r: r_result,
    }
}

fn token(result: &Result<(u64, Fenced), LockError>) -> Option<u64> {
    result.as_ref().ok().map(|(token, _)| *token)
}

/// Every token that was issued was accepted by the storage (strictly above every earlier
/// holder's), and they strictly increase in the order P, Q, R.
fn assert_strictly_increasing(what: &str, episode: &Episode) {
    let issued: Vec<(u64, Fenced)> = [&episode.p, &episode.q, &episode.r]
        .into_iter()
        .filter_map(|r| r.as_ref().ok().copied())
        .collect();
    for (token, verdict) in &issued {
        assert_eq!(
            *verdict,
            Fenced::Accepted,
            "{what}: token {token} refused by the storage ({episode:?})"
        );
    }
    assert!(
        issued.windows(2).all(|w| w[0].0 < w[1].0),
        "{what}: tokens not strictly increasing ({episode:?})"
    );
}

/// The scenario of issue 15: P's token is confirmed only by {0, 1, 2} (3 and 4 cut off),
/// node 2 restarts empty, and Q is granted by {2, 3, 4} (0 and 1 cut off). With a write-back
/// quorum of 3, Q read a max of 4 and claimed 5 again: the storage saw 5 from two holders.
/// Now a token needs 4 confirmations: P and Q each reach only 3 nodes, so neither gets one
/// (`Unavailable`, naming the 4 needed), and R, with every node back, gets one above every
/// earlier token.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_node_restarted_empty_and_minority_cuts_never_repeat_a_token() {
    let episode = episode("fence-a", &[3, 4], &[2], &[0, 1], None, (KEPT, KEPT)).await;
    eprintln!("issue-15 scenario: {episode:?}");
    assert_strictly_increasing("issue-15 scenario", &episode);
    for (who, result) in [("P", &episode.p), ("Q", &episode.q)] {
        match result {
            Err(LockError::Unavailable { quorum: 4, .. }) => {}
            other => panic!("{who} reached 3 nodes, so it must not get a token: {other:?}"),
        }
    }
    assert!(token(&episode.r).is_some(), "R: {episode:?}");
}

/// The same faults with one node cut off each time, so every holder reaches a fencing
/// quorum: P is confirmed by {0, 1, 2, 3}, nodes 2 and 3 restart empty (two of the three
/// nodes any two fencing quorums share), Q reaches {1, 2, 3, 4}, and node 1's replies to Q
/// come late, so Q's lock is granted by {2, 3, 4} and reads a max of 4. Node 1 still holds
/// P's token and refuses Q's claim of 5, so Q's token goes above it; R's above Q's. (A
/// write-back quorum of 3 hands Q the 5 again here, every time.)
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_nodes_restarted_empty_with_single_cuts_keep_tokens_increasing() {
    two_restarts("two restarts, single cuts", "fence-b", (KEPT, KEPT)).await;
}

/// The two-restart episode (P confirmed by {0, 1, 2, 3}, nodes 2 and 3 restarted empty, Q
/// cut off node 0 with node 1's replies late) with the warm-up's and P's and Q's counter
/// ttls: P gets 5, Q above it, R above Q, and the storage accepts every token.
async fn two_restarts(what: &str, resource: &str, ttls: (Duration, Duration)) {
    let episode = episode(resource, &[4], &[2, 3], &[0], Some(1), ttls).await;
    eprintln!("{what}: {episode:?}");
    assert_strictly_increasing(what, &episode);
    let [p, q, r] = [&episode.p, &episode.q, &episode.r].map(token);
    assert_eq!(p, Some(5), "{episode:?}");
    assert!(
        q.is_some_and(|q| q > 5) && r > q,
        "every holder reached 4 nodes: {episode:?}"
    );
}

/// The same episode with P's and Q's fencing counters expiring after 300 ms, long before Q
/// locks (the warm-up's, after 10 minutes): on node 1, which still holds P's token 5, the
/// resource's counter is gone, and the token is only in the key prefix's fencing floor (in
/// its window's `current`; the window, opened by the warm-up for 10 minutes, was cut to
/// P's 300 ms by P's claim, and no claim has folded it into `past` since). Q, granted by
/// {2, 3, 4}, reads 4 (node 4's floor) and claims 5: node 1 must compare it with the floor, refuse it, and
/// send Q above 5. A floor that read only `past`, or a window left to outlive P's counter,
/// would confirm it (with 2, 3 and 4: a fencing quorum), and the storage would see 5 twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_nodes_restarted_empty_after_the_counters_expired_keep_tokens_increasing() {
    two_restarts(
        "two restarts, counters expired",
        "fence-d",
        (KEPT, EXPIRING),
    )
    .await;
}

/// The same with the warm-up's counters never expiring (`Duration::MAX`), so that its window
/// has no expiry at all until P's claim gives it one: handles of one key prefix may keep
/// their counters for different times.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn counters_kept_forever_beside_expiring_ones_keep_tokens_increasing() {
    let ttls = (Duration::MAX, EXPIRING);
    two_restarts("two restarts, counters kept and expired", "fence-e", ttls).await;
}

/// Negative control, outside the fault model: P is confirmed by {0, 1, 2, 3}; nodes 1, 2
/// and 3 (all three that P's and Q's fencing quorums share) restart empty; Q reaches
/// {1, 2, 3, 4}, reads a max of 4 and claims 5 again. The storage must see the duplicate.
/// Node 3's replies to Q come late, so that Q's lock is granted by {1, 2, 4} and its read
/// sees node 4's 4: granted by {1, 2, 3}, it would read 0, claim 1, find node 4 above it and
/// go to 5 plus a random spread (a split claim), which repeats P's token only by chance.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_nodes_restarted_empty_repeat_a_token_and_the_storage_sees_it() {
    let episode = episode("fence-c", &[4], &[1, 2, 3], &[0], Some(3), (KEPT, KEPT)).await;
    eprintln!("control, three restarts: {episode:?}");
    assert_eq!(token(&episode.p), Some(5), "{episode:?}");
    assert!(
        matches!(episode.q, Ok((5, Fenced::Duplicate))),
        "Q must get P's token again, and the storage must refuse it as a duplicate: {episode:?}"
    );
}

/// Sets `key` to `value` on every node.
async fn set_everywhere(nodes: &RedisNodes, key: &str, value: &str) {
    for url in nodes.urls() {
        let client = plain_client(&url).await;
        let () = fred::interfaces::KeysInterface::set(&client, key, value, None, None, false)
            .await
            .unwrap();
    }
}

/// A counter written before counters had a ttl is a floor: tokens go on above it. Counters
/// past 2^53 (where Lua's doubles stop being exact) are compared exactly: successive tokens
/// still differ. A counter that is not a number reads as 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn counters_past_2_to_the_53_strictly_increase() {
    let nodes = RedisNodes::start(5);
    let redlock = redlock(&nodes).await;
    let fenced = LockOptions::default().fencing(true);
    let token = |resource: &'static str| {
        let redlock = redlock.clone();
        let fenced = fenced.clone();
        async move {
            let guard = redlock.lock_with(resource, &fenced).await.unwrap();
            let token = guard.fencing_token().unwrap();
            guard.release().await.unwrap();
            token
        }
    };
    // First, while the key prefix's floor is 0 (a resource fenced for the first time gets a
    // token above the highest one of the prefix).
    set_everywhere(&nodes, &fencing_key("foreign"), "a7f3c9e1b2").await;
    assert_eq!(token("foreign").await, 1);

    // A counter written before counters had a ttl: tokens go on above it, and it gets one.
    set_everywhere(&nodes, &fencing_key("prior"), "7").await;
    assert_eq!(token("prior").await, 8);
    let ttls = nodes.pttls(&fencing_key("prior")).await;
    assert!(ttls.iter().filter(|&&t| t > 0).count() >= 4, "{ttls:?}");

    let past = 9_007_199_254_740_993_u64; // 2^53 + 1: a double reads it as 2^53
    set_everywhere(&nodes, &fencing_key("big"), &past.to_string()).await;
    let tokens = [token("big").await, token("big").await, token("big").await];
    assert_eq!(tokens, [past + 1, past + 2, past + 3]);
    // Stored exactly (a fencing quorum confirmed it; the fifth write may land just after).
    let stored = nodes.values(&fencing_key("big")).await;
    let exact = stored
        .iter()
        .filter(|s| s.as_deref() == Some((past + 3).to_string().as_str()))
        .count();
    assert!(exact >= 4, "{stored:?}");
}

/// Eight readers (compatible holders of a mode lock) take fenced locks at once, one attempt
/// each: each gets a token, all distinct. Claiming the same value, each would be confirmed by
/// the nodes it reached first and none by 4 of 5, round after round; claims after the first
/// spread out at random, so the highest is confirmed wherever it arrives.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_readers_all_get_distinct_tokens() {
    let nodes = RedisNodes::start(5);
    let readers = join_all((0..8).map(|_| redlock(&nodes))).await;
    for round in 0..5 {
        let resource = format!("shared:{round}");
        let options = LockOptions::default().fencing(true).retry_count(0);
        let guards = join_all(
            readers
                .iter()
                .map(|r| r.lock_mode_with(&resource, Mode::ProtectedRead, &options)),
        )
        .await;
        let mut tokens: Vec<u64> = guards
            .iter()
            .map(|g| match g {
                Ok(guard) => guard.fencing_token().unwrap(),
                Err(e) => panic!("round {round}: a reader got no lock: {e}"),
            })
            .collect();
        tokens.sort_unstable();
        tokens.dedup();
        assert_eq!(tokens.len(), 8, "round {round}: tokens repeat: {tokens:?}");
        for guard in guards {
            guard.unwrap().release().await.unwrap();
        }
    }
}

/// Two readers claim at once, each reaching a different side first: A's commands reach nodes
/// {0, 1} at once and {2, 3, 4} 20 ms later, B's {3, 4} at once and {0, 1, 2} later, so both
/// are granted at the same moment, read the same counter and claim the same value. Claiming
/// equal values, every round would split 3 / 2 (node 2 goes to either) and neither would ever
/// be confirmed by 4; after a split, claims spread out at random, so the higher one wins
/// every node it reaches.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_readers_split_three_two_still_both_get_tokens() {
    let nodes = RedisNodes::start(5);
    let (a, b) = (
        Client::new(&nodes, KEPT).await,
        Client::new(&nodes, KEPT).await,
    );
    tokio::time::sleep(PAST_QUARANTINE).await;
    for n in 2..5 {
        a.proxies[n].set(Direction::Request, Fault::Delay(ms(20)));
    }
    for n in 0..3 {
        b.proxies[n].set(Direction::Request, Fault::Delay(ms(20)));
    }
    let options = LockOptions::default().ttl(TTL).fencing(true).retry_count(0);
    for round in 0..3 {
        let resource = format!("split:{round}");
        let (ga, gb) = tokio::join!(
            a.redlock
                .lock_mode_with(&resource, Mode::ProtectedRead, &options),
            b.redlock
                .lock_mode_with(&resource, Mode::ProtectedRead, &options)
        );
        let (ga, gb) = (ga.unwrap(), gb.unwrap());
        assert_ne!(ga.fencing_token(), gb.fencing_token(), "round {round}");
        let _ = tokio::join!(ga.release(), gb.release());
    }
}

/// A handle over `nodes` with key prefix `prefix` whose fencing counters expire after `ttl`.
async fn handle_keeping_counters(nodes: &RedisNodes, prefix: &str, ttl: Duration) -> Redlock {
    Redlock::builder()
        .nodes(nodes.urls())
        .key_prefix(prefix)
        .fencing_counter_ttl(ttl)
        .build()
        .await
        .unwrap()
}

/// Takes and releases a fenced lock on each of `resources`, 20 at a time: their tokens.
async fn fence_each(redlock: &Redlock, resources: &[String]) -> Vec<u64> {
    let fenced = LockOptions::default().fencing(true);
    let mut tokens = Vec::new();
    for chunk in resources.chunks(20) {
        let guards = join_all(chunk.iter().map(|r| redlock.lock_with(r, &fenced))).await;
        for guard in guards {
            let guard = guard.unwrap();
            tokens.push(guard.fencing_token().unwrap());
            guard.release().await.unwrap();
        }
    }
    tokens
}

/// The fencing counters (`<key>\0redlock:fencing`) under `prefix` on each node.
async fn counters(nodes: &RedisNodes, prefix: &str) -> Vec<usize> {
    let suffix = format!("{}fencing", redlock_core::BOOKKEEPING_SEPARATOR);
    nodes
        .keys(&format!("{prefix}*"))
        .await
        .iter()
        .map(|keys| keys.iter().filter(|k| k.ends_with(&suffix)).count())
        .collect()
}

/// Fencing counters expire (`fencing_counter_ttl`), so that fenced locks on ever new
/// resources (one per order, say) do not fill the nodes: 200 resources fenced leave no
/// counter once the ttl has passed, only the key prefix's floor, while a handle whose
/// counters never expire (`Duration::MAX`, as every counter was before they had a ttl)
/// still holds all 200 on every node. Across the expiry, each resource's next token is
/// above every token it had (and above every token of the prefix: the floor's). A ttl of
/// zero is taken as 1 ms: counters are gone at once, and tokens still strictly increase.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fencing_counters_expire_and_tokens_keep_increasing_across_the_expiry() {
    let nodes = RedisNodes::start(5);
    let resources: Vec<String> = (0..200).map(|i| format!("order:{i}")).collect();
    let expiring = handle_keeping_counters(&nodes, "short:", Duration::from_secs(2)).await;
    let forever = handle_keeping_counters(&nodes, "kept:", Duration::MAX).await;
    let before = fence_each(&expiring, &resources).await;
    fence_each(&forever, &resources).await;
    let written = counters(&nodes, "short:").await;
    assert!(
        written.iter().all(|&n| n > 0),
        "the counters were written: {written:?}"
    );

    tokio::time::sleep(Duration::from_millis(2_500)).await;
    assert_eq!(counters(&nodes, "short:").await, [0; 5], "counters left");
    let floor = format!("short:{}fencing-floor", redlock_core::BOOKKEEPING_SEPARATOR);
    for keys in nodes.keys("short:*").await {
        let fencing: Vec<&String> = keys.iter().filter(|k| k.contains("fencing")).collect();
        assert_eq!(fencing, [&floor], "only the floor stays");
    }
    let kept_ttls = nodes.pttls(&fencing_key("kept:order:0")).await;
    assert!(
        kept_ttls.iter().filter(|&&t| t == -1).count() >= 4,
        "Duration::MAX: no expiry: {kept_ttls:?}"
    );
    let kept = counters(&nodes, "kept:").await;

    assert!(
        kept.iter().filter(|&&n| n == 200).count() >= 4 && kept.iter().all(|&n| n <= 200),
        "Duration::MAX keeps every counter: {kept:?}"
    );

    let highest = before.iter().copied().max().unwrap();
    let after = fence_each(&expiring, &resources[..10]).await;
    for (i, token) in after.iter().enumerate() {
        assert!(
            *token > before[i] && *token > highest,
            "{}: token {token} after its counter expired, {} before (prefix's highest {highest})",
            resources[i],
            before[i]
        );
    }

    let zero = handle_keeping_counters(&nodes, "zero:", Duration::ZERO).await;
    let mut tokens = Vec::new();
    for _ in 0..5 {
        tokens.extend(fence_each(&zero, &["job".to_owned()]).await);
    }
    assert!(tokens.windows(2).all(|w| w[0] < w[1]), "{tokens:?}");
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(counters(&nodes, "zero:").await, [0; 5]);
}

/// A fencing floor this version cannot read (another format) is an error on that node: the
/// claim is not confirmed there, and the floor is left as it is. On every node, a fenced lock
/// is unavailable; an unfenced one is not affected.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_unreadable_fencing_floor_is_left_as_it_is_and_confirms_nothing() {
    let nodes = RedisNodes::start(5);
    let redlock = redlock(&nodes).await;
    let floor = format!("{}fencing-floor", redlock_core::BOOKKEEPING_SEPARATOR);
    set_everywhere(&nodes, &floor, "v2:12:34").await;
    let fenced = LockOptions::default().fencing(true).retry_count(0);
    let result = redlock.lock_with("job", &fenced).await;
    assert!(
        matches!(result, Err(LockError::Unavailable { quorum: 4, .. })),
        "{result:?}"
    );
    assert_eq!(
        nodes.values(&floor).await,
        vec![Some("v2:12:34".to_owned()); 5]
    );
    redlock.lock("job").await.unwrap().release().await.unwrap();
}

/// `command args` on one server, from a plain client.
async fn command(url: &str, command: &'static str, args: Vec<String>) -> fred::types::Value {
    use fred::interfaces::ClientLike;
    use fred::types::{ClusterHash, CustomCommand};
    let cmd = CustomCommand::new_static(command, ClusterHash::FirstKey, false);
    plain_client(url).await.custom(cmd, args).await.unwrap()
}

/// A node's wall clock, in ms (`TIME`).
async fn node_time(url: &str) -> i64 {
    let time: Vec<String> = command(url, "TIME", vec![]).await.convert().unwrap();
    time[0].parse::<i64>().unwrap() * 1000 + time[1].parse::<i64>().unwrap() / 1000
}

/// A backward step of a node's clock, shorter than half the counter ttl, between the
/// deletion of a resource's expired counter and the next claim: the window of the floor must
/// not come back to life. The two-restart episode again (P confirmed by {0, 1, 2, 3}, nodes 2
/// and 3 restarted empty, Q granted by {2, 3, 4} with a read of 4, claiming 5), with counters
/// kept 1 s and node 1 (which alone still knows P's 5) run under the clock shim, its active
/// expiry off so that only a read deletes an expired key. P's claim opens a new window there.
/// Once P's counter has expired, a read deletes it; then node 1's clock is stepped back to
/// 250 ms before the counter's expiry, and Q claims at once. A window as long as the counter
/// would be open again (its `current`, 5, not in `past`), and node 1 would confirm Q's 5: the
/// storage would see it twice. The window lasts half the ttl, so it has ended 250 ms before:
/// node 1 refuses 5 and Q goes above it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_backward_clock_step_under_half_the_counter_ttl_never_repeats_a_token() {
    const COUNTER: Duration = Duration::from_secs(1);
    let clock1 = ClockOffset::new();
    let mut nodes = RedisNodes::start_opts(5, |i| {
        if i == 1 {
            ServerOptions::default()
                .args(["--enable-debug-command", "yes"])
                .envs(clock1.env())
        } else {
            ServerOptions::default()
        }
    });
    let node1 = nodes.servers[1].url();
    let resource = "fence-clock";
    let p = Client::new(&nodes, COUNTER).await;
    let store = RedisServer::start();
    let register = Register::new(&store, resource).await;
    tokio::time::sleep(PAST_QUARANTINE).await;
    for warm_up in 0..4 {
        let (token, _) = p
            .fenced_write(resource, &[], &register, warm_up)
            .await
            .unwrap();
        assert_eq!(token, warm_up + 1);
    }
    command(
        &node1,
        "DEBUG",
        vec!["SET-ACTIVE-EXPIRE".into(), "0".into()],
    )
    .await;
    // The warm-up's window ends (it is shorter than the counters): P's claim opens a new one.
    tokio::time::sleep(COUNTER + ms(200)).await;
    let p_result = p.fenced_write(resource, &[4], &register, 100).await;
    assert_eq!(token(&p_result), Some(5), "{p_result:?}");
    let counter = fencing_key(resource);
    let left: i64 = command(&node1, "PTTL", vec![counter.clone()])
        .await
        .convert()
        .unwrap();
    let expires_at = node_time(&node1).await + left;
    for n in [2, 3] {
        nodes.servers[n].restart();
    }
    let q = Client::new(&nodes, COUNTER).await;
    tokio::time::sleep(PAST_QUARANTINE).await;
    q.reach_all(&nodes).await;
    q.proxies[1].set(Direction::Reply, Fault::Delay(ms(50)));
    // Expired: this read deletes it (active expiry is off).
    let gone: Option<String> = command(&node1, "GET", vec![counter])
        .await
        .convert()
        .unwrap();
    assert_eq!(gone, None);
    let now = node_time(&node1).await;
    clock1.set(expires_at - 250 - now);
    let q_result = q.fenced_write(resource, &[0], &register, 200).await;
    q.proxies[1].heal();
    eprintln!("clock step: P {p_result:?}, Q {q_result:?}");
    match q_result {
        Ok((q, Fenced::Accepted)) => assert!(q > 5, "Q got {q}"),
        other => panic!("Q: {other:?} (P: {p_result:?})"),
    }
}
