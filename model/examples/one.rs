//! Explores the scenarios (of `scenarios::all`, `scenarios::deeper` and the foreign poller's)
//! whose name contains the first argument, printing each verdict and trace:
//! `cargo run --release -p redlock-model --example one -- "bare majority"`.

use redlock_model::check::scenarios::{self, Scenario};
use redlock_model::check::{Search, check};

fn main() {
    let only = std::env::args().nth(1).unwrap_or_default();
    let config = scenarios::foreign_poller();
    let poller = Scenario {
        witnesses: scenarios::witnesses(&config),
        config,
        rejects: None,
        depth_first: false,
    };
    let every = scenarios::all()
        .into_iter()
        .chain(scenarios::deeper())
        .chain([poller]);
    for scenario in every.filter(|s| s.config.name.contains(&only)) {
        let search = match scenario.rejects {
            Some(w) if !scenarios::WITNESSES.contains(&w) => {
                if scenario.depth_first {
                    Search::AnyViolation
                } else {
                    Search::FirstViolation
                }
            }
            _ => Search::Exhaustive,
        };
        let verdict = check(scenario.config.clone(), 2, search);
        println!("{}", verdict.summary());
        for (property, trace) in &verdict.violations {
            println!("  {property}:\n{trace}");
        }
    }
}
