//! The README's commands: `cargo xtask test`, `cargo xtask demo`, and `cargo xtask bench` and
//! `cargo xtask soak` for measurements; `cargo xtask layers` and `cargo xtask vocabulary` run
//! one check of `cargo xtask test` alone.
//!
//! xtask itself depends on nothing heavy, so that on a fresh machine it builds in seconds and
//! then says what it is doing before each long step.

mod cancel_safety;
mod flaws;
mod install;
mod layers;
mod package;
mod valkey;
mod vocabulary;

use std::process::{Command, ExitCode};

use anyhow::{Context, bail};

const USAGE: &str = "usage: cargo xtask <test|demo|bench|soak|layers|vocabulary|package|flaws>
  test   fmt check, the module layering, the public docs' vocabulary, clippy -D warnings,
         every test against real redis-server nodes, the macro's UI tests, the TLS tests
         over native-tls too, the server-facing tests again on Valkey 8.1 and on a mixed
         Redis/Valkey set, the protocol model checked, redlock-core's features linted, doctests (the README's snippets
         included), the published crates packaged, the demo, and rustdoc
  layers each library crate's module import graph, its cycles (none allowed) and, in
         redlock-core, imports against the layer order of ARCHITECTURE.md
  vocabulary
         the READMEs, the CHANGELOG's Unreleased section and the library crates' rustdoc
         checked for internal vocabulary (test ids, workload numbers, seeds, issues, hashes),
         and every public async fn's doc for a `# Cancel safety` section
  flaws  known-bad variants of redlock-core's own code, each applied in turn and caught by
         the simulation of the lock (the source is written back after each)
  package
         `cargo package` of every published crate (each built from its package), and each
         package's files checked: licence texts, README, nothing included from outside it
  demo   5 Redis nodes, 3 shop replicas, concurrent load, a SIGTERM hand-over
  bench  the seven workloads against 5 nodes, beside raw fred and redis-rs floors and rslock
         (args after --: --quick, --only sequential,contended)
  soak   RL-15, the randomized nemesis soak, then the validity-contract property test, each
         for about --minutes N (default 30; --seed S replays a run), then the simulation of
         the lock over 20 seeds per minute, then the protocol model explored further";

fn main() -> ExitCode {
    let task = std::env::args().nth(1).unwrap_or_default();
    let result = match task.as_str() {
        "test" => test(),
        "demo" => demo(),
        "bench" => bench(),
        "soak" => soak(),
        "layers" => layers::check(&workspace_root(), true),
        "flaws" => flaws::check(&workspace_root()),
        "vocabulary" => vocabulary::check(&workspace_root())
            .and_then(|()| cancel_safety::check(&workspace_root())),
        "package" => package::check(&workspace_root()),
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

/// Prints what the next step does, so that a long build is never silent, with the wall time
/// since the first step, so that a slow run shows where its time went.
fn step(what: &str) {
    static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    let elapsed = START
        .get_or_init(std::time::Instant::now)
        .elapsed()
        .as_secs();
    eprintln!("xtask [{}:{:02}]: {what}", elapsed / 60, elapsed % 60);
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

/// Where cargo puts its builds: `CARGO_TARGET_DIR`, or the workspace's `target`.
fn target_dir() -> std::path::PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map_or_else(|| workspace_root().join("target"), std::path::PathBuf::from)
}

/// Removes trybuild's copy of the dependencies (about 1.4 GB) once the macro's UI tests have
/// run: nothing after them uses it, and a CI machine's disk may not hold it beside every
/// other build of the test command.
fn forget_trybuild_builds() {
    let dir = target_dir().join("tests").join("trybuild");
    if let Err(error) = std::fs::remove_dir_all(&dir)
        && error.kind() != std::io::ErrorKind::NotFound
    {
        eprintln!("xtask: could not remove {}: {error}", dir.display());
    }
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
    integration_test_shown(&env, "contract")?;
    step("the simulation of the lock's own code over many more seeds");
    simulation_soak(parsed)?;
    step("the protocol model explored further (longer horizons, faults combined)");
    protocol_model(&["--ignored"])
}

/// The simulation's safety tests over `minutes` × [`SIM_SEEDS_PER_MINUTE`] seeds, with the
/// seeds per second they ran at.
fn simulation_soak(minutes: f64) -> anyhow::Result<()> {
    let seeds = ((minutes * SIM_SEEDS_PER_MINUTE).ceil() as u64).max(20);
    let seeds_text = seeds.to_string();
    // Seeds the test run has not tried: a base drawn from the clock, printed to replay.
    let base = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(1, |since| since.as_secs() % 1_000_000_000);
    let base_text = base.to_string();
    eprintln!(
        "simulation: seeds {base} to {} (SIM_SEED_BASE={base})",
        base + seeds - 1
    );
    cargo(&[&flaws::SIMULATION[..], &["--no-run"]].concat())?;
    let started = std::time::Instant::now();
    cargo_with_env(
        &[("SIM_SEEDS", &seeds_text), ("SIM_SEED_BASE", &base_text)],
        &[
            &flaws::SIMULATION[..],
            &[
                "-E",
                "test(no_two_holders) or test(fencing_tokens_increase)",
            ],
        ]
        .concat(),
    )?;
    let elapsed = started.elapsed().as_secs_f64();
    eprintln!(
        "simulation: {seeds} seeds in each of 2 tests, {elapsed:.0} s ({:.1} seeds/s, 60 simulated seconds each)",
        2.0 * seeds as f64 / elapsed
    );
    Ok(())
}

/// Seeds of the simulation per minute of `--minutes` (a seed takes about 0.7 s in a debug
/// build, and the two safety tests run side by side).
const SIM_SEEDS_PER_MINUTE: f64 = 20.0;

/// The protocol model's explorations (`model/tests/protocol.rs`), their verdicts shown;
/// `extra` goes to the test binary.
fn protocol_model(extra: &[&str]) -> anyhow::Result<()> {
    let mut args = vec!["test", "-p", "redlock-model", "--test", "protocol", "--"];
    args.extend_from_slice(extra);
    args.push("--nocapture");
    cargo(&args)
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

/// The integration tests that run one at a time under `cargo test`: the fault scenarios
/// (`faults` group in .config/nextest.toml), and the log captures, each test of which installs
/// its own subscriber (nextest runs every test in a process of its own anyway).
const FAULT_TESTS: [&str; 3] = ["reliability", "soak", "logging"];

/// The integration test targets of redlock-tests but the UI tests (a step of their own).
fn integration_tests() -> anyhow::Result<Vec<String>> {
    let dir = workspace_root().join("tests/tests");
    let mut targets = Vec::new();
    for entry in std::fs::read_dir(&dir).with_context(|| format!("reading {}", dir.display()))? {
        let path = entry?.path();
        if path.extension().is_some_and(|ext| ext == "rs")
            && let Some(stem) = path.file_stem().and_then(|s| s.to_str())
        {
            targets.push(stem.to_owned());
        }
    }
    targets.sort();
    Ok(targets)
}

/// redlock-core's features. Every `cfg` in its code names at most one of them, or only the
/// TLS pair ([`features_used_alone`] checks that), so a feature's code can only break with
/// that feature alone (a missing item), with none (dead code), or beside the other TLS
/// feature: those combinations and all together are linted, not the 64 of the power set.
const CORE_FEATURES: [&str; 7] = [
    "macros",
    "tls-rustls",
    "tls-native",
    "unix-sockets",
    "serde",
    "metrics",
    "model",
];

/// The two features a `cfg` may name together.
const TLS_PAIR: [&str; 2] = ["tls-rustls", "tls-native"];

/// Fails if a `cfg` in redlock-core names two features other than the TLS pair: the
/// combinations [`feature_combinations`] lints would no longer cover every build.
fn features_used_alone() -> anyhow::Result<()> {
    let mut sources = Vec::new();
    vocabulary::files_with_extension(
        &workspace_root().join("redlock-core/src"),
        "rs",
        &mut sources,
    )?;
    for path in sources {
        let text = std::fs::read_to_string(&path)?;
        if let Some((line, features)) = combined_features(&text) {
            bail!(
                "{}:{line}: a cfg naming {features:?} together; add the combination to xtask's feature_combinations",
                path.display(),
            );
        }
    }
    Ok(())
}

/// The first `cfg` (`#[cfg(..)]`, `cfg_attr(..)`, `cfg!(..)`) in `text` that names two
/// features other than the TLS pair, with its 1-based line and the features. A `cfg` is read
/// to its closing parenthesis, across lines.
fn combined_features(text: &str) -> Option<(usize, Vec<String>)> {
    let mut from = 0;
    while let Some((start, opener)) = ["cfg(", "cfg_attr(", "cfg!("]
        .iter()
        .filter_map(|opener| {
            text[from..]
                .find(opener)
                .map(|at| (from + at, opener.len()))
        })
        .min()
    {
        let body = start + opener;
        let mut depth = 1;
        let mut end = text.len();
        for (offset, c) in text[body..].char_indices() {
            match c {
                '(' => depth += 1,
                ')' => depth -= 1,
                _ => {}
            }
            if depth == 0 {
                end = body + offset;
                break;
            }
        }
        let mut features: Vec<&str> = text[body..end]
            .split("feature")
            .skip(1)
            .filter_map(|rest| rest.trim_start().strip_prefix('='))
            .filter_map(|rest| rest.trim_start().strip_prefix('"'))
            .filter_map(|rest| rest.split('"').next())
            .collect();
        features.sort_unstable();
        features.dedup();
        let tls_pair_only = features.iter().all(|f| TLS_PAIR.contains(f));
        if features.len() > 1 && !tls_pair_only {
            let line = text[..start].matches('\n').count() + 1;
            return Some((line, features.into_iter().map(str::to_owned).collect()));
        }
        from = body;
    }
    None
}

/// `cargo clippy -D warnings` of redlock-core with no feature, each feature alone, the two
/// TLS features together and all of them; its unit tests with none.
fn feature_combinations() -> anyhow::Result<()> {
    features_used_alone()?;
    let combinations = std::iter::once(String::new())
        .chain(CORE_FEATURES.iter().map(|f| (*f).to_owned()))
        .chain(["tls-rustls,tls-native".to_owned(), CORE_FEATURES.join(",")]);
    for features in combinations {
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
    step("every public async fn says what dropping its future does (`# Cancel safety`)");
    cancel_safety::check(&workspace_root())?;
    step("licences, bans and sources of every dependency (cargo deny, deny.toml)");
    let deny = install::cargo_deny()?;
    let args = [
        "check",
        "--hide-inclusion-graph",
        "licenses",
        "bans",
        "sources",
    ];
    eprintln!("$ cargo deny {}", args.join(" "));
    let status = Command::new(deny)
        .args(args)
        .current_dir(workspace_root())
        .status()
        .context("could not run cargo-deny")?;
    if !status.success() {
        bail!("`cargo deny {}` ({status})", args.join(" "));
    }
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
    cargo(&["test", "-p", "redlock-macro-ui", "--test", "macro_ui"])?;
    forget_trybuild_builds();
    step(
        "the benchmark as a smoke run (a debug build of every workload, --quick: its figures mean nothing; `cargo xtask bench` measures)",
    );
    cargo(&["run", "--quiet", "-p", "redlock-bench", "--", "--quick"])?;
    step(
        "the protocol model: every scenario explored by the model checker, every known-bad variant rejected (about 4 min)",
    );
    protocol_model(&[])?;
    if nextest_available() {
        // nextest builds every test binary first, then runs each test in its own process
        // under the limits of .config/nextest.toml, which count run time only.
        step(
            "building the tests, then running them against real redis-server nodes (RL-15 alone takes 2 min)",
        );
        cargo(&[
            "nextest",
            "run",
            "--workspace",
            "--no-tests",
            "warn",
            "-E",
            "not binary(macro_ui) and not binary(protocol)",
        ])?;
        step(
            "known-bad variants of redlock-core's own code, each caught by the simulation of the lock at some seed",
        );
        flaws::check(&workspace_root())?;
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
        "redlock-core with no feature, each alone, both TLS features and all: clippy-clean; its unit tests with none",
    );
    feature_combinations()?;
    step("doctests");
    cargo(&["test", "--workspace", "--exclude", "readme", "--doc"])?;
    // Alone, so that its snippets build with the README's dependencies and no feature that
    // another workspace member turns on.
    step("the README's snippets and its Cargo.toml snippet (examples/readme)");
    cargo(&["test", "-p", "readme"])?;
    cargo(&["test", "-p", "readme", "--features", "tls", "--doc"])?;
    step(
        "the published crates packaged, each built from its package alone, and their files checked (licences, README, nothing included from outside)",
    );
    package::check(&workspace_root())?;
    step(
        "the demo, as `cargo xtask demo` runs it but in a debug build: 5 nodes, 3 shop replicas, load, a SIGTERM hand-over; fails if its invariant breaks",
    );
    cargo(&["build", "--quiet", "-p", "shop", "-p", "demo"])?;
    cargo_with_env(
        &[("REDIS_SERVER_BIN", &server.to_string_lossy())],
        &["run", "--quiet", "-p", "demo"],
    )?;
    step("rustdoc -D warnings");
    cargo_with_env(
        &[("RUSTDOCFLAGS", "-D warnings")],
        &["doc", "--workspace", "--no-deps", "--quiet"],
    )?;
    step(
        "rustdoc as docs.rs builds it: every feature, each feature-gated item marked (`--cfg docsrs`, nightly features allowed)",
    );
    let mut docs_rs = vec!["doc", "--no-deps", "--quiet", "--all-features"];
    for krate in package::PUBLISHED.iter().filter(|k| **k != "redlock-cli") {
        docs_rs.extend(["-p", krate]);
    }
    cargo_with_env(
        &[
            ("RUSTC_BOOTSTRAP", "1"),
            ("RUSTDOCFLAGS", "--cfg docsrs -D warnings"),
        ],
        &docs_rs,
    )?;
    step("all checks passed");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{combined_features, features_used_alone};

    #[test]
    fn redlock_core_names_its_features_alone() {
        features_used_alone().unwrap_or_else(|e| panic!("{e:#}"));
    }

    #[test]
    fn a_cfg_naming_two_features_is_found_and_one_feature_or_the_tls_pair_is_not() {
        let allowed = [
            r#"#[cfg(feature = "metrics")]"#,
            r#"#[cfg(all(test, feature = "serde"))]"#,
            r#"#[cfg(all(unix, feature = "metrics"))]"#,
            r#"#[cfg(any(feature = "tls-rustls", feature = "tls-native"))]"#,
            r#"#[cfg(not(any(feature = "tls-rustls", feature = "tls-native")))]"#,
            r#"#[cfg_attr(docsrs, doc(cfg(feature = "serde")))]"#,
            "no cfg at all",
        ];
        for text in allowed {
            assert_eq!(combined_features(text), None, "{text}");
        }
        let refused = [
            (r#"#[cfg(all(feature = "serde", feature = "metrics"))]"#, 1),
            (
                "fn a() {}\n#[cfg(not(any(feature = \"macros\",\n feature = \"tls-native\")))]",
                2,
            ),
            (
                r#"let x = cfg!(all(feature="metrics", feature="serde"));"#,
                1,
            ),
            (
                r#"#[cfg(any(feature = "tls-rustls", feature = "tls-native", feature = "serde"))]"#,
                1,
            ),
        ];
        for (text, line) in refused {
            let found = combined_features(text).map(|(l, _)| l);
            assert_eq!(found, Some(line), "{text}");
        }
    }
}
