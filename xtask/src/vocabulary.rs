//! `cargo xtask vocabulary`: the public docs speak to users, not to the project's own notes.
//!
//! Scans the workspace README, each library crate's README, the CHANGELOG's unreleased
//! section, the rustdoc (`///`, `//!`) and Markdown pages (redlock-core's guide) of the library
//! crates ([`CRATES`]), and the READMEs of `bench`, `tests` and `examples/demo`, for
//! internal vocabulary: test ids (`RL-05`), the benchmark's workload numbers (`W2`), seed
//! numbers (`seed 002`), issue numbers (`issue 15`, `#15`), commit hashes in prose, and "our
//! reliability notes" (not shipped). A doc names the scenario or the measurement instead ("the
//! delayed-restart test", "32 lockers on distinct resources").
//!
//! Markdown code is told apart from prose: a hash-like token inside a code span or a fenced
//! block is code (`9.2233720368548e+18`, a token's hex digits). Every other rule applies to
//! code too (the bench's `--only` takes the workloads' names).

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};

use crate::layers::CRATES;

/// Hits allowed in files that others are editing now; each entry is `(file, hit)`, the hit
/// compared without regard to case. Temporary: empty it once those files are reworded.
const ALLOWED: &[(&str, &str)] = &[];

/// One piece of internal vocabulary found in a public doc.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Hit {
    /// The file, relative to the workspace root, with `/` separators.
    pub(crate) file: String,
    /// 1-based.
    pub(crate) line: usize,
    /// The text that matched.
    pub(crate) text: String,
    /// What it is.
    pub(crate) rule: &'static str,
}

/// Scans the public docs under `root`, prints every hit as `file:line`, and fails on any.
pub(crate) fn check(root: &Path) -> anyhow::Result<()> {
    let mut hits = Vec::new();
    let mut scanned = 0;
    for (path, kind) in sources(root)? {
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("reading {}", path.display()))?;
        let file = relative(root, &path);
        hits.extend(scan(&file, &text, kind));
        scanned += 1;
    }
    let (allowed, hits): (Vec<Hit>, Vec<Hit>) =
        hits.into_iter().partition(|hit| is_allowed(ALLOWED, hit));
    for hit in &hits {
        println!("{}:{}: `{}` ({})", hit.file, hit.line, hit.text, hit.rule);
    }
    for (file, text) in ALLOWED {
        let used = allowed
            .iter()
            .any(|hit| hit.file == *file && hit.text.eq_ignore_ascii_case(text));
        if used {
            println!("{file}: `{text}` allowed for now (xtask/src/vocabulary.rs, ALLOWED)");
        } else {
            println!("{file}: `{text}` is allowed but no longer found: drop it from ALLOWED");
        }
    }
    println!(
        "vocabulary: {scanned} files, {} internal terms in the public docs",
        hits.len()
    );
    if !hits.is_empty() {
        bail!(
            "{} internal terms in the public docs (above, as file:line): name the scenario or the measurement instead",
            hits.len()
        );
    }
    Ok(())
}

/// Whether `allowed` lists `hit`'s file and text.
fn is_allowed(allowed: &[(&str, &str)], hit: &Hit) -> bool {
    allowed
        .iter()
        .any(|(file, text)| hit.file == *file && hit.text.eq_ignore_ascii_case(text))
}

fn relative(root: &Path, path: &Path) -> String {
    let relative = path.strip_prefix(root).unwrap_or(path);
    relative
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join("/")
}

/// How a file's public text is found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// The whole file is Markdown.
    Markdown,
    /// Markdown, only its unreleased sections (`## Unreleased`, `## [0.1.0] - Unreleased`):
    /// released entries keep their words.
    Changelog,
    /// Rust: its `///` and `//!` lines, as Markdown.
    Rust,
}

/// READMEs outside the library crates that the root README links to as documentation.
const OTHER_READMES: [&str; 3] = ["bench", "tests", "examples/demo"];

/// The files scanned: README.md, CHANGELOG.md, each library crate's README.md, its sources and
/// the Markdown files among them (redlock-core's guide pages), and [`OTHER_READMES`].
fn sources(root: &Path) -> anyhow::Result<Vec<(PathBuf, Kind)>> {
    let mut found = vec![
        (root.join("README.md"), Kind::Markdown),
        (root.join("CHANGELOG.md"), Kind::Changelog),
    ];
    for krate in CRATES {
        let readme = root.join(krate).join("README.md");
        if readme.is_file() {
            found.push((readme, Kind::Markdown));
        }
        let mut rust = Vec::new();
        files_with_extension(&root.join(krate).join("src"), "rs", &mut rust)?;
        rust.sort();
        found.extend(rust.into_iter().map(|path| (path, Kind::Rust)));
        let mut markdown = Vec::new();
        files_with_extension(&root.join(krate).join("src"), "md", &mut markdown)?;
        markdown.sort();
        found.extend(markdown.into_iter().map(|path| (path, Kind::Markdown)));
    }
    for dir in OTHER_READMES {
        let readme = root.join(dir).join("README.md");
        if readme.is_file() {
            found.push((readme, Kind::Markdown));
        }
    }
    Ok(found)
}

/// Every file under `dir` (recursively) whose extension is `extension`, added to `found`.
pub(crate) fn files_with_extension(
    dir: &Path,
    extension: &str,
    found: &mut Vec<PathBuf>,
) -> anyhow::Result<()> {
    for entry in std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let path = entry?.path();
        if path.is_dir() {
            files_with_extension(&path, extension, found)?;
        } else if path.extension().is_some_and(|e| e == extension) {
            found.push(path);
        }
    }
    Ok(())
}

/// Every hit in `text`, a file of `kind` named `file`.
pub(crate) fn scan(file: &str, text: &str, kind: Kind) -> Vec<Hit> {
    let mut hits = Vec::new();
    let mut markdown = Markdown::default();
    let mut in_unreleased = false;
    for (index, line) in text.lines().enumerate() {
        let prose = match kind {
            Kind::Markdown => Some(line),
            Kind::Changelog => {
                if let Some(heading) = line.strip_prefix("## ") {
                    // `## Unreleased`, or a version not released yet: `## [0.1.0] - Unreleased`.
                    in_unreleased = heading.to_ascii_lowercase().contains("unreleased");
                }
                in_unreleased.then_some(line)
            }
            Kind::Rust => doc_text(line),
        };
        let Some(prose) = prose else {
            // Not a doc line: whatever Markdown state it was in ends here.
            markdown = Markdown::default();
            continue;
        };
        for (text, rule) in markdown.line(prose) {
            hits.push(Hit {
                file: file.to_owned(),
                line: index + 1,
                text,
                rule,
            });
        }
    }
    hits
}

/// The Markdown of a `///` or `//!` line, `None` for any other line.
fn doc_text(line: &str) -> Option<&str> {
    let trimmed = line.trim_start();
    if trimmed.starts_with("////") {
        return None;
    }
    let rest = trimmed
        .strip_prefix("///")
        .or_else(|| trimmed.strip_prefix("//!"))?;
    Some(rest.strip_prefix(' ').unwrap_or(rest))
}

/// Where a Markdown text is between lines: inside a fenced block, or inside a code span that a
/// line break does not end.
#[derive(Debug, Default)]
struct Markdown {
    fenced: bool,
    in_span: bool,
}

/// A stretch of a line: its text, and whether it is code.
struct Piece<'a> {
    text: &'a str,
    code: bool,
}

impl Markdown {
    /// The hits in one line of Markdown.
    fn line(&mut self, line: &str) -> Vec<(String, &'static str)> {
        let trimmed = line.trim_start();
        if trimmed.starts_with("```") || trimmed.starts_with("~~~") {
            self.fenced = !self.fenced;
            self.in_span = false;
            return words(trimmed, true);
        }
        if self.fenced {
            return words(line, true);
        }
        if trimmed.is_empty() {
            self.in_span = false;
            return Vec::new();
        }
        let mut found = Vec::new();
        for piece in self.pieces(line) {
            found.extend(words(piece.text, piece.code));
        }
        found
    }

    /// `line` cut at its backticks into prose and code spans.
    fn pieces<'a>(&mut self, line: &'a str) -> Vec<Piece<'a>> {
        let mut pieces = Vec::new();
        let mut rest = line;
        loop {
            // A run of backticks opens a span closed by a run of the same length; a span left
            // open at the end of the line carries on to the next (one backtick, as is usual).
            match rest.find('`') {
                None => {
                    pieces.push(Piece {
                        text: rest,
                        code: self.in_span,
                    });
                    return pieces;
                }
                Some(at) => {
                    let ticks = rest[at..].bytes().take_while(|b| *b == b'`').count();
                    pieces.push(Piece {
                        text: &rest[..at],
                        code: self.in_span,
                    });
                    let after = &rest[at + ticks..];
                    if self.in_span {
                        self.in_span = false;
                        rest = after;
                        continue;
                    }
                    let close = "`".repeat(ticks);
                    match after.find(&close) {
                        Some(end) => {
                            let span = &after[..end];
                            pieces.push(Piece {
                                text: span,
                                code: true,
                            });
                            rest = &after[end + ticks..];
                        }
                        None => {
                            self.in_span = true;
                            rest = after;
                        }
                    }
                }
            }
        }
    }
}

fn is_word(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// The hits in one stretch of text: `code` when it is inside a code span or a fenced block.
fn words(text: &str, code: bool) -> Vec<(String, &'static str)> {
    let mut found = Vec::new();
    let lower = text.to_ascii_lowercase();
    let bytes = text.as_bytes();
    let word_before = |at: usize| at > 0 && is_word(char::from(bytes[at - 1]));
    let word_at = |at: usize| bytes.get(at).is_some_and(|b| is_word(char::from(*b)));
    let digits_at = |at: usize| {
        bytes[at.min(bytes.len())..]
            .iter()
            .take_while(|b| b.is_ascii_digit())
            .count()
    };

    // Test ids: RL-05, RL-15.
    for (at, _) in text.match_indices("RL-") {
        let digits = digits_at(at + 3);
        if !word_before(at) && digits > 0 {
            found.push((text[at..at + 3 + digits].to_owned(), "a test id"));
        }
    }
    // The bench's workload numbers: W1 … W7 (its `--only` takes the workloads' names).
    for (at, _) in text.match_indices('W') {
        let number = bytes.get(at + 1).copied();
        if !word_before(at) && matches!(number, Some(b'1'..=b'7')) && !word_at(at + 2) {
            found.push((text[at..at + 2].to_owned(), "a workload number"));
        }
    }
    // Seed and issue numbers: "seed 002", "issue 15", "issue #15".
    for (word, rule) in [("seed ", "a seed number"), ("issue ", "an issue number")] {
        for (at, _) in lower.match_indices(word) {
            let number = at + word.len();
            let hash = usize::from(bytes.get(number) == Some(&b'#'));
            let digits = digits_at(number + hash);
            if !word_before(at) && digits > 0 {
                found.push((text[at..number + hash + digits].to_owned(), rule));
            }
        }
    }
    // Bare issue references: "#15", "(#15)" ("issue #15" is found above).
    for (at, _) in text.match_indices('#') {
        let digits = digits_at(at + 1);
        let before = text[..at].chars().next_back();
        if digits > 0
            && !lower[..at].ends_with("issue ")
            && before.is_none_or(|c| c.is_whitespace() || c == '(' || c == '[')
            && !word_at(at + 1 + digits)
        {
            found.push((text[at..at + 1 + digits].to_owned(), "an issue number"));
        }
    }
    // The notes the tests come from, which are not shipped.
    for (at, _) in lower.match_indices("reliability notes") {
        found.push((
            text[at..at + "reliability notes".len()].to_owned(),
            "unshipped notes",
        ));
    }
    // Commit hashes, in prose only.
    if !code {
        found.extend(
            hashes(text)
                .into_iter()
                .map(|hash| (hash.to_owned(), "a commit hash")),
        );
    }
    found
}

/// Tokens of 7 to 40 lowercase hex digits, with at least one digit and one letter, that are
/// not part of a decimal number (`1.5e10`).
fn hashes(text: &str) -> Vec<&str> {
    let mut found = Vec::new();
    let mut start = None;
    let bytes = text.as_bytes();
    for (at, c) in text.char_indices().chain([(text.len(), ' ')]) {
        if is_word(c) {
            start.get_or_insert(at);
            continue;
        }
        let Some(from) = start.take() else { continue };
        let token = &text[from..at];
        let hex = token
            .bytes()
            .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
        let digit = token.bytes().any(|b| b.is_ascii_digit());
        let letter = token.bytes().any(|b| b.is_ascii_lowercase());
        let decimal = from >= 2 && bytes[from - 1] == b'.' && bytes[from - 2].is_ascii_digit();
        if (7..=40).contains(&token.len()) && hex && digit && letter && !decimal {
            found.push(token);
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hits(text: &str, kind: Kind) -> Vec<String> {
        scan("README.md", text, kind)
            .into_iter()
            .map(|hit| hit.text)
            .collect()
    }

    fn markdown(text: &str) -> Vec<String> {
        hits(text, Kind::Markdown)
    }

    #[test]
    fn internal_vocabulary_is_rejected() {
        assert_eq!(
            markdown("crashes and restarts (RL-05, four tests)"),
            ["RL-05"]
        );
        assert_eq!(markdown("a soak (RL-15): 0 overlaps"), ["RL-15"]);
        assert_eq!(markdown("| W1 N=3 | 187 |"), ["W1"]);
        assert_eq!(markdown("W1–W7 against 5 nodes"), ["W1", "W7"]);
        assert_eq!(markdown("W2 is CPU-bound; W3, W7."), ["W2", "W3", "W7"]);
        assert_eq!(markdown("Seed 002's modes"), ["Seed 002"]);
        assert_eq!(markdown("as in seed 001, now"), ["seed 001"]);
        assert_eq!(markdown("fixed in issue 15"), ["issue 15"]);
        assert_eq!(markdown("see Issue #15 and (#16)"), ["Issue #15", "#16"]);
        assert_eq!(
            markdown("scenarios of our Reliability Notes"),
            ["Reliability Notes"]
        );
        assert_eq!(
            markdown("Before the pipeline (1e4ebbb, same flags)"),
            ["1e4ebbb"]
        );
        assert_eq!(
            markdown("commit 0993cc0a1b2c3d4e5f60718293a4b5c6d7e8f901 fixed it"),
            ["0993cc0a1b2c3d4e5f60718293a4b5c6d7e8f901"]
        );
        // Ids are ids in code too.
        assert_eq!(markdown("the `RL-05` control"), ["RL-05"]);
        assert_eq!(markdown("```text\n// W2 figures\n```"), ["W2"]);
        assert_eq!(markdown("a workload (`W3`)"), ["W3"]);
    }

    #[test]
    fn ordinary_words_and_code_are_accepted() {
        for text in [
            "fails with `WRONGTYPE` and deletes nothing",
            "WRONGTYPE Operation against a key",
            "W = `RedlockBuilder::foreign_window`, T = 2 W",
            "a W7x or W8 or W0, HW1, W1a",
            "a 160-bit token: 40 hex digits",
            "seed printed; `--seed S` replays a run",
            "no issue with 3 nodes; this issue is known",
            "RL15_SEED=7 replays it; CURL-5",
            "# async fn run() {}",
            "the reliability tests assert",
            "1000000 tokens, 9.2233720368548e+18 in prose is a number",
            "ffffffff, deadbeef, defaced, 0x1e4ebbb9",
            "fred.rs#353",
            "1,024 entries; 10^6 tokens",
        ] {
            assert_eq!(markdown(text), Vec::<String>::new(), "{text}");
        }
    }

    #[test]
    fn hex_in_code_is_not_a_hash() {
        assert!(markdown("written as `9.2233720368548e+18`").is_empty());
        assert!(markdown("a digest such as `3f2a9c1b7d`").is_empty());
        assert!(markdown("```text\nSHA 3f2a9c1b7d0e\n```").is_empty());
        // A span across a line break is still code.
        assert!(markdown("the digest `3f2a\n9c1b7d0e8f` and on").is_empty());
        // A blank line ends it.
        assert_eq!(markdown("a `span\n\n3f2a9c1b7d0e8f"), ["3f2a9c1b7d0e8f"]);
    }

    #[test]
    fn workload_numbers_are_refused_in_code_too() {
        assert_eq!(markdown("(add `-- --only W3` for one workload)"), ["W3"]);
        assert!(markdown("(add `-- --only contended` for one workload)").is_empty());
        assert_eq!(markdown("runs --only W3 alone"), ["W3"]);
        assert_eq!(markdown("the `W3 hand-overs` figure"), ["W3"]);
    }

    #[test]
    fn rust_doc_lines_only() {
        let source = "//! Lock modes (seed 002).\n// RL-05 in a comment\nfn f() { let w = \"W2\"; }\n/// RL-14's token part.\n    /// `9.2233720368548e+18`\n//// RL-01 not a doc\n";
        let found = scan("redlock-core/src/mode.rs", source, Kind::Rust);
        let found: Vec<(usize, &str)> = found.iter().map(|h| (h.line, h.text.as_str())).collect();
        assert_eq!(found, [(1, "seed 002"), (4, "RL-14")]);
    }

    #[test]
    fn changelog_unreleased_section_only() {
        let changelog = "# Changelog\n\n## Unreleased\n- RL-05 passes\n\n## 0.1.0\n- seed 002's modes (RL-05)\n";
        assert_eq!(hits(changelog, Kind::Changelog), ["RL-05"]);
        let versioned = "# Changelog\n\n## [0.2.0] - Unreleased\n- RL-05 passes\n\n## [0.1.0] - 2027-01-04\n- RL-06\n";
        assert_eq!(hits(versioned, Kind::Changelog), ["RL-05"]);
    }

    #[test]
    fn the_allow_list_allows_only_its_file_and_term() {
        let hit = |file: &str, text: &str| Hit {
            file: file.to_owned(),
            line: 1,
            text: text.to_owned(),
            rule: "a workload number",
        };
        let allowed = [("redlock-core/src/options.rs", "W7")];
        let found = scan(
            "redlock-core/src/options.rs",
            "/// 64 lockers over 8 handles (W7).",
            Kind::Rust,
        );
        assert_eq!(found.len(), 1);
        assert!(found.iter().all(|hit| is_allowed(&allowed, hit)));
        assert!(is_allowed(
            &allowed,
            &hit("redlock-core/src/options.rs", "w7")
        ));
        assert!(!is_allowed(
            &allowed,
            &hit("redlock-core/src/mode.rs", "W7")
        ));
        assert!(!is_allowed(
            &allowed,
            &hit("redlock-core/src/options.rs", "W6")
        ));
        // The real list names only files that exist.
        let root = Path::new(env!("CARGO_MANIFEST_DIR"))
            .parent()
            .expect("the workspace root");
        for (file, _) in ALLOWED {
            assert!(root.join(file).is_file(), "{file}");
        }
    }
}
