//! A lock handed on by its token (detach, resume, release from another handle), the
//! operator's force-release and the write → read downgrade, over 5 real nodes.

#![allow(clippy::unwrap_used)] // tests unwrap: a failure is the assertion

use std::time::{Duration, Instant};

use redlock_core::{DetachedLock, InvalidInput, LockError, LockOptions, LostReason, Mode, Redlock};
use redlock_tests::{
    HeldValue, Holding, LogCapture, RedisNodes, lock_everywhere, plain_client, redlock, within,
};

/// One attempt, no waiting.
fn once() -> LockOptions {
    LockOptions::default().retry_count(0)
}

/// The tokens held at `key` on each node (a plain lock), `None` where it is free.
async fn tokens(nodes: &RedisNodes, key: &str) -> Vec<Option<String>> {
    nodes
        .holdings(key)
        .await
        .into_iter()
        .map(|h| h.value.token().map(str::to_owned))
        .collect()
}

/// A handle over `proxies` (a node timeout of 300 ms, so that a cut node fails fast).
async fn through(proxies: &[redlock_tests::proxy::Proxy]) -> Redlock {
    Redlock::builder()
        .nodes(redlock_tests::proxy_urls(proxies))
        .node_timeout(Duration::from_millis(300))
        .build()
        .await
        .unwrap()
}

/// The holders' entries (`token → "<MODE> <expiry>"`) at `key` on each node, waiters left
/// out.
async fn mode_holders(nodes: &RedisNodes, key: &str) -> Vec<Vec<(String, String)>> {
    nodes
        .fields(key)
        .await
        .into_iter()
        .map(|fields| {
            let mut holders: Vec<(String, String)> = fields
                .into_iter()
                .filter(|(field, _)| !field.starts_with('~'))
                .collect();
            holders.sort();
            holders
        })
        .collect()
}

mod resume {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_detached_lock_is_resumed_elsewhere_and_excludes_like_the_original() {
        let nodes = RedisNodes::start(5);
        let (web, worker, other) = (
            redlock(&nodes).await,
            redlock(&nodes).await,
            redlock(&nodes).await,
        );
        let options = LockOptions::default().ttl(Duration::from_secs(5));
        let guard = web.lock_with("job:1", &options).await.unwrap();
        let info = guard.info();
        let detached = guard.detach().unwrap();
        // The web side no longer holds it, and its views say so.
        assert!(!info.is_valid());
        assert_eq!(info.lost().reason(), Some(LostReason::Detached));
        // Through a job queue: serialized, token included.
        let wire = serde_json::to_string(&detached).unwrap();
        let detached: DetachedLock = serde_json::from_str(&wire).unwrap();
        // Still held with the detached token: detaching released nothing.
        let key = detached.key().to_owned();
        let old = detached.token().expose().to_owned();
        nodes.held_everywhere(&key, &old).await;
        assert!(
            tokens(&nodes, &key)
                .await
                .iter()
                .all(|t| t.as_deref() == Some(&old))
        );

        let resumed = worker.resume(&detached).await.unwrap();
        assert!(resumed.is_valid());
        assert_eq!(resumed.resource(), "job:1");
        let new = resumed.token().expose().to_owned();
        assert_ne!(new, old, "a resumption takes a fresh token");
        assert_eq!(nodes.holder(&key).await.as_deref(), Some(new.as_str()));
        // Excludes like the original, extends and releases like it.
        assert!(matches!(
            other.lock_with("job:1", &once()).await,
            Err(LockError::Busy { .. })
        ));
        resumed.extend(Duration::from_secs(20)).await.unwrap();
        // Extended on a quorum at least (its last calls land after it).
        let extended = |h: &Holding| h.ttl.is_some_and(|ttl| ttl > Duration::from_secs(15));
        let holdings = nodes.settle(&key, extended).await;
        let longer = holdings.iter().filter(|h| extended(h)).count();
        assert!(longer >= nodes.quorum(), "{holdings:?}");
        assert!(resumed.release().await.unwrap().was_held());
        let _next = other.lock_with("job:1", &once()).await.unwrap();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_detached_lock_is_resumed_at_most_once() {
        let nodes = RedisNodes::start(5);
        let (a, b, c) = (
            redlock(&nodes).await,
            redlock(&nodes).await,
            redlock(&nodes).await,
        );
        let (mut firsts, mut seconds) = (0, 0);
        for round in 0..10 {
            let resource = format!("once:{round}");
            let detached = a
                .lock_with(&resource, &once())
                .await
                .unwrap()
                .detach()
                .unwrap();
            // Two workers got the same message: at most one holds the lock.
            let (x, y) = tokio::join!(b.resume(&detached), c.resume(&detached));
            match (&x, &y) {
                (Ok(_), Err(LockError::Lost { .. })) => firsts += 1,
                (Err(LockError::Lost { .. }), Ok(_)) => seconds += 1,
                _ => panic!("round {round}: {x:?} and {y:?}"),
            }
            // Once resumed, the detached token can neither resume nor release it.
            assert!(matches!(
                a.resume(&detached).await,
                Err(LockError::Lost { .. })
            ));
            let released = a.release_detached(detached).await.unwrap();
            assert!(!released.was_held());
            let holder = x.or(y).unwrap();
            assert!(holder.is_valid());
            assert!(holder.release().await.unwrap().was_held());
        }
        assert_eq!(firsts + seconds, 10);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_resumed_lock_claims_no_more_validity_than_the_nodes_hold() {
        let nodes = RedisNodes::start(5);
        let (a, b) = (redlock(&nodes).await, redlock(&nodes).await);
        for (taken, resumed) in [(10, 1), (1, 10)] {
            let resource = format!("validity:{taken}");
            let options = LockOptions::default().ttl(Duration::from_secs(taken));
            let detached = a
                .lock_with(&resource, &options)
                .await
                .unwrap()
                .detach()
                .unwrap();
            let options = LockOptions::default().ttl(Duration::from_secs(resumed));
            let guard = b.resume_with(&detached, &options).await.unwrap();
            let left = guard.remaining_validity();
            // A quorum holds it at least as long as the guard claims, and nothing was
            // shortened: a 10 s lock resumed at 1 s keeps its 10 s; a 1 s lock resumed at
            // 10 s was extended to 10 s (the swapped token and the extension after it each
            // land on the last nodes after their quorum, if the node timeout did not cut
            // them).
            let key = guard.key().to_owned();
            let floor = u64::try_from(left.as_millis()).unwrap();
            let longest = taken.max(resumed) * 1000;
            let ms = |h: &Holding| {
                h.ttl
                    .map_or(0, |ttl| u64::try_from(ttl.as_millis()).unwrap())
            };
            let token = guard.token().expose();
            let settled = |h: &Holding| h.value.holds(token) && ms(h) > longest - 1000;
            let resumed_at = Instant::now();
            let holdings = nodes.settle(&key, settled).await;
            // A node the node timeout cut never settles, and the wait then lasts its 2 s:
            // the ttls read are compared with what the guard claims after it, and with the
            // ttl less the time waited.
            let now = guard.remaining_validity();
            let floor = floor.min(u64::try_from(now.as_millis()).unwrap());
            let waited = u64::try_from(resumed_at.elapsed().as_millis()).unwrap();
            let claimed = holdings
                .iter()
                .filter(|h| h.value.holds(token) && ms(h) >= floor);
            assert!(
                claimed.count() >= nodes.quorum(),
                "{holdings:?} for {now:?} ({left:?} before the wait)"
            );
            for holding in holdings.iter().filter(|h| h.value.holds(token)) {
                assert!(
                    ms(holding) + waited > taken * 1000 - 1000,
                    "{holding:?}: shortened below its {taken} s"
                );
            }
            assert!(left > Duration::from_millis(longest - 1500), "{left:?}");
            guard.release().await.unwrap();
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_detached_lock_past_its_ttl_is_not_resumed() {
        let nodes = RedisNodes::start(5);
        let (a, b) = (redlock(&nodes).await, redlock(&nodes).await);
        let options = LockOptions::default().ttl(Duration::from_millis(300));
        let detached = a
            .lock_with("late", &options)
            .await
            .unwrap()
            .detach()
            .unwrap();
        tokio::time::sleep(Duration::from_millis(500)).await;
        let error = b.resume(&detached).await.unwrap_err();
        assert!(
            matches!(
                error,
                LockError::Lost {
                    reason: LostReason::Refused(_),
                    ..
                }
            ),
            "{error:?}"
        );
        // Nothing was re-created.
        assert!(nodes.is_free(detached.key()).await);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn detaching_hands_on_without_releasing_and_release_all_leaves_it() {
        let nodes = RedisNodes::start(5);
        let a = redlock(&nodes).await;
        let options = LockOptions::default()
            .ttl(Duration::from_secs(1))
            .auto_extend(true);
        let guard = a.lock_with("handed", &options).await.unwrap();
        let lost = guard.lost();
        let detached = guard.detach().unwrap();
        assert!(lost.is_lost());
        // Neither the handle's release_all nor its shutdown touch it: it is not ours any more.
        assert!(a.release_all().await.released.is_empty());
        assert_eq!(
            nodes.holder(detached.key()).await.as_deref(),
            Some(detached.token().expose())
        );
        // Nobody extends a detached lock: it expires with its ttl.
        within("the detached lock to expire", async {
            while !nodes.is_free(detached.key()).await {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
        .await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_lock_in_a_mode_is_resumed_in_that_mode() {
        let nodes = RedisNodes::start(5);
        let (a, b) = (redlock(&nodes).await, redlock(&nodes).await);
        let writer = a
            .lock_mode("doc", Mode::Exclusive, Duration::from_secs(5))
            .await
            .unwrap();
        let detached = writer.detach().unwrap();
        assert_eq!(detached.mode(), Some(Mode::Exclusive));
        // A shorter ttl than the key has left: no extension follows the swap.
        let shorter = LockOptions::default().ttl(Duration::from_secs(2));
        let resumed = b.resume_with(&detached, &shorter).await.unwrap();
        assert_eq!(resumed.mode(), Some(Mode::Exclusive));
        let token = resumed.token().expose().to_owned();
        nodes.held_everywhere(resumed.key(), &token).await;
        for holders in mode_holders(&nodes, resumed.key()).await {
            assert_eq!(holders.len(), 1, "{holders:?}");
            assert_eq!(holders[0].0, token);
            assert!(holders[0].1.starts_with("EX "), "{holders:?}");
        }
        // The key keeps its expiry (the swap of its only field must not leave it without one).
        for holding in nodes.holdings(resumed.key()).await {
            assert!(
                holding.ttl.is_some_and(|ttl| ttl > Duration::from_secs(4)),
                "{holding:?}"
            );
        }
        let reader = LockOptions::default().retry_count(0);
        assert!(
            a.lock_mode_with("doc", Mode::ProtectedRead, &reader)
                .await
                .is_err()
        );
        resumed.release().await.unwrap();
        let _reader = a
            .lock_mode_with("doc", Mode::ProtectedRead, &reader)
            .await
            .unwrap();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_resumption_that_asks_for_more_is_refused_before_anything_is_sent() {
        let nodes = RedisNodes::start(3);
        let a = redlock(&nodes).await;
        let prefixed = Redlock::builder()
            .nodes(nodes.urls())
            .key_prefix("app:")
            .build()
            .await
            .unwrap();
        let detached = a.lock("plain").await.unwrap().detach().unwrap();
        let asks = [
            (&a, LockOptions::default().fencing(true), "fencing"),
            (&prefixed, LockOptions::default(), "key prefix"),
        ];
        let moded = a
            .lock_mode("moded", Mode::Exclusive, Duration::from_secs(5))
            .await
            .unwrap()
            .detach()
            .unwrap();
        let before = nodes.script_calls().await;
        // A minimum hold is refused for a lock in a mode, the detached lock's mode included.
        let at_least = LockOptions::default().lock_at_least_for(Duration::from_secs(1));
        let error = a.resume_with(&moded, &at_least).await.unwrap_err();
        assert!(matches!(error, LockError::Invalid(_)), "{error:?}");
        for (handle, options, what) in asks {
            let error = handle.resume_with(&detached, &options).await.unwrap_err();
            assert!(
                matches!(
                    &error,
                    LockError::Invalid(InvalidInput::ResumeMismatch { option }) if *option == what
                ),
                "{what}: {error:?}"
            );
        }
        assert_eq!(nodes.script_calls().await, before, "something was sent");
        // A token that no lock could have is refused when read back.
        let wire = serde_json::to_string(&detached).unwrap();
        let forged = wire.replace(detached.token().expose(), "not-a-token");
        let error = serde_json::from_str::<DetachedLock>(&forged).unwrap_err();
        assert!(error.to_string().contains("token"), "{error}");
        // Debug never shows the token.
        assert!(!format!("{detached:?}").contains(detached.token().expose()));
        // Released through another key prefix: refused before anything is sent.
        let error = prefixed
            .release_detached(detached.clone())
            .await
            .unwrap_err();
        assert!(matches!(error, LockError::Invalid(_)), "{error:?}");
        assert_eq!(nodes.script_calls().await, before, "something was sent");
        a.release_detached(detached).await.unwrap();
        a.release_detached(moded).await.unwrap();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_failed_resumption_gives_the_lock_back_to_the_detached_token() {
        let nodes = RedisNodes::start(5);
        let proxies = nodes.proxies();
        let a = redlock(&nodes).await;
        let through_proxies = through(&proxies).await;
        let options = LockOptions::default().ttl(Duration::from_secs(10));
        let held = a.lock_with("give-back", &options).await.unwrap();
        // What each node holds once the grants have landed (a quorum at least: a grant the
        // node timeout cut on a loaded machine never lands).
        let token = held.token().expose().to_owned();
        nodes
            .settle(held.key(), |holding| holding.value.holds(&token))
            .await;
        let before = tokens(&nodes, held.key()).await;
        let holding: Vec<usize> = (0..before.len())
            .filter(|&i| before[i].as_deref() == Some(&token))
            .collect();
        assert!(holding.len() >= 3, "{before:?}");
        let detached = held.detach().unwrap();
        // Every node cut off but two that hold it: those two swap, no quorum.
        for (i, proxy) in proxies.iter().enumerate() {
            if !holding[..2].contains(&i) {
                proxy.partition();
            }
        }
        let error = through_proxies.resume(&detached).await.unwrap_err();
        assert!(matches!(error, LockError::Unavailable { .. }), "{error:?}");
        // The nodes that swapped hold the detached token again: the resumption can be retried.
        assert_eq!(tokens(&nodes, detached.key()).await, before);
        for proxy in &proxies {
            proxy.heal();
        }
        // Tried again (each failure gives it back) until the clients have reconnected.
        let resumed = within("a resumption once healed", async {
            loop {
                match through_proxies.resume(&detached).await {
                    Ok(guard) => return guard,
                    Err(LockError::Unavailable { .. }) => {
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                    Err(error) => panic!("{error:?}"),
                }
            }
        })
        .await;
        resumed.release().await.unwrap();
    }
}

mod force_release {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_force_release_frees_the_resource_and_the_holder_learns_it_lost_the_lock() {
        let nodes = RedisNodes::start(5);
        let (holder, operator, next) = (
            redlock(&nodes).await,
            redlock(&nodes).await,
            redlock(&nodes).await,
        );
        let options = LockOptions::default()
            .ttl(Duration::from_secs(1))
            .auto_extend(true);
        // Once every node has it (the lock returns at a quorum; a grant the node timeout cut
        // never lands).
        let guard = lock_everywhere(&holder, &nodes, "stuck", None, &options).await;
        let lost = guard.lost();
        let report = operator.force_release("stuck").await.unwrap();
        assert_eq!(
            (report.removed, report.answered, report.not_a_lock),
            (5, 5, 0)
        );
        assert!(nodes.is_free(guard.key()).await);
        let taken = next.lock_with("stuck", &once()).await.unwrap();
        // The old holder's next extension is refused: its lost signal fires.
        within("the old holder's lost signal", lost.cancelled()).await;
        assert!(matches!(lost.reason(), Some(LostReason::Refused(_))));
        assert!(!guard.is_valid());
        // Its release touches nothing of the new holder's.
        assert!(!guard.release().await.unwrap().was_held());
        assert!(taken.release().await.unwrap().was_held());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_force_release_wakes_a_waiter() {
        let nodes = RedisNodes::start(5);
        let (holder, operator, waiter) = (
            redlock(&nodes).await,
            redlock(&nodes).await,
            redlock(&nodes).await,
        );
        let long = LockOptions::default().ttl(Duration::from_secs(30));
        let _stuck = holder.lock_with("woken", &long).await.unwrap();
        // Retries 5 s apart: only a wake-up gets it in sooner.
        let patient = LockOptions::default()
            .retry_count(3)
            .retry_delay(Duration::from_secs(5))
            .retry_jitter(Duration::ZERO);
        let waiting = tokio::spawn(async move { waiter.lock_with("woken", &patient).await });
        tokio::time::sleep(Duration::from_millis(300)).await;
        let forced = Instant::now();
        operator.force_release("woken").await.unwrap();
        let guard = within("the waiter", waiting).await.unwrap().unwrap();
        let waited = forced.elapsed();
        assert!(waited < Duration::from_secs(2), "woken after {waited:?}");
        guard.release().await.unwrap();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_force_release_removes_every_holder_in_modes_and_leaves_other_data() {
        let nodes = RedisNodes::start(5);
        let (a, operator) = (redlock(&nodes).await, redlock(&nodes).await);
        let read = Duration::from_secs(30);
        let read = LockOptions::default().ttl(read);
        let pr = Some(Mode::ProtectedRead);
        // Both on every node (the lock returns at a quorum; a grant the node timeout cut
        // never lands).
        let r1 = lock_everywhere(&a, &nodes, "shared", pr, &read).await;
        let r2 = lock_everywhere(&a, &nodes, "shared", pr, &read).await;
        assert_eq!(operator.force_release("shared").await.unwrap().removed, 5);
        assert!(nodes.is_free(r1.key()).await);
        drop((r1, r2));

        // Another application's list at the key is not a lock: left as it was.
        for url in nodes.urls() {
            use fred::interfaces::ClientLike;
            let client = plain_client(&url).await;
            let cmd = fred::types::CustomCommand::new_static(
                "RPUSH",
                fred::types::ClusterHash::FirstKey,
                false,
            );
            let _: i64 = client
                .custom(cmd, vec!["app-queue".to_owned(), "item".to_owned()])
                .await
                .unwrap();
        }
        let report = operator.force_release("app-queue").await.unwrap();
        assert_eq!((report.removed, report.not_a_lock), (0, 5));
        for holding in nodes.holdings("app-queue").await {
            assert_eq!(holding.value, HeldValue::Other("list".to_owned()));
        }
        // A string without an expiry is an application's value, not a lock: left. A foreign
        // client's lock (`SET NX PX`) is a holder: removed.
        for url in nodes.urls() {
            use fred::interfaces::ClientLike;
            let client = plain_client(&url).await;
            let set = fred::types::CustomCommand::new_static(
                "SET",
                fred::types::ClusterHash::FirstKey,
                false,
            );
            let _: String = client
                .custom(set, vec!["app-string".to_owned(), "hello".to_owned()])
                .await
                .unwrap();
        }
        let report = operator.force_release("app-string").await.unwrap();
        assert_eq!((report.removed, report.not_a_lock), (0, 5));
        for holding in nodes.holdings("app-string").await {
            assert_eq!(holding.value, HeldValue::Token("hello".to_owned()));
        }
        for url in nodes.urls() {
            redlock_tests::foreign_set_nx(&url, "foreign-lock")
                .await
                .unwrap();
        }
        let report = operator.force_release("foreign-lock").await.unwrap();
        assert_eq!((report.removed, report.not_a_lock), (5, 0));
        assert!(report.confirmed());
        assert!(nodes.is_free("foreign-lock").await);
    }

    #[test]
    fn a_force_release_is_logged_loudly_without_the_token() {
        let capture = LogCapture::default();
        let writer = capture.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::TRACE)
            .with_ansi(false)
            .with_writer(move || writer.clone())
            .finish();
        let nodes = RedisNodes::start(3);
        let token = tracing::subscriber::with_default(subscriber, || {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap()
                .block_on(async {
                    let a = redlock(&nodes).await;
                    let guard = a.lock("logged").await.unwrap();
                    let token = guard.token().expose().to_owned();
                    a.force_release("logged").await.unwrap();
                    // Found nothing: still a warning.
                    a.force_release("logged").await.unwrap();
                    drop(guard);
                    a.shutdown(Duration::from_secs(1)).await;
                    token
                })
        });
        let warnings = capture.with(&["WARN", "force-released", "logged"]);
        assert_eq!(warnings.len(), 2, "{}", capture.text());
        assert!(warnings[0].contains("removed=3"), "{warnings:?}");
        assert!(!capture.text().contains(&token), "a token was logged");
    }
}

mod downgrade {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_writer_downgrades_to_a_reader_and_readers_come_in() {
        let nodes = RedisNodes::start(5);
        let (a, b) = (redlock(&nodes).await, redlock(&nodes).await);
        // The lock returns at a quorum, and a grant the node timeout cut (a loaded machine)
        // leaves it there: the control attempt below could then take a node the writer does
        // not hold. So the writer is taken until every node holds it.
        let ten = LockOptions::default().ttl(Duration::from_secs(10));
        let writer = lock_everywhere(&a, &nodes, "catalog", Some(Mode::Exclusive), &ten).await;
        let info = writer.info();
        let read = LockOptions::default().retry_count(0);
        assert!(
            b.lock_mode_with("catalog", Mode::ProtectedRead, &read)
                .await
                .is_err(),
            "a control"
        );
        writer.downgrade(Mode::ProtectedRead).await.unwrap();
        // Every view says so, and every node holds the same entry in the weaker mode.
        assert_eq!(writer.mode(), Some(Mode::ProtectedRead));
        assert_eq!(info.mode(), Some(Mode::ProtectedRead));
        assert!(writer.is_valid());
        let token = writer.token().expose().to_owned();
        // The downgrade returns at a quorum; the other nodes' conversions land just after (a
        // call the node timeout cut leaves its node's entry exclusive). Every node still
        // holds the writer's one entry, and a quorum holds it in the weaker mode.
        let in_pr = |h: &Holding| match &h.value {
            HeldValue::Holders(fields) => fields.get(&token).is_some_and(|v| v.starts_with("PR ")),
            _ => false,
        };
        let holdings = nodes.settle(writer.key(), in_pr).await;
        assert!(
            holdings.iter().filter(|h| in_pr(h)).count() >= 3,
            "{holdings:?}"
        );
        for holders in mode_holders(&nodes, writer.key()).await {
            assert_eq!(holders.len(), 1, "{holders:?}");
            assert_eq!(holders[0].0, token);
        }
        // Readers come in beside it now; a writer does not.
        let reader = b
            .lock_mode_with("catalog", Mode::ProtectedRead, &read)
            .await
            .unwrap();
        let write = LockOptions::default().retry_count(0);
        assert!(
            b.lock_mode_with("catalog", Mode::Exclusive, &write)
                .await
                .is_err()
        );
        reader.release().await.unwrap();
        writer.release().await.unwrap();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn no_writer_gets_in_while_a_writer_downgrades() {
        let nodes = RedisNodes::start(5);
        let (a, c) = (redlock(&nodes).await, redlock(&nodes).await);
        let writer = a
            .lock_mode("gapless", Mode::Exclusive, Duration::from_secs(10))
            .await
            .unwrap();
        // Another writer tries all along, before, during and after the downgrade.
        let stop = tokio_util::sync::CancellationToken::new();
        let hammer = tokio::spawn({
            let stop = stop.clone();
            async move {
                let write = LockOptions::default().retry_count(0);
                let mut tries = 0;
                while !stop.is_cancelled() {
                    tries += 1;
                    if let Ok(guard) = c.lock_mode_with("gapless", Mode::Exclusive, &write).await {
                        return Err(guard.valid_until());
                    }
                }
                Ok(tries)
            }
        });
        tokio::time::sleep(Duration::from_millis(200)).await;
        writer.downgrade(Mode::ProtectedRead).await.unwrap();
        tokio::time::sleep(Duration::from_millis(200)).await;
        stop.cancel();
        let tries = within("the other writer", hammer).await.unwrap();
        assert!(
            tries.is_ok_and(|n| n > 1),
            "another writer got in: {tries:?}"
        );
        writer.release().await.unwrap();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_downgrade_without_a_quorum_still_shows_the_weaker_mode() {
        let nodes = RedisNodes::start(5);
        let proxies = nodes.proxies();
        let a = through(&proxies).await;
        let writer = a
            .lock_mode("partial", Mode::Exclusive, Duration::from_secs(10))
            .await
            .unwrap();
        // Every grant landed before the cut (a late one would be lost with it).
        nodes
            .held_everywhere(writer.key(), writer.token().expose())
            .await;
        for proxy in &proxies[2..] {
            proxy.partition();
        }
        let error = writer.downgrade(Mode::ProtectedRead).await.unwrap_err();
        assert!(matches!(error, LockError::Unavailable { .. }), "{error:?}");
        // Two nodes converted: with the two it may not hold, a reader could get a quorum,
        // so no view may still claim the exclusive mode.
        assert_eq!(writer.mode(), Some(Mode::ProtectedRead));
        assert!(writer.is_valid());
        let modes: Vec<_> = mode_holders(&nodes, writer.key())
            .await
            .into_iter()
            .map(|holders| holders[0].1[..2].to_owned())
            .collect();
        assert_eq!(modes, ["PR", "PR", "EX", "EX", "EX"]);
        for proxy in &proxies {
            proxy.heal();
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_writer_that_waited_downgrades_and_readers_are_not_refused_by_its_old_request() {
        let nodes = RedisNodes::start(5);
        let (a, b, c) = (
            redlock(&nodes).await,
            redlock(&nodes).await,
            redlock(&nodes).await,
        );
        let first = a
            .lock_mode("queued", Mode::Exclusive, Duration::from_secs(10))
            .await
            .unwrap();
        // A second writer waits (refused at first: its request's entry ranks it), then gets
        // it when the first releases.
        let write = LockOptions::default().wait_timeout(Duration::from_secs(5));
        let waiting =
            tokio::spawn(async move { b.lock_mode_with("queued", Mode::Exclusive, &write).await });
        tokio::time::sleep(Duration::from_millis(300)).await;
        first.release().await.unwrap();
        let writer = within("the second writer", waiting).await.unwrap().unwrap();
        writer.downgrade(Mode::ProtectedRead).await.unwrap();
        // A reader asking once is let in: the writer's old request no longer ranks ahead of it.
        let read = LockOptions::default().retry_count(0);
        let reader = c
            .lock_mode_with("queued", Mode::ProtectedRead, &read)
            .await
            .unwrap();
        reader.release().await.unwrap();
        writer.release().await.unwrap();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_downgrade_without_a_quorum_can_be_tried_again() {
        let nodes = RedisNodes::start(5);
        let proxies = nodes.proxies();
        let a = through(&proxies).await;
        let writer = a
            .lock_mode("again", Mode::Exclusive, Duration::from_secs(10))
            .await
            .unwrap();
        // Every grant landed before the cut (a late one would be lost with it).
        nodes
            .held_everywhere(writer.key(), writer.token().expose())
            .await;
        for proxy in &proxies[2..] {
            proxy.partition();
        }
        let error = writer.downgrade(Mode::ProtectedRead).await.unwrap_err();
        assert!(matches!(error, LockError::Unavailable { .. }), "{error:?}");
        for proxy in &proxies {
            proxy.heal();
        }
        within("the downgrade tried again", async {
            loop {
                match writer.downgrade(Mode::ProtectedRead).await {
                    Ok(()) => return,
                    Err(LockError::Unavailable { .. }) => {
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                    Err(error) => panic!("{error:?}"),
                }
            }
        })
        .await;
        // A quorum converted (the others may still be on their way, or stay in the stronger
        // mode: they only exclude more).
        let converted = mode_holders(&nodes, writer.key())
            .await
            .iter()
            .filter(|holders| holders[0].1.starts_with("PR "))
            .count();
        assert!(converted >= 3, "{converted} of 5");
        // Still no upgrade back.
        let error = writer.downgrade(Mode::Exclusive).await.unwrap_err();
        assert!(matches!(error, LockError::Invalid(_)), "{error:?}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_downgrade_wakes_a_waiting_reader() {
        let nodes = RedisNodes::start(5);
        let (a, b) = (redlock(&nodes).await, redlock(&nodes).await);
        let writer = a
            .lock_mode("woken-reader", Mode::Exclusive, Duration::from_secs(30))
            .await
            .unwrap();
        let patient = LockOptions::default()
            .retry_count(3)
            .retry_delay(Duration::from_secs(5))
            .retry_jitter(Duration::ZERO);
        let waiting = tokio::spawn(async move {
            b.lock_mode_with("woken-reader", Mode::ProtectedRead, &patient)
                .await
        });
        tokio::time::sleep(Duration::from_millis(300)).await;
        let downgraded = Instant::now();
        writer.downgrade(Mode::ProtectedRead).await.unwrap();
        let reader = within("the reader", waiting).await.unwrap().unwrap();
        let waited = downgraded.elapsed();
        assert!(waited < Duration::from_secs(2), "woken after {waited:?}");
        reader.release().await.unwrap();
        writer.release().await.unwrap();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn what_is_not_a_downgrade_is_refused_before_anything_is_sent() {
        let nodes = RedisNodes::start(3);
        let a = redlock(&nodes).await;
        let reader = a
            .lock_mode("refused", Mode::ProtectedRead, Duration::from_secs(5))
            .await
            .unwrap();
        let plain = a.lock("refused-plain").await.unwrap();
        let reentrant = LockOptions::default().reentrant(true);
        let shared = a
            .lock_mode_with("refused-shared", Mode::Exclusive, &reentrant)
            .await
            .unwrap();
        let mut before = nodes.script_calls().await;
        for (guard, to, from) in [
            (&reader, Mode::Exclusive, Some(Mode::ProtectedRead)),
            (&reader, Mode::ProtectedRead, Some(Mode::ProtectedRead)),
            (&plain, Mode::ProtectedRead, None),
        ] {
            let error = guard.downgrade(to).await.unwrap_err();
            assert!(
                matches!(
                    &error,
                    LockError::Invalid(InvalidInput::NotADowngrade { from: f, to: t })
                        if *f == from && *t == to
                ),
                "{error:?}"
            );
        }
        assert_eq!(reader.mode(), Some(Mode::ProtectedRead));
        assert_eq!(nodes.script_calls().await, before, "something was sent");
        shared
            .scope(async {
                let inner = a
                    .lock_mode_with("refused-shared", Mode::Exclusive, &reentrant)
                    .await
                    .unwrap();
                before = nodes.script_calls().await;
                let error = inner.downgrade(Mode::ProtectedRead).await.unwrap_err();
                assert!(
                    matches!(error, LockError::Invalid(InvalidInput::Shared { .. })),
                    "{error:?}"
                );
            })
            .await;
        assert_eq!(shared.mode(), Some(Mode::Exclusive));
        assert_eq!(nodes.script_calls().await, before, "something was sent");
    }
}

mod owner {
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

    /// The label a quorum shows for `resource`, once it shows `expected` (the label is
    /// written beside the grant, not awaited by it), within 10 s.
    async fn shows(handle: &Redlock, resource: &str, expected: Option<&str>) {
        within(&format!("{resource} to show {expected:?}"), async {
            loop {
                let status = handle.inspect(resource).await.unwrap();
                if status.owner() == expected {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_holders_label_is_shown_while_it_holds_and_never_for_the_next_holder() {
        let nodes = RedisNodes::start(5);
        let (web, plain) = (labelled(&nodes, "web-1/4242").await, redlock(&nodes).await);
        // Auto-extended at a 1 s ttl: the label must follow the extensions.
        let options = LockOptions::default()
            .ttl(Duration::from_secs(1))
            .auto_extend(true);
        let guard = web.lock_with("report", &options).await.unwrap();
        shows(&plain, "report", Some("web-1/4242")).await;
        tokio::time::sleep(Duration::from_millis(2500)).await;
        let status = plain.inspect("report").await.unwrap();
        assert_eq!(status.owner(), Some("web-1/4242"), "{status:#?}");
        // Keyed by a digest of the token, never the token.
        for keys in nodes.keys("report*owner*").await {
            assert_eq!(keys.len(), 1, "{keys:?}");
            assert!(!keys[0].contains(guard.token().expose()));
        }
        guard.release().await.unwrap();
        assert_eq!(plain.inspect("report").await.unwrap().owner(), None);
        // The next holder has no label: the one left behind (it expires with its ttl) is
        // not shown for it.
        let next = plain.lock("report").await.unwrap();
        assert_eq!(nodes.keys("report*owner*").await.concat().len(), 5);
        let status = plain.inspect("report").await.unwrap();
        assert_eq!(status.owner(), None, "{status:#?}");
        next.release().await.unwrap();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn holders_in_modes_each_show_their_label() {
        let nodes = RedisNodes::start(3);
        let (a, b) = (
            labelled(&nodes, "reader-a").await,
            labelled(&nodes, "reader-b").await,
        );
        let ttl = Duration::from_secs(5);
        let first = a
            .lock_mode("shared", Mode::ProtectedRead, ttl)
            .await
            .unwrap();
        let second = b
            .lock_mode("shared", Mode::ProtectedRead, ttl)
            .await
            .unwrap();
        within("both labels", async {
            loop {
                let status = a.inspect("shared").await.unwrap();
                let labels: Vec<Vec<String>> = status
                    .nodes
                    .iter()
                    .map(|node| match &node.read.as_ref().unwrap().holder {
                        redlock_core::Holder::Modes(holders) => {
                            let mut labels: Vec<String> =
                                holders.iter().filter_map(|h| h.owner.clone()).collect();
                            labels.sort();
                            labels
                        }
                        other => panic!("{other:?}"),
                    })
                    .collect();
                if labels.iter().all(|l| l == &["reader-a", "reader-b"]) {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await;
        first.release().await.unwrap();
        second.release().await.unwrap();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn anyone_can_see_who_leads() {
        let nodes = RedisNodes::start(5);
        let (candidate, observer) = (
            labelled(&nodes, "scheduler@node-3").await,
            redlock(&nodes).await,
        );
        let election = candidate.leader_election("scheduler");
        let stop = election.shutdown_signal();
        let (led_tx, led_rx) = tokio::sync::oneshot::channel();
        let mut led_tx = Some(led_tx);
        let running = tokio::spawn(election.run(move |term| {
            if let Some(tx) = led_tx.take() {
                let _ = tx.send(());
            }
            async move { term.ended().await }
        }));
        within("a term", led_rx).await.unwrap();
        let watching = observer.leader_election("scheduler");
        within("the leader's label", async {
            while watching.leader().await.unwrap().as_deref() != Some("scheduler@node-3") {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await;
        stop.cancel();
        within("the election to end", running)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(watching.leader().await.unwrap(), None);
    }

    #[tokio::test]
    async fn a_label_that_is_empty_too_long_or_holds_a_control_character_is_refused() {
        let nodes = RedisNodes::start(1);
        let long = "x".repeat(redlock_core::MAX_OWNER_LEN + 1);
        for label in ["", long.as_str(), "web-1\nroot"] {
            let error = Redlock::builder()
                .nodes(nodes.urls())
                .owner(label)
                .build()
                .await
                .unwrap_err();
            assert!(
                matches!(
                    &error,
                    redlock_core::BuildError::Option { name: "owner", .. }
                ),
                "{label:?}: {error:?}"
            );
        }
    }
}
