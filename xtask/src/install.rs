//! Installs what the README's commands need from Debian packages when it is missing (as root):
//! `redis-server` and, for the wall-clock shim of the reliability tests, `gcc`.
//!
//! Debian's `redis-server` package also installs a system service on port 6379 and starts it.
//! The tests never use it, so the install keeps it from starting (a `policy-rc.d` that refuses
//! service starts for the length of the install) and disables it at boot; one line says so.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Context, bail};

/// Environment variable naming the `redis-server` binary to use instead of the one on `PATH`
/// (the tests read the same one).
const SERVER_BIN_ENV: &str = "REDIS_SERVER_BIN";

/// Debian's hook that `invoke-rc.d` and `deb-systemd-invoke` ask before starting a service;
/// exit code 101 means "not now".
const POLICY_RC_D: &str = "/usr/sbin/policy-rc.d";

/// Finds `redis-server`, installing Debian's package first if it is missing and we are root.
pub(crate) fn redis_server() -> anyhow::Result<PathBuf> {
    if let Some(bin) = std::env::var_os(SERVER_BIN_ENV) {
        return Ok(PathBuf::from(bin));
    }
    if let Some(path) = on_path("redis-server") {
        return Ok(path);
    }
    apt_install_without_starting("redis-server", &format!("or set {SERVER_BIN_ENV}"))?;
    // Enabled at boot by the package's postinst; nothing here asked for that.
    let _ = quiet("deb-systemd-helper", &["disable", "redis-server.service"]);
    let _ = quiet("update-rc.d", &["redis-server", "disable"]);
    eprintln!(
        "xtask: installed Debian's redis-server; its system service (port 6379) was not started \
         and is disabled at boot (`systemctl enable --now redis-server` turns it on)"
    );
    on_path("redis-server").context("redis-server still not on PATH after the install")
}

/// Finds `gcc`, installing Debian's package first if it is missing and we are root.
pub(crate) fn gcc() -> anyhow::Result<PathBuf> {
    if let Some(path) = on_path("gcc") {
        return Ok(path);
    }
    apt_install_without_starting("gcc", "for the wall-clock shim of the reliability tests")?;
    on_path("gcc").context("gcc still not on PATH after the install")
}

fn on_path(program: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join(program))
            .find(|candidate| candidate.is_file())
    })
}

/// Runs a command with its output discarded; `Ok(true)` if it ran and succeeded.
fn quiet(program: &str, args: &[&str]) -> std::io::Result<bool> {
    Command::new(program)
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map(|status| status.success())
}

/// `apt-get install <package>` when root, with service starts refused while it runs;
/// otherwise an error that says what to install.
fn apt_install_without_starting(package: &str, alternative: &str) -> anyhow::Result<()> {
    if !nix::unistd::geteuid().is_root() {
        bail!(
            "{package} is not installed; install it (Debian/Ubuntu: `sudo apt-get install {package}`) {alternative}"
        );
    }
    eprintln!("xtask: {package} not found: installing Debian's {package} package (apt-get)");
    let _policy = PolicyRcD::install()?;
    // apt's own chatter (debconf notes) only when something failed.
    let apt = |args: &[&str]| -> anyhow::Result<()> {
        let output = Command::new("apt-get")
            .args(args)
            .env("DEBIAN_FRONTEND", "noninteractive")
            .output()
            .context("could not run apt-get")?;
        if !output.status.success() {
            eprint!("{}", String::from_utf8_lossy(&output.stderr));
            bail!("`apt-get {}` failed: {}", args.join(" "), output.status);
        }
        Ok(())
    };
    apt(&["update", "-qq"])?;
    apt(&["install", "-y", "-qq", "--no-install-recommends", package])?;
    Ok(())
}

/// A `policy-rc.d` refusing every service start, removed on drop. An existing one (the
/// machine's own policy) is left as it is and not removed.
struct PolicyRcD {
    ours: bool,
}

impl PolicyRcD {
    fn install() -> anyhow::Result<Self> {
        let path = Path::new(POLICY_RC_D);
        if path.exists() {
            return Ok(Self { ours: false });
        }
        std::fs::write(
            path,
            "#!/bin/sh\n# written by cargo xtask for one apt-get install\nexit 101\n",
        )
        .with_context(|| format!("could not write {POLICY_RC_D}"))?;
        std::fs::set_permissions(path, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .with_context(|| format!("could not make {POLICY_RC_D} executable"))?;
        Ok(Self { ours: true })
    }
}

impl Drop for PolicyRcD {
    fn drop(&mut self) {
        if self.ours {
            let _ = std::fs::remove_file(POLICY_RC_D);
        }
    }
}
