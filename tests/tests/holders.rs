//! Who holds a resource, as the nodes tell it and as the waiters are served, against real
//! redis-server processes: two holders with one owner label that split the nodes are not one
//! owner (nor a leader); a call the node answers `NOSCRIPT` is sent again by source at once;
//! the waiters' queue follows the ranks their clients' wall clocks gave them, so a client
//! clock ahead by d serves its waiter as if it had started d later (the bound the guarantees
//! page gives for client clock skew); a re-entry that waited for its turn across a downgrade,
//! or races it from another thread, never runs in the downgraded lock.

#![allow(clippy::unwrap_used)] // tests unwrap: a failure is the assertion

use std::time::Duration;

use fred::interfaces::{ClientLike, KeysInterface, LuaInterface};
use fred::types::{ClusterHash, CustomCommand};
use redlock_core::{LockError, LockOptions, Mode, Redlock};
use redlock_tests::{
    HeldValue, RedisNodes, lock_everywhere, plain_client, redlock, waiters_key, within,
};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// `command args...` on the node at `url`, from a plain client.
async fn on<T: fred::types::FromValue>(url: &str, command: &'static str, args: Vec<String>) -> T {
    let client = plain_client(url).await;
    let cmd = CustomCommand::new_static(command, ClusterHash::FirstKey, false);
    let out = client.custom(cmd, args).await.unwrap();
    client.quit().await.unwrap();
    out
}

mod owners {
    use super::*;

    /// A handle labelled `label` over `nodes`.
    async fn labelled(nodes: &RedisNodes, label: &str) -> Redlock {
        Redlock::builder()
            .nodes(nodes.urls())
            .owner(label)
            .build()
            .await
            .unwrap()
    }

    /// Waits until each node holds `counts[i]` owner labels for `key` (written beside a
    /// grant, not awaited by it).
    async fn labels(nodes: &RedisNodes, key: &str, counts: &[usize]) {
        within(&format!("{counts:?} labels of {key}"), async {
            loop {
                let keys = nodes.keys(&format!("{key}*owner*")).await;
                if keys.iter().map(Vec::len).eq(counts.iter().copied()) {
                    return;
                }
                tokio::time::sleep(ms(20)).await;
            }
        })
        .await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn two_holders_with_one_label_that_split_the_nodes_are_neither_owner_nor_leader() {
        let nodes = RedisNodes::start(5);
        let urls = nodes.urls();
        let (a, b, observer) = (
            labelled(&nodes, "replica").await,
            labelled(&nodes, "replica").await,
            redlock(&nodes).await,
        );
        let options = LockOptions::default().ttl(Duration::from_secs(30));
        let first = lock_everywhere(&a, &nodes, "job", None, &options).await;
        labels(&nodes, "job", &[1; 5]).await;
        // a's key goes from nodes 2, 3 and 4 (expired there, flushed): b takes them, a
        // quorum, and is the owner.
        for url in &urls[2..] {
            let client = plain_client(url).await;
            let _: i64 = client.del("job").await.unwrap();
        }
        let second = b.lock_with("job", &options).await.unwrap();
        labels(&nodes, "job", &[1, 1, 2, 2, 2]).await;
        let status = observer.inspect("job").await.unwrap();
        assert_eq!(status.owner(), Some("replica"), "{status:#?}");
        // b's key goes from node 4: a holds nodes 0 and 1, b nodes 2 and 3, both labelled
        // "replica". Four nodes show that label; no holder has a quorum.
        let client = plain_client(&urls[4]).await;
        let _: i64 = client.del("job").await.unwrap();
        let status = observer.inspect("job").await.unwrap();
        assert_eq!(status.held_on(), 4, "{status:#?}");
        assert_eq!(status.owner(), None, "{status:#?}");
        let leader = observer.leader_election("job").leader().await.unwrap();
        assert_eq!(leader, None, "a leader while nobody holds a quorum");
        let _ = first.release().await;
        let _ = second.release().await;
    }
}

/// How many `NOSCRIPT` errors every node has answered so far (`INFO errorstats`).
async fn noscripts(nodes: &RedisNodes) -> Vec<u64> {
    let mut out = Vec::new();
    for url in nodes.urls() {
        let text: String = on(&url, "INFO", vec!["errorstats".into()]).await;
        out.push(
            text.lines()
                .find_map(|line| line.strip_prefix("errorstat_NOSCRIPT:count="))
                .and_then(|count| count.trim().parse().ok())
                .unwrap_or(0),
        );
    }
    out
}

#[tokio::test]
async fn a_call_answered_noscript_is_sent_again_by_source_at_once() {
    let nodes = RedisNodes::start(3);
    let a = redlock(&nodes).await;
    // A plain lock is the node's own `SET`: the release is the script call.
    let guard = a.lock("noscript").await.unwrap();
    let token = guard.token().expose().to_owned();
    let held = nodes.settle("noscript", |h| h.value.holds(&token)).await;
    assert!(held.iter().all(|h| h.value.holds(&token)), "{held:?}");
    for url in nodes.urls() {
        let client = plain_client(&url).await;
        client.script_flush(false).await.unwrap();
    }
    let (errors, evals) = (noscripts(&nodes).await, nodes.command_calls("eval").await);
    // Alone on an idle handle: sent by its caller, as a batch of one.
    assert!(guard.release().await.unwrap().was_held());
    let gone = nodes.settle("noscript", |h| !h.value.holds(&token)).await;
    assert!(gone.iter().all(|h| h.value == HeldValue::Free), "{gone:?}");
    let (errors_after, evals_after) = (noscripts(&nodes).await, nodes.command_calls("eval").await);
    for node in 0..3 {
        // One `EVALSHA` answered `NOSCRIPT`, then the `EVAL`; not a second `EVALSHA`.
        assert_eq!(
            errors_after[node] - errors[node],
            1,
            "node {node}: NOSCRIPT answers"
        );
        assert_eq!(evals_after[node] - evals[node], 1, "node {node}: EVAL sent");
    }
}

mod ranks {
    use super::*;

    /// Options of a waiter that only a release wakes.
    fn waiter() -> LockOptions {
        LockOptions::default()
            .retry_delay(Duration::from_secs(10))
            .retry_jitter(Duration::ZERO)
            .wait_timeout(Duration::from_secs(30))
    }

    /// Waits until `key` has `n` waiters queued on every node.
    async fn until_queued(nodes: &RedisNodes, key: &str, n: i64) {
        within("the waiter to queue on every node", async {
            while nodes.queued(key).await.iter().any(|&q| q < n) {
                tokio::time::sleep(ms(2)).await;
            }
        })
        .await;
    }

    /// The waiters queued for `key`, by rank: their markers and scores (each a client's wall
    /// clock when it started waiting, in ms), the same on every node.
    async fn queue(nodes: &RedisNodes, key: &str) -> Vec<(String, i64)> {
        let mut each = Vec::new();
        for url in nodes.urls() {
            let flat: Vec<String> = on(
                &url,
                "ZRANGE",
                vec![
                    waiters_key(key),
                    "0".into(),
                    "-1".into(),
                    "WITHSCORES".into(),
                ],
            )
            .await;
            let queue: Vec<(String, i64)> = flat
                .chunks(2)
                .map(|pair| (pair[0].clone(), pair[1].parse().unwrap()))
                .collect();
            each.push(queue);
        }
        assert!(each.windows(2).all(|w| w[0] == w[1]), "{each:?}");
        each.swap_remove(0)
    }

    /// Two waiters queue 300 ms apart behind a holder; the first one's client clock is then
    /// made to run ahead by its head start plus `past` ms (its rank rewritten on every node,
    /// as that clock would have written it); the holder releases. Returns the order the two
    /// were served in (0: the one that started first).
    async fn served(past: i64) -> Vec<usize> {
        let nodes = RedisNodes::start(3);
        let holder = redlock(&nodes).await;
        let held = holder.lock("res").await.unwrap();
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        for i in 0..2usize {
            let (handle, tx) = (redlock(&nodes).await, tx.clone());
            tokio::spawn(async move {
                let guard = handle.lock_with("res", &waiter()).await.unwrap();
                tx.send(i).unwrap();
                tokio::time::sleep(ms(20)).await;
                guard.release().await.unwrap();
            });
            until_queued(&nodes, "res", i64::try_from(i).unwrap() + 1).await;
            tokio::time::sleep(ms(300)).await;
        }
        let ranks = queue(&nodes, "res").await;
        let [(first, started), (_, next)] = ranks.as_slice() else {
            panic!("{ranks:?}")
        };
        let head_start = next - started;
        assert!(head_start >= 300, "{ranks:?}");
        // Its clock ahead by d = head start + past: it ranks as if it started d later.
        let lead = head_start + past;
        nodes
            .zadd(
                &waiters_key("res"),
                &[(started + lead).to_string(), first.clone()],
            )
            .await;
        held.release().await.unwrap();
        let mut order = Vec::new();
        for _ in 0..2 {
            order.push(within("the next waiter", rx.recv()).await.unwrap());
        }
        order
    }

    #[tokio::test]
    async fn a_waiter_whose_clock_leads_by_more_than_its_head_start_is_served_second() {
        assert_eq!(served(100).await, vec![1, 0]);
    }

    #[tokio::test]
    async fn a_waiter_whose_clock_leads_by_less_than_its_head_start_keeps_its_place() {
        assert_eq!(served(-100).await, vec![0, 1]);
    }
}

#[tokio::test]
async fn a_reentry_that_waited_for_its_turn_across_a_downgrade_does_not_enter() {
    let nodes = RedisNodes::start(3);
    let (a, b) = (redlock(&nodes).await, redlock(&nodes).await);
    let exclusive = LockOptions::default()
        .reentrant(true)
        .ttl(Duration::from_secs(10))
        .wait_timeout(ms(300));
    let guard = a
        .lock_mode_with("doc", Mode::Exclusive, &exclusive)
        .await
        .unwrap();
    guard
        .scope(async {
            let first = a
                .lock_mode_with("doc", Mode::Exclusive, &exclusive)
                .await
                .unwrap();
            assert_eq!(guard.hold_count(), 2);
            // A sibling re-entry finds the scope in EX and waits for the first one's turn.
            let mut second = Box::pin(a.lock_mode_with("doc", Mode::Exclusive, &exclusive));
            assert!(futures_util::poll!(second.as_mut()).is_pending());
            // The first one leaves: the turn is the second one's, the lock has one hold,
            // and the downgrade goes ahead; a reader comes in.
            drop(first);
            guard.downgrade(Mode::ProtectedRead).await.unwrap();
            let reader = b
                .lock_mode("doc", Mode::ProtectedRead, Duration::from_secs(5))
                .await
                .unwrap();
            // The second one's body is written for EX: it must not run beside the reader.
            match second.await {
                Err(LockError::Busy { .. }) => {}
                Ok(entered) => panic!(
                    "an EX re-entry entered the lock downgraded to {:?} beside a reader",
                    entered.mode()
                ),
                Err(other) => panic!("{other:?}"),
            }
            reader.release().await.unwrap();
        })
        .await;
    assert_eq!(guard.hold_count(), 1);
    guard.release().await.unwrap();
}

/// A scope of the lock spawned onto another worker re-enters it in EX at the instant the
/// guard downgrades it, 300 times: the re-entry and the downgrade never both succeed (either
/// the re-entry is seen and the downgrade refused as shared, or the re-entry sees the weaker
/// mode and does not enter). Without the re-entry's check of the mode after it counted its
/// hold, or the downgrade's count of holds after it changed the mode, a few rounds in 300
/// have both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reentry_racing_a_downgrade_from_another_thread_never_runs_beside_it() {
    use std::sync::{Arc, Barrier};
    let nodes = RedisNodes::start(3);
    let a = redlock(&nodes).await;
    let exclusive = LockOptions::default()
        .reentrant(true)
        .ttl(Duration::from_secs(10))
        .retry_count(0);
    let (mut both, mut entered, mut downgraded) = (0, 0, 0);
    for round in 0..300 {
        let resource = format!("race:{round}");
        let guard = a
            .lock_mode_with(&resource, Mode::Exclusive, &exclusive)
            .await
            .unwrap();
        let start = Arc::new(Barrier::new(2));
        let reentry = {
            let (a, resource, options, start) = (
                a.clone(),
                resource.clone(),
                exclusive.clone(),
                start.clone(),
            );
            tokio::spawn(guard.scope(async move {
                start.wait();
                a.lock_mode_with(&resource, Mode::Exclusive, &options).await
            }))
        };
        start.wait();
        let downgrade = guard.downgrade(Mode::ProtectedRead).await;
        let reentry = reentry.await.unwrap();
        downgraded += usize::from(downgrade.is_ok());
        entered += usize::from(reentry.is_ok());
        both += usize::from(downgrade.is_ok() && reentry.is_ok());
        drop(reentry);
        let _ = guard.release().await;
    }
    assert_eq!(
        both, 0,
        "{both} of 300 rounds had both ({entered} re-entries, {downgraded} downgrades)"
    );
}
