//! The scripts that read or label a lock for operators: owner.lua (a holder's label, sent
//! through the dispatch script) and inspect.lua (what a node holds for a resource, sent on
//! its own with `EVAL`), mirrored statement for statement.

use super::args::{arg, need, pget};
use super::mode::mode_entry;
use super::prelude::{Raise, node_now};
use super::store::WRONGTYPE;
use super::{Call, Node, Reply};

/// The first 16 hex digits of the SHA-1 of `token`: what names its label key.
fn digest_of(token: &str) -> String {
    sha1_smol::Sha1::from(token).digest().to_string()[..16].to_owned()
}

/// owner.lua.
pub(super) fn owner(node: &mut Node, call: &Call) -> Result<Reply, Raise> {
    let (key, owner_key) = (need(call, 1)?, need(call, 2)?);
    let (token, label, ttl_ms, mode) = (
        arg(call, 1),
        arg(call, 2),
        arg(call, 3),
        arg(call, 4) == "1",
    );
    if mode {
        if node.store.key_type(key) != "hash" {
            return Ok(Reply::Int(0));
        }
        let Some(value) = node
            .store
            .hget(key, token)
            .map_err(|_| WRONGTYPE.to_owned())?
        else {
            return Ok(Reply::Int(0));
        };
        match mode_entry(token, value) {
            Some(entry) if !entry.waiter && entry.expiry > node_now(node) as f64 => {}
            _ => return Ok(Reply::Int(0)),
        }
    } else if pget(node, key).as_deref() != Some(token) {
        return Ok(Reply::Int(0));
    }
    // Never shortened, as extend.lua never shortens the lock.
    let mut ttl: i64 = ttl_ms
        .parse()
        .map_err(|_| "ERR value is not an integer or out of range".to_owned())?;
    let left = node.store.pttl(owner_key);
    if left > ttl {
        ttl = left;
    }
    let px = u64::try_from(ttl)
        .ok()
        .filter(|&ms| ms > 0)
        .ok_or_else(|| "ERR invalid expire time in 'set' command".to_owned())?;
    node.store.set(owner_key, label, Some(px));
    Ok(Reply::Int(1))
}

/// inspect.lua on `key` and `queue_key`: its reply, the quadruples of a hash in field order
/// (a server's `HGETALL` order is its own).
pub(super) fn inspect(node: &Node, key: &str, queue_key: &str) -> Reply {
    let label_of =
        |digest: &str| pget(node, &format!("{key}\0redlock:owner:{digest}")).unwrap_or_default();
    let kind = node.store.key_type(key);
    let pttl = node.store.pttl(key);
    let queued = node.store.zcard(queue_key).map_or(0, |n| n as i64);
    let mut out = vec![
        Reply::Bulk(kind.to_owned()),
        Reply::Int(pttl),
        Reply::Int(queued),
        Reply::Int(0),
        Reply::Bulk(String::new()),
    ];
    match kind {
        "string" => {
            let value = pget(node, key).unwrap_or_default();
            if value.starts_with('~') {
                out[3] = Reply::Int(1);
            } else {
                let digest = digest_of(&value);
                out[4] = Reply::Bulk(label_of(&digest));
                out.push(Reply::Bulk(digest));
            }
        }
        "hash" => {
            let now = node_now(node) as f64;
            for (field, value) in node.store.hgetall(key).unwrap_or_default() {
                let Some(entry) = mode_entry(&field, &value) else {
                    return Reply::Array(vec![
                        Reply::Bulk(kind.to_owned()),
                        Reply::Int(pttl),
                        Reply::Int(queued),
                        Reply::Int(1),
                        Reply::Bulk(String::new()),
                    ]);
                };
                if entry.expiry > now {
                    out.push(Reply::Bulk(entry.held.clone()));
                    out.push(Reply::Int((entry.expiry - now) as i64));
                    if entry.waiter {
                        out.push(Reply::Int(1));
                        out.push(Reply::Bulk(String::new()));
                    } else {
                        out.push(Reply::Int(0));
                        out.push(Reply::Bulk(label_of(&digest_of(&field))));
                    }
                }
            }
        }
        _ => {}
    }
    Reply::Array(out)
}
