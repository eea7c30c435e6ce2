//! Running one exploration and reading its result.

use std::time::{Duration, Instant};

use stateright::{Checker, HasDiscoveries, Model};

use super::config::Config;
use super::system::{RUN_ENDS, System, WITNESSES};

/// How an exploration searches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Search {
    /// Every reachable state (up to node symmetry).
    Exhaustive,
    /// Breadth first until the first violation: a shortest counterexample.
    FirstViolation,
    /// Depth first until the first violation: any counterexample, in far less memory than
    /// [`Search::FirstViolation`] holds for a large space.
    AnyViolation,
}

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
    /// Each property violated, with a readable trace of a path to the violation.
    pub violations: Vec<(&'static str, String)>,
    /// Under fair scheduling, some run got to its end, where the liveness properties are
    /// evaluated (a model that never gets there would pass them vacuously).
    pub reached_end: bool,
    /// The witnesses some state satisfied ([`scenarios::witness`](super::scenarios::witness)).
    pub witnessed: Vec<&'static str>,
}

impl Verdict {
    /// One line: the name, the counts and the time.
    pub fn summary(&self) -> String {
        format!(
            "{}: {} states ({} distinct), depth {}, {:.1} s, {}; witnessed: {}",
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
            },
            self.witnessed.join(", ")
        )
    }
}

/// Explores `config` on `threads` threads.
///
/// `Exhaustive`: every reachable state, depth first, keeping one state per class of states
/// that differ only in which node is which (node symmetry). `FirstViolation`: until a
/// property is violated, breadth first so that the counterexample is a shortest one (depth
/// first under fair scheduling, where every path is long).
pub fn check(config: Config, threads: usize, search: Search) -> Verdict {
    let system = System::new(config);
    let started = Instant::now();
    let builder = system.clone().checker().threads(threads);
    match search {
        Search::Exhaustive => verdict(
            &system,
            &builder
                .symmetry_fn(super::symmetry::representative)
                .spawn_dfs()
                .join(),
            started,
        ),
        // Breadth first for a shortest counterexample, except under fair scheduling, where
        // every path is long (no step waits) and any one shows a liveness violation: depth
        // first finds one at once, where breadth first would hold every state of each depth.
        Search::FirstViolation if !system.config.fair => verdict(
            &system,
            &builder
                .finish_when(HasDiscoveries::AnyFailures)
                .spawn_bfs()
                .join(),
            started,
        ),
        Search::AnyViolation | Search::FirstViolation => verdict(
            &system,
            &builder
                .finish_when(HasDiscoveries::AnyFailures)
                .spawn_dfs()
                .join(),
            started,
        ),
    }
}

/// The verdict of a finished `checker`.
fn verdict(system: &System, checker: &impl Checker<System>, started: Instant) -> Verdict {
    let elapsed = started.elapsed();
    let discoveries = checker.discoveries();
    let reached_end = discoveries.contains_key(RUN_ENDS);
    let mut witnessed: Vec<&'static str> = discoveries
        .keys()
        .copied()
        .filter(|property| WITNESSES.contains(property))
        .collect();
    witnessed.sort_unstable();
    let mut violations: Vec<(&'static str, String)> = discoveries
        .into_iter()
        .filter(|(property, _)| !WITNESSES.contains(property))
        .map(|(property, path)| (property, system.trace(&path.into_vec())))
        .collect();
    violations.sort();
    Verdict {
        name: system.config.name,
        states: checker.state_count(),
        unique_states: checker.unique_state_count(),
        max_depth: checker.max_depth(),
        reached_end,
        witnessed,
        elapsed,
        violations,
    }
}
