//! `cargo xtask layers`: the module import graph of each library crate, its cycles, and
//! redlock-core's layer order.
//!
//! A module imports another when its code names it: a `crate::a::b`, `super::…` or `self::…`
//! path, a `use` group under one (`crate::a::{b, c}`), or a name the crate root re-exports
//! (`crate::Name` where `lib.rs` has `pub use a::{Name}`). Comments, doc links and the
//! `#[cfg(test)] mod tests` that ends a file are left out (a line is cut at its first `//`,
//! strings included: a `crate::` path after a URL on the same line is missed); an edge between a
//! folder module and one of its own children is not counted (the folder declares and re-exports
//! them), siblings are separate nodes. A cycle fails `cargo xtask test`.
//!
//! redlock-core's modules also keep an order: ARCHITECTURE.md's "redlock-core: layers" diagram
//! puts each top-level module in a layer, top first, and a module may import only modules of
//! its own layer or of a layer below. The diagram is read as it is written (see
//! [`layer_order`]); a module it does not place, a module it names that does not exist, and an
//! import of a higher layer fail the check.
//!
//! A layer named exactly `slices` ([`SLICES`]) is a layer of independent slices: a module under
//! one of its top-level modules may not import a module under another of them (a slice's own
//! children and lower layers stay allowed, and lower layers may not import a slice, as above).
//! In every other layer, siblings may import each other.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use anyhow::{Context, bail};

/// The crates whose layering is checked.
pub(crate) const CRATES: [&str; 7] = [
    "redlock-template",
    "redlock-core",
    "redlock-axum",
    "redlock-macros",
    "redlock-cli",
    "redlock-test",
    "model",
];

/// Module path (`""` for the root, `a::b`) → the modules it imports.
type Graph = BTreeMap<String, BTreeSet<String>>;

/// The crate whose layers ARCHITECTURE.md draws.
const LAYERED: &str = "redlock-core";

/// The heading of ARCHITECTURE.md's section whose diagram gives [`LAYERED`]'s layers.
const LAYERS_HEADING: &str = "## redlock-core: layers";

/// The name of the layer whose top-level modules are independent slices: none imports another.
const SLICES: &str = "slices";

/// Imports against the layer order that are known and allowed for now, as `(importing module,
/// imported module)`: an import of a higher layer, or a slice's import of another slice.
/// Temporary: each is to be moved to its layer (or the diagram changed),
/// and its entry dropped, by whoever owns the file.
const KNOWN_VIOLATIONS: &[(&str, &str)] = &[];

/// A layer of [`LAYERED`]: its name and its top-level modules.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Layer {
    name: String,
    modules: BTreeSet<String>,
}

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
            failed.push(format!("import cycles in {krate}"));
        }
        if krate == LAYERED {
            let architecture = root.join("ARCHITECTURE.md");
            let text = std::fs::read_to_string(&architecture)
                .with_context(|| format!("reading {}", architecture.display()))?;
            let layers = layer_order(&text)?;
            if verbose {
                for layer in &layers {
                    let modules: Vec<&str> = layer.modules.iter().map(String::as_str).collect();
                    println!("{krate}: layer {}: {}", layer.name, modules.join(", "));
                }
            }
            let problems = check_layers(&graph, &layers, KNOWN_VIOLATIONS);
            for problem in &problems {
                println!("{krate}: {problem}");
            }
            let allowed = allowed_violations(&graph, &layers, KNOWN_VIOLATIONS);
            for (from, to) in KNOWN_VIOLATIONS {
                if allowed.contains(&((*from).to_owned(), (*to).to_owned())) {
                    let what = if slice_to_slice(&layers, from, to) {
                        "is a slice importing another slice"
                    } else {
                        "imports a higher layer"
                    };
                    println!(
                        "{krate}: {from} -> {to} {what}: allowed for now (xtask/src/layers.rs, KNOWN_VIOLATIONS)"
                    );
                } else {
                    println!(
                        "{krate}: {from} -> {to} is allowed but no longer found: drop it from KNOWN_VIOLATIONS"
                    );
                }
            }
            println!(
                "{krate}: layer order ({} layers, from ARCHITECTURE.md): {}",
                layers.len(),
                if problems.is_empty() {
                    "kept".to_owned()
                } else {
                    format!(
                        "{} {}",
                        problems.len(),
                        if problems.len() == 1 {
                            "problem"
                        } else {
                            "problems"
                        }
                    )
                }
            );
            if !problems.is_empty() {
                failed.push(format!("the layer order of {krate} (ARCHITECTURE.md)"));
            }
        }
    }
    if !failed.is_empty() {
        bail!("{}", failed.join("; "));
    }
    Ok(())
}

/// The layers of ARCHITECTURE.md's diagram under [`LAYERS_HEADING`], top first.
///
/// The diagram is the first fenced block of that section. A line starting at the diagram's
/// left margin (its least indented line's column) opens a layer, named by its text up to the first run of two spaces; an indented line
/// continues the layer above; a line of `─` separates groups of layers. In a layer's text,
/// what is inside parentheses is a comment, and each `name.rs` or `name/` outside them is one
/// of its top-level modules.
fn layer_order(architecture: &str) -> anyhow::Result<Vec<Layer>> {
    let section = architecture
        .split_once(LAYERS_HEADING)
        .map(|(_, after)| after)
        .with_context(|| format!("ARCHITECTURE.md has no `{LAYERS_HEADING}` section"))?;
    let mut lines = section.lines().skip_while(|line| !line.starts_with("```"));
    lines
        .next()
        .with_context(|| format!("no diagram under `{LAYERS_HEADING}`"))?;
    let mut body = Vec::new();
    let mut closed = false;
    for line in lines {
        if line.starts_with("```") {
            closed = true;
            break;
        }
        let trimmed = line.trim();
        if !trimmed.is_empty() && !trimmed.starts_with('─') {
            body.push(line);
        }
    }
    let indent = |line: &str| line.len() - line.trim_start().len();
    let margin = body.iter().map(|line| indent(line)).min().unwrap_or(0);
    let mut layers: Vec<(String, String)> = Vec::new();
    for line in body {
        let trimmed = line.trim();
        if indent(line) > margin {
            let (_, text) = layers
                .last_mut()
                .with_context(|| format!("a diagram line before any layer: `{line}`"))?;
            text.push(' ');
            text.push_str(trimmed);
        } else {
            let (name, text) = trimmed.split_once("  ").unwrap_or((trimmed, ""));
            layers.push((name.trim().to_owned(), text.trim().to_owned()));
        }
    }
    if !closed {
        bail!("the diagram under `{LAYERS_HEADING}` is not closed");
    }
    if layers.is_empty() {
        bail!("the diagram under `{LAYERS_HEADING}` names no layer");
    }
    layers
        .into_iter()
        .map(|(name, text)| {
            let modules = layer_modules(&text)
                .with_context(|| format!("layer `{name}` in ARCHITECTURE.md"))?;
            Ok(Layer { name, modules })
        })
        .collect()
}

/// The `name.rs` and `name/` of a layer's text, outside parentheses.
fn layer_modules(text: &str) -> anyhow::Result<BTreeSet<String>> {
    let mut outside = String::new();
    let mut depth = 0usize;
    for c in text.chars() {
        match c {
            '(' => depth += 1,
            ')' => {
                depth = depth
                    .checked_sub(1)
                    .with_context(|| format!("a `)` without its `(` in `{text}`"))?;
            }
            _ if depth == 0 => outside.push(c),
            _ => {}
        }
    }
    if depth != 0 {
        bail!("a `(` left open in `{text}`");
    }
    let is_name = |name: &str| {
        !name.is_empty()
            && name
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
    };
    Ok(outside
        .split(|c: char| c.is_whitespace() || c == '+' || c == ',')
        .filter_map(|token| {
            token
                .strip_suffix(".rs")
                .or_else(|| token.strip_suffix('/'))
        })
        .filter(|name| is_name(name))
        .map(str::to_owned)
        .collect())
}

/// The top-level module of `module` (`a` for `a::b`).
fn top(module: &str) -> &str {
    module.split("::").next().unwrap_or(module)
}

/// Whether `from` and `to` are under two different top-level modules of the [`SLICES`] layer.
fn slice_to_slice(layers: &[Layer], from: &str, to: &str) -> bool {
    top(from) != top(to)
        && layers.iter().any(|layer| {
            layer.name == SLICES
                && layer.modules.contains(top(from))
                && layer.modules.contains(top(to))
        })
}

/// Every import of `graph` from a module of a layer to a module of a higher one, or from one
/// slice to another ([`slice_to_slice`]), as `(importing module, imported module)`.
fn violations(graph: &Graph, layers: &[Layer]) -> Vec<(String, String)> {
    let layer_of = |module: &str| {
        layers
            .iter()
            .position(|layer| layer.modules.contains(top(module)))
    };
    let mut found = Vec::new();
    for (module, imports) in graph {
        let Some(from) = layer_of(module) else {
            continue;
        };
        for import in imports {
            if layer_of(import).is_some_and(|to| to < from)
                || slice_to_slice(layers, module, import)
            {
                found.push((module.clone(), import.clone()));
            }
        }
    }
    found
}

/// The violations `known` allows ([`KNOWN_VIOLATIONS`] in the check).
fn allowed_violations(
    graph: &Graph,
    layers: &[Layer],
    known: &[(&str, &str)],
) -> BTreeSet<(String, String)> {
    violations(graph, layers)
        .into_iter()
        .filter(|(from, to)| known.contains(&(from.as_str(), to.as_str())))
        .collect()
}

/// What breaks the layer order: a module in no layer or in two, a layer's module that does not
/// exist, and each import of a higher layer or of another slice that `known` does not allow
/// ([`KNOWN_VIOLATIONS`] in the check).
fn check_layers(graph: &Graph, layers: &[Layer], known: &[(&str, &str)]) -> Vec<String> {
    let mut problems = Vec::new();
    let modules: BTreeSet<&str> = graph
        .keys()
        .filter(|module| !module.is_empty())
        .map(|module| top(module))
        .collect();
    for module in &modules {
        let placed: Vec<&str> = layers
            .iter()
            .filter(|layer| layer.modules.contains(*module))
            .map(|layer| layer.name.as_str())
            .collect();
        match placed.as_slice() {
            [_] => {}
            [] => problems.push(format!(
                "module {module} is in no layer of ARCHITECTURE.md's diagram: add it to its layer"
            )),
            many => problems.push(format!(
                "module {module} is in more than one layer of ARCHITECTURE.md's diagram: {}",
                many.join(", ")
            )),
        }
    }
    for layer in layers {
        for module in &layer.modules {
            if !modules.contains(module.as_str()) {
                problems.push(format!(
                    "layer {} of ARCHITECTURE.md names {module}, which is not a module",
                    layer.name
                ));
            }
        }
    }
    let layer_name = |module: &str| {
        layers
            .iter()
            .find(|layer| layer.modules.contains(top(module)))
            .map_or("", |layer| layer.name.as_str())
    };
    for (from, to) in violations(graph, layers) {
        if known.contains(&(from.as_str(), to.as_str())) {
            continue;
        }
        if slice_to_slice(layers, &from, &to) {
            problems.push(format!(
                "slice {from} -> {to}: a slice imports another slice"
            ));
        } else {
            problems.push(format!(
                "{from} ({}) imports {to} ({}), a higher layer",
                layer_name(&from),
                layer_name(&to)
            ));
        }
    }
    problems
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

    /// No import allowed across the layer order.
    const KNOWN: &[(&str, &str)] = &[];

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

    const DIAGRAM: &str = "# A\n\n## redlock-core: layers\n\nText.\n\n```\n top        a.rs (A, with b.rs in a comment)   c/ (mod, d\n            · e: more (nested) words)\n            f.rs + g.rs\n ───────────\n bottom two  h.rs (values\n            i.rs)   j.rs\n```\n\n```\n other  k.rs\n```\n";

    fn layers_of(layers: &[(&str, &[&str])]) -> Vec<Layer> {
        layers
            .iter()
            .map(|(name, modules)| Layer {
                name: (*name).to_owned(),
                modules: modules.iter().map(|m| (*m).to_owned()).collect(),
            })
            .collect()
    }

    #[test]
    fn the_diagram_is_read_top_first_without_its_comments() {
        let layers = layer_order(DIAGRAM).unwrap();
        assert_eq!(
            layers,
            layers_of(&[("top", &["a", "c", "f", "g"]), ("bottom two", &["h", "j"])])
        );
        assert!(layer_order("## redlock-core: layers\n```\n top  a.rs (open\n```\n").is_err());
        assert!(layer_order("## other\n```\n top  a.rs\n```\n").is_err());
    }

    #[test]
    fn architecture_md_draws_every_layer_of_redlock_core() {
        // Binds the diagram to the check: its layers, in order, and where a few modules are.
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
        let text = std::fs::read_to_string(root.join("ARCHITECTURE.md")).unwrap();
        let layers = layer_order(&text).unwrap();
        let names: Vec<&str> = layers.iter().map(|l| l.name.as_str()).collect();
        assert_eq!(
            names,
            ["handle", "recipes", "slices", "kernel", "node", "values"]
        );
        let layer_of = |module: &str| {
            layers
                .iter()
                .find(|l| l.modules.contains(module))
                .map(|l| l.name.as_str())
        };
        assert_eq!(layer_of("registry"), Some("handle"));
        assert_eq!(layer_of("leader"), Some("recipes"));
        assert_eq!(layer_of("semaphore"), Some("slices"));
        assert_eq!(layer_of("setup"), Some("slices"));
        assert_eq!(layer_of("kernel"), Some("kernel"));
        assert_eq!(layer_of("node"), Some("node"));
        assert_eq!(layer_of("keys"), Some("values"));
        // Words in the diagram's comments are not modules.
        assert_eq!(layer_of("scripts"), None);
        assert_eq!(layer_of("Inner"), None);
        // And every module of the crate is placed, each once.
        let graph = graph(&root.join(LAYERED).join("src")).unwrap();
        let problems = check_layers(&graph, &layers, KNOWN);
        assert!(
            problems.iter().all(|p| p.contains("imports")),
            "{problems:?}"
        );
    }

    #[test]
    fn an_import_of_a_higher_layer_fails_and_of_its_own_or_lower_does_not() {
        let layers = layers_of(&[("top", &["a", "b"]), ("middle", &["c"]), ("bottom", &["d"])]);
        let fine = graph_of(&[
            ("a", &["b", "c", "d"]),
            ("b", &["a"]),
            ("c", &["d", "c::x"]),
            ("c::x", &["d"]),
            ("d", &[]),
        ]);
        assert!(check_layers(&fine, &layers, KNOWN).is_empty());
        let wrong = graph_of(&[
            ("a", &[]),
            ("b", &[]),
            ("c", &[]),
            ("c::x", &["a"]),
            ("d", &["c::x"]),
        ]);
        assert_eq!(
            check_layers(&wrong, &layers, KNOWN),
            [
                "c::x (middle) imports a (top), a higher layer",
                "d (bottom) imports c::x (middle), a higher layer",
            ]
        );
    }

    #[test]
    fn a_slice_imports_no_other_slice_and_other_layers_keep_their_siblings() {
        let layers = layers_of(&[
            ("handle", &["h"]),
            ("slices", &["a", "b"]),
            ("kernel", &["k", "l"]),
        ]);
        let fine = graph_of(&[
            ("h", &["a", "b::x"]),
            ("a", &["a::x", "k"]),
            ("a::x", &["a::y", "l"]),
            ("a::y", &[]),
            ("b", &[]),
            ("b::x", &["k"]),
            ("k", &["l"]),
            ("l", &["k"]),
        ]);
        assert!(check_layers(&fine, &layers, KNOWN).is_empty());
        let wrong = graph_of(&[
            ("h", &[]),
            ("a", &["b"]),
            ("a::x", &[]),
            ("b", &[]),
            ("b::x", &["a::x"]),
            ("k", &["a"]),
            ("l", &[]),
        ]);
        assert_eq!(
            check_layers(&wrong, &layers, KNOWN),
            [
                "slice a -> b: a slice imports another slice",
                "slice b::x -> a::x: a slice imports another slice",
                "k (kernel) imports a (slices), a higher layer",
            ]
        );
        // Only a layer named exactly `slices` is one of slices.
        let named = layers_of(&[("slices two", &["a", "b"]), ("kernel", &["k"])]);
        assert!(check_layers(&wrong, &named, KNOWN)[0].starts_with("module h is in no layer"));
        assert!(
            !check_layers(&wrong, &named, KNOWN)
                .iter()
                .any(|p| p.contains("slice "))
        );
    }

    #[test]
    fn every_module_in_exactly_one_layer() {
        let layers = layers_of(&[("top", &["a", "gone"]), ("bottom", &["b", "a"])]);
        let graph = graph_of(&[
            ("", &[]),
            ("a", &[]),
            ("b", &[]),
            ("new", &[]),
            ("new::x", &[]),
        ]);
        let problems = check_layers(&graph, &layers, KNOWN);
        assert_eq!(problems.len(), 3, "{problems:?}");
        assert!(problems[0].starts_with("module a is in more than one layer"));
        assert!(problems[1].starts_with("module new is in no layer"));
        assert!(problems[2].contains("names gone, which is not a module"));
    }

    #[test]
    fn known_violations_are_allowed_by_name_only() {
        const KNOWN: &[(&str, &str)] = &[("tls", "connect")];
        let layers = layers_of(&[("handle", &["connect"]), ("values", &["tls", "error"])]);
        let graph = graph_of(&[
            ("connect", &[]),
            ("error", &["connect"]),
            ("tls", &["connect"]),
        ]);
        assert_eq!(
            check_layers(&graph, &layers, KNOWN),
            ["error (values) imports connect (handle), a higher layer"]
        );
        assert_eq!(
            allowed_violations(&graph, &layers, KNOWN),
            [("tls".to_owned(), "connect".to_owned())]
                .into_iter()
                .collect()
        );
    }

    #[test]
    fn a_known_violation_may_be_a_slice_importing_another() {
        const KNOWN: &[(&str, &str)] = &[("a", "b")];
        let layers = layers_of(&[("slices", &["a", "b", "c"])]);
        let graph = graph_of(&[("a", &["b"]), ("b", &[]), ("c", &["b"])]);
        assert_eq!(
            check_layers(&graph, &layers, KNOWN),
            ["slice c -> b: a slice imports another slice"]
        );
        assert_eq!(
            allowed_violations(&graph, &layers, KNOWN),
            [("a".to_owned(), "b".to_owned())].into_iter().collect()
        );
    }
}
