//! The root README's Rust snippets, compiled by `cargo test --doc` (run by `cargo xtask test`)
//! against the dependencies the README's `Cargo.toml` snippet lists, and no others: this
//! crate's own, which a test compares with the snippet.
//!
//! The same goes for the pages of redlock-core's guide (some of which, such as the axum page,
//! cannot compile as redlock-core's own doctests) and for the crates' READMEs. Only
//! redlock-template's README uses a crate of its own, a dev-dependency here.

#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
struct ReadmeSnippets;

/// The guide's pages, one doctest item each (`redlock-core/src/guide/*.md`).
#[cfg(doctest)]
mod guide {
    #[doc = include_str!("../../../redlock-core/src/guide/lock.md")]
    struct Lock;
    #[doc = include_str!("../../../redlock-core/src/guide/leader_election.md")]
    struct LeaderElection;
    #[doc = include_str!("../../../redlock-core/src/guide/lock_modes.md")]
    struct LockModes;
    #[doc = include_str!("../../../redlock-core/src/guide/semaphore.md")]
    struct Semaphore;
    #[doc = include_str!("../../../redlock-core/src/guide/attribute.md")]
    struct Attribute;
    #[doc = include_str!("../../../redlock-core/src/guide/axum.md")]
    struct Axum;
    #[doc = include_str!("../../../redlock-core/src/guide/command_line.md")]
    struct CommandLine;
    #[doc = include_str!("../../../redlock-core/src/guide/handing_on.md")]
    struct HandingOn;
    #[doc = include_str!("../../../redlock-core/src/guide/configuration.md")]
    struct Configuration;
    #[doc = include_str!("../../../redlock-core/src/guide/tls.md")]
    struct Tls;
    #[doc = include_str!("../../../redlock-core/src/guide/metrics.md")]
    struct Metrics;
    #[doc = include_str!("../../../redlock-core/src/guide/how_it_works.md")]
    struct HowItWorks;
    #[doc = include_str!("../../../redlock-core/src/guide/fencing.md")]
    struct Fencing;
    #[doc = include_str!("../../../redlock-core/src/guide/guarantees.md")]
    struct Guarantees;
    #[doc = include_str!("../../../redlock-core/src/guide/other_clients.md")]
    struct OtherClients;
}

/// The crates' READMEs.
#[cfg(doctest)]
mod crate_readmes {
    #[doc = include_str!("../../../redlock-core/README.md")]
    struct Core;
    #[doc = include_str!("../../../redlock-axum/README.md")]
    struct Axum;
    #[doc = include_str!("../../../redlock-macros/README.md")]
    struct Macros;
    #[doc = include_str!("../../../redlock-template/README.md")]
    struct Template;
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // tests unwrap: a failure is the assertion

    use std::collections::BTreeMap;

    /// Each dependency's name and features.
    fn dependencies(manifest: &str) -> BTreeMap<String, Vec<String>> {
        let manifest: toml::Table = manifest.parse().unwrap();
        manifest["dependencies"]
            .as_table()
            .unwrap()
            .iter()
            .map(|(name, spec)| {
                let mut features: Vec<String> = spec
                    .get("features")
                    .and_then(toml::Value::as_array)
                    .map(|list| {
                        list.iter()
                            .filter_map(|f| f.as_str().map(str::to_owned))
                            .collect()
                    })
                    .unwrap_or_default();
                features.sort();
                (name.clone(), features)
            })
            .collect()
    }

    #[test]
    fn the_readme_cargo_toml_snippet_lists_exactly_these_dependencies() {
        let readme = include_str!("../../../README.md");
        let start = readme.find("```toml\n").unwrap() + "```toml\n".len();
        let snippet = &readme[start..][..readme[start..].find("```").unwrap()];
        let ours = dependencies(include_str!("../Cargo.toml"));
        assert_eq!(dependencies(snippet), ours);
        assert!(ours.contains_key("tokio") && ours.contains_key("redlock-axum"));
    }

    #[test]
    fn the_axum_guide_cargo_toml_snippet_lists_the_same_crates() {
        let guide = include_str!("../../../redlock-core/src/guide/axum.md");
        let start = guide.find("```toml\n").unwrap() + "```toml\n".len();
        let snippet = &guide[start..][..guide[start..].find("```").unwrap()];
        assert_eq!(
            dependencies(snippet),
            dependencies(include_str!("../Cargo.toml"))
        );
    }
}
