//! The protocol model, explored: every scenario's design satisfies every property, and every
//! known-bad variant is rejected with the property it must violate. Each verdict prints one
//! line (states, depth, time); each violation a readable trace.
//!
//! `cargo xtask test` runs the scenarios sized for CI; `cargo xtask soak` also runs the
//! ignored test, the same scenarios with a longer horizon and faults combined.

#![allow(clippy::unwrap_used)] // tests unwrap: a failure is the assertion

use redlock_model::check::check;
use redlock_model::check::scenarios::{self, Scenario};

/// Threads the checker uses (the machine CI runs on has 2 cores).
const THREADS: usize = 2;

/// Runs `scenarios` and fails, with every unexpected verdict's trace, unless each design
/// holds and each known-bad variant violates its property.
fn explore(scenarios: Vec<Scenario>) {
    let mut failures = Vec::new();
    let mut total = 0;
    for scenario in scenarios {
        let search = scenario.search();
        let verdict = check(scenario.config.clone(), THREADS, search);
        total += verdict.unique_states;
        println!("{}", verdict.summary());
        let found: Vec<&str> = verdict.violations.iter().map(|(p, _)| *p).collect();
        let missing: Vec<&str> = scenario
            .witnesses
            .iter()
            .copied()
            .filter(|w| !verdict.witnessed.contains(w))
            .collect();
        let as_expected = match scenario.rejects {
            // Under fair scheduling, the liveness properties must have been evaluated; and
            // what the scenario is about must have been reached.
            None => {
                found.is_empty()
                    && (verdict.reached_end || !scenario.config.fair)
                    && missing.is_empty()
            }
            // A witness's negative control: no state satisfies it.
            Some(w) if scenarios::WITNESSES.contains(&w) => !verdict.witnessed.contains(&w),
            Some(property) => found.contains(&property),
        };
        if !missing.is_empty() {
            println!("  not witnessed: {}", missing.join(", "));
        }
        for (property, trace) in &verdict.violations {
            println!("  {property}, a shortest path to it:\n{trace}");
        }
        if !as_expected {
            failures.push(format!(
                "{}: expected {}, found {:?}",
                scenario.config.name,
                match scenario.rejects {
                    None => format!(
                        "every property to hold, and witnessed: {:?}",
                        scenario.witnesses
                    ),
                    Some(w) if scenarios::WITNESSES.contains(&w) =>
                        format!("`{w}` never witnessed"),
                    Some(p) => format!("`{p}` violated"),
                },
                found
            ));
        }
    }
    println!("{total} distinct states in all");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn every_design_holds_and_every_known_bad_variant_is_rejected() {
    explore(scenarios::all());
}

#[test]
#[ignore = "minutes: `cargo xtask soak` runs it"]
fn deeper_explorations_hold() {
    explore(scenarios::deeper());
}
