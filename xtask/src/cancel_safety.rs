//! Every public async fn of the library crates says what dropping its future does: a
//! `# Cancel safety` section in its doc comment, as tokio's own docs have. Run with the public
//! docs' vocabulary (`cargo xtask vocabulary`, and so `cargo xtask test`).
//!
//! A public async fn is a line starting (after indentation) with `pub async fn`, or a `pub fn`
//! whose signature returns `impl Future` (`impl std::future::Future` too) before its body
//! opens. Its doc comment is the `///` lines and attributes right above it.

use std::path::Path;

use anyhow::Context;

use crate::layers::CRATES;
use crate::vocabulary::files_with_extension;

/// The heading every public async fn's doc must have.
const HEADING: &str = "# Cancel safety";

/// One public async fn whose doc has no [`HEADING`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Missing {
    /// 1-based line of the `fn`.
    pub(crate) line: usize,
    /// The signature's first line, trimmed.
    pub(crate) signature: String,
}

/// Checks every `.rs` file of [`CRATES`]; prints each fn missing the section and fails on any.
pub(crate) fn check(root: &Path) -> anyhow::Result<()> {
    let mut missing = 0;
    let mut scanned = 0;
    for krate in CRATES {
        let mut files = Vec::new();
        files_with_extension(&root.join(krate).join("src"), "rs", &mut files)?;
        files.sort();
        for path in files {
            let text = std::fs::read_to_string(&path)
                .with_context(|| format!("reading {}", path.display()))?;
            let file = path
                .strip_prefix(root)
                .unwrap_or(&path)
                .display()
                .to_string();
            for fn_missing in scan(&text) {
                println!(
                    "{file}:{}: `{}` has no `{HEADING}` section in its doc",
                    fn_missing.line, fn_missing.signature
                );
                missing += 1;
            }
            scanned += 1;
        }
    }
    println!("cancel safety: {scanned} files, {missing} public async fns without `{HEADING}`");
    anyhow::ensure!(
        missing == 0,
        "say what dropping each future does: add a `{HEADING}` section to its doc"
    );
    Ok(())
}

/// The public async fns of `text` whose doc comment has no [`HEADING`].
pub(crate) fn scan(text: &str) -> Vec<Missing> {
    let lines: Vec<&str> = text.lines().collect();
    let mut found = Vec::new();
    for (index, line) in lines.iter().enumerate() {
        if !is_public_async(&lines[index..]) {
            continue;
        }
        let documented = lines[..index]
            .iter()
            .rev()
            .map(|l| l.trim_start())
            .take_while(|l| l.starts_with("///") || l.starts_with("#["))
            .any(|l| l.starts_with("///") && l.trim_start_matches('/').trim() == HEADING);
        if !documented {
            found.push(Missing {
                line: index + 1,
                signature: line.trim().to_owned(),
            });
        }
    }
    found
}

/// Whether the item starting at `lines[0]` is a public async fn: `pub async fn`, or a
/// `pub fn` returning `impl Future` before its body opens.
fn is_public_async(lines: &[&str]) -> bool {
    let first = lines[0].trim_start();
    if first.starts_with("pub async fn ") {
        return true;
    }
    if !first.starts_with("pub fn ") {
        return false;
    }
    let mut signature = String::new();
    for line in lines {
        let head = line.split('{').next().unwrap_or(line);
        signature.push_str(head);
        signature.push(' ');
        if line.contains('{') || line.trim_end().ends_with(';') {
            break;
        }
    }
    signature
        .split("->")
        .nth(1)
        .is_some_and(|returned| returned.contains("impl Future") || returned.contains("Future<"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_async_fn_without_the_section_is_found() {
        let text = "\
/// Locks.
///
/// # Cancel safety
/// Dropping it releases what it took.
pub async fn documented() {}

/// Locks, with nothing said about a drop.
pub async fn bare() {}

/// A future, undocumented.
#[must_use]
pub fn returned(&self)
    -> impl Future<Output = ()> + Send {
    async {}
}

/// Not public.
pub(crate) async fn private() {}

/// Not async.
pub fn plain() -> u32 { 1 }

/// # Cancel safety in prose is not the heading: `# Cancel safety`.
pub async fn heading_in_prose() {}
";
        let missing: Vec<usize> = scan(text).into_iter().map(|m| m.line).collect();
        assert_eq!(missing, [8, 12, 24]);
    }
}
