//! The plain lock's scripts mirrored, and the dispatch of a call to its script.
//!
//! Each function is the script of the same name under `redlock-core/src/` (in its slice),
//! statement for statement: its keys and arguments bound by position first, as the Lua binds
//! them to named locals.

use super::args::{arg, cget, key, need, pget};
use super::prelude::{
    Raise, below, busy_read, decimal, fence_read, holder_digest, ms_left, node_now, number,
    past_current, quarantine_check, window_open,
};
use super::{Call, Node, Reply};

/// A whole number of ms from an argument (`PX` refuses anything else; the client never sends
/// one).
fn ms(s: &str) -> Result<u64, Raise> {
    s.parse::<u64>()
        .ok()
        .filter(|&v| v > 0)
        .ok_or_else(|| "ERR invalid expire time in 'set' command".to_owned())
}

fn array(items: Vec<Reply>) -> Reply {
    Reply::Array(items)
}

/// release.lua.
pub(super) fn release(node: &mut Node, call: &Call) -> Result<Reply, Raise> {
    let token = arg(call, 1);
    let mut deleted = 0;
    for key in &call.keys {
        if pget(node, key).as_deref() == Some(token) {
            deleted += i64::from(node.store.delete(key));
        }
    }
    Ok(Reply::Int(deleted))
}

/// set_nx.lua: `SET key token NX PX ttl_ms GET`, after the quarantine check; with an owner
/// key, the label written with the grant.
pub(super) fn set_nx(node: &mut Node, call: &Call) -> Result<Reply, Raise> {
    let key = need(call, 1)?;
    let (token, ttl_ms, quarantine_ms) = (arg(call, 1), arg(call, 2), arg(call, 3));
    // With the quarantine off the script reads no other key: a batched call names the lock
    // key alone. With it on, a missing key raises, as `redis.call` with nil does.
    let (witness_key, marker_key) = if super::prelude::number(quarantine_ms) > 0 {
        (need(call, 2)?.to_owned(), need(call, 3)?.to_owned())
    } else {
        (key.to_owned(), key.to_owned())
    };
    if let Some(refused) = quarantine_check(node, quarantine_ms, &witness_key, &marker_key)? {
        return Ok(refused);
    }
    let ttl_ms = ms(ttl_ms)?;
    match cget(node, key)? {
        Some(held) => Ok(Reply::Bulk(held)),
        None => {
            node.store.set(key, token, Some(ttl_ms));
            // With an owner key, the holder's label, written with the grant.
            if let (Some(owner_key), Some(label)) = (key_opt(call, 4), call.args.get(3)) {
                node.store.set(&owner_key, label, Some(ttl_ms));
            }
            Ok(Reply::Nil)
        }
    }
}

/// acquire.lua.
pub(super) fn acquire(node: &mut Node, call: &Call) -> Result<Reply, Raise> {
    let (token, ttl_ms, quarantine_ms) = (arg(call, 1), arg(call, 2), arg(call, 3));
    let (windowed, streak) = (arg(call, 4) == "1", matches!(arg(call, 4), "1" | "2"));
    // `tonumber(ARGV[5]) or 1`.
    let n = arg(call, 5).parse::<usize>().unwrap_or(1);
    let streak_key = need(call, 2 * n + 1)?;
    let (witness_key, marker_key) = (need(call, 2 * n + 2)?, need(call, 2 * n + 3)?);
    let (counter_key, floor_key) = (key_opt(call, 2 * n + 4), key_opt(call, 2 * n + 5));

    if let Some(refused) = quarantine_check(node, quarantine_ms, witness_key, marker_key)? {
        return Ok(refused);
    }
    let fence = fence_read(node, counter_key.as_deref(), floor_key.as_deref())?;
    let (mut taken, mut holders, mut left) = (Vec::new(), Vec::new(), None);
    for i in 1..=n {
        let (key, window_key) = (need(call, i)?, need(call, n + i)?);
        // What refused this key: its window, or the key itself.
        let at = if windowed && window_open(node, window_key) {
            Some(window_key)
        } else if left.is_some() {
            // Already refused: only who holds the rest is read.
            node.store.exists(key).then_some(key)
        } else if !node.store.exists(key) {
            // SET NX PX: refused by a key of any type.
            node.store.set(key, token, Some(ms(ttl_ms)?));
            taken.push(key.to_owned());
            None
        } else {
            Some(key)
        };
        if let Some(at) = at {
            left = left.or_else(|| Some(ms_left(node, at)));
            let holder = if at == key {
                holder_digest(node, key)
            } else {
                "window".to_owned()
            };
            holders.push(if n > 1 {
                format!("{i}:{holder}")
            } else {
                holder
            });
        }
    }
    if let Some(left) = left {
        for key in &taken {
            node.store.delete(key);
        }
        return Ok(array(vec![
            Reply::Int(0),
            fence,
            Reply::Int(0),
            Reply::Int(left),
            Reply::Bulk(holders.join(",")),
        ]));
    }
    let busy = if streak && n == 1 {
        busy_read(node, streak_key)
    } else {
        0
    };
    Ok(array(vec![Reply::Int(1), fence, Reply::Int(busy)]))
}

/// `redis.pcall("set", listen_key, "1", "PX", ttl_ms)`: the listen flag, when its key was
/// passed and the ttl is one `PX` takes (the error is swallowed otherwise).
pub(super) fn set_listen(node: &mut Node, listen_key: Option<&str>, ttl_ms: &str) {
    if let (Some(listen_key), Ok(px)) = (listen_key, ms(ttl_ms)) {
        node.store.set(listen_key, "1", Some(px));
    }
}

/// An optional key (`KEYS[i]`, nil when not passed).
fn key_opt(call: &Call, i: usize) -> Option<String> {
    key(call, i).map(str::to_owned)
}

/// acquire_queued.lua.
pub(super) fn acquire_queued(node: &mut Node, call: &Call) -> Result<Reply, Raise> {
    let (key, queue_key, window_key) = (need(call, 1)?, need(call, 2)?, need(call, 3)?);
    let (streak_key, witness_key, marker_key) = (need(call, 4)?, need(call, 5)?, need(call, 6)?);
    let listen_key = key_opt(call, 7);
    let (counter_key, floor_key) = (key_opt(call, 8), key_opt(call, 9));
    let (token, ttl_ms, marker, score) = (arg(call, 1), arg(call, 2), arg(call, 3), arg(call, 4));
    let (queue_ttl_ms, quarantine_ms) = (arg(call, 5), arg(call, 6));

    if let Some(refused) = quarantine_check(node, quarantine_ms, witness_key, marker_key)? {
        return Ok(refused);
    }
    let fence = fence_read(node, counter_key.as_deref(), floor_key.as_deref())?;
    // `redis.pcall("get", key)`: an error table for another type (neither nil nor the marker).
    let current = node.store.get_str(key);
    let free = matches!(current, Ok(None));
    if current == Ok(Some(marker)) || (free && !window_open(node, window_key)) {
        node.store.set(key, token, Some(ms(ttl_ms)?));
        let _ = node.store.zrem(queue_key, marker);
        return Ok(array(vec![
            Reply::Int(1),
            fence,
            Reply::Int(busy_read(node, streak_key)),
        ]));
    }
    if node.store.zcard(queue_key).unwrap_or(0) < 1024 {
        let _ = node.store.zadd_nx(queue_key, number(score), marker);
    }
    let _ = node.store.pexpire(queue_key, number(queue_ttl_ms));
    set_listen(node, listen_key.as_deref(), queue_ttl_ms);
    let mut left = ms_left(node, key);
    if left < 0 {
        left = ms_left(node, window_key);
    }
    let holder = if free {
        "window".to_owned()
    } else {
        holder_digest(node, key)
    };
    Ok(array(vec![
        Reply::Int(0),
        fence,
        Reply::Int(0),
        Reply::Int(left),
        Reply::Bulk(holder),
    ]))
}

/// extend.lua.
pub(super) fn extend(node: &mut Node, call: &Call) -> Result<Reply, Raise> {
    let (token, ttl_ms) = (arg(call, 1), arg(call, 2));
    if call
        .keys
        .iter()
        .any(|key| pget(node, key).as_deref() != Some(token))
    {
        return Ok(Reply::Int(0));
    }
    let ttl = number(ttl_ms);
    for key in &call.keys {
        if node.flaws.shortening_extend || node.store.pttl(key) < ttl {
            node.store.pexpire(key, ttl);
        }
    }
    Ok(Reply::Int(1))
}

/// keep.lua.
pub(super) fn keep(node: &mut Node, call: &Call) -> Result<Reply, Raise> {
    let key = need(call, 1)?;
    let (token, keep_ms, kept) = (arg(call, 1), arg(call, 2), arg(call, 3));
    if pget(node, key).as_deref() != Some(token) {
        return Ok(Reply::Int(0));
    }
    node.store.set(key, kept, Some(ms(keep_ms)?));
    Ok(Reply::Int(1))
}

/// leave.lua.
pub(super) fn leave(node: &mut Node, call: &Call) -> Result<Reply, Raise> {
    let waiters = need(call, 1)?;
    let (marker, in_hash) = (arg(call, 1), arg(call, 2));
    if in_hash == "1" {
        let _ = node.store.hdel(waiters, marker);
    } else {
        let _ = node.store.zrem(waiters, marker);
    }
    if let Some(alive) = key(call, 2) {
        let _ = node.store.zrem(alive, marker);
    }
    Ok(Reply::Int(1))
}

/// quarantine.lua.
pub(super) fn quarantine(node: &mut Node, call: &Call) -> Result<Reply, Raise> {
    let (witness_key, marker_key) = (need(call, 1)?, need(call, 2)?);
    if let Some(refused) = quarantine_check(node, arg(call, 1), witness_key, marker_key)? {
        return Ok(refused);
    }
    Ok(array(vec![Reply::Int(1), Reply::Int(0)]))
}

/// release_handover.lua.
pub(super) fn release_handover(node: &mut Node, call: &Call) -> Result<Reply, Raise> {
    let (key, queue_key, streak_key, window_key) = (
        need(call, 1)?,
        need(call, 2)?,
        need(call, 3)?,
        need(call, 4)?,
    );
    let (token, grace_ms, channel) = (arg(call, 1), arg(call, 2), arg(call, 3));
    let (window_ms, window_due) = (number(arg(call, 4)), arg(call, 5) == "1");
    let listen_key = key_opt(call, 5);
    let (busy_ms, queue_ttl_ms) = (number(arg(call, 6)), number(arg(call, 7)));

    if pget(node, key).as_deref() != Some(token) {
        return Ok(Reply::Int(0));
    }
    // `DEL key listen_key` (or `DEL key` without the flag's key): 1 when the flag was missing.
    let deleted = node.store.delete(key);
    if let Some(listen_key) = listen_key.as_deref()
        && !node.store.delete(listen_key)
        && deleted
    {
        return Ok(Reply::Int(1));
    }
    let listen_again = |node: &mut Node| set_listen(node, listen_key.as_deref(), arg(call, 7));
    let now = i64::try_from(node_now(node)).unwrap_or(i64::MAX);
    // The streak's start to write: now less busy_ms, or `before` if earlier.
    let streak_start = |before: Option<i64>| {
        let since = now - busy_ms;
        match before {
            Some(b) if b < since => b,
            _ => since,
        }
    };
    let head = node.store.zpopmin(queue_key).ok().flatten();
    if let Some((named, _)) = head {
        let following = node
            .store
            .zrange(queue_key)
            .ok()
            .and_then(|m| m.into_iter().next())
            .map_or(String::new(), |(m, _)| m);
        if window_ms > 0 && window_due {
            // `SET window_key named PX window_ms` (under pcall: always succeeds here).
            node.store
                .set(window_key, &named, Some(window_ms.unsigned_abs()));
            node.store.delete(streak_key);
            listen_again(node);
            node.published.push((
                channel.to_owned(),
                // `window_ms` is a Lua number: `..` writes it as "%.14g" does.
                format!("{named} {following} {}", lua_concat(window_ms)),
            ));
            return Ok(Reply::Int(1));
        }
        node.store.set(key, &named, Some(ms(grace_ms)?));
        if window_ms > 0 {
            let before = pget(node, streak_key).map(|b| lua_tonumber(&b));
            let since = streak_start(before.flatten());
            if queue_ttl_ms > 0 {
                let px = Some(queue_ttl_ms.unsigned_abs());
                node.store.set(streak_key, &since.to_string(), px);
            }
        }
        listen_again(node);
        node.published
            .push((channel.to_owned(), format!("{named} {following}")));
    } else {
        if window_ms > 0
            && let Some(before) = pget(node, streak_key)
        {
            let since = streak_start(lua_tonumber(&before));
            node.store.set(
                streak_key,
                &since.to_string(),
                Some(window_ms.unsigned_abs()),
            );
        }
        node.published.push((channel.to_owned(), "*".to_owned()));
    }
    Ok(Reply::Int(1))
}

/// An integer as Lua's `..` writes a number (in exponent form from 10^14).
#[allow(clippy::cast_precision_loss)] // as Lua's double
fn lua_concat(v: i64) -> String {
    super::prelude::concat_number(v as f64)
}

/// Lua's `tonumber` on a decimal integer string (`nil` otherwise).
fn lua_tonumber(s: &str) -> Option<i64> {
    s.trim().parse().ok()
}

/// fence.lua.
pub(super) fn fence(node: &mut Node, call: &Call) -> Result<Reply, Raise> {
    let (counter_key, floor_key, window_key) = (need(call, 1)?, need(call, 2)?, need(call, 3)?);
    let (claim, keep) = (arg(call, 1), number(arg(call, 2)));
    let window_ms = (keep / 2).max(1);

    let (mut past, mut current) = ("0".to_owned(), "0".to_owned());
    if let Some(floor) = cget(node, floor_key)? {
        let Some((p, c)) = past_current(&floor) else {
            return Err(format!("unreadable fencing floor: {floor}"));
        };
        (past, current) = (p, c);
    }
    let window_left = node.store.pttl(window_key);
    if window_left == -2 {
        if below(&past, &current) {
            past = current.clone();
        }
        current = "0".to_owned();
    }
    let before = match cget(node, counter_key)? {
        Some(b) => decimal(Some(&b)),
        None => past.clone(),
    };
    if !below(&before, claim) {
        return Ok(array(vec![Reply::Int(0), Reply::Bulk(before)]));
    }
    if keep > 0 && (window_left == -1 || window_left == -2 || window_left > window_ms) {
        node.store
            .set(window_key, "1", Some(window_ms.unsigned_abs()));
    } else if keep == 0 && window_left == -2 {
        node.store.set(window_key, "1", None);
    }
    if below(&current, claim) {
        current = claim.to_owned();
    }
    node.store
        .set(floor_key, &format!("{past} {current}"), None);
    let px = (keep > 0).then(|| keep.unsigned_abs());
    node.store.set(counter_key, claim, px);
    Ok(array(vec![Reply::Int(1), Reply::Bulk(before)]))
}
