//! The dispatch script's loop, for one call: the script named by the call's id runs, and an
//! error it raises is its reply (`pcall`).

use super::{Call, Node, Reply, admin, id, mode, permit, scripts};
use scripts::{
    acquire, acquire_queued, extend, fence, keep, leave, quarantine, release, release_handover,
    set_nx,
};

/// Runs `call` on `node` as the dispatch script does: an error raised is a reply.
pub(super) fn run(node: &mut Node, call: &Call) -> Reply {
    let result = match call.script {
        id::RELEASE => release(node, call),
        id::RELEASE_HANDOVER => release_handover(node, call),
        id::EXTEND => extend(node, call),
        id::ACQUIRE => acquire(node, call),
        id::ACQUIRE_QUEUED => acquire_queued(node, call),
        id::FENCE => fence(node, call),
        id::ACQUIRE_MODE => mode::acquire_mode(node, call),
        id::EXTEND_MODE => mode::extend_mode(node, call),
        id::RELEASE_MODE => mode::release_mode(node, call),
        id::LEAVE => leave(node, call),
        id::KEEP => keep(node, call),
        id::NOOP => Ok(Reply::Int(1)),
        id::QUARANTINE => quarantine(node, call),
        id::ACQUIRE_PERMIT => permit::acquire_permit(node, call),
        id::RELEASE_SLOTS => permit::release_slots(node, call),
        id::EXTEND_PERMIT => permit::extend_permit(node, call),
        id::OWNER => admin::owner(node, call),
        id::SET_NX => set_nx(node, call),
        other => Err(format!("script {other} is not modelled")),
    };
    result.unwrap_or_else(Reply::Error)
}
