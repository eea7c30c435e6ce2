//! The semaphore's scripts mirrored: acquire_permit.lua, extend_permit.lua, and
//! release_slots.lua.

use super::args::{arg, key, need, pget};
use super::prelude::{
    Raise, concat_number, holder_digest, ms_left, node_now, number, quarantine_check, tonumber,
};
use super::{Call, Node, Reply};

/// The most waiters a queue holds (`MAX_QUEUED_WAITERS`).
const MAX_QUEUED_WAITERS: usize = 1024;

/// A sorted set's score as `ZADD` reads it from an argument (the scripts' scores are whole
/// milliseconds; anything else is refused here, where Redis would take a fraction).
fn score_arg(s: &str) -> Option<i64> {
    s.trim().parse().ok()
}

/// acquire_permit.lua.
pub(super) fn acquire_permit(node: &mut Node, call: &Call) -> Result<Reply, Raise> {
    let (witness_key, marker_key) = (need(call, 1)?, need(call, 2)?);
    let (queue_key, alive_key) = (need(call, 3)?.to_owned(), need(call, 4)?.to_owned());
    let (token, ttl_ms, quarantine_ms) = (arg(call, 1), arg(call, 2), arg(call, 3));
    let (marker, score, queue_ttl_ms, alive_ms) =
        (arg(call, 4), arg(call, 5), arg(call, 6), arg(call, 7));
    let listen_key = key(call, 5).map(str::to_owned);
    let capacity_key = key(call, 6).unwrap_or_default().to_owned();
    let permits = arg(call, 8);
    let first_slot = 7;

    if let Some(refused) = quarantine_check(node, quarantine_ms, witness_key, marker_key)? {
        return Ok(refused);
    }
    // `redis.pcall("get", capacity_key)`: another number of permits stored is a refusal.
    if let Ok(Some(stored)) = node.store.get_str(&capacity_key)
        && stored != permits
    {
        return Ok(Reply::Array(vec![
            Reply::Int(-4),
            Reply::Int(0),
            Reply::Bulk(stored.to_owned()),
        ]));
    }
    // `keep_capacity(ms)`: stored for `max(ms, pttl)` whenever either is positive (the `PX`
    // argument is the number as Lua writes it; one `SET` refuses is skipped, under `pcall`).
    let keep_capacity = |node: &mut Node, ms: i64| {
        let left = node.store.pttl(&capacity_key);
        #[allow(clippy::cast_precision_loss)] // ms far below 2^53
        let px = concat_number(ms.max(left) as f64).parse::<u64>().ok();
        if (ms > 0 || left > 0)
            && let Some(px) = px.filter(|&px| px > 0)
        {
            node.store.set(&capacity_key, permits, Some(px));
        }
    };
    // The clock read only while the liveness set exists (`redis.pcall("exists", alive_key)`;
    // the model's clock is the same at every read within a call, so only the clean-up and
    // the ranking below depend on it).
    let live = node.store.exists(&alive_key);
    let now = i64::try_from(node_now(node)).unwrap_or(i64::MAX);
    // `zremrangebyscore alive_key -inf now`, then the 8 entries that count the shortest.
    if live {
        if let Ok(members) = node.store.zrange(&alive_key) {
            for (other, counts_until) in &members {
                if *counts_until <= now {
                    let _ = node.store.zrem(&alive_key, other);
                }
            }
        }
        if let Ok(soonest) = node.store.zrange(&alive_key) {
            for (other, _) in soonest.iter().take(8) {
                // `redis.pcall("zscore", queue_key, other) == false`: missing (an error for
                // another type is not false).
                if node.store.zscore(&queue_key, other) == Ok(None) {
                    let _ = node.store.zrem(&alive_key, other);
                }
            }
        }
    }
    let mut holders: Vec<String> = Vec::new();
    let refused =
        |node: &mut Node, holders: &[String], earliest: i64, latest: i64| -> Result<Reply, Raise> {
            if !marker.is_empty() {
                if node.store.zcard(&queue_key).unwrap_or(0) < MAX_QUEUED_WAITERS
                    && let Some(score) = score_arg(score)
                {
                    let _ = node.store.zadd_nx(&queue_key, score, marker);
                }
                if let Some(queue_ttl) = score_arg(queue_ttl_ms) {
                    node.store.pexpire(&queue_key, queue_ttl);
                }
                super::scripts::set_listen(node, listen_key.as_deref(), queue_ttl_ms);
                let alive = tonumber(alive_ms)
                    .ok_or_else(|| "attempt to perform arithmetic on a nil value".to_owned())?;
                #[allow(clippy::cast_possible_truncation)] // whole ms
                let until = now + alive as i64;
                let _ = node.store.zadd(&alive_key, until, marker);
                if let Some(queue_ttl) = score_arg(queue_ttl_ms) {
                    node.store.pexpire(&alive_key, queue_ttl);
                }
            }
            keep_capacity(node, latest);
            Ok(Reply::Array(vec![
                Reply::Int(0),
                Reply::Int(0),
                Reply::Int(0),
                Reply::Int(earliest),
                Reply::Bulk(holders.join(",")),
            ]))
        };

    // Who holds each slot; the first free one; the one reserved for this waiter; when the
    // earliest busy one frees.
    let slots: Vec<String> = call.keys.iter().skip(first_slot - 1).cloned().collect();
    let (mut free, mut reserved, mut count, mut earliest) = (None, None, 0_usize, -1_i64);
    let mut latest = 0_i64;
    for (i, slot) in slots.iter().enumerate() {
        // `redis.pcall("get", slot)`: an error table (truthy, no string) for another type.
        let current = node.store.get_str(slot).map(|v| v.map(str::to_owned));
        holders.push(String::new());
        if !marker.is_empty() && current.as_ref().is_ok_and(|v| v.as_deref() == Some(marker)) {
            if reserved.is_none() {
                reserved = Some(i);
            }
        } else if matches!(current, Ok(None)) {
            count += 1;
            if free.is_none() {
                free = Some(i);
            }
        } else {
            holders[i] = holder_digest(node, slot);
            let left = ms_left(node, slot);
            if left > 0 && (earliest < 0 || left < earliest) {
                earliest = left;
            }
            latest = latest.max(left);
        }
    }
    let take = |node: &mut Node, holders: &[String], i: usize, is_reserved: bool| {
        let px = ttl(ttl_ms)?;
        if is_reserved {
            node.store.set(&slots[i], token, Some(px));
        } else if node.store.exists(&slots[i]) {
            return Ok(None);
        } else {
            node.store.set(&slots[i], token, Some(px));
        }
        if !marker.is_empty() {
            let _ = node.store.zrem(&queue_key, marker);
            let _ = node.store.zrem(&alive_key, marker);
        }
        keep_capacity(node, latest.max(i64::try_from(px).unwrap_or(i64::MAX)));
        let slot = i64::try_from(i + 1).unwrap_or(i64::MAX);
        Ok::<_, Raise>(Some(Reply::Array(vec![
            Reply::Int(1),
            Reply::Int(0),
            Reply::Int(slot),
            Reply::Bulk(holders.join(",")),
        ])))
    };

    if let Some(i) = reserved {
        return take(node, &holders, i, true).map(|r| r.unwrap_or(Reply::Nil));
    }
    let Some(free) = free else {
        return refused(node, &holders, earliest, latest);
    };
    // The waiters ahead of this one, while they are fewer than the free slots.
    // `zrangebyscore queue_key -inf (score LIMIT 0 count+32` (an invalid bound is an error).
    // Only with the liveness set (the Lua's `if now`): without it, no ranking.
    let before: Option<Vec<String>> = tonumber(score).filter(|_| live).and_then(|bound| {
        let members = node.store.zrange(&queue_key).ok()?;
        #[allow(clippy::cast_precision_loss)] // scores are whole ms, far below 2^53
        let below = members.into_iter().filter(|(_, s)| (*s as f64) < bound);
        Some(below.take(count + 32).map(|(m, _)| m).collect())
    });
    if let Some(before) = before {
        let mut ahead = 0;
        for other in before {
            let counts_until = node.store.zscore(&alive_key, &other).ok().flatten();
            if counts_until.is_some_and(|until| until > now) {
                ahead += 1;
                if ahead >= count {
                    for holder in &mut holders {
                        if holder.is_empty() {
                            "ahead".clone_into(holder);
                        }
                    }
                    return refused(node, &holders, earliest, latest);
                }
            } else {
                let _ = node.store.zrem(&queue_key, &other);
                let _ = node.store.zrem(&alive_key, &other);
            }
        }
    }
    match take(node, &holders, free, false)? {
        Some(granted) => Ok(granted),
        None => refused(node, &holders, earliest, latest),
    }
}

/// A `PX` argument: a whole number of ms above 0, or the error `SET` raises.
fn ttl(s: &str) -> Result<u64, Raise> {
    s.parse::<u64>()
        .ok()
        .filter(|&v| v > 0)
        .ok_or_else(|| "ERR invalid expire time in 'set' command".to_owned())
}

/// release_slots.lua.
pub(super) fn release_slots(node: &mut Node, call: &Call) -> Result<Reply, Raise> {
    let token = arg(call, 1);
    let keys = &call.keys;
    // `n = math.floor(#KEYS / 3)`: the queues at `KEYS[n + i]`, the listen flags at
    // `KEYS[2n + i]`.
    let n = keys.len() / 3;
    let mut deleted = 0;
    for i in 0..n {
        if pget(node, &keys[i]).as_deref() != Some(token) {
            continue;
        }
        // `DEL key flag`: the flag was there when it deletes two.
        node.store.delete(&keys[i]);
        let listened = node.store.delete(&keys[2 * n + i]);
        deleted += 1;
        if listened {
            node.published.push((keys[n + i].clone(), "*".to_owned()));
        }
    }
    Ok(Reply::Int(deleted))
}

/// extend_permit.lua.
pub(super) fn extend_permit(node: &mut Node, call: &Call) -> Result<Reply, Raise> {
    let (slot_key, capacity_key) = (need(call, 1)?, need(call, 2)?);
    let (token, ttl_ms, permits) = (arg(call, 1), arg(call, 2), arg(call, 3));
    if pget(node, slot_key).as_deref() != Some(token) {
        return Ok(Reply::Int(0));
    }
    let ttl = number(ttl_ms);
    if node.store.pttl(slot_key) < ttl {
        node.store.pexpire(slot_key, ttl);
    }
    // `redis.pcall("get")`: another type is an error table, neither ours nor absent.
    let ours = match node.store.get_str(capacity_key) {
        Ok(stored) => stored.is_none_or(|stored| stored == permits),
        Err(_) => false,
    };
    if ours && node.store.pttl(capacity_key) < ttl {
        let px = u64::try_from(ttl).map_err(|_| "ERR invalid expire time in 'set' command")?;
        node.store.set(capacity_key, permits, Some(px));
    }
    Ok(Reply::Int(1))
}
