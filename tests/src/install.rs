//! Installs what the tests need from Debian packages when it is missing (as root): the
//! README's commands must set up a fresh machine by themselves.

use std::path::PathBuf;
use std::process::{Command, Stdio};

/// Environment variable naming the `redis-server` binary to use instead of the one on `PATH`.
pub const SERVER_BIN_ENV: &str = "REDIS_SERVER_BIN";

/// Finds `redis-server`; if it is missing and we are root, installs Debian's `redis-server`
/// package with apt-get. Otherwise the error says what to install.
pub fn ensure_redis_server() -> Result<PathBuf, String> {
    if let Some(path) = find_redis_server() {
        return Ok(path);
    }
    apt_install("redis-server", "set REDIS_SERVER_BIN")?;
    // The package starts a system instance on 6379; we never use it, so stop it.
    let _ = Command::new("service")
        .args(["redis-server", "stop"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    find_redis_server().ok_or_else(|| "redis-server still not found after install".into())
}

fn find_redis_server() -> Option<PathBuf> {
    match std::env::var_os(SERVER_BIN_ENV) {
        Some(bin) => Some(PathBuf::from(bin)),
        None => on_path("redis-server"),
    }
}

/// Finds a C compiler for the clock shim; installs Debian's `gcc` if missing and root.
pub fn ensure_gcc() -> Result<PathBuf, String> {
    if let Some(path) = on_path("gcc") {
        return Ok(path);
    }
    apt_install("gcc", "or run the clock tests elsewhere")?;
    on_path("gcc").ok_or_else(|| "gcc still not found after install".into())
}

fn on_path(program: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join(program))
            .find(|candidate| candidate.is_file())
    })
}

/// `apt-get install <package>` when root; otherwise an error that says what to install.
fn apt_install(package: &str, alternative: &str) -> Result<(), String> {
    if !nix::unistd::geteuid().is_root() {
        return Err(format!(
            "{package} is not installed; install it (Debian/Ubuntu: `sudo apt-get install {package}`) {alternative}"
        ));
    }
    eprintln!("{package} not found: installing Debian's {package} package");
    let apt = |args: &[&str]| {
        Command::new("apt-get")
            .args(args)
            .env("DEBIAN_FRONTEND", "noninteractive")
            .status()
            .map_err(|e| format!("could not run apt-get: {e}"))
    };
    apt(&["update", "-qq"])?;
    let status = apt(&["install", "-y", "-qq", "--no-install-recommends", package])?;
    if !status.success() {
        return Err(format!("apt-get install {package} failed: {status}"));
    }
    Ok(())
}
