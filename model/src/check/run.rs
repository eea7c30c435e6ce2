//! Running one exploration and reading its result.

use std::time::{Duration, Instant};

use stateright::{Checker, HasDiscoveries, Model};

use super::config::Config;
use super::system::System;

/// What an exploration found.
#[derive(Debug)]
pub struct Verdict {
    /// The configuration's name.
    pub name: &'static str,
    /// States generated.
    pub states: usize,
    /// Distinct states.
    pub unique_states: usize,
    /// The longest path explored, in steps.
    pub max_depth: usize,
    /// How long it took.
    pub elapsed: Duration,
    /// Each property violated, with a readable trace of a shortest path to the violation.
    pub violations: Vec<(&'static str, String)>,
}

impl Verdict {
    /// One line: the name, the counts and the time.
    pub fn summary(&self) -> String {
        format!(
            "{}: {} states ({} distinct), depth {}, {:.1} s, {}",
            self.name,
            self.states,
            self.unique_states,
            self.max_depth,
            self.elapsed.as_secs_f64(),
            if self.violations.is_empty() {
                "every property holds".to_owned()
            } else {
                let names: Vec<&str> = self.violations.iter().map(|(name, _)| *name).collect();
                format!("violated: {}", names.join(", "))
            }
        )
    }
}

/// Explores every state of `config` (depth first, one state per class of states that differ
/// only in which node is which), on `threads` threads; with `stop_at_first`, stops at the
/// first property violated.
pub fn check(config: Config, threads: usize, stop_at_first: bool) -> Verdict {
    let name = config.name;
    let system = System::new(config);
    let started = Instant::now();
    let checker = system
        .clone()
        .checker()
        .threads(threads)
        .symmetry_fn(super::symmetry::representative)
        .finish_when(if stop_at_first {
            HasDiscoveries::Any
        } else {
            HasDiscoveries::All
        })
        .spawn_dfs()
        .join();
    let elapsed = started.elapsed();
    let mut violations: Vec<(&'static str, String)> = checker
        .discoveries()
        .into_iter()
        .map(|(property, path)| (property, system.trace(&path.into_vec())))
        .collect();
    violations.sort();
    Verdict {
        name,
        states: checker.state_count(),
        unique_states: checker.unique_state_count(),
        max_depth: checker.max_depth(),
        elapsed,
        violations,
    }
}
