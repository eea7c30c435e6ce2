//! Oracles independent of the lock (reliability.md §7): an interval checker over the holders'
//! own records (O1), a read-modify-write register on a separate store that loses updates when
//! two holders overlap (O2), and a fenced write that refuses stale fencing tokens (O3).

use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use fred::clients::Client;
use fred::interfaces::{KeysInterface, LuaInterface};

use redlock_core::Mode;

use crate::RedisServer;

/// One holder's critical section as the harness saw it, on the harness's monotonic clock:
/// from the moment the lock call returned to the release or the end of validity, whichever
/// came first.
#[derive(Debug, Clone, Copy)]
pub struct Hold {
    /// Which client held it.
    pub holder: usize,
    /// When the lock call returned.
    pub start: Instant,
    /// `min(released, valid_until)`.
    pub end: Instant,
    /// The lock mode it was held in; `None` for the plain exclusive lock.
    pub mode: Option<Mode>,
}

impl Hold {
    /// `true` when `self` and `other` may overlap: both held in compatible modes.
    fn may_share(&self, other: &Hold) -> bool {
        matches!((self.mode, other.mode), (Some(a), Some(b)) if a.compatible(b))
    }
}

/// O1: every hold of one resource, checked for overlaps.
#[derive(Debug, Default)]
pub struct History {
    holds: Mutex<Vec<Hold>>,
}

impl History {
    /// An empty history.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records a hold: acquired at `start`, valid until `valid_until`, released at `released`.
    pub fn record(&self, holder: usize, start: Instant, valid_until: Instant, released: Instant) {
        self.record_mode(holder, None, start, valid_until, released);
    }

    /// Records a hold in a lock mode (`None`: the plain exclusive lock).
    pub fn record_mode(
        &self,
        holder: usize,
        mode: Option<Mode>,
        start: Instant,
        valid_until: Instant,
        released: Instant,
    ) {
        let hold = Hold {
            holder,
            start,
            end: released.min(valid_until),
            mode,
        };
        self.holds
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(hold);
    }

    /// How many holds were recorded.
    pub fn len(&self) -> usize {
        self.holds
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }

    /// `true` if nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Every hold, sorted by start.
    pub fn holds(&self) -> Vec<Hold> {
        let mut holds = self
            .holds
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        holds.sort_by_key(|h| h.start);
        holds
    }

    /// Pairs of holds that overlap: each hold that started before an earlier one had ended
    /// is reported with the hold it overlaps.
    pub fn overlaps(&self) -> Vec<(Hold, Hold)> {
        let mut found = Vec::new();
        let mut longest: Option<Hold> = None;
        for hold in self.holds() {
            if let Some(previous) = longest
                && hold.start < previous.end
            {
                found.push((previous, hold));
            }
            if longest.is_none_or(|p| hold.end > p.end) {
                longest = Some(hold);
            }
        }
        found
    }
}

impl History {
    /// Pairs of overlapping holds, split by whether their modes allow it: `(conflicts,
    /// shared)`. A conflict is two holds in incompatible modes (or a plain hold and any other)
    /// at once; shared pairs show that compatible holders really did hold together.
    pub fn mode_overlaps(&self) -> (Vec<(Hold, Hold)>, usize) {
        let holds = self.holds();
        let (mut conflicts, mut shared) = (Vec::new(), 0);
        for (i, a) in holds.iter().enumerate() {
            for b in holds[i + 1..].iter().take_while(|b| b.start < a.end) {
                if a.may_share(b) {
                    shared += 1;
                } else {
                    conflicts.push((*a, *b));
                }
            }
        }
        (conflicts, shared)
    }
}

/// Fenced read: refused (nil) if the reader's fencing token is below the highest seen;
/// otherwise raises the highest seen to it, so an older holder can no longer write.
const FENCED_READ: &str = r#"local seen = tonumber(redis.call("get", KEYS[2]) or "0")
if tonumber(ARGV[1]) < seen then return false end
redis.call("set", KEYS[2], ARGV[1])
return tonumber(redis.call("get", KEYS[1]) or "0")"#;

/// Fenced write: accepted only if the writer's fencing token is at least the highest seen
/// (Kleppmann's storage-side check). Returns 1 if written, 0 if refused as stale.
const FENCED_WRITE: &str = r#"local seen = tonumber(redis.call("get", KEYS[2]) or "0")
if tonumber(ARGV[2]) < seen then return 0 end
redis.call("set", KEYS[2], ARGV[2])
redis.call("set", KEYS[1], ARGV[1])
return 1"#;

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
            .del(format!("{name}:fence"))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        register
    }

    /// The register `name` on the store at `url`, as it is.
    pub async fn connect(url: &str, name: &str) -> Self {
        Self {
            client: crate::plain_client(url).await,
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

    /// Writes `value` if `fence` is not below the highest fencing token written so far.
    /// Returns whether it was written.
    pub async fn write_fenced(&self, value: i64, fence: u64) -> bool {
        let keys = vec![self.key.clone(), format!("{}:fence", self.key)];
        let written: i64 = self
            .client
            .eval(
                FENCED_WRITE,
                keys,
                vec![value.to_string(), fence.to_string()],
            )
            .await
            .unwrap_or_else(|e| panic!("fenced write: {e}"));
        written == 1
    }

    /// Reads the value through the fencing check: `None` if `fence` is below the highest
    /// token seen, else the value (and `fence` becomes the highest seen).
    pub async fn read_fenced(&self, fence: u64) -> Option<i64> {
        let keys = vec![self.key.clone(), format!("{}:fence", self.key)];
        self.client
            .eval(FENCED_READ, keys, vec![fence.to_string()])
            .await
            .unwrap_or_else(|e| panic!("fenced read: {e}"))
    }

    /// Read, pause for `pause`, write the value read plus one.
    pub async fn increment(&self, pause: Duration) {
        let value = self.read().await;
        tokio::time::sleep(pause).await;
        self.write(value + 1).await;
    }

    /// [`increment`](Self::increment) with both the read and the write fenced by `fence`.
    /// Returns whether the increment happened (`false`: a newer holder got there first).
    pub async fn increment_fenced(&self, pause: Duration, fence: u64) -> bool {
        let Some(value) = self.read_fenced(fence).await else {
            return false;
        };
        tokio::time::sleep(pause).await;
        self.write_fenced(value + 1, fence).await
    }
}
