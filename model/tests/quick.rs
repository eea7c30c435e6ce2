#![allow(missing_docs)]
use redlock_model::check::{check, scenarios};

#[test]
fn all() {
    for s in scenarios::all() {
        let v = check(s.config.clone(), 2, s.rejects.is_some());
        println!("{}  [expect {:?}]", v.summary(), s.rejects);
        for (p, t) in &v.violations { if Some(*p) != s.rejects || true { println!("{p}:\n{t}"); } }
    }
}
