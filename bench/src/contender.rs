//! The implementations measured side by side, behind one small interface.

use std::time::Duration;

use redlock_core::{LockOptions, Redlock};

use crate::floor::Floor;
use crate::floor_redis::RedisFloor;

/// The lock ttl of every workload: long enough never to expire during a cycle.
pub(crate) const TTL: Duration = Duration::from_secs(10);

/// How redlock-core's handles are built: `--no-windows` and `--no-handover` turn those
/// features off, to measure what each costs.
#[derive(Clone, Copy, Debug)]
pub(crate) struct OursConfig {
    pub(crate) windows: bool,
    pub(crate) handover: bool,
}

static OURS: std::sync::OnceLock<OursConfig> = std::sync::OnceLock::new();

/// Sets how redlock-core's handles are built (once, before any workload).
pub(crate) fn configure(config: OursConfig) {
    let _first = OURS.set(config);
}

/// Which implementation.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub(crate) enum Kind {
    Ours,
    Floor,
    RedisFloor,
    Rslock,
}

impl Kind {
    /// In discriminant order (`--alone` indexes it).
    pub(crate) const ALL: [Kind; 4] = [Kind::Ours, Kind::Floor, Kind::RedisFloor, Kind::Rslock];

    /// The `--alone` argument naming it.
    pub(crate) fn flag(self) -> &'static str {
        match self {
            Kind::Ours => "ours",
            Kind::Floor => "floor",
            Kind::RedisFloor => "redis-floor",
            Kind::Rslock => "rslock",
        }
    }

    pub(crate) fn name(self) -> &'static str {
        match self {
            Kind::Ours => "redlock-core",
            Kind::Floor => "fred floor",
            Kind::RedisFloor => "redis-rs floor",
            Kind::Rslock => "rslock 0.10",
        }
    }
}

/// A connected implementation.
pub(crate) enum Contender {
    Ours(Redlock),
    Floor(Floor),
    RedisFloor(RedisFloor),
    Rslock(rslock::LockManager),
}

impl Contender {
    pub(crate) async fn connect(kind: Kind, urls: &[String]) -> anyhow::Result<Self> {
        Ok(match kind {
            Kind::Ours => {
                let config = OURS.get().copied().unwrap_or(OursConfig {
                    windows: true,
                    handover: true,
                });
                let mut builder = Redlock::builder()
                    .nodes(urls.iter().map(String::as_str))
                    // One handle per node count over the same servers, by design of the
                    // bench: the node-set check would refuse the second count.
                    .node_set_check(false)
                    .lock_options(LockOptions::default().ttl(TTL));
                if !config.windows {
                    builder = builder.foreign_window(Duration::ZERO);
                }
                if !config.handover {
                    builder = builder.handover_grace(Duration::ZERO);
                }
                Contender::Ours(builder.build().await?)
            }
            Kind::Floor => Contender::Floor(Floor::connect(urls).await?),
            Kind::RedisFloor => Contender::RedisFloor(RedisFloor::connect(urls).await?),
            Kind::Rslock => Contender::Rslock(rslock::LockManager::new(urls.to_vec())),
        })
    }

    /// One uncontended lock + unlock; `false` if the lock was not granted.
    pub(crate) async fn cycle(&self, resource: &str) -> bool {
        match self {
            Contender::Ours(redlock) => match redlock.lock(resource).await {
                Ok(guard) => guard.release().await.is_ok(),
                Err(_) => false,
            },
            Contender::Floor(floor) => match floor.lock(resource, TTL).await {
                Some(token) => {
                    floor.unlock(resource, &token).await;
                    true
                }
                None => false,
            },
            Contender::RedisFloor(floor) => match floor.lock(resource, TTL).await {
                Some(token) => {
                    floor.unlock(resource, &token).await;
                    true
                }
                None => false,
            },
            Contender::Rslock(manager) => match manager.lock(resource, TTL).await {
                Ok(lock) => {
                    manager.unlock(&lock).await;
                    true
                }
                Err(_) => false,
            },
        }
    }

    /// Waits for the lock (each implementation's own waiting strategy), holds it for `hold`
    /// while `critical` runs at the start, and releases it. `false` if it was not acquired.
    pub(crate) async fn contend(
        &self,
        resource: &str,
        hold: Duration,
        critical: impl FnOnce(),
        leave: impl FnOnce(),
    ) -> bool {
        match self {
            Contender::Ours(redlock) => {
                let options = redlock
                    .options()
                    .clone()
                    .wait_timeout(Duration::from_secs(30));
                let Ok(guard) = redlock.lock_with(resource, &options).await else {
                    return false;
                };
                critical();
                tokio::time::sleep(hold).await;
                leave();
                guard.release().await.is_ok()
            }
            Contender::Floor(floor) => {
                let token = floor.lock_polling(resource, TTL).await;
                critical();
                tokio::time::sleep(hold).await;
                leave();
                floor.unlock(resource, &token).await;
                true
            }
            Contender::RedisFloor(floor) => {
                let token = floor.lock_polling(resource, TTL).await;
                critical();
                tokio::time::sleep(hold).await;
                leave();
                floor.unlock(resource, &token).await;
                true
            }
            Contender::Rslock(manager) => {
                let Ok(lock) = manager.acquire_no_guard(resource, TTL).await else {
                    return false;
                };
                critical();
                tokio::time::sleep(hold).await;
                leave();
                manager.unlock(&lock).await;
                true
            }
        }
    }
}
