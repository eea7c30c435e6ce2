//! Administration: force-release of a resource's holders, what the nodes hold for a resource
//! (inspect), and the holders' owner labels (`owner.lua`, written at each grant).

pub(crate) mod force;
pub(crate) mod inspect;
pub(crate) mod list;
mod node;
