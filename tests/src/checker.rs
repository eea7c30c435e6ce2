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
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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

    /// A hold by `holder` from `start` to `end` ms after `t0`.
    fn hold(t0: Instant, holder: usize, mode: Option<Mode>, start: u64, end: u64) -> History {
        let history = History::new();
        add(&history, t0, holder, mode, start, end);
        history
    }

    fn add(
        history: &History,
        t0: Instant,
        holder: usize,
        mode: Option<Mode>,
        start: u64,
        end: u64,
    ) {
        let at = |ms| t0 + Duration::from_millis(ms);
        // Released at `end`, valid until later: the hold ends at the release.
        history.record_mode(holder, mode, at(start), at(end + 1_000), at(end));
    }

    #[test]
    fn disjoint_and_touching_holds_do_not_overlap() {
        let t0 = Instant::now();
        let history = hold(t0, 0, None, 0, 10);
        add(&history, t0, 1, None, 10, 20);
        add(&history, t0, 2, None, 30, 40);
        assert!(history.overlaps().is_empty());
        assert!(history.mode_overlaps().0.is_empty());
    }

    #[test]
    fn overlapping_holds_are_flagged_even_behind_a_short_one() {
        let t0 = Instant::now();
        // A long hold, a short one inside it, and a third that starts after the short one
        // ended but while the long one still runs: both later holds overlap the long one.
        let history = hold(t0, 0, None, 0, 100);
        add(&history, t0, 1, None, 10, 20);
        add(&history, t0, 2, None, 50, 60);
        let pairs: Vec<(usize, usize)> = history
            .overlaps()
            .iter()
            .map(|(a, b)| (a.holder, b.holder))
            .collect();
        assert_eq!(pairs, [(0, 1), (0, 2)]);
        assert_eq!(history.mode_overlaps().0.len(), 2);
    }

    #[test]
    fn the_end_of_a_hold_is_its_validity_when_that_comes_first() {
        let t0 = Instant::now();
        let at = |ms| t0 + Duration::from_millis(ms);
        let history = History::new();
        // Valid until 10, released (too late) at 50: a hold from 20 does not overlap it.
        history.record(0, at(0), at(10), at(50));
        history.record(1, at(20), at(30), at(30));
        assert!(history.overlaps().is_empty());
        // Valid until 50, released at 50: it does.
        history.record(2, at(40), at(60), at(60));
        history.record(3, at(45), at(70), at(70));
        assert_eq!(history.overlaps().len(), 1);
    }

    #[test]
    fn modes_share_only_where_the_table_allows() {
        let t0 = Instant::now();
        let (pr, ex, cr, cw) = (
            Some(Mode::ProtectedRead),
            Some(Mode::Exclusive),
            Some(Mode::ConcurrentRead),
            Some(Mode::ConcurrentWrite),
        );
        // Readers together: shared, no conflict.
        let readers = hold(t0, 0, pr, 0, 100);
        add(&readers, t0, 1, pr, 10, 50);
        add(&readers, t0, 2, cr, 20, 30);
        assert_eq!(readers.mode_overlaps(), (Vec::new(), 3));
        // A writer beside a reader, a plain lock beside a mode holder, PR beside CW: each is a
        // conflict the checker must report (the negative controls).
        for (a, b) in [
            (pr, ex),
            (None, pr),
            (pr, None),
            (None, None),
            (pr, cw),
            (ex, ex),
        ] {
            let history = hold(t0, 0, a, 0, 100);
            add(&history, t0, 1, b, 50, 150);
            let (conflicts, shared) = history.mode_overlaps();
            assert_eq!((conflicts.len(), shared), (1, 0), "{a:?} beside {b:?}");
        }
        // NL shares with everything, EX included.
        let null = hold(t0, 0, ex, 0, 100);
        add(&null, t0, 1, Some(Mode::Null), 50, 150);
        assert_eq!(null.mode_overlaps(), (Vec::new(), 1));
    }

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
