//! One file of cases, run against both kinds of nodes: real servers ([`TestNodes`], on real
//! time) and in-memory nodes ([`MemoryNodes`], on a paused clock). A case sees its nodes
//! through [`Nodes`] only, so both kinds answer the same assertions; `cargo nextest` prints
//! each half's run time (`servers::` and `memory::`).

#![allow(clippy::unwrap_used)] // tests unwrap: a failure is the assertion

use std::time::Duration;

use redlock_core::{LockError, LockOptions, Redlock};
use redlock_test::{MemoryNodes, TestNodes};
use tokio::time::Instant;

/// What a case needs from its nodes.
trait Nodes {
    async fn redlock_with(&self, options: LockOptions) -> Redlock;
    /// The token on a quorum of nodes at `key`.
    async fn holder(&self, key: &str) -> Option<String>;
    /// Nothing at `key` on a quorum.
    async fn is_free(&self, key: &str) -> bool;
    /// Waiters queued for `key` on a quorum.
    async fn queued_on_quorum(&self, key: &str) -> bool;
    /// Node `index` gives no vote (a server is paused, so its calls time out; an in-memory
    /// node is stopped, so they fail at once); `up` brings it back with its keys.
    fn down(&self, index: usize);
    fn up(&self, index: usize);
}

impl Nodes for TestNodes {
    async fn redlock_with(&self, options: LockOptions) -> Redlock {
        redlock_test::redlock_with(self, options).await
    }
    async fn holder(&self, key: &str) -> Option<String> {
        TestNodes::holder(self, key).await
    }
    async fn is_free(&self, key: &str) -> bool {
        TestNodes::is_free(self, key).await
    }
    async fn queued_on_quorum(&self, key: &str) -> bool {
        let queued = self.queued(key).await;
        queued.iter().filter(|n| **n > 0).count() >= self.quorum()
    }
    fn down(&self, index: usize) {
        self.servers[index].pause();
    }
    fn up(&self, index: usize) {
        self.servers[index].resume();
    }
}

impl Nodes for MemoryNodes {
    async fn redlock_with(&self, options: LockOptions) -> Redlock {
        MemoryNodes::redlock_with(self, options).await
    }
    async fn holder(&self, key: &str) -> Option<String> {
        MemoryNodes::holder(self, key)
    }
    async fn is_free(&self, key: &str) -> bool {
        MemoryNodes::is_free(self, key)
    }
    async fn queued_on_quorum(&self, key: &str) -> bool {
        self.queued(key).iter().filter(|n| **n > 0).count() >= self.quorum()
    }
    fn down(&self, index: usize) {
        self.stop(index);
    }
    fn up(&self, index: usize) {
        self.start(index);
    }
}

/// Waits, at most `limit` of the nodes' clock, until `done` holds; how long it took.
async fn within(limit: Duration, mut done: impl AsyncFnMut() -> bool) -> Duration {
    let started = Instant::now();
    while !done().await {
        assert!(started.elapsed() < limit, "not within {limit:?}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    started.elapsed()
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// A lock is held on a quorum, excludes a second, and its release frees it.
async fn a_lock_excludes_until_released(nodes: &impl Nodes) {
    let lock = nodes.redlock_with(LockOptions::default()).await;
    let guard = lock.lock("kinds:a").await.unwrap();
    let token = guard.token().expose().to_owned();
    within(ms(2_000), async || {
        nodes.holder("kinds:a").await.as_deref() == Some(&token)
    })
    .await;
    assert!(lock.try_lock("kinds:a").await.unwrap().is_none());
    guard.release().await.unwrap();
    within(ms(2_000), async || nodes.is_free("kinds:a").await).await;
    assert!(lock.try_lock("kinds:a").await.unwrap().is_some());
}

/// A lock not extended is gone from the nodes after its ttl, and its guard says so.
async fn a_lock_expires_after_its_ttl(nodes: &impl Nodes) {
    let options = LockOptions::default().ttl(ms(300));
    let lock = nodes.redlock_with(options).await;
    let guard = lock.lock("kinds:b").await.unwrap();
    assert!(guard.is_valid());
    let took = within(ms(3_000), async || nodes.is_free("kinds:b").await).await;
    assert!(took >= ms(200), "freed after {took:?}, before its ttl");
    assert!(!guard.is_valid());
}

/// An auto-extended lock outlives its ttl many times over, and is released at the end.
async fn auto_extension_keeps_a_lock(nodes: &impl Nodes) {
    let options = LockOptions::default().ttl(ms(300)).auto_extend(true);
    let lock = nodes.redlock_with(options).await;
    let guard = lock.lock("kinds:c").await.unwrap();
    let token = guard.token().expose().to_owned();
    let until = Instant::now() + ms(1_500);
    while Instant::now() < until {
        tokio::time::sleep(ms(50)).await;
        assert!(guard.is_valid(), "lost while auto-extended");
    }
    assert_eq!(
        nodes.holder("kinds:c").await.as_deref(),
        Some(token.as_str())
    );
    guard.release().await.unwrap();
    within(ms(2_000), async || nodes.is_free("kinds:c").await).await;
}

/// A waiter gets the lock once the holder releases it, long before its own retries
/// would have found it free.
async fn a_waiter_gets_the_lock_on_release(nodes: &impl Nodes) {
    let options = LockOptions::default()
        .ttl(ms(10_000))
        .retry_delay(ms(2_000))
        .wait_timeout(ms(8_000));
    let lock = nodes.redlock_with(options).await;
    let holder = lock.lock("kinds:d").await.unwrap();
    let waiter = {
        let lock = lock.clone();
        tokio::spawn(async move {
            let asked = Instant::now();
            let guard = lock.lock("kinds:d").await.unwrap();
            (asked.elapsed(), guard)
        })
    };
    within(ms(2_000), async || nodes.queued_on_quorum("kinds:d").await).await;
    holder.release().await.unwrap();
    let (waited, guard) = waiter.await.unwrap();
    assert!(
        waited < ms(1_900),
        "the waiter waited {waited:?}: woken by its retry, not the release"
    );
    guard.release().await.unwrap();
}

/// A minority of nodes down costs nothing; a majority down refuses every lock, which the
/// nodes coming back ends.
async fn a_lock_needs_a_quorum(nodes: &impl Nodes) {
    let options = LockOptions::default().retry_count(0);
    let lock = nodes.redlock_with(options).await;
    nodes.down(0);
    let guard = lock.lock("kinds:e").await.unwrap();
    guard.release().await.unwrap();
    nodes.down(1);
    match lock.lock("kinds:e").await {
        Err(LockError::Unavailable { .. }) => {}
        other => panic!("{other:?}"),
    }
    nodes.up(0);
    nodes.up(1);
    within(ms(5_000), async || match lock.lock("kinds:e").await {
        Ok(guard) => guard.release().await.is_ok(),
        Err(_) => false,
    })
    .await;
}

/// A semaphore of 2 admits two holders and refuses a third until one leaves.
async fn a_semaphore_admits_its_permits(nodes: &impl Nodes) {
    let options = LockOptions::default().retry_count(0);
    let lock = nodes.redlock_with(options).await;
    let semaphore = lock.semaphore("kinds:f", 2);
    let first = semaphore.acquire().await.unwrap();
    let _second = semaphore.acquire().await.unwrap();
    assert!(semaphore.acquire().await.unwrap_err().is_busy());
    first.release().await.unwrap();
    semaphore.acquire().await.unwrap().release().await.unwrap();
}

/// Readers share a resource; a writer waits for them.
async fn readers_share_and_a_writer_excludes(nodes: &impl Nodes) {
    let options = LockOptions::default().retry_count(0);
    let lock = nodes.redlock_with(options).await;
    let reader = lock.read_lock("kinds:g").await.unwrap();
    let other = lock.read_lock("kinds:g").await.unwrap();
    assert!(lock.write_lock("kinds:g").await.unwrap_err().is_busy());
    reader.release().await.unwrap();
    other.release().await.unwrap();
    let writer = lock.write_lock("kinds:g").await.unwrap();
    assert!(lock.read_lock("kinds:g").await.unwrap_err().is_busy());
    writer.release().await.unwrap();
}

/// Each case twice: against three servers, and against three in-memory nodes on a paused
/// clock.
macro_rules! on_both_kinds {
    ($($case:ident),* $(,)?) => {
        mod servers {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    super::$case(&redlock_test::TestNodes::start(3)).await;
                }
            )*
        }
        mod memory {
            $(
                #[tokio::test(start_paused = true)]
                async fn $case() {
                    super::$case(&redlock_test::MemoryNodes::new(3)).await;
                }
            )*
        }
    };
}

on_both_kinds!(
    a_lock_excludes_until_released,
    a_lock_expires_after_its_ttl,
    auto_extension_keeps_a_lock,
    a_waiter_gets_the_lock_on_release,
    a_lock_needs_a_quorum,
    a_semaphore_admits_its_permits,
    readers_share_and_a_writer_excludes,
);
