//! `cargo xtask layers`: the module import graph of each library crate, and its cycles.
//!
//! A module imports another when its code names it: a `crate::a::b`, `super::…` or `self::…`
//! path, a `use` group under one (`crate::a::{b, c}`), or a name the crate root re-exports
//! (`crate::Name` where `lib.rs` has `pub use a::{Name}`). Comments, doc links and the
//! `#[cfg(test)] mod tests` that ends a file are left out (a line is cut at its first `//`,
//! strings included: a `crate::` path after a URL on the same line is missed); an edge between a
//! folder module and one of its own children is not counted (the folder declares and re-exports
//! them), siblings are separate nodes. A cycle fails `cargo xtask test`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use anyhow::{Context, bail};

/// The crates whose layering is checked.
pub(crate) const CRATES: [&str; 5] = [
    "redlock-template",
    "redlock-core",
    "redlock-axum",
    "redlock-macros",
    "redlock-cli",
];

/// Module path (`""` for the root, `a::b`) → the modules it imports.
type Graph = BTreeMap<String, BTreeSet<String>>;

/// Checks every crate in [`CRATES`]; prints each graph when `verbose`.
pub(crate) fn check(root: &Path, verbose: bool) -> anyhow::Result<()> {
    let mut failed = Vec::new();
    for krate in CRATES {
        let graph = graph(&root.join(krate).join("src"))?;
        let cycles = cycles(&graph);
        if verbose {
            for (module, imports) in &graph {
                let name = if module.is_empty() { "(root)" } else { module };
                let imports: Vec<&str> = imports.iter().map(String::as_str).collect();
                println!("{krate}: {name} -> {}", imports.join(", "));
            }
        }
        let edges: usize = graph.values().map(BTreeSet::len).sum();
        println!(
            "{krate}: {} modules, {edges} imports, cycles: {}",
            graph.len(),
            if cycles.is_empty() {
                "none".to_owned()
            } else {
                format!("{cycles:?}")
            }
        );
        if !cycles.is_empty() {
            failed.push(krate);
        }
    }
    if !failed.is_empty() {
        bail!("import cycles in {}", failed.join(", "));
    }
    Ok(())
}

/// Every module of the crate whose sources are under `src`, with its source.
fn modules(src: &Path) -> anyhow::Result<BTreeMap<String, String>> {
    let mut found = BTreeMap::new();
    let mut dirs = vec![src.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in
            std::fs::read_dir(&dir).with_context(|| format!("reading {}", dir.display()))?
        {
            let path = entry?.path();
            if path.is_dir() {
                dirs.push(path);
                continue;
            }
            if path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let relative = path.strip_prefix(src)?.with_extension("");
            let mut parts: Vec<String> = relative
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            if matches!(
                parts.last().map(String::as_str),
                Some("mod" | "lib" | "main")
            ) {
                parts.pop();
            }
            let source = std::fs::read_to_string(&path)?;
            found.insert(parts.join("::"), code_only(&source));
        }
    }
    Ok(found)
}

/// `source` without comments and without the trailing test module.
fn code_only(source: &str) -> String {
    let source = match source.find("#[cfg(test)]\nmod tests") {
        Some(at) => &source[..at],
        None => source,
    };
    source
        .lines()
        .map(|line| match line.find("//") {
            Some(at) => &line[..at],
            None => line,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The paths a module's code names from `crate`, `super` or `self`, `use` groups expanded one
/// level.
fn paths(code: &str) -> Vec<Vec<String>> {
    let mut found = Vec::new();
    let bytes = code.as_bytes();
    for head in ["crate::", "super::", "self::"] {
        let mut from = 0;
        while let Some(at) = code[from..].find(head).map(|i| i + from) {
            from = at + head.len();
            let before = at.checked_sub(1).map(|i| bytes[i]);
            if before.is_some_and(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b':') {
                continue;
            }
            let mut segments = vec![head.trim_end_matches(':').to_owned()];
            let mut rest = &code[from..];
            loop {
                let name: String = rest
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                if name.is_empty() {
                    if let Some(group) = rest.strip_prefix('{') {
                        let group = &group[..group.find('}').unwrap_or(group.len())];
                        for item in group.split(',') {
                            let first = item.trim().split("::").next().unwrap_or("");
                            let first = first.split_whitespace().next().unwrap_or("");
                            if !first.is_empty() {
                                let mut path = segments.clone();
                                path.push(first.to_owned());
                                found.push(path);
                            }
                        }
                        segments.clear();
                    }
                    break;
                }
                rest = &rest[name.len()..];
                segments.push(name);
                match rest.strip_prefix("::") {
                    Some(more) => rest = more,
                    None => break,
                }
            }
            if !segments.is_empty() {
                found.push(segments);
            }
        }
    }
    found
}

/// The names the crate root re-exports (`pub use a::b::{X, Y as Z};`) and the module each
/// comes from.
fn reexports(root: &str, modules: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    let mut names = BTreeMap::new();
    let flat = root.replace('\n', " ");
    for statement in flat.split(';') {
        let Some(at) = statement
            .find("pub use ")
            .or_else(|| statement.find("pub(crate) use "))
        else {
            continue;
        };
        let path = statement[at..]
            .split_once("use ")
            .map_or("", |(_, p)| p)
            .trim();
        let (module, items) = match path.split_once("::{") {
            Some((module, items)) => (module, items.trim_end_matches('}')),
            None => match path.rsplit_once("::") {
                Some((module, item)) => (module, item),
                None => continue,
            },
        };
        let module = module.trim();
        if !modules.contains_key(module) {
            continue;
        }
        for item in items.split(',') {
            if let Some(name) = item.split_whitespace().last() {
                names.insert(name.to_owned(), module.to_owned());
            }
        }
    }
    names
}

/// The module a path from `module` names: its longest prefix that is a module.
fn resolve(module: &str, path: &[String], modules: &BTreeMap<String, String>) -> Option<String> {
    let mut base: Vec<String> = if module.is_empty() {
        Vec::new()
    } else {
        module.split("::").map(str::to_owned).collect()
    };
    let mut rest = path;
    match rest.first()?.as_str() {
        "crate" => {
            base.clear();
            rest = &rest[1..];
        }
        "self" => rest = &rest[1..],
        "super" => {
            while rest.first().map(String::as_str) == Some("super") {
                base.pop();
                rest = &rest[1..];
            }
        }
        _ => return None,
    }
    (0..=rest.len()).rev().find_map(|take| {
        let mut candidate = base.clone();
        candidate.extend(rest[..take].iter().cloned());
        let candidate = candidate.join("::");
        modules.contains_key(&candidate).then_some(candidate)
    })
}

/// The import graph of the crate under `src`.
fn graph(src: &Path) -> anyhow::Result<Graph> {
    let modules = modules(src)?;
    let root_reexports = reexports(modules.get("").map_or("", String::as_str), &modules);
    let mut graph = Graph::new();
    for (module, code) in &modules {
        let imports = graph.entry(module.clone()).or_default();
        for path in paths(code) {
            let target = match (path.first().map(String::as_str), path.get(1)) {
                (Some("crate"), Some(name)) if root_reexports.contains_key(name) => {
                    Some(root_reexports[name].clone())
                }
                _ => resolve(module, &path, &modules),
            };
            let Some(target) = target else { continue };
            let related = target.is_empty()
                || target == *module
                || target.starts_with(&format!("{module}::"))
                || module.starts_with(&format!("{target}::"));
            if !related {
                imports.insert(target);
            }
        }
    }
    Ok(graph)
}

/// The strongly connected components with more than one module (Tarjan).
fn cycles(graph: &Graph) -> Vec<Vec<String>> {
    struct State<'a> {
        graph: &'a Graph,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on_stack: BTreeSet<&'a str>,
        found: Vec<Vec<String>>,
    }
    fn visit<'a>(state: &mut State<'a>, node: &'a str) {
        let next = state.index.len();
        state.index.insert(node, next);
        state.low.insert(node, next);
        state.stack.push(node);
        state.on_stack.insert(node);
        let graph = state.graph;
        for target in graph.get(node).into_iter().flatten() {
            let target = target.as_str();
            if !state.index.contains_key(target) {
                visit(state, target);
                let low = state.low[node].min(state.low[target]);
                state.low.insert(node, low);
            } else if state.on_stack.contains(target) {
                let low = state.low[node].min(state.index[target]);
                state.low.insert(node, low);
            }
        }
        if state.low[node] == state.index[node] {
            let mut component = Vec::new();
            while let Some(member) = state.stack.pop() {
                state.on_stack.remove(member);
                component.push(member.to_owned());
                if member == node {
                    break;
                }
            }
            if component.len() > 1 {
                component.sort();
                state.found.push(component);
            }
        }
    }
    let mut state = State {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        found: Vec::new(),
    };
    for node in graph.keys() {
        if !state.index.contains_key(node.as_str()) {
            visit(&mut state, node);
        }
    }
    state.found
}

#[cfg(test)]
mod tests {
    use super::*;

    fn graph_of(edges: &[(&str, &[&str])]) -> Graph {
        edges
            .iter()
            .map(|(m, to)| {
                (
                    (*m).to_owned(),
                    to.iter().map(|t| (*t).to_owned()).collect(),
                )
            })
            .collect()
    }

    #[test]
    fn a_cycle_is_found_and_a_layering_is_not_one() {
        let layered = graph_of(&[("a", &["b"]), ("b", &["c"]), ("c", &[])]);
        assert!(cycles(&layered).is_empty());
        let cyclic = graph_of(&[("a", &["b"]), ("b", &["c"]), ("c", &["a"]), ("d", &["a"])]);
        assert_eq!(cycles(&cyclic), vec![vec!["a", "b", "c"]]);
    }

    #[test]
    fn paths_groups_and_comments() {
        let code = code_only(
            "use crate::a::{b, c::D};\n// crate::x\nlet v = super::e::f();\n#[cfg(test)]\nmod tests { use crate::z; }",
        );
        let found = paths(&code);
        assert!(found.contains(&vec!["crate".into(), "a".into(), "b".into()]));
        assert!(found.contains(&vec!["crate".into(), "a".into(), "c".into()]));
        assert!(found.contains(&vec!["super".into(), "e".into(), "f".into()]));
        assert!(
            !found
                .iter()
                .any(|p| p.contains(&"x".to_owned()) || p.contains(&"z".to_owned()))
        );
    }

    #[test]
    fn root_reexports_count_as_imports_of_their_module() {
        let modules: BTreeMap<String, String> = [
            (
                "",
                "pub use builder::{Builder, LIMIT};\npub use redlock::Redlock;",
            ),
            ("builder", "use crate::Redlock;"),
            ("redlock", "fn f() -> crate::Builder { todo!() }"),
        ]
        .into_iter()
        .map(|(m, s)| (m.to_owned(), s.to_owned()))
        .collect();
        let names = reexports(&modules[""], &modules);
        assert_eq!(names["LIMIT"], "builder");
        assert_eq!(names["Redlock"], "redlock");
    }
}
