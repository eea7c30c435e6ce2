//! `cargo xtask flaws`: known-bad variants of redlock-core's own code (not of a model), each
//! applied to its source in turn and caught by the simulation of the lock
//! (`tests/tests/simulation.rs`, its `a_flawed_lock_is_caught` test) at some seed.
//!
//! Each flaw is one text replacement in one file. The file is written back when the run of
//! that flaw ends, whether it passed, failed or panicked; only a killed process leaves a flaw
//! in place (`git diff` shows it).

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, bail, ensure};

/// `cargo` arguments that run the simulation of the lock (`tests/tests/simulation.rs`) with
/// nextest; filters and options follow.
pub(crate) const SIMULATION: [&str; 6] = [
    "nextest",
    "run",
    "-p",
    "redlock-tests",
    "--test",
    "simulation",
];

/// One known-bad variant: in `file`, `find` (found exactly once) becomes `replace`.
struct Flaw {
    name: &'static str,
    file: &'static str,
    find: &'static str,
    replace: &'static str,
}

const FLAWS: &[Flaw] = &[
    Flaw {
        name: "a quorum of half the nodes, not a majority",
        file: "redlock-core/src/timing.rs",
        find: "    nodes / 2 + 1\n",
        replace: "    nodes / 2\n",
    },
    Flaw {
        name: "a grant's validity counted from the decision, not from the first send",
        file: "redlock-core/src/timing.rs",
        find: "Some(_) => Ok(start.plus(ttl - drift)),",
        replace: "Some(_) => Ok(now.plus(ttl - drift)),",
    },
    Flaw {
        name: "an extension's validity counted from its replies, not from its first send",
        file: "redlock-core/src/kernel/lease/extend.rs",
        find: "timing::extended_until(start, ttl, drift)",
        replace: "timing::extended_until(Instant::now(), ttl, drift)",
    },
];

/// Puts a file's text back when dropped.
struct Restore {
    path: PathBuf,
    text: String,
}

impl Drop for Restore {
    fn drop(&mut self) {
        if let Err(error) = std::fs::write(&self.path, &self.text) {
            eprintln!(
                "xtask flaws: could not restore {}: {error} (restore it with git)",
                self.path.display()
            );
        }
    }
}

/// Runs the flaw test with nextest (`extra` added to its arguments): whether it passed.
fn nextest(root: &Path, extra: &[&str]) -> anyhow::Result<bool> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let status = Command::new(cargo)
        .args(SIMULATION)
        .args(extra)
        .args([
            "--run-ignored",
            "only",
            "-E",
            "test(a_flawed_lock_is_caught)",
        ])
        .current_dir(root)
        .status()
        .context("could not run cargo nextest")?;
    Ok(status.success())
}

/// Applies each flaw in turn and fails unless the simulation rejects it; first, the same
/// test must pass on the code as it is (so that a failure is the flaw's).
pub(crate) fn check(root: &Path) -> anyhow::Result<()> {
    crate::step("the flaw test on the code as it is (a control: it must pass)");
    ensure!(
        nextest(root, &[])?,
        "the simulation's flaw test fails without any flaw"
    );
    for flaw in FLAWS {
        let path = root.join(flaw.file);
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("reading {}", path.display()))?;
        ensure!(
            text.matches(flaw.find).count() == 1,
            "flaw `{}`: `{}` is not in {} exactly once (the code moved: update the flaw)",
            flaw.name,
            flaw.find,
            flaw.file
        );
        let flawed = text.replacen(flaw.find, flaw.replace, 1);
        let restore = Restore { path, text };
        std::fs::write(&restore.path, flawed)
            .with_context(|| format!("writing {}", restore.path.display()))?;
        crate::step(&format!("known-bad: {}", flaw.name));
        // Built first: a flaw that does not compile would fail the test for another reason.
        ensure!(
            nextest(root, &["--no-run"])?,
            "the known-bad variant `{}` does not build (update the flaw)",
            flaw.name
        );
        let passed = nextest(root, &["--no-fail-fast"])?;
        drop(restore);
        if passed {
            bail!(
                "the simulation did not catch the known-bad variant `{}` ({})",
                flaw.name,
                flaw.file
            );
        }
        eprintln!("caught (the seed is in the failure above): {}", flaw.name);
    }
    Ok(())
}
