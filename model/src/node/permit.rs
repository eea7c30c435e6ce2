//! The semaphore's scripts mirrored: acquire_permit.lua, release_slots.lua.

use super::prelude::Raise;
use super::{Call, Node, Reply};

/// acquire_permit.lua.
pub(super) fn acquire_permit(node: &mut Node, call: &Call) -> Result<Reply, Raise> {
    let _ = (node, call);
    Err("acquire_permit is not modelled yet".into())
}

/// release_slots.lua.
pub(super) fn release_slots(node: &mut Node, call: &Call) -> Result<Reply, Raise> {
    let _ = (node, call);
    Err("release_slots is not modelled yet".into())
}
