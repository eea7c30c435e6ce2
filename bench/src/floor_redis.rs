//! The same floor as [`floor`](crate::floor) written on `redis-rs` (the client rslock uses): one
//! multiplexed connection per node, `SET key token NX PX ttl` to all in parallel, wait for all,
//! then `EVALSHA` compare-and-delete to all. Beside the fred floor it shows what the client
//! crate itself costs.

use std::time::Duration;

use rand::Rng;
use redis::aio::MultiplexedConnection;

const RELEASE: &str = r#"if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("del", KEYS[1]) else return 0 end"#;

/// One multiplexed connection per node, and the release script's SHA1.
pub(crate) struct RedisFloor {
    connections: Vec<MultiplexedConnection>,
    sha1: String,
    quorum: usize,
}

impl RedisFloor {
    pub(crate) async fn connect(urls: &[String]) -> anyhow::Result<Self> {
        let mut connections = Vec::new();
        let mut sha1 = String::new();
        for url in urls {
            let client = redis::Client::open(url.as_str())?;
            let mut connection = client.get_multiplexed_async_connection().await?;
            sha1 = redis::cmd("SCRIPT")
                .arg("LOAD")
                .arg(RELEASE)
                .query_async(&mut connection)
                .await?;
            connections.push(connection);
        }
        Ok(Self {
            quorum: connections.len() / 2 + 1,
            connections,
            sha1,
        })
    }

    /// One attempt; the token if a quorum granted it (the keys of a failed attempt are
    /// released before returning).
    pub(crate) async fn lock(&self, key: &str, ttl: Duration) -> Option<String> {
        let token = format!("{:032x}", rand::rng().random::<u128>());
        let ttl_ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX);
        let replies = futures_util::future::join_all(self.connections.iter().map(|connection| {
            let mut connection = connection.clone();
            let mut set = redis::cmd("SET");
            set.arg(key).arg(&token).arg("NX").arg("PX").arg(ttl_ms);
            async move { set.query_async::<Option<String>>(&mut connection).await }
        }))
        .await;
        let granted = replies.iter().filter(|r| matches!(r, Ok(Some(_)))).count();
        if granted >= self.quorum {
            Some(token)
        } else {
            self.unlock(key, &token).await;
            None
        }
    }

    /// Compare-and-delete on every node.
    pub(crate) async fn unlock(&self, key: &str, token: &str) {
        let _: Vec<redis::RedisResult<redis::Value>> =
            futures_util::future::join_all(self.connections.iter().map(|connection| {
                let mut connection = connection.clone();
                let mut evalsha = redis::cmd("EVALSHA");
                evalsha.arg(&self.sha1).arg(1).arg(key).arg(token);
                async move { evalsha.query_async(&mut connection).await }
            }))
            .await;
    }

    /// Polls until the lock is taken: a random delay in `[0, 200)` ms between attempts,
    /// as the fred floor and rslock do.
    pub(crate) async fn lock_polling(&self, key: &str, ttl: Duration) -> String {
        loop {
            if let Some(token) = self.lock(key, ttl).await {
                return token;
            }
            let delay = rand::rng().random_range(0..200);
            tokio::time::sleep(Duration::from_millis(delay)).await;
        }
    }
}
