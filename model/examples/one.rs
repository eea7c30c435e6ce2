//! Explores the scenarios (of `scenarios::all`, `scenarios::deeper` and the foreign poller's)
//! whose name contains the first argument, printing each verdict and trace:
//! `cargo run --release -p redlock-model --example one -- "bare majority"`.

use redlock_model::check::check;
use redlock_model::check::scenarios::{self, Scenario};

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
        let verdict = check(scenario.config.clone(), 2, scenario.search());
        println!("{}", verdict.summary());
        for (property, trace) in &verdict.violations {
            println!("  {property}:\n{trace}");
        }
    }
}
