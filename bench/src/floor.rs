//! The floor: the Redlock protocol hand-written on plain `fred` clients with their default
//! configuration, as a user would write it in an afternoon. `SET key token NX PX ttl` to all
//! nodes in parallel, wait for all, then `EVALSHA` compare-and-delete to all, wait for all.

use std::time::Duration;

use fred::clients::Client;
use fred::interfaces::{ClientLike, KeysInterface, LuaInterface};
use fred::types::config::Config;
use fred::types::{Builder, Expiration, SetOptions, Value};
use rand::Rng;

const RELEASE: &str = r#"if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("del", KEYS[1]) else return 0 end"#;

/// One client per node, and the release script's SHA1.
pub(crate) struct Floor {
    clients: Vec<Client>,
    sha1: String,
    quorum: usize,
}

/// Closes the connections: left open, they would count as a foreign client's for
/// redlock-core's windows in the workloads after this one.
impl Drop for Floor {
    fn drop(&mut self) {
        for client in self.clients.drain(..) {
            tokio::spawn(async move {
                let _closed = client.quit().await;
            });
        }
    }
}

impl Floor {
    pub(crate) async fn connect(urls: &[String]) -> anyhow::Result<Self> {
        let mut clients = Vec::new();
        let mut sha1 = String::new();
        for url in urls {
            let client = Builder::from_config(Config::from_url(url)?).build()?;
            client.init().await?;
            sha1 = client.script_load(RELEASE).await?;
            clients.push(client);
        }
        Ok(Self {
            quorum: clients.len() / 2 + 1,
            clients,
            sha1,
        })
    }

    /// One attempt; the token if a quorum granted it (the keys of a failed attempt are
    /// released before returning).
    pub(crate) async fn lock(&self, key: &str, ttl: Duration) -> Option<String> {
        let token = format!("{:032x}", rand::rng().random::<u128>());
        let ttl_ms = i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX);
        let replies = futures_util::future::join_all(self.clients.iter().map(|client| {
            client.set::<Option<String>, _, _>(
                key,
                token.as_str(),
                Some(Expiration::PX(ttl_ms)),
                Some(SetOptions::NX),
                false,
            )
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
        let _: Vec<Result<Value, _>> = futures_util::future::join_all(
            self.clients
                .iter()
                .map(|client| client.evalsha::<Value, _, _, _>(self.sha1.as_str(), key, token)),
        )
        .await;
    }

    /// Polls until the lock is taken: a random delay in `[0, 200)` ms between attempts,
    /// rslock's default.
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
