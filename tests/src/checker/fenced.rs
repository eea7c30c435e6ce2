//! O2 and O3: a register on a separate store that loses updates to overlapping holders, and
//! its writes and reads through a storage-side fencing check.

use std::time::Duration;

use fred::clients::Client;
use fred::interfaces::{KeysInterface, LuaInterface};

use crate::RedisServer;
use crate::plain_client;

/// The storage-side fencing check (Kleppmann's), shared by the fenced read and write:
/// `KEYS[2]` is the highest token seen and `KEYS[3]` the holder that presented it. A token
/// below the highest is stale (0); a token equal to it from a *different* holder is a
/// duplicate (-1), a fencing violation, since tokens must strictly increase across holders;
/// otherwise the token becomes the highest seen and the operation goes on.
const FENCE_CHECK: &str = r#"local seen = tonumber(redis.call("get", KEYS[2]) or "0")
local token = tonumber(ARGV[1])
if token < seen then return 0 end
local by = redis.call("get", KEYS[3])
if token == seen and by and by ~= ARGV[2] then return -1 end
redis.call("set", KEYS[2], ARGV[1])
redis.call("set", KEYS[3], ARGV[2])
"#;

/// Fenced read: the check, then the value (as a string, so 0 and "refused" differ).
const FENCED_READ: &str = r#"
return {1, redis.call("get", KEYS[1]) or "0"}"#;

/// Fenced write: the check, then the write of `ARGV[3]`.
const FENCED_WRITE: &str = r#"
redis.call("set", KEYS[1], ARGV[3])
return 1"#;

/// What the storage's fencing check decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fenced {
    /// The token was at least the highest seen (and the same holder's, if equal).
    Accepted,
    /// The token was below the highest seen: a stale holder, refused.
    Stale,
    /// The token equalled the highest seen, presented by another holder: the lock issued one
    /// token twice (a fencing violation the storage cannot tell from a legitimate holder).
    Duplicate,
}

impl Fenced {
    fn from_code(code: i64) -> Self {
        match code {
            1 => Self::Accepted,
            0 => Self::Stale,
            _ => Self::Duplicate,
        }
    }
}

/// O2 and O3: an integer on a separate store (not one of the lock's nodes).
///
/// [`increment`](Self::increment) is a read, a pause and a write, like Jepsen's `lock-set`:
/// two holders inside it at once lose an update, so the final value is below the number of
/// increments. [`write_fenced`](Self::write_fenced) is the same write through a fencing
/// check.
#[derive(Debug, Clone)]
pub struct Register {
    client: Client,
    key: String,
}

impl Register {
    /// The register `name` on `store`, set to 0.
    pub async fn new(store: &RedisServer, name: &str) -> Self {
        let register = Self::connect(&store.url(), name).await;
        register.write(0).await;
        let _: i64 = register
            .client
            .del(vec![
                format!("{name}:fence"),
                format!("{name}:fence-holder"),
            ])
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        register
    }

    /// The register `name` on the store at `url`, as it is.
    pub async fn connect(url: &str, name: &str) -> Self {
        Self {
            client: plain_client(url).await,
            key: name.to_owned(),
        }
    }

    /// Reads the value.
    pub async fn read(&self) -> i64 {
        let value: Option<i64> = self
            .client
            .get(&self.key)
            .await
            .unwrap_or_else(|e| panic!("register read: {e}"));
        value.unwrap_or(0)
    }

    /// Writes `value` unconditionally.
    pub async fn write(&self, value: i64) {
        let () = self
            .client
            .set(&self.key, value, None, None, false)
            .await
            .unwrap_or_else(|e| panic!("register write: {e}"));
    }

    /// Writes `value` through the fencing check of `token`, presented by `holder` (any id
    /// unique to one lock hold).
    pub async fn write_fenced(&self, value: i64, token: u64, holder: u64) -> Fenced {
        let script = format!("{FENCE_CHECK}{FENCED_WRITE}");
        let args = vec![token.to_string(), holder.to_string(), value.to_string()];
        let code: i64 = self
            .client
            .eval(script, self.fence_keys(), args)
            .await
            .unwrap_or_else(|e| panic!("fenced write: {e}"));
        Fenced::from_code(code)
    }

    /// Reads the value through the fencing check of `token` by `holder`.
    pub async fn read_fenced(&self, token: u64, holder: u64) -> Result<i64, Fenced> {
        let script = format!("{FENCE_CHECK}{FENCED_READ}");
        let args = vec![token.to_string(), holder.to_string()];
        let reply: fred::types::Value = self
            .client
            .eval(script, self.fence_keys(), args)
            .await
            .unwrap_or_else(|e| panic!("fenced read: {e}"));
        match reply {
            fred::types::Value::Array(parts) => Ok(parts[1]
                .as_str()
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| panic!("fenced read: {parts:?}"))),
            other => Err(Fenced::from_code(other.as_i64().unwrap_or(-1))),
        }
    }

    fn fence_keys(&self) -> Vec<String> {
        vec![
            self.key.clone(),
            format!("{}:fence", self.key),
            format!("{}:fence-holder", self.key),
        ]
    }

    /// Read, pause for `pause`, write the value read plus one.
    pub async fn increment(&self, pause: Duration) {
        let value = self.read().await;
        tokio::time::sleep(pause).await;
        self.write(value + 1).await;
    }

    /// [`increment`](Self::increment) with both the read and the write through the fencing
    /// check of `token` by `holder`. [`Fenced::Accepted`] if the increment happened.
    pub async fn increment_fenced(&self, pause: Duration, token: u64, holder: u64) -> Fenced {
        let value = match self.read_fenced(token, holder).await {
            Ok(value) => value,
            Err(refused) => return refused,
        };
        tokio::time::sleep(pause).await;
        self.write_fenced(value + 1, token, holder).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_register_loses_an_update_to_two_writers_and_fencing_refuses_stale_and_duplicate_tokens()
     {
        let store = RedisServer::start();
        let register = Register::new(&store, "oracle").await;
        // Two increments at once, with no lock: one update is lost (the negative control).
        let pause = Duration::from_millis(20);
        tokio::join!(register.increment(pause), register.increment(pause));
        assert_eq!(register.read().await, 1);
        register.increment(Duration::ZERO).await;
        assert_eq!(register.read().await, 2);
        // Fenced: a token below the highest seen is refused, on write and on read.
        let fenced = Register::new(&store, "fenced").await;
        let (p, q) = (1, 2); // two holders
        assert_eq!(
            fenced.increment_fenced(Duration::ZERO, 5, p).await,
            Fenced::Accepted
        );
        assert_eq!(fenced.write_fenced(100, 4, q).await, Fenced::Stale);
        assert_eq!(fenced.read_fenced(4, q).await, Err(Fenced::Stale));
        assert_eq!(
            fenced.increment_fenced(Duration::ZERO, 4, q).await,
            Fenced::Stale
        );
        assert_eq!(fenced.read().await, 1);
        // The same token again: fine from its holder, a violation from another one, on read
        // and on write (the issue-15 composed fault: P and Q both got 5).
        assert_eq!(
            fenced.increment_fenced(Duration::ZERO, 5, p).await,
            Fenced::Accepted
        );
        assert_eq!(fenced.read_fenced(5, q).await, Err(Fenced::Duplicate));
        assert_eq!(fenced.write_fenced(100, 5, q).await, Fenced::Duplicate);
        assert_eq!(fenced.read().await, 2);
        assert_eq!(
            fenced.increment_fenced(Duration::ZERO, 6, q).await,
            Fenced::Accepted
        );
        assert_eq!(fenced.read().await, 3);
        // Once 6 is seen, 5 is stale for everyone, its holder included.
        assert_eq!(fenced.write_fenced(100, 5, p).await, Fenced::Stale);
        assert_eq!(fenced.read_fenced(7, p).await, Ok(3));
    }
}
