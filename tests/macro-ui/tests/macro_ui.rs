//! Compile errors of `#[redlock]`, pinned to rustc 1.95 (rust-toolchain.toml).

#![allow(clippy::unwrap_used)] // tests unwrap: a failure is the assertion

#[test]
fn ui() {
    let cases = trybuild::TestCases::new();
    cases.pass("ui/pass/*.rs");
    cases.compile_fail("ui/fail/*.rs");
}
