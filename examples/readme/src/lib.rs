//! The root README's Rust snippets, compiled by `cargo test --doc` (run by `cargo xtask test`)
//! against the dependencies the README's `Cargo.toml` snippet lists, and no others: this
//! crate's own, which a test compares with the snippet.

#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
struct ReadmeSnippets;

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
}
