//! A model of the Redlock protocol as this workspace runs it, checked exhaustively.

pub mod check;
pub mod node;
