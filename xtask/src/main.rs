//! The README's commands: `cargo xtask test`, `cargo xtask demo`, and `cargo xtask bench` and
//! `cargo xtask soak` for measurements; `cargo xtask layers` and `cargo xtask vocabulary` run
//! one check of `cargo xtask test` alone.
//!
//! xtask itself depends on nothing heavy, so that on a fresh machine it builds in seconds and
//! then says what it is doing before each long step.

mod install;
mod layers;
mod valkey;
mod vocabulary;

use std::process::{Command, ExitCode};

use anyhow::{Context, bail};

const USAGE: &str = "usage: cargo xtask <test|demo|bench|soak|layers|vocabulary>
  test   fmt check, the module layering, the public docs' vocabulary, clippy -D warnings,
         every test against real redis-server nodes, the macro's UI tests, the TLS tests
         over native-tls too, every feature combination of redlock-core linted, doctests
         (the README's snippets included) and rustdoc
  layers each library crate's module import graph, its cycles (none allowed) and, in
         redlock-core, imports against the layer order of ARCHITECTURE.md
  vocabulary
         the READMEs, the CHANGELOG's Unreleased section and the library crates' rustdoc
         checked for internal vocabulary (test ids, workload numbers, seeds, issues, hashes)
  demo   5 Redis nodes, 3 shop replicas, concurrent load, a SIGTERM hand-over
  bench  the seven workloads against 5 nodes, beside raw fred and redis-rs floors and rslock
         (args after --: --quick, --only sequential,contended)
  soak   RL-15, the randomized nemesis soak, then the validity-contract property test, each
         for about --minutes N (default 30; --seed S replays a run)";

fn main() -> ExitCode {
    let task = std::env::args().nth(1).unwrap_or_default();
    let result = match task.as_str() {
        "test" => test(),
        "demo" => demo(),
        "bench" => bench(),
        "soak" => soak(),
        "layers" => layers::check(&workspace_root(), true),
        "vocabulary" => vocabulary::check(&workspace_root()),
        _ => {
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        // One line: what failed (the step's own output is above it); no backtrace.
        Err(error) => {
            eprintln!("xtask {task}: FAILED: {error:#}");
            ExitCode::FAILURE
        }
    }
}

/// Prints what the next step does, so that a long build is never silent.
fn step(what: &str) {
    eprintln!("xtask: {what}");
}

/// Runs `cargo <args>` from the workspace root and fails if it fails.
fn cargo(args: &[&str]) -> anyhow::Result<()> {
    cargo_with_env(&[], args)
}

/// [`cargo`] with extra environment variables.
fn cargo_with_env(env: &[(&str, &str)], args: &[&str]) -> anyhow::Result<()> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    eprintln!("$ cargo {}", args.join(" "));
    let status = Command::new(cargo)
        .args(args)
        .envs(env.iter().copied())
        .current_dir(workspace_root())
        .status()
        .context("could not run cargo")?;
    if !status.success() {
        bail!("`cargo {}` ({status})", args.join(" "));
    }
    Ok(())
}

fn workspace_root() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(std::path::Path::to_path_buf)
        .unwrap_or_default()
}

/// The arguments after the task name, without a leading `--`.
fn task_args() -> Vec<String> {
    std::env::args().skip(2).filter(|a| a != "--").collect()
}

/// `cargo xtask demo`: builds the shop and the load driver (release), then runs the driver,
/// which starts the nodes and replicas and prints the results.
fn demo() -> anyhow::Result<()> {
    let server = install::redis_server()?;
    step(&format!("using {}", server.display()));
    step("building the shop and the demo driver (release; a few minutes on a fresh machine)");
    cargo(&["build", "--release", "--quiet", "-p", "shop", "-p", "demo"])?;
    cargo_with_env(
        &[("REDIS_SERVER_BIN", &server.to_string_lossy())],
        &["run", "--release", "--quiet", "-p", "demo"],
    )
}

/// `cargo xtask bench [-- args]`: the benchmark binary, built in release mode.
fn bench() -> anyhow::Result<()> {
    let server = install::redis_server()?;
    step(&format!("using {}", server.display()));
    step("building the benchmarks (release; a few minutes on a fresh machine)");
    cargo(&["build", "--release", "--quiet", "-p", "redlock-bench"])?;
    let extra = task_args();
    let mut args = vec!["run", "--release", "--quiet", "-p", "redlock-bench", "--"];
    args.extend(extra.iter().map(String::as_str));
    cargo(&args)
}

/// `cargo xtask soak [--minutes N] [--seed S]`: RL-15, then the validity-contract property
/// test, each for about N minutes (longer than in the normal test run), with their output
/// (seed, episodes, figures) shown.
fn soak() -> anyhow::Result<()> {
    let args = task_args();
    let value = |flag: &str| {
        args.iter()
            .position(|a| a == flag)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    let minutes = value("--minutes").unwrap_or_else(|| "30".into());
    let parsed = minutes
        .parse::<f64>()
        .with_context(|| format!("--minutes {minutes}: not a number"))?;
    if !(parsed.is_finite() && parsed > 0.0) {
        bail!("--minutes {minutes}: give a positive number of minutes");
    }
    let mut env = vec![("RL15_MINUTES", minutes.as_str())];
    let seed = value("--seed");
    if let Some(seed) = &seed {
        seed.parse::<u64>()
            .with_context(|| format!("--seed {seed}: not an unsigned integer"))?;
        env.push(("RL15_SEED", seed.as_str()));
    }
    let server = install::redis_server()?;
    step(&format!("using {}", server.display()));
    install::gcc()?;
    step(&format!("RL-15 soak for {minutes} min (built first)"));
    integration_test_shown(&env, "soak")?;
    // The validity-contract property test for about as long (550 steps take ~35 s in CI).
    let steps = format!("{:.0}", parsed * CONTRACT_STEPS_PER_MINUTE);
    let mut env = vec![("CONTRACT_STEPS", steps.as_str())];
    if let Some(seed) = &seed {
        env.push(("CONTRACT_SEED", seed.as_str()));
    }
    step(&format!("the validity contract, {steps} steps"));
    integration_test_shown(&env, "contract")
}

/// Runs one integration test of redlock-tests with `env`, its output shown.
fn integration_test_shown(env: &[(&str, &str)], target: &str) -> anyhow::Result<()> {
    cargo_with_env(
        env,
        &[
            "test",
            "-p",
            "redlock-tests",
            "--test",
            target,
            "--",
            "--nocapture",
        ],
    )
}

/// Steps of the validity-contract property test per minute of `cargo xtask soak`.
const CONTRACT_STEPS_PER_MINUTE: f64 = 900.0;

/// The integration tests that run one at a time (`faults` group in .config/nextest.toml).
const FAULT_TESTS: [&str; 2] = ["reliability", "soak"];

/// The integration test targets of redlock-tests but the UI tests (a step of their own).
fn integration_tests() -> anyhow::Result<Vec<String>> {
    let dir = workspace_root().join("tests/tests");
    let mut targets = Vec::new();
    for entry in std::fs::read_dir(&dir).with_context(|| format!("reading {}", dir.display()))? {
        let path = entry?.path();
        if path.extension().is_some_and(|ext| ext == "rs")
            && let Some(stem) = path.file_stem().and_then(|s| s.to_str())
            && stem != "macro_ui"
        {
            targets.push(stem.to_owned());
        }
    }
    targets.sort();
    Ok(targets)
}

/// `cargo clippy -D warnings` of redlock-core with every combination of its connection
/// features, `serde` and `metrics` alone and with all, and its unit tests with none.
fn feature_combinations() -> anyhow::Result<()> {
    const FEATURES: [&str; 4] = ["macros", "tls-rustls", "tls-native", "unix-sockets"];
    // `serde` (config/'s `Deserialize`) and `metrics` (telemetry.rs) touch no other
    // feature's code: each alone and all together, rather than doubling the combinations.
    // The workspace run has them on (redlock-tests turns them on), the no-feature run off.
    const INDEPENDENT: [&str; 2] = ["serde", "metrics"];
    let independent = INDEPENDENT.iter().map(|f| (*f).to_owned()).chain([format!(
        "{},{}",
        INDEPENDENT.join(","),
        FEATURES.join(",")
    )]);
    let combinations = (0..1u32 << FEATURES.len()).map(|mask| {
        let chosen: Vec<&str> = FEATURES
            .iter()
            .enumerate()
            .filter(|(i, _)| mask & (1 << i) != 0)
            .map(|(_, feature)| *feature)
            .collect();
        chosen.join(",")
    });
    for features in combinations.chain(independent) {
        if features.is_empty() {
            // Also the unit tests with no feature at all: the workspace's own run has TLS
            // (redlock-tests turns it on), where `rediss://` without TLS cannot be tested.
            cargo(&[
                "test",
                "--quiet",
                "-p",
                "redlock-core",
                "--no-default-features",
                "--lib",
            ])?;
        }
        cargo(&[
            "clippy",
            "--quiet",
            "-p",
            "redlock-core",
            "--no-default-features",
            "--features",
            &features,
            "--lib",
            "--",
            "-D",
            "warnings",
        ])?;
    }
    Ok(())
}

fn nextest_available() -> bool {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    Command::new(cargo)
        .args(["nextest", "--version"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// `cargo xtask test`: what CI runs. Every step that compiles runs before, never inside, a
/// step with a time limit: the macro's UI tests (trybuild builds its own copy of the
/// dependency tree) are a step of their own, without a limit, and leave the timed run.
fn test() -> anyhow::Result<()> {
    let server = install::redis_server()?;
    step(&format!("using {}", server.display()));
    install::gcc()?;
    step("checking formatting");
    cargo(&["fmt", "--all", "--", "--check"])?;
    step("the module layering (no import cycles, redlock-core's layer order)");
    layers::check(&workspace_root(), false)?;
    step("the public docs' vocabulary (no test ids, workload numbers, seeds, issues, hashes)");
    vocabulary::check(&workspace_root())?;
    step("clippy -D warnings (builds the workspace: several minutes on a fresh machine)");
    cargo(&[
        "clippy",
        "--workspace",
        "--all-targets",
        "--",
        "-D",
        "warnings",
    ])?;
    step(
        "the macro's UI tests (trybuild compiles its own copy of the dependencies: about 2 min on a fresh machine)",
    );
    cargo(&["test", "-p", "redlock-tests", "--test", "macro_ui"])?;
    step(
        "the benchmark as a smoke run (a debug build of every workload, --quick: its figures mean nothing; `cargo xtask bench` measures)",
    );
    cargo(&["run", "--quiet", "-p", "redlock-bench", "--", "--quick"])?;
    if nextest_available() {
        // nextest builds every test binary first, then runs each test in its own process
        // under the limits of .config/nextest.toml, which count run time only.
        step(
            "building the tests, then running them against real redis-server nodes (RL-15 alone takes 3 min)",
        );
        cargo(&[
            "nextest",
            "run",
            "--workspace",
            "--no-tests",
            "warn",
            "-E",
            "not binary(macro_ui)",
        ])?;
    } else {
        step(
            "cargo-nextest not found: running `cargo test` (no per-test time limit; install cargo-nextest for one)",
        );
        cargo(&[
            "test",
            "--workspace",
            "--exclude",
            "redlock-tests",
            "--lib",
            "--bins",
            "--tests",
        ])?;
        cargo(&["test", "-p", "redlock-tests", "--lib", "--bins"])?;
        for target in integration_tests()? {
            // As in .config/nextest.toml: the fault scenarios one at a time.
            let threads = if FAULT_TESTS.contains(&target.as_str()) {
                "1"
            } else {
                "2"
            };
            cargo(&[
                "test",
                "-p",
                "redlock-tests",
                "--test",
                &target,
                "--",
                "--test-threads",
                threads,
            ])?;
        }
    }
    install::openssl_dev()?;
    step("the TLS tests again, over native-tls (redlock-core's other TLS feature)");
    let native = [
        "-p",
        "redlock-tests",
        "--no-default-features",
        "--features",
        "tls-native",
        "--test",
        "tls",
    ];
    if nextest_available() {
        cargo(&[&["nextest", "run"][..], &native[..]].concat())?;
    } else {
        cargo(&[&["test"][..], &native[..]].concat())?;
    }
    valkey::test()?;
    step(
        "every combination of redlock-core's features compiles, clippy-clean; its unit tests with none",
    );
    feature_combinations()?;
    step("doctests");
    cargo(&["test", "--workspace", "--exclude", "readme", "--doc"])?;
    // Alone, so that its snippets build with the README's dependencies and no feature that
    // another workspace member turns on.
    step("the README's snippets and its Cargo.toml snippet (examples/readme)");
    cargo(&["test", "-p", "readme"])?;
    cargo(&["test", "-p", "readme", "--features", "tls", "--doc"])?;
    step("rustdoc -D warnings");
    cargo_with_env(
        &[("RUSTDOCFLAGS", "-D warnings")],
        &["doc", "--workspace", "--no-deps", "--quiet"],
    )?;
    eprintln!("xtask test: all checks passed");
    Ok(())
}
