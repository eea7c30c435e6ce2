//! Hand-over by token: a held lock detached from its guard, and resumed by a new holder
//! (`resume.lua` swaps the token after the quarantine check).

mod node;
pub(crate) mod resume;
