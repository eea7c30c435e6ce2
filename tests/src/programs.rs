//! Finds the programs the tests run: `redis-server` and `gcc`. They are only looked up here;
//! `cargo xtask test` installs them first on a fresh machine (`xtask/src/install.rs`), so that
//! no test races another to run `apt-get`.

use std::path::PathBuf;

/// Environment variable naming the `redis-server` binary to use instead of the one on `PATH`.
pub const SERVER_BIN_ENV: &str = "REDIS_SERVER_BIN";

/// The `redis-server` to run: `$REDIS_SERVER_BIN`, else the one on `PATH`.
///
/// # Errors
/// A message saying how to get one when there is none.
pub fn redis_server() -> Result<PathBuf, String> {
    match std::env::var_os(SERVER_BIN_ENV) {
        Some(bin) => Ok(PathBuf::from(bin)),
        None => on_path("redis-server").ok_or_else(|| {
            format!(
                "redis-server not found on PATH: run `cargo xtask test` (it installs Debian's \
                 redis-server), install it yourself, or set {SERVER_BIN_ENV}"
            )
        }),
    }
}

/// The C compiler that builds the wall-clock shim.
///
/// # Errors
/// A message saying how to get one when there is none.
pub fn gcc() -> Result<PathBuf, String> {
    on_path("gcc").ok_or_else(|| {
        "gcc not found on PATH: run `cargo xtask test` (it installs Debian's gcc) or install it"
            .to_owned()
    })
}

fn on_path(program: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join(program))
            .find(|candidate| candidate.is_file())
    })
}
