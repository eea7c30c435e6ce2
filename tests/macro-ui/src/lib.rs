//! The compile errors of `#[redlock]`: the cases are in `ui/`, run by `tests/macro_ui.rs`.
