//! `cargo xtask test` and `cargo xtask demo`: the README's two commands; `cargo xtask bench`.

mod demo;

use std::process::Command;

use anyhow::{Context, bail};

fn main() -> anyhow::Result<()> {
    let task = std::env::args().nth(1).unwrap_or_default();
    match task.as_str() {
        "test" => test(),
        "demo" => demo::run(),
        "bench" => bench(),
        "soak" => soak(),
        _ => {
            eprintln!("usage: cargo xtask <test|demo|bench>");
            eprintln!(
                "  test  fmt check, clippy -D warnings, every test against real redis-server nodes"
            );
            eprintln!(
                "  demo  5 Redis nodes, 3 shop replicas, concurrent load, a SIGTERM hand-over"
            );
            eprintln!(
                "  bench W1–W5 against 5 nodes, beside a raw fred floor and rslock (args after --: --quick, --only W1,W3)"
            );
            eprintln!(
                "  soak  RL-15, the randomized nemesis soak (--minutes N, default 30; --seed S replays a run)"
            );
            std::process::exit(2);
        }
    }
}

/// Runs `cargo <args>` from the workspace root and fails if it fails.
pub(crate) fn cargo(args: &[&str]) -> anyhow::Result<()> {
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
        bail!("`cargo {}` failed: {status}", args.join(" "));
    }
    Ok(())
}

pub(crate) fn workspace_root() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(std::path::Path::to_path_buf)
        .unwrap_or_default()
}

/// `cargo xtask bench [-- args]`: the benchmark binary, built in release mode.
fn bench() -> anyhow::Result<()> {
    let server = redlock_tests::ensure_redis_server().map_err(anyhow::Error::msg)?;
    eprintln!("using {}", server.display());
    let extra: Vec<String> = std::env::args().skip(2).filter(|a| a != "--").collect();
    let mut args = vec!["run", "--release", "-p", "redlock-bench", "--"];
    args.extend(extra.iter().map(String::as_str));
    cargo(&args)
}

/// `cargo xtask soak [--minutes N] [--seed S]`: RL-15 for longer than the normal test run's
/// three minutes, with its output (seed, episodes, figures) shown.
fn soak() -> anyhow::Result<()> {
    let server = redlock_tests::ensure_redis_server().map_err(anyhow::Error::msg)?;
    eprintln!("using {}", server.display());
    let args: Vec<String> = std::env::args().skip(2).filter(|a| a != "--").collect();
    let value = |flag: &str| {
        args.iter()
            .position(|a| a == flag)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    let minutes = value("--minutes").unwrap_or_else(|| "30".into());
    minutes
        .parse::<f64>()
        .with_context(|| format!("--minutes {minutes}: not a number"))?;
    let mut env = vec![("RL15_MINUTES", minutes.as_str())];
    let seed = value("--seed");
    if let Some(seed) = &seed {
        seed.parse::<u64>()
            .with_context(|| format!("--seed {seed}: not an unsigned integer"))?;
        env.push(("RL15_SEED", seed.as_str()));
    }
    cargo_with_env(
        &env,
        &[
            "test",
            "-p",
            "redlock-tests",
            "--test",
            "soak",
            "--",
            "--nocapture",
        ],
    )
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

fn test() -> anyhow::Result<()> {
    let server = redlock_tests::ensure_redis_server().map_err(anyhow::Error::msg)?;
    eprintln!("using {}", server.display());
    cargo(&["fmt", "--all", "--", "--check"])?;
    cargo(&[
        "clippy",
        "--workspace",
        "--all-targets",
        "--",
        "-D",
        "warnings",
    ])?;
    // nextest runs each test in its own process and kills hung ones (.config/nextest.toml);
    // doctests are not run by nextest.
    if nextest_available() {
        cargo(&["nextest", "run", "--workspace", "--no-tests", "warn"])?;
        cargo(&["test", "--workspace", "--doc"])?;
    } else {
        eprintln!("cargo-nextest not found: running `cargo test` (no per-test time limit)");
        cargo(&["test", "--workspace"])?;
    }
    cargo_with_env(
        &[("RUSTDOCFLAGS", "-D warnings")],
        &["doc", "--workspace", "--no-deps", "--quiet"],
    )?;
    eprintln!("all checks passed");
    Ok(())
}
