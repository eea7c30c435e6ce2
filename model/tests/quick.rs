#![allow(missing_docs)]
use redlock_model::check::{check, scenarios, Search};

#[test]
fn all() {
    let only = std::env::var("ONLY").unwrap_or_default();
    for s in scenarios::all() {
        if !s.config.name.contains(&only) { continue; }
        let search = if s.rejects.is_some() { Search::FirstViolation } else { Search::Exhaustive };
        let v = check(s.config.clone(), 2, search);
        println!("{} expect {:?}", v.summary(), s.rejects);
        for (p, t) in &v.violations { println!("{p}:\n{t}"); }
    }
}
