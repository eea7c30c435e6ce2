//! The mode scripts mirrored: acquire_mode.lua, extend_mode.lua, release_mode.lua.

use super::prelude::Raise;
use super::{Call, Node, Reply};

/// acquire_mode.lua.
pub(super) fn acquire_mode(node: &mut Node, call: &Call) -> Result<Reply, Raise> {
    let _ = (node, call);
    Err("acquire_mode is not modelled yet".into())
}

/// extend_mode.lua.
pub(super) fn extend_mode(node: &mut Node, call: &Call) -> Result<Reply, Raise> {
    let _ = (node, call);
    Err("extend_mode is not modelled yet".into())
}

/// release_mode.lua.
pub(super) fn release_mode(node: &mut Node, call: &Call) -> Result<Reply, Raise> {
    let _ = (node, call);
    Err("release_mode is not modelled yet".into())
}
