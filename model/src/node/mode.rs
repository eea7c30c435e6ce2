//! The mode scripts mirrored: acquire_mode.lua, extend_mode.lua, release_mode.lua, with
//! prelude.lua's `mode_entry`, the parser of their entries.
//!
//! Lua numbers are doubles: the entries' expiries and ranks, and the node's clock they are
//! compared with, are `f64` here too, and an expiry written into an entry is spelled as Lua's
//! `..` spells a number ([`concat_number`]).

use super::args::{arg, key as key_at, need};
use super::prelude::{
    Raise, concat_number, fence_read, holder_digest, ms_left, node_now, quarantine_check, tonumber,
    window_open,
};
use super::store::WRONGTYPE;
use super::{Call, Node, Reply};

/// The six lock modes, as a mode entry spells them (`MODES` in prelude.lua).
const MODES: [&str; 6] = ["NL", "CR", "CW", "PR", "PW", "EX"];

/// One field of a mode lock's hash, parsed ([`mode_entry`]).
#[derive(Debug, Clone, PartialEq)]
pub(super) struct ModeEntry {
    /// The entry's mode.
    pub(super) held: String,
    /// Its expiry, ms of the node's clock.
    pub(super) expiry: f64,
    /// Its rank: the waiter's `since`, 0 for a holder.
    pub(super) rank: f64,
    /// A waiter's entry (its field a marker).
    pub(super) waiter: bool,
}

/// `mode_entry(field, value)`: the entry, or `None` when the field is not an entry of ours (a
/// holder's field is 40 lowercase hex digits valued `"<MODE> <expiry>"`, a waiter's is `~`
/// and 16 lowercase hex digits valued `"<MODE> <expiry> <since>"`).
pub(super) fn mode_entry(field: &str, value: &str) -> Option<ModeEntry> {
    let lower_hex = |s: &str| s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
    let waiter = if let Some(rest) = field.strip_prefix('~') {
        // `#field ~= 17 or string.find(field, "[^0-9a-f]", 2)`
        if field.len() != 17 || !lower_hex(rest) {
            return None;
        }
        true
    } else {
        if field.len() != 40 || !lower_hex(field) {
            return None;
        }
        false
    };
    // "^(%u%u) (%d+) (%d+)$" for a waiter, "^(%u%u) (%d+)$" for a holder.
    let mut parts = value.split(' ');
    let held = parts.next()?;
    let numbers: Vec<&str> = parts.collect();
    let upper = held.len() == 2 && held.bytes().all(|b| b.is_ascii_uppercase());
    let digits = |s: &&str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    let expected = if waiter { 2 } else { 1 };
    if !upper || numbers.len() != expected || !numbers.iter().all(digits) {
        return None;
    }
    if !MODES.contains(&held) {
        return None;
    }
    let expiry = tonumber(numbers.first()?)?;
    let rank = if waiter {
        tonumber(numbers.get(1)?)?
    } else {
        0.0
    };
    Some(ModeEntry {
        held: held.to_owned(),
        expiry,
        rank,
        waiter,
    })
}

/// `redis.call(...)` on the hash at a key: [`WRONGTYPE`] raised for another type.
fn wrongtype<T>(result: Result<T, super::WrongType>) -> Result<T, Raise> {
    result.map_err(|_| WRONGTYPE.to_owned())
}

/// A Lua number as the integer reply Redis makes of it (truncated).
#[allow(clippy::cast_possible_truncation)] // Redis truncates (`(long long)` of the double)
fn int(v: f64) -> Reply {
    Reply::Int(v as i64)
}

/// A Lua number as `redis.call` passes it as an argument (an integer for the times here).
#[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)] // times are whole ms
fn ms_arg(v: f64) -> u64 {
    v as u64
}

/// `tonumber(s)` used in arithmetic: nil raises.
fn arith(s: &str) -> Result<f64, Raise> {
    tonumber(s).ok_or_else(|| "attempt to perform arithmetic on a nil value".to_owned())
}

/// The node's clock as a Lua number.
#[allow(clippy::cast_precision_loss)] // exact below 2^53 ms
fn now_f64(node: &Node) -> f64 {
    node_now(node) as f64
}

/// acquire_mode.lua.
pub(super) fn acquire_mode(node: &mut Node, call: &Call) -> Result<Reply, Raise> {
    let (key, window_key) = (need(call, 1)?, need(call, 2)?);
    let (witness_key, marker_key) = (need(call, 3)?, need(call, 4)?);
    let listen_key = key_at(call, 5);
    let (counter_key, floor_key) = (key_at(call, 6), key_at(call, 7));
    let (token, mode, ttl_ms, marker) = (arg(call, 1), arg(call, 2), arg(call, 3), arg(call, 4));
    let (intent_ttl_ms, compatible_modes) = (arg(call, 5), arg(call, 6));
    let (since, quarantine_ms) = (arg(call, 7), arg(call, 8));

    if let Some(refused) = quarantine_check(node, quarantine_ms, witness_key, marker_key)? {
        return Ok(refused);
    }
    let (compatible, score) = (format!(" {compatible_modes} "), tonumber(since));
    let fence = fence_read(node, counter_key, floor_key)?;
    let kind = node.store.key_type(key);
    let reply = |code: i64, fence: Reply, left: i64| {
        Reply::Array(vec![
            Reply::Int(code),
            fence,
            Reply::Int(0),
            Reply::Int(left),
        ])
    };
    let refusal = |fence: Reply, left: i64, holders: String| {
        Reply::Array(vec![
            Reply::Int(0),
            fence,
            Reply::Int(0),
            Reply::Int(left),
            Reply::Bulk(holders),
        ])
    };
    if kind == "string" {
        // `SET listen_key 1 NX PX intent_ttl_ms`: a longer flag is left as it is.
        if !listen_key.is_some_and(|k| node.store.exists(k)) {
            super::scripts::set_listen(node, listen_key, intent_ttl_ms);
        }
        return Ok(refusal(fence, ms_left(node, key), holder_digest(node, key)));
    }
    if kind != "none" && kind != "hash" {
        return Ok(reply(-2, fence, -1));
    }
    if kind == "none" && window_open(node, window_key) {
        return Ok(refusal(
            fence,
            ms_left(node, window_key),
            "window".to_owned(),
        ));
    }
    let now = now_f64(node);
    let entries = if kind == "hash" {
        wrongtype(node.store.hgetall(key))?
    } else {
        Vec::new()
    };
    let (mut latest, mut refused, mut blocked, mut expired) = (now, false, now, Vec::new());
    let mut blocking: Vec<String> = Vec::new();
    for (field, value) in entries {
        let Some(entry) = mode_entry(&field, &value) else {
            if node.flaws.mode_takes_foreign_hash {
                // The flaw: a field that is not ours is dropped, as if it had expired.
                expired.push(field);
                continue;
            }
            return Ok(reply(-2, fence, -1));
        };
        if entry.expiry <= now {
            expired.push(field);
        } else {
            if entry.expiry > latest {
                latest = entry.expiry;
            }
            if field != marker && !compatible.contains(&format!(" {} ", entry.held)) {
                // `not waiter or rank < score or (rank == score and field < marker)`: the
                // comparison with a nil `score` raises, the equality does not.
                let blocks = !entry.waiter || {
                    let score =
                        score.ok_or_else(|| "attempt to compare number with nil".to_owned())?;
                    entry.rank < score || (entry.rank == score && field.as_str() < marker)
                };
                if blocks {
                    refused = true;
                    if entry.expiry > blocked {
                        blocked = entry.expiry;
                    }
                    blocking
                        .push(sha1_smol::Sha1::from(&field).digest().to_string()[..16].to_owned());
                }
            }
        }
    }
    for field in &expired {
        wrongtype(node.store.hdel(key, field))?;
    }
    let (mut expiry, mut granted) = (now + arith(ttl_ms)?, 1);
    if refused {
        (expiry, granted) = (now + arith(intent_ttl_ms)?, 0);
        let value = format!("{mode} {} {since}", concat_number(expiry));
        wrongtype(node.store.hset(key, marker, &value))?;
    } else {
        let value = format!("{mode} {}", concat_number(expiry));
        wrongtype(node.store.hset(key, token, &value))?;
    }
    if expiry > latest {
        latest = expiry;
    }
    node.store.pexpireat(key, ms_arg(latest));
    if refused {
        blocking.sort();
        return Ok(refusal(fence, (blocked - now) as i64, blocking.join(" ")));
    }
    Ok(Reply::Array(vec![
        Reply::Int(granted),
        fence,
        Reply::Int(0),
        int(blocked - now),
    ]))
}

/// extend_mode.lua.
pub(super) fn extend_mode(node: &mut Node, call: &Call) -> Result<Reply, Raise> {
    let (key, token, ttl_ms) = (need(call, 1)?, arg(call, 1), arg(call, 2));

    if node.store.key_type(key) != "hash" {
        return Ok(Reply::Int(0));
    }
    let Some(value) = wrongtype(node.store.hget(key, token))?.map(str::to_owned) else {
        return Ok(Reply::Int(0));
    };
    let Some(entry) = mode_entry(token, &value).filter(|e| !e.waiter) else {
        return Ok(Reply::Int(0));
    };
    let now = now_f64(node);
    if entry.expiry <= now {
        wrongtype(node.store.hdel(key, token))?;
        return Ok(Reply::Int(0));
    }
    let ttl = arith(ttl_ms)?;
    if entry.expiry < now + ttl {
        let value = format!("{} {}", entry.held, concat_number(now + ttl));
        wrongtype(node.store.hset(key, token, &value))?;
    }
    #[allow(clippy::cast_precision_loss)] // PTTL is far below 2^53
    let left = node.store.pttl(key) as f64;
    if left < ttl {
        node.store.pexpireat(key, ms_arg(now + ttl));
    }
    Ok(Reply::Int(1))
}

/// release_mode.lua.
pub(super) fn release_mode(node: &mut Node, call: &Call) -> Result<Reply, Raise> {
    let (key, queue_key) = (need(call, 1)?, key_at(call, 2));
    let (token, channel, marker) = (arg(call, 1), arg(call, 2), arg(call, 3));

    if node.store.key_type(key) != "hash" {
        return Ok(Reply::Int(0));
    }
    if !marker.is_empty() {
        wrongtype(node.store.hdel(key, marker))?;
    }
    let Some(value) = wrongtype(node.store.hget(key, token))?.map(str::to_owned) else {
        return Ok(Reply::Int(0));
    };
    wrongtype(node.store.hdel(key, token))?;
    let mine = mode_entry(token, &value).map(|e| e.expiry);
    let now = now_f64(node);
    let held = mine.unwrap_or(0.0) > now;
    let entries = wrongtype(node.store.hgetall(key))?;
    let (mut latest, mut waiting, mut foreign) = (0.0, false, false);
    for (field, value) in entries {
        match mode_entry(&field, &value) {
            None => foreign = true,
            Some(entry) if entry.expiry <= now => {
                wrongtype(node.store.hdel(key, &field))?;
            }
            Some(entry) => {
                if entry.expiry > latest {
                    latest = entry.expiry;
                }
                if entry.waiter {
                    waiting = true;
                }
            }
        }
    }
    if latest > 0.0 && !foreign {
        node.store.pexpireat(key, ms_arg(latest));
    }
    if latest == 0.0
        && !foreign
        && let Some(queue_key) = queue_key
    {
        // `redis.pcall("zcard", queue_key)`: an error for another type, not a number.
        waiting = node.store.zcard(queue_key).is_ok_and(|n| n > 0);
    }
    if waiting && !channel.is_empty() {
        node.published.push((channel.to_owned(), "*".to_owned()));
    }
    Ok(Reply::Int(i64::from(held)))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::super::{Call, Flaws, Node, Reply, id};
    use super::mode_entry;

    const T1: &str = "1111111111111111111111111111111111111111";
    const T2: &str = "2222222222222222222222222222222222222222";
    const W1: &str = "~00000000000000a1";

    fn acquire(node: &mut Node, token: &str, mode: &str, compatible: &str) -> Reply {
        let call = Call::new(
            id::ACQUIRE_MODE,
            &["r", "r:window", "r", "r"],
            &[token, mode, "1000", W1, "500", compatible, "7", "0"],
        );
        node.run(&call)
    }

    #[test]
    fn entries_are_parsed_as_prelude_lua_parses_them() {
        let holder = mode_entry(T1, "PR 1234").unwrap();
        assert_eq!((holder.held.as_str(), holder.expiry), ("PR", 1234.0));
        assert!(!holder.waiter);
        let waiter = mode_entry(W1, "EX 99 7").unwrap();
        assert!(waiter.waiter && waiter.rank == 7.0);
        assert_eq!(mode_entry(T1, "PR 1234 5"), None, "a holder with a rank");
        assert_eq!(mode_entry(W1, "EX 99"), None, "a waiter without one");
        assert_eq!(mode_entry(T1, "XX 1"), None, "not a mode");
        assert_eq!(mode_entry(&"A".repeat(40), "PR 1"), None, "upper-case hex");
        assert_eq!(mode_entry("owner", "app"), None);
        assert_eq!(mode_entry(T1, "PR -1"), None);
    }

    #[test]
    fn numbers_are_written_as_lua_writes_them() {
        use super::super::prelude::concat_number;
        assert_eq!(concat_number(1_700_000_000_000.0), "1700000000000");
        assert_eq!(concat_number(99_999_999_999_999.0), "99999999999999");
        assert_eq!(concat_number(1e14), "1e+14");
        assert_eq!(concat_number(123_456_789_012_346.0), "1.2345678901235e+14");
        assert_eq!(concat_number(1.5), "1.5");
        assert_eq!(concat_number(-2.0), "-2");
        assert_eq!(concat_number(0.0001), "0.0001");
        assert_eq!(concat_number(0.00001), "1e-05");
    }

    #[test]
    fn compatible_modes_share_and_others_wait() {
        let mut node = Node::new("ab", 10_000);
        let shared = "NL CR PR";
        assert_eq!(acquire(&mut node, T1, "PR", shared).int_at(0), Some(1));
        assert_eq!(acquire(&mut node, T2, "PR", shared).int_at(0), Some(1));
        // An exclusive request is refused until 11_000 and leaves its waiter entry.
        let refused = acquire(
            &mut node,
            "3333333333333333333333333333333333333333",
            "EX",
            "NL",
        );
        assert_eq!(refused.int_at(0), Some(0));
        assert_eq!(refused.int_at(3), Some(1000));
        let waiter = node.store.hget("r", W1).unwrap().unwrap();
        assert_eq!(waiter, "EX 10500 7");
        assert_eq!(node.store.pttl("r"), 1000);
    }

    #[test]
    fn a_foreign_hash_is_refused_unless_the_flaw_takes_it() {
        let mut node = Node::new("ab", 10_000);
        node.store.hset("r", "owner", "app").unwrap();
        let refused = acquire(&mut node, T1, "EX", "NL");
        assert_eq!(refused.int_at(0), Some(-2));
        assert_eq!(node.store.hget("r", "owner").unwrap(), Some("app"));
        assert_eq!(node.store.pttl("r"), -1, "nothing expired");

        let flaws = Flaws {
            mode_takes_foreign_hash: true,
            ..Flaws::default()
        };
        let mut flawed = Node::new("ab", 10_000).with_flaws(flaws);
        flawed.store.hset("r", "owner", "app").unwrap();
        assert_eq!(acquire(&mut flawed, T1, "EX", "NL").int_at(0), Some(1));
        assert_eq!(flawed.store.hget("r", "owner").unwrap(), None, "wiped");
    }
}
