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
        // `id .. " " .. q`: the number as Lua's `..` writes it.
        #[allow(clippy::cast_precision_loss)] // as Lua's double
        let q_concat = concat_number(q as f64);
        node.store
            .set(witness_key, &format!("{id} {q_concat}"), None);
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

/// Lua's `tonumber(s)` on a string: a decimal (or `0x` hexadecimal) number, surrounding
/// spaces allowed; `None` (nil) for anything else.
pub(super) fn tonumber(s: &str) -> Option<f64> {
    let t = s.trim();
    let (negative, digits) = match t.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, t),
    };
    if let Some(hex) = digits
        .strip_prefix("0x")
        .or_else(|| digits.strip_prefix("0X"))
    {
        // `strtoul`, as Lua 5.1 reads a hexadecimal constant.
        let value = u64::from_str_radix(hex, 16).ok()?;
        #[allow(clippy::cast_precision_loss)] // as the C conversion to a double
        let value = value as f64;
        return Some(if negative { -value } else { value });
    }
    let plain = t
        .chars()
        .all(|c| c.is_ascii_digit() || matches!(c, '+' | '-' | '.' | 'e' | 'E'));
    if plain {
        return t.parse().ok();
    }
    // `strtod` also reads "inf" and "nan", in any case.
    match digits.to_ascii_lowercase().as_str() {
        "inf" | "infinity" => Some(if negative {
            f64::NEG_INFINITY
        } else {
            f64::INFINITY
        }),
        "nan" => Some(f64::NAN),
        _ => None,
    }
}

/// A Lua number as `..` writes it into a string (Lua 5.1's `"%.14g"`): an integer below
/// 10^14 in plain digits, larger or fractional numbers as C's `%g` writes them.
pub(super) fn concat_number(v: f64) -> String {
    const PRECISION: i32 = 14;
    if v.is_nan() {
        return if v.is_sign_negative() { "-nan" } else { "nan" }.to_owned();
    }
    if v.is_infinite() {
        return if v < 0.0 { "-inf" } else { "inf" }.to_owned();
    }
    // The exponent `%e` would write with PRECISION significant digits decides the style.
    let scientific = format!("{:.*e}", (PRECISION - 1).unsigned_abs() as usize, v);
    let (mantissa, exponent) = scientific.split_once('e').unwrap_or((&scientific, "0"));
    let exponent: i32 = exponent.parse().unwrap_or(0);
    let trim = |s: &str| -> String {
        if s.contains('.') {
            s.trim_end_matches('0').trim_end_matches('.').to_owned()
        } else {
            s.to_owned()
        }
    };
    if (-4..PRECISION).contains(&exponent) {
        let decimals = (PRECISION - 1 - exponent).unsigned_abs() as usize;
        trim(&format!("{v:.decimals$}"))
    } else {
        let sign = if exponent < 0 { '-' } else { '+' };
        format!("{}e{sign}{:02}", trim(mantissa), exponent.unsigned_abs())
    }
}
