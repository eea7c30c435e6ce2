//! A Redis keyspace, as far as the scripts use it: strings, hashes and sorted sets, each key
//! with an optional expiry on the node's clock (ms). A key is gone once the clock reaches its
//! expiry. Redis keeps it through that millisecond (it expires a key once its clock is past
//! the expiry): with whole milliseconds, the model lets keys go up to 1 ms sooner, the side
//! that is harder on the lock's exclusion, and on the quarantine's and windows' markers.

use std::collections::BTreeMap;

/// What a key holds.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Value {
    /// A string.
    Str(String),
    /// A hash: field to value.
    Hash(BTreeMap<String, String>),
    /// A sorted set: member to score (the scripts' scores are whole milliseconds).
    ZSet(BTreeMap<String, i64>),
}

/// A key's value and its expiry (ms of the node's clock; `None`: no expiry).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Entry {
    /// The value.
    pub value: Value,
    /// When the key expires.
    pub expires_at: Option<u64>,
}

/// The keyspace and the node's clock.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Store {
    now: u64,
    keys: BTreeMap<String, Entry>,
}

impl Store {
    /// An empty keyspace, the clock at `now_ms`.
    pub fn new(now_ms: u64) -> Self {
        Self {
            now: now_ms,
            keys: BTreeMap::new(),
        }
    }

    /// The clock, ms.
    pub fn now(&self) -> u64 {
        self.now
    }

    /// Sets the clock; keys that have expired by then are removed.
    pub fn set_now(&mut self, now_ms: u64) {
        self.now = now_ms;
        let now = self.now;
        self.keys
            .retain(|_, entry| entry.expires_at.is_none_or(|at| at > now));
    }

    /// Removes every key.
    pub fn clear(&mut self) {
        self.keys.clear();
    }

    /// The live keys and their entries, in key order.
    pub fn entries(&self) -> impl Iterator<Item = (&String, &Entry)> {
        let now = self.now;
        self.keys
            .iter()
            .filter(move |(_, e)| e.expires_at.is_none_or(|at| at > now))
    }

    /// The live entry at `key`.
    pub fn get(&self, key: &str) -> Option<&Entry> {
        self.keys
            .get(key)
            .filter(|e| e.expires_at.is_none_or(|at| at > self.now))
    }

    /// Writes `entry` at `key`, whatever was there.
    pub fn put(&mut self, key: &str, entry: Entry) {
        self.keys.insert(key.to_owned(), entry);
    }

    /// Deletes `key`; whether it existed.
    pub fn delete(&mut self, key: &str) -> bool {
        let live = self.get(key).is_some();
        self.keys.remove(key);
        live
    }
}

/// A command on a key of another type (Redis's `WRONGTYPE` error).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WrongType;

/// The text of [`WrongType`], as Redis words it.
pub(crate) const WRONGTYPE: &str =
    "WRONGTYPE Operation against a key holding the wrong kind of value";

impl Store {
    /// `GET key`: the string, `None` when missing, [`WrongType`] for another type.
    pub fn get_str(&self, key: &str) -> Result<Option<&str>, WrongType> {
        match self.get(key).map(|e| &e.value) {
            None => Ok(None),
            Some(Value::Str(s)) => Ok(Some(s)),
            Some(_) => Err(WrongType),
        }
    }

    /// `SET key value [PX px]`: overwrites whatever was there, any type.
    pub fn set(&mut self, key: &str, value: &str, px: Option<u64>) {
        let expires_at = px.map(|ms| self.now + ms);
        self.put(
            key,
            Entry {
                value: Value::Str(value.to_owned()),
                expires_at,
            },
        );
    }

    /// `EXISTS key`.
    pub fn exists(&self, key: &str) -> bool {
        self.get(key).is_some()
    }

    /// `PTTL key`: ms left, -1 without an expiry, -2 when missing.
    pub fn pttl(&self, key: &str) -> i64 {
        match self.get(key) {
            None => -2,
            Some(Entry {
                expires_at: None, ..
            }) => -1,
            Some(Entry {
                expires_at: Some(at),
                ..
            }) => i64::try_from(at - self.now).unwrap_or(i64::MAX),
        }
    }

    /// `PEXPIRE key ms`: whether the key exists (a ttl of 0 or less deletes it).
    pub fn pexpire(&mut self, key: &str, ms: i64) -> bool {
        if !self.exists(key) {
            return false;
        }
        if ms <= 0 {
            self.keys.remove(key);
            return true;
        }
        let at = self.now + ms.unsigned_abs();
        if let Some(entry) = self.keys.get_mut(key) {
            entry.expires_at = Some(at);
        }
        true
    }

    /// `PEXPIREAT key at`: whether the key exists (a time not after the clock deletes it).
    pub fn pexpireat(&mut self, key: &str, at: u64) -> bool {
        if !self.exists(key) {
            return false;
        }
        if at <= self.now {
            self.keys.remove(key);
            return true;
        }
        if let Some(entry) = self.keys.get_mut(key) {
            entry.expires_at = Some(at);
        }
        true
    }

    /// The sorted set at `key` (`None` when missing), or [`WrongType`].
    pub fn zset(&self, key: &str) -> Result<Option<&BTreeMap<String, i64>>, WrongType> {
        match self.get(key).map(|e| &e.value) {
            None => Ok(None),
            Some(Value::ZSet(z)) => Ok(Some(z)),
            Some(_) => Err(WrongType),
        }
    }

    /// The sorted set at `key` to change, created empty (without expiry) when missing.
    fn zset_mut(&mut self, key: &str) -> Result<&mut BTreeMap<String, i64>, WrongType> {
        self.zset(key)?;
        if !self.exists(key) {
            self.put(
                key,
                Entry {
                    value: Value::ZSet(BTreeMap::new()),
                    expires_at: None,
                },
            );
        }
        match self.keys.get_mut(key).map(|e| &mut e.value) {
            Some(Value::ZSet(z)) => Ok(z),
            _ => Err(WrongType),
        }
    }

    /// Deletes `key` if it is an empty sorted set or hash (Redis never keeps one).
    fn drop_if_empty(&mut self, key: &str) {
        let empty = match self.get(key).map(|e| &e.value) {
            Some(Value::ZSet(z)) => z.is_empty(),
            Some(Value::Hash(h)) => h.is_empty(),
            _ => false,
        };
        if empty {
            self.keys.remove(key);
        }
    }

    /// `ZADD key NX score member`: whether it was added.
    pub fn zadd_nx(&mut self, key: &str, score: i64, member: &str) -> Result<bool, WrongType> {
        let z = self.zset_mut(key)?;
        if z.contains_key(member) {
            return Ok(false);
        }
        z.insert(member.to_owned(), score);
        Ok(true)
    }

    /// `ZADD key score member` (adds or moves): whether it was added.
    pub fn zadd(&mut self, key: &str, score: i64, member: &str) -> Result<bool, WrongType> {
        let z = self.zset_mut(key)?;
        Ok(z.insert(member.to_owned(), score).is_none())
    }

    /// `ZREM key member`: whether it was there.
    pub fn zrem(&mut self, key: &str, member: &str) -> Result<bool, WrongType> {
        if self.zset(key)?.is_none() {
            return Ok(false);
        }
        let removed = self.zset_mut(key)?.remove(member).is_some();
        self.drop_if_empty(key);
        Ok(removed)
    }

    /// `ZCARD key`.
    pub fn zcard(&self, key: &str) -> Result<usize, WrongType> {
        Ok(self.zset(key)?.map_or(0, BTreeMap::len))
    }

    /// The members of the sorted set at `key` in Redis's order: by score, then member.
    pub fn zrange(&self, key: &str) -> Result<Vec<(String, i64)>, WrongType> {
        let mut members: Vec<(String, i64)> = self
            .zset(key)?
            .map(|z| z.iter().map(|(m, s)| (m.clone(), *s)).collect())
            .unwrap_or_default();
        members.sort_by(|a, b| a.1.cmp(&b.1).then_with(|| a.0.cmp(&b.0)));
        Ok(members)
    }

    /// `ZPOPMIN key`: the lowest member and its score.
    pub fn zpopmin(&mut self, key: &str) -> Result<Option<(String, i64)>, WrongType> {
        let first = self.zrange(key)?.into_iter().next();
        if let Some((member, _)) = &first {
            self.zrem(key, member)?;
        }
        Ok(first)
    }

    /// The hash at `key` (`None` when missing), or [`WrongType`].
    pub fn hash(&self, key: &str) -> Result<Option<&BTreeMap<String, String>>, WrongType> {
        match self.get(key).map(|e| &e.value) {
            None => Ok(None),
            Some(Value::Hash(h)) => Ok(Some(h)),
            Some(_) => Err(WrongType),
        }
    }

    /// `HSET key field value`: whether the field is new. A new hash has no expiry.
    pub fn hset(&mut self, key: &str, field: &str, value: &str) -> Result<bool, WrongType> {
        self.hash(key)?;
        if !self.exists(key) {
            self.put(
                key,
                Entry {
                    value: Value::Hash(BTreeMap::new()),
                    expires_at: None,
                },
            );
        }
        match self.keys.get_mut(key).map(|e| &mut e.value) {
            Some(Value::Hash(h)) => Ok(h.insert(field.to_owned(), value.to_owned()).is_none()),
            _ => Err(WrongType),
        }
    }

    /// `HDEL key field`: whether it was there (an emptied hash is deleted).
    pub fn hdel(&mut self, key: &str, field: &str) -> Result<bool, WrongType> {
        if self.hash(key)?.is_none() {
            return Ok(false);
        }
        let removed = match self.keys.get_mut(key).map(|e| &mut e.value) {
            Some(Value::Hash(h)) => h.remove(field).is_some(),
            _ => false,
        };
        self.drop_if_empty(key);
        Ok(removed)
    }
}

impl Store {
    /// `TYPE key`: "none", "string", "hash" or "zset".
    pub fn key_type(&self, key: &str) -> &'static str {
        match self.get(key).map(|e| &e.value) {
            None => "none",
            Some(Value::Str(_)) => "string",
            Some(Value::Hash(_)) => "hash",
            Some(Value::ZSet(_)) => "zset",
        }
    }

    /// `HGET key field`: the field's value, `None` when it or the key is missing.
    pub fn hget(&self, key: &str, field: &str) -> Result<Option<&str>, WrongType> {
        Ok(self
            .hash(key)?
            .and_then(|h| h.get(field))
            .map(String::as_str))
    }

    /// `HGETALL key`: every field and its value (in field order; the scripts that read them
    /// do not depend on the order), empty when the key is missing.
    pub fn hgetall(&self, key: &str) -> Result<Vec<(String, String)>, WrongType> {
        Ok(self
            .hash(key)?
            .map(|h| h.iter().map(|(f, v)| (f.clone(), v.clone())).collect())
            .unwrap_or_default())
    }

    /// `ZSCORE key member`: its score, `None` when it or the key is missing.
    pub fn zscore(&self, key: &str, member: &str) -> Result<Option<i64>, WrongType> {
        Ok(self.zset(key)?.and_then(|z| z.get(member).copied()))
    }
}
