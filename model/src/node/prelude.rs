//! `scripts/prelude.lua`'s helpers, mirrored: each has the name and the behaviour of the Lua
//! function it mirrors (`redis.call` raising becomes an `Err` with the error's text;
//! `redis.pcall` degrading becomes the value the Lua falls back to).

use super::store::WRONGTYPE;
use super::{Node, Reply};

/// A raised error: the dispatch script answers the call with it.
pub(super) type Raise = String;

/// `node_now()`: the node's clock in ms.
pub(super) fn node_now(node: &Node) -> u64 {
    node.store.now()
}

/// `tonumber(s) or 0` for a whole number of ms (the scripts' arguments are decimal).
pub(super) fn number(s: &str) -> i64 {
    s.trim().parse().unwrap_or(0)
}

/// `quarantine_check(quarantine_ms, witness_key, marker_key)`: `Some({-1, 0})` or
/// `Some({-3, 0})` when the node refuses, `None` when the script may go on.
pub(super) fn quarantine_check(
    node: &mut Node,
    quarantine_ms: &str,
    witness_key: &str,
    marker_key: &str,
) -> Result<Option<Reply>, Raise> {
    let q = number(quarantine_ms);
    if q <= 0 {
        return Ok(None);
    }
    let refuse = |code| Some(Reply::Array(vec![Reply::Int(code), Reply::Int(0)]));
    let id = node.run_id.clone();
    let witness = node
        .store
        .get_str(witness_key)
        .map_err(|_| WRONGTYPE.to_owned())?
        .map(str::to_owned);
    let parsed = witness.as_deref().and_then(|w| {
        let (wid, wq) = w.split_once(' ')?;
        let hex = !wid.is_empty() && wid.chars().all(|c| c.is_ascii_hexdigit());
        let digits = !wq.is_empty() && wq.chars().all(|c| c.is_ascii_digit());
        (hex && digits).then(|| (wid.to_owned(), wq.to_owned()))
    });
    let Some((wid, wq)) = parsed.filter(|(wid, _)| *wid == id) else {
        let q_text = q.to_string();
        node.store.set(marker_key, &q_text, Some(q.unsigned_abs()));
        node.store.set(witness_key, &format!("{id} {q}"), None);
        return Ok(refuse(-1));
    };
    let _ = wid;
    if wq.parse::<i64>().ok() != Some(q) {
        return Ok(refuse(-3));
    }
    let asked = node
        .store
        .get_str(marker_key)
        .map_err(|_| WRONGTYPE.to_owned())?
        .map(str::to_owned);
    if let Some(asked) = asked {
        let asked = asked.parse::<i64>().unwrap_or(0);
        if asked < q {
            let left = node.store.pttl(marker_key);
            if left > 0 {
                let px = left + q - asked;
                node.store
                    .set(marker_key, &q.to_string(), Some(px.unsigned_abs()));
            }
        }
        return Ok(refuse(-1));
    }
    Ok(None)
}

/// `busy_read(streak_key)`: ms the key has been busy without a window (0 without a streak).
pub(super) fn busy_read(node: &Node, streak_key: &str) -> i64 {
    match node.store.get_str(streak_key) {
        Ok(Some(started)) => {
            let started: i64 = started.parse().unwrap_or(0);
            let now = i64::try_from(node_now(node)).unwrap_or(i64::MAX);
            (now - started).max(0)
        }
        _ => 0,
    }
}

/// `ms_left(key)`: `PTTL`, which is -1 or -2 for a key without expiry or gone.
pub(super) fn ms_left(node: &Node, key: &str) -> i64 {
    node.store.pttl(key)
}

/// `holder_digest(key)`: the first 16 hex digits of the SHA-1 of the string at `key`, or "?".
pub(super) fn holder_digest(node: &Node, key: &str) -> String {
    match node.store.get_str(key) {
        Ok(Some(v)) => sha1_smol::Sha1::from(v).digest().to_string()[..16].to_owned(),
        _ => "?".to_owned(),
    }
}

/// `window_open(window_key)`.
pub(super) fn window_open(node: &Node, window_key: &str) -> bool {
    node.store.exists(window_key)
}

/// `decimal(v)`: `v` without leading zeros if it is a plain decimal string, else "0".
pub(super) fn decimal(v: Option<&str>) -> String {
    match v {
        Some(s) if !s.is_empty() && s.chars().all(|c| c.is_ascii_digit()) => {
            let digits = s.trim_start_matches('0');
            if digits.is_empty() {
                "0".to_owned()
            } else {
                digits.to_owned()
            }
        }
        _ => "0".to_owned(),
    }
}

/// `below(a, b)`: `a < b` for two decimal strings without leading zeros.
pub(super) fn below(a: &str, b: &str) -> bool {
    if a.len() != b.len() {
        return a.len() < b.len();
    }
    a < b
}

/// `fence_read(counter_key, floor_key)`: the fencing hint, the integer 0 without a counter
/// key, else a bulk string.
pub(super) fn fence_read(
    node: &Node,
    counter_key: Option<&str>,
    floor_key: Option<&str>,
) -> Result<Reply, Raise> {
    let Some(counter_key) = counter_key else {
        return Ok(Reply::Int(0));
    };
    if let Some(fence) = node
        .store
        .get_str(counter_key)
        .map_err(|_| WRONGTYPE.to_owned())?
    {
        return Ok(Reply::Bulk(fence.to_owned()));
    }
    let floor = match floor_key {
        Some(k) => node.store.get_str(k).map_err(|_| WRONGTYPE.to_owned())?,
        // `redis.call("get", nil)` raises in Lua.
        None => return Err("Wrong number of args calling Redis command from script".into()),
    };
    let (past, current) = floor.and_then(past_current).unwrap_or_default();
    let mut fence = if current.is_empty() {
        "0".to_owned()
    } else {
        current.clone()
    };
    if !past.is_empty() && below(&current, &past) {
        fence = past;
    }
    Ok(Reply::Bulk(fence))
}

/// `string.match(s, "^(%d+) (%d+)$")`.
pub(super) fn past_current(s: &str) -> Option<(String, String)> {
    let (a, b) = s.split_once(' ')?;
    let digits = |x: &str| !x.is_empty() && x.chars().all(|c| c.is_ascii_digit());
    (digits(a) && digits(b)).then(|| (a.to_owned(), b.to_owned()))
}
