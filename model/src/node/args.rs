//! A call's `KEYS` and `ARGV` as the scripts read them, and the two ways they read a string
//! key (`redis.call` raising, `redis.pcall` degrading).

use super::prelude::Raise;
use super::store::WRONGTYPE;
use super::{Call, Node};

/// `KEYS[i]` (1-based, as in Lua), `None` past the end.
pub(super) fn key(call: &Call, i: usize) -> Option<&str> {
    call.keys.get(i - 1).map(String::as_str)
}

/// `ARGV[i]` (1-based), "" past the end (where the Lua compares with a string or parses it).
pub(super) fn arg(call: &Call, i: usize) -> &str {
    call.args.get(i - 1).map_or("", String::as_str)
}

/// `KEYS[i]`, which the script needs: its absence raises, as `redis.call` with nil does.
pub(super) fn need(call: &Call, i: usize) -> Result<&str, Raise> {
    key(call, i).ok_or_else(|| format!("KEYS[{i}] missing"))
}

/// `redis.pcall("get", key)`, compared with a token: a value of another type is an error
/// table, equal to no string.
pub(super) fn pget(node: &Node, key: &str) -> Option<String> {
    node.store.get_str(key).ok().flatten().map(str::to_owned)
}

/// `redis.call("get", key)`: raises on another type.
pub(super) fn cget(node: &Node, key: &str) -> Result<Option<String>, Raise> {
    node.store
        .get_str(key)
        .map(|v| v.map(str::to_owned))
        .map_err(|_| WRONGTYPE.to_owned())
}
