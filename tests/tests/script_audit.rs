//! A static audit of redlock-core's Lua scripts, read from their text when the test runs (no
//! server; milliseconds): every script that can grant a lock runs the quarantine check before it
//! writes anything, every script that deletes, converts or extends a holder's lock compares the
//! holder's token before it writes the lock key, and every `.lua` file is classified in
//! [`TABLE`], so that a new script is held to the rules of its class.
//!
//! (`redlock-core/src/node/scripts.rs` holds each submitted script to its declared `Effect` in a
//! unit test, and `tests/tests/effects.rs` runs them on a server; this audit reads the files
//! themselves, wherever they are, so a file that no declaration names is caught too.)
//!
//! # How the text is read
//!
//! - The files: every `.lua` file under `redlock-core/src`, found by walking it, and named by its
//!   file name alone (never by its folder: the scripts move between folders). Two files of one
//!   name are a problem.
//! - Comments are blanked (`--` to the end of the line, and long comments), keeping the line
//!   breaks, so line numbers are the file's; strings are kept.
//! - A *command* is `redis.call(..)` or `redis.pcall(..)`: its name is its first argument when
//!   that is a string literal, its *key* the text of its second, its *field* that of its third.
//!   A command is a *write* unless its name is one of [`READS`]; one named by a variable is a
//!   write. A write is a *lock write* unless its key is one of the bookkeeping names
//!   ([`BOOKKEEPING`]: queues, windows, streaks, listen flags, the quarantine's witness and
//!   marker, fencing counters, owner labels) or it writes the field (or member) `marker`
//!   ([`FIELD_WRITES`]: a waiter's own entry).
//! - A *helper* is a `local function` of `prelude.lua` (the text from its `local function` line
//!   to the next line at the margin opening with `local`). The dispatch script runs each script
//!   after the prelude (dispatch.lua: the prelude, then every script as a function body, then
//!   the loop), so a script's call of a helper stands, at the call's place, for whatever the
//!   helper runs and compares, through the helpers it calls in turn.
//! - The *quarantine check* is a call of `quarantine_check(..)`, or of a helper that calls it
//!   (directly or through others); its own writes (the witness and the marker) are the check's.
//! - A *token compare* is `== token` or `~= token`, an `HGET` or `HEXISTS` whose field is
//!   `token`, or a digest of the holder looked up among those given (`[redis.sha1hex(`,
//!   force_release.lua), in the script's text or in a helper it calls.
//! - Order is text order: a write in a local function defined above the check counts as before
//!   it, and a compare in one branch counts for the writes below it in every branch.
//!
//! # The rules
//!
//! 0. (every script) Readable: `redis.call` and `redis.pcall` are called where they are named
//!    (an alias would run commands this reading does not see).
//! 1. (grant, swap) Quarantine first: the script calls the quarantine check, at its top level
//!    (in no block, where it could be skipped), as `local q = quarantine_check(..)` followed by
//!    `if q then return q end` (its refusal returned), and no write comes before that call.
//! 2. (delete, extend, swap) Token first: the first lock write comes after a token compare.
//! 3. Every `.lua` file under `redlock-core/src` has a row in [`TABLE`].
//! 4. Every row of [`TABLE`] names a file that exists.
//! 5. The class fits the writes: a read-only script writes nothing, an "other" script writes no
//!    lock key, and a grant, swap, delete or extend script writes one (so that a script cannot
//!    leave rules 1 and 2 by a class that does not fit it).

#![allow(clippy::unwrap_used)] // tests unwrap: a failure is the assertion

use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

use redlock_tests::lua::{inside_a_name, strip_comments};

/// What a script may do to a lock, which fixes the rules it is held to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Class {
    /// Writes a lock key, a mode entry or a slot for a new holder: rules 1 and 5.
    Grant,
    /// Both a grant and a delete: a new token takes the place of a compared one (rules 1, 2, 5).
    Swap,
    /// Deletes or converts a holder's lock (`DEL`, `HDEL`, an overwrite, a shorter ttl):
    /// rules 2 and 5.
    Delete,
    /// Lengthens a holder's lock: rules 2 and 5.
    Extend,
    /// Writes nothing: rule 5.
    ReadOnly,
    /// Writes bookkeeping keys or a waiter's own entry only, never a lock key: rule 5.
    Other,
    /// The batch loop, which runs three scripts' short forms inline (`Inline` in
    /// node/scripts.rs): its grant (`set`) only in a branch taken for a call with no
    /// quarantine argument (`na == 2`: the pipeline sends that form only with the quarantine
    /// off), and any other lock write after a token compare (rule 2).
    Inline,
}

impl Class {
    fn name(self) -> &'static str {
        match self {
            Self::Grant => "grant",
            Self::Swap => "swap",
            Self::Delete => "delete",
            Self::Extend => "extend",
            Self::ReadOnly => "read-only",
            Self::Other => "other",
            Self::Inline => "inline",
        }
    }
}

/// Every `.lua` file of redlock-core, by file name: its class, and why.
const TABLE: &[(&str, Class, &str)] = &[
    (
        "acquire.lua",
        Class::Grant,
        "SET NX PX of each lock key, all or none",
    ),
    (
        "set_nx.lua",
        Class::Grant,
        "SET NX PX GET of the lock key: the node's own command, in a batch",
    ),
    (
        "acquire_queued.lua",
        Class::Grant,
        "SET of a free key or of the one reserved for this waiter",
    ),
    (
        "acquire_mode.lua",
        Class::Grant,
        "HSET of a holder's entry (drops expired entries too)",
    ),
    (
        "acquire_permit.lua",
        Class::Grant,
        "SET (NX) of a semaphore's slot",
    ),
    (
        "resume.lua",
        Class::Swap,
        "the detached token swapped for a fresh one (SET KEEPTTL, HDEL + HSET)",
    ),
    ("release.lua", Class::Delete, "compare-and-DEL of each key"),
    (
        "release_handover.lua",
        Class::Delete,
        "compare-and-DEL, then a reservation SET for the longest waiter",
    ),
    (
        "release_mode.lua",
        Class::Delete,
        "HDEL of the holder's entry, PEXPIREAT down to the latest left",
    ),
    (
        "release_slots.lua",
        Class::Delete,
        "compare-and-DEL of each key, waking its listeners",
    ),
    (
        "force_release.lua",
        Class::Delete,
        "DEL or HDEL of the holders whose digests the operator named",
    ),
    (
        "keep.lua",
        Class::Delete,
        "the token overwritten by a kept mark (the minimum hold's release)",
    ),
    (
        "downgrade.lua",
        Class::Delete,
        "the holder's entry converted to a weaker mode (HSET)",
    ),
    (
        "extend.lua",
        Class::Extend,
        "compare-and-PEXPIRE of every key, all or none",
    ),
    (
        "extend_permit.lua",
        Class::Extend,
        "compare-and-PEXPIRE of a permit's slot; its stored number of permits kept as long",
    ),
    (
        "extend_mode.lua",
        Class::Extend,
        "the holder's entry given a later expiry (HSET, PEXPIREAT)",
    ),
    (
        "inspect.lua",
        Class::ReadOnly,
        "an operator's read of a resource",
    ),
    (
        "force_read.lua",
        Class::ReadOnly,
        "the holders' digests, read before a force-release",
    ),
    ("noop.lua", Class::ReadOnly, "the pipeline's barrier"),
    (
        "dispatch.lua",
        Class::Inline,
        "the batch loop: runs the scripts, and set_nx.lua's and release.lua's short forms inline",
    ),
    (
        "prelude.lua",
        Class::Other,
        "the shared helpers, followed at each call; writes only the quarantine's keys",
    ),
    (
        "quarantine.lua",
        Class::Other,
        "the quarantine check alone (witness and marker)",
    ),
    (
        "leave.lua",
        Class::Other,
        "removes the waiter's own marker (ZREM or HDEL), no holder's",
    ),
    (
        "fence.lua",
        Class::Other,
        "the fencing counter, floor and window",
    ),
    (
        "owner.lua",
        Class::Other,
        "a label key beside the lock, after a token compare",
    ),
];

/// Commands that write no key (reads, and `PUBLISH`): any other is taken for a write.
const READS: &[&str] = &[
    "get",
    "mget",
    "strlen",
    "exists",
    "type",
    "ttl",
    "pttl",
    "expiretime",
    "pexpiretime",
    "hget",
    "hmget",
    "hgetall",
    "hkeys",
    "hvals",
    "hexists",
    "hlen",
    "hstrlen",
    "zcard",
    "zcount",
    "zrange",
    "zrangebyscore",
    "zscore",
    "zrank",
    "scard",
    "sismember",
    "smembers",
    "llen",
    "lrange",
    "time",
    "info",
    "publish",
];

/// The names the scripts (and the prelude's helpers) give the keys of a lock's bookkeeping: a
/// write to one of them writes no lock key.
const BOOKKEEPING: &[&str] = &[
    "window_key",
    "streak_key",
    "queue_key",
    "alive_key",
    "listen_key",
    "witness_key",
    "marker_key",
    "counter_key",
    "floor_key",
    "owner_key",
];

/// Commands whose third argument is a field or a member: with `marker` there, they write a
/// waiter's own entry, not a holder's.
const FIELD_WRITES: &[&str] = &["hset", "hsetnx", "hdel", "zrem", "srem", "sadd"];

/// The prelude's helper that is the quarantine check.
const QUARANTINE: &str = "quarantine_check";

// ---------------------------------------------------------------------------------------------
// The files

/// Every `.lua` file under a folder, by file name.
#[derive(Debug, Clone)]
struct Sources {
    /// The text of each file, by its file name.
    files: BTreeMap<String, String>,
    /// One problem per file name that more than one file has.
    duplicates: Vec<String>,
}

impl Sources {
    /// Read now from `redlock-core/src`. A file moved between the listing and its read (the
    /// scripts are moved around) is read again from a fresh listing.
    fn read() -> Self {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../redlock-core/src");
        let mut attempt = 0;
        loop {
            match Self::read_from(&root) {
                Ok(sources) => return sources,
                Err(e) if e.kind() == io::ErrorKind::NotFound && attempt < 10 => {
                    attempt += 1;
                    std::thread::sleep(Duration::from_millis(50));
                }
                Err(e) => panic!("reading the scripts under {}: {e}", root.display()),
            }
        }
    }

    fn read_from(root: &Path) -> io::Result<Self> {
        fn walk(dir: &Path, out: &mut Vec<PathBuf>) -> io::Result<()> {
            for entry in std::fs::read_dir(dir)? {
                let path = entry?.path();
                if path.is_dir() {
                    walk(&path, out)?;
                } else if path.extension().is_some_and(|e| e == "lua") {
                    out.push(path);
                }
            }
            Ok(())
        }
        let mut paths = Vec::new();
        walk(root, &mut paths)?;
        paths.sort();
        let mut by_name: BTreeMap<String, Vec<PathBuf>> = BTreeMap::new();
        let mut files = BTreeMap::new();
        for path in paths {
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            files.insert(name.clone(), std::fs::read_to_string(&path)?);
            by_name.entry(name).or_default().push(path);
        }
        let duplicates = by_name
            .iter()
            .filter(|(_, paths)| paths.len() > 1)
            .map(|(name, paths)| {
                let shown: Vec<String> = paths
                    .iter()
                    .map(|p| p.strip_prefix(root).unwrap_or(p).display().to_string())
                    .collect();
                format!(
                    "{name}: more than one file of this name under redlock-core/src: {}",
                    shown.join(", ")
                )
            })
            .collect();
        Ok(Self { files, duplicates })
    }
}

// ---------------------------------------------------------------------------------------------
// Reading Lua text (comments stripped by `redlock_tests::lua`)

/// Whether `s` starts with a character that continues a name.
fn continues_a_name(s: &str) -> bool {
    s.starts_with(|c: char| c.is_ascii_alphanumeric() || c == '_')
}

/// The line (from 1) of byte `at` of `code`.
fn line_of(code: &str, at: usize) -> usize {
    1 + code[..at].matches('\n').count()
}

/// The arguments of the call whose `(` is at `open`, split at its own commas (trimmed), and
/// the offset of its `)`; `None` when it is not closed.
fn arguments(code: &str, open: usize) -> Option<(Vec<&str>, usize)> {
    let bytes = code.as_bytes();
    let (mut depth, mut quote, mut start, mut args) = (0usize, None::<u8>, open + 1, vec![]);
    let mut i = open;
    while i < bytes.len() {
        let b = bytes[i];
        match quote {
            Some(_) if b == b'\\' => i += 1,
            Some(q) if b == q => quote = None,
            Some(_) => {}
            None => match b {
                b'"' | b'\'' => quote = Some(b),
                b'(' | b'[' | b'{' => depth += 1,
                b')' | b']' | b'}' => {
                    depth -= 1;
                    if depth == 0 {
                        args.push(code[start..i].trim());
                        return Some((args, i));
                    }
                }
                b',' if depth == 1 => {
                    args.push(code[start..i].trim());
                    start = i + 1;
                }
                _ => {}
            },
        }
        i += 1;
    }
    None
}

/// How many blocks (`function`, `if`, `do`, `repeat`, closed by `end` or `until`) are open at
/// byte `at` of `code` (`while .. do` and `for .. do` open one, at their `do`).
fn depth(code: &str, at: usize) -> i64 {
    let bytes = &code.as_bytes()[..at];
    let (mut depth, mut quote, mut i) = (0i64, None::<u8>, 0);
    while i < bytes.len() {
        let b = bytes[i];
        match quote {
            Some(_) if b == b'\\' => i += 1,
            Some(q) if b == q => quote = None,
            Some(_) => {}
            None if b == b'"' || b == b'\'' => quote = Some(b),
            None if b.is_ascii_alphabetic() || b == b'_' => {
                let start = i;
                while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_') {
                    i += 1;
                }
                if start == 0 || bytes[start - 1] != b'.' {
                    match &code[start..i] {
                        "function" | "if" | "do" | "repeat" => depth += 1,
                        "end" | "until" => depth -= 1,
                        _ => {}
                    }
                }
                continue;
            }
            None => {}
        }
        i += 1;
    }
    depth
}

// ---------------------------------------------------------------------------------------------
// What a piece of Lua does

/// One command a piece of Lua runs.
#[derive(Debug, Clone)]
struct Command {
    at: usize,
    text: String,
    /// Lowercase; `None` when a variable names it.
    name: Option<String>,
    key: String,
    field: String,
}

impl Command {
    fn writes(&self) -> bool {
        self.name
            .as_deref()
            .is_none_or(|name| !READS.contains(&name))
    }

    fn writes_lock(&self) -> bool {
        // A waiter's own entry: the field (or member) `marker` of a command that writes one.
        let waiters_own = self.field == "marker"
            && self
                .name
                .as_deref()
                .is_none_or(|name| FIELD_WRITES.contains(&name));
        self.writes() && !BOOKKEEPING.contains(&self.key.as_str()) && !waiters_own
    }

    fn compares_token(&self) -> bool {
        matches!(self.name.as_deref(), Some("hget" | "hexists")) && self.field == "token"
    }
}

/// What a piece of Lua does itself, in text order.
#[derive(Debug, Clone, Default)]
struct Facts {
    commands: Vec<Command>,
    /// The helpers it calls: where, and which.
    calls: Vec<(usize, String)>,
    /// Its token compares: where, and its text.
    compares: Vec<(usize, String)>,
    /// `redis.call` or `redis.pcall` not called where named: where.
    aliases: Vec<usize>,
}

/// Reads `code` (comments stripped), calling helpers among `helpers`.
fn facts(code: &str, helpers: &BTreeSet<String>) -> Facts {
    let mut out = Facts::default();
    for (at, _) in code.match_indices("redis.") {
        if inside_a_name(code, at) {
            continue;
        }
        let rest = &code[at + "redis.".len()..];
        let Some(after) = rest
            .strip_prefix("pcall")
            .or_else(|| rest.strip_prefix("call"))
        else {
            continue; // redis.sha1hex, redis.error_reply, ...: no command
        };
        if continues_a_name(after) {
            continue;
        }
        let open = code.len() - after.trim_start().len();
        let parsed = after
            .trim_start()
            .starts_with('(')
            .then(|| arguments(code, open))
            .flatten();
        let Some((args, close)) = parsed else {
            out.aliases.push(at);
            continue;
        };
        let name = args.first().and_then(|a| {
            let quoted = a.len() >= 2
                && (a.starts_with('"') && a.ends_with('"')
                    || a.starts_with('\'') && a.ends_with('\''));
            quoted.then(|| a[1..a.len() - 1].to_ascii_lowercase())
        });
        let command = Command {
            at,
            text: code[at..=close].to_owned(),
            name,
            key: args.get(1).copied().unwrap_or("").to_owned(),
            field: args.get(2).copied().unwrap_or("").to_owned(),
        };
        if command.compares_token() {
            out.compares.push((at, command.text.clone()));
        }
        out.commands.push(command);
    }
    for pattern in ["== token", "~= token", "[redis.sha1hex("] {
        for (at, _) in code.match_indices(pattern) {
            if !continues_a_name(&code[at + pattern.len()..]) || pattern.ends_with('(') {
                out.compares.push((at, pattern.to_owned()));
            }
        }
    }
    for helper in helpers {
        for (at, _) in code.match_indices(helper.as_str()) {
            let after = &code[at + helper.len()..];
            if !inside_a_name(code, at)
                && after.trim_start().starts_with('(')
                && !code[..at].trim_end().ends_with("function")
            {
                out.calls.push((at, helper.clone()));
            }
        }
    }
    out.compares.sort();
    out.calls.sort();
    out
}

/// The prelude's helpers, each with what it does itself.
#[derive(Debug)]
struct Helpers {
    facts: BTreeMap<String, Facts>,
}

impl Helpers {
    /// A helper is the prelude's text from its `local function name(` line to the next line at
    /// the margin opening with `local` (a helper or a table), or the end.
    fn parse(prelude: &str) -> Self {
        let code = strip_comments(prelude);
        let mut bodies = BTreeMap::<String, String>::new();
        let mut current: Option<String> = None;
        for line in code.lines() {
            if let Some(rest) = line.strip_prefix("local function ") {
                let name = rest.split('(').next().unwrap().trim().to_owned();
                current = Some(name.clone());
                bodies.entry(name).or_default();
            } else if line.starts_with("local ") {
                current = None;
            }
            if let Some(name) = &current {
                let body = bodies.get_mut(name).unwrap();
                body.push_str(line);
                body.push('\n');
            }
        }
        let names: BTreeSet<String> = bodies.keys().cloned().collect();
        let facts = bodies
            .iter()
            .map(|(name, body)| (name.clone(), facts(body, &names)))
            .collect();
        Self { facts }
    }

    fn names(&self) -> BTreeSet<String> {
        self.facts.keys().cloned().collect()
    }

    /// Whether `helper` calls a helper for which `wanted` holds, through any chain of helpers.
    fn reaches(&self, helper: &str, wanted: &dyn Fn(&str, &Facts) -> bool) -> bool {
        let mut seen = BTreeSet::new();
        let mut todo = vec![helper.to_owned()];
        while let Some(name) = todo.pop() {
            if !seen.insert(name.clone()) {
                continue;
            }
            let Some(facts) = self.facts.get(&name) else {
                continue;
            };
            if wanted(&name, facts) {
                return true;
            }
            todo.extend(facts.calls.iter().map(|(_, h)| h.clone()));
        }
        false
    }

    /// Whether a call of `helper` is the quarantine check.
    fn is_the_check(&self, helper: &str) -> bool {
        self.reaches(helper, &|name, _| name == QUARANTINE)
    }

    /// Whether a call of `helper` compares a token.
    fn compares(&self, helper: &str) -> bool {
        self.reaches(helper, &|_, facts| !facts.compares.is_empty())
    }

    /// Adds to `out` the writes `helper` runs, through every helper it calls, each placed at
    /// `at` (the script's call) and shown with the chain `via`.
    fn writes(
        &self,
        helper: &str,
        at: usize,
        via: &str,
        in_check: bool,
        chain: &mut Vec<String>,
        out: &mut Vec<Write>,
    ) {
        if chain.iter().any(|h| h == helper) {
            return; // recursion
        }
        let Some(facts) = self.facts.get(helper) else {
            return;
        };
        let in_check = in_check || helper == QUARANTINE;
        chain.push(helper.to_owned());
        for command in facts.commands.iter().filter(|c| c.writes()) {
            out.push(Write {
                at,
                text: command.text.clone(),
                via: via.to_owned(),
                lock: command.writes_lock(),
                in_check,
            });
        }
        for (_, inner) in &facts.calls {
            let via = format!("{via} > {inner}()");
            self.writes(inner, at, &via, in_check, chain, out);
        }
        chain.pop();
    }
}

/// One write a script runs, itself or through a helper.
#[derive(Debug)]
struct Write {
    /// The script's byte: the command's, or the call of the helper that runs it.
    at: usize,
    text: String,
    /// The chain of helpers it runs through (`fence_read()`), empty for the script's own.
    via: String,
    lock: bool,
    /// Run by the quarantine check itself (its witness and marker).
    in_check: bool,
}

impl Write {
    fn show(&self, code: &str) -> String {
        let line = line_of(code, self.at);
        if self.via.is_empty() {
            format!("line {line}: `{}`", self.text)
        } else {
            format!("line {line}: `{}` (through {})", self.text, self.via)
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The rules

/// The problems of the script `name`, of `class`, whose text is `text`: one line each, naming
/// the script, its class and the rule it breaks.
fn check_script(name: &str, class: Class, text: &str, helpers: &Helpers) -> Vec<String> {
    let code = strip_comments(text);
    let own = facts(&code, &helpers.names());
    let mut problems = Vec::new();
    let mut problem = |rule: &str, detail: String| {
        problems.push(format!("{name} ({}): {rule}: {detail}", class.name()));
    };

    for &at in &own.aliases {
        problem(
            "rule 0 (readable)",
            format!(
                "line {}: redis.call or redis.pcall not called where it is named",
                line_of(&code, at)
            ),
        );
    }

    // Every write, the script's own and its helpers', in text order.
    let mut writes: Vec<Write> = own
        .commands
        .iter()
        .filter(|c| c.writes())
        .map(|c| Write {
            at: c.at,
            text: c.text.clone(),
            via: String::new(),
            lock: c.writes_lock(),
            in_check: false,
        })
        .collect();
    for (at, helper) in &own.calls {
        let in_check = helpers.is_the_check(helper);
        helpers.writes(
            helper,
            *at,
            &format!("{helper}()"),
            in_check,
            &mut Vec::new(),
            &mut writes,
        );
    }
    writes.sort_by_key(|w| w.at);
    let mut compares = own.compares.clone();
    compares.extend(
        own.calls
            .iter()
            .filter(|(_, helper)| helpers.compares(helper))
            .map(|(at, helper)| (*at, format!("{helper}()"))),
    );
    compares.sort();

    if matches!(class, Class::Grant | Class::Swap) {
        const RULE: &str = "rule 1 (quarantine first)";
        match own.calls.iter().find(|(_, h)| helpers.is_the_check(h)) {
            None => problem(
                RULE,
                format!(
                    "no call of {QUARANTINE}(), directly or through a prelude helper: a grant \
                     must be refused while the node is quarantined"
                ),
            ),
            Some((at, helper)) => {
                let line = line_of(&code, *at);
                if let Some(guard) = guard_problem(&code, *at, helper) {
                    problem(RULE, format!("line {line}: {guard}"));
                }
                if let Some(write) = writes.iter().find(|w| !w.in_check && w.at < *at) {
                    problem(
                        RULE,
                        format!(
                            "{} writes before the quarantine check ({helper}() at line {line})",
                            write.show(&code)
                        ),
                    );
                }
            }
        }
    }

    if matches!(class, Class::Delete | Class::Extend | Class::Swap) {
        const RULE: &str = "rule 2 (token compared first)";
        if let Some(write) = writes.iter().find(|w| w.lock) {
            match compares.first() {
                None => problem(
                    RULE,
                    format!(
                        "{} writes the lock key, and the script compares no token \
                         (`== token`, `~= token`, HGET of the field `token`, a digest lookup)",
                        write.show(&code)
                    ),
                ),
                Some((at, what)) if write.at < *at => problem(
                    RULE,
                    format!(
                        "{} writes the lock key before the first token compare (`{what}` at \
                         line {})",
                        write.show(&code),
                        line_of(&code, *at)
                    ),
                ),
                Some(_) => {}
            }
        }
    }

    if class == Class::Inline {
        for write in writes.iter().filter(|w| w.lock) {
            let line = line_of(&code, write.at);
            if write.text.contains("\"set\"") {
                // The branch it runs in: the nearest `if` or `elseif` above it.
                let branch = code
                    .lines()
                    .take(line)
                    .collect::<Vec<_>>()
                    .into_iter()
                    .rev()
                    .find(|l| {
                        l.trim_start().starts_with("if ") || l.trim_start().starts_with("elseif ")
                    });
                if !branch.is_some_and(|b| b.contains("na == 2")) {
                    problem(
                        "rule 1 (quarantine first)",
                        format!(
                            "{} grants outside a branch for the short form (`na == 2`, no \
                             quarantine argument)",
                            write.show(&code)
                        ),
                    );
                }
            } else {
                // Every other write is guarded on its own line (`if value == token then ...`):
                // a compare anywhere above it, in another branch, does not count.
                let start = code[..write.at].rfind('\n').map_or(0, |i| i + 1);
                let guard = &code[start..write.at];
                if !(guard.contains("== token then") || guard.contains("~= token then")) {
                    problem(
                        "rule 2 (token compared first)",
                        format!(
                            "{} writes the lock key without a token compare guarding it on \
                             its line",
                            write.show(&code)
                        ),
                    );
                }
            }
        }
    }

    const FIT: &str = "rule 5 (the class fits the writes)";
    match class {
        Class::Inline => {}
        Class::ReadOnly => {
            if let Some(write) = writes.first() {
                problem(
                    FIT,
                    format!("{} writes, in a read-only script", write.show(&code)),
                );
            }
        }
        Class::Other => {
            if let Some(write) = writes.iter().find(|w| w.lock) {
                problem(
                    FIT,
                    format!(
                        "{} writes a lock key: classify it grant, swap, delete or extend",
                        write.show(&code)
                    ),
                );
            }
        }
        Class::Grant | Class::Swap | Class::Delete | Class::Extend => {
            if !writes.iter().any(|w| w.lock) {
                problem(
                    FIT,
                    "writes no lock key: classify it read-only or other".to_owned(),
                );
            }
        }
    }
    problems
}

/// What is wrong with the quarantine check called at `at` (a call of `helper`): `None` when it
/// is at the script's top level, bound (`local q = helper(..)`) and its refusal returned by the
/// next line (`if q then return q end`).
fn guard_problem(code: &str, at: usize, helper: &str) -> Option<String> {
    if depth(code, at) != 0 {
        return Some(format!(
            "{helper}() is called inside a block, where it can be skipped"
        ));
    }
    let start = code[..at].rfind('\n').map_or(0, |i| i + 1);
    let end = code[at..].find('\n').map_or(code.len(), |i| at + i);
    let bound = code[start..end]
        .trim()
        .strip_prefix("local ")
        .and_then(|l| l.split_once(" = "))
        .filter(|(_, call)| call.starts_with(&format!("{helper}(")) && call.ends_with(')'))
        .map(|(name, _)| name.trim());
    let Some(name) = bound else {
        return Some(format!(
            "{helper}()'s answer is not bound (`local q = {helper}(..)`), so its refusal is not returned"
        ));
    };
    let guard = format!("if {name} then return {name} end");
    let next = code[end..].lines().map(str::trim).find(|l| !l.is_empty());
    (next != Some(guard.as_str()))
        .then(|| format!("{helper}() is not followed by `{guard}`: its refusal is not returned"))
}

/// Every problem of `sources` against `table`.
fn audit(sources: &Sources, table: &[(&str, Class, &str)]) -> Vec<String> {
    let mut problems = sources.duplicates.clone();
    let Some(prelude) = sources.files.get("prelude.lua") else {
        problems.push(
            "prelude.lua: not found under redlock-core/src, so no helper can be followed"
                .to_owned(),
        );
        return problems;
    };
    let helpers = Helpers::parse(prelude);
    if !helpers.facts.contains_key(QUARANTINE) {
        problems.push(format!(
            "prelude.lua: defines no {QUARANTINE}(), so no grant can pass rule 1"
        ));
    }
    let mut rows: BTreeMap<&str, Class> = BTreeMap::new();
    for &(name, class, _) in table {
        if rows.insert(name, class).is_some() {
            problems.push(format!("{name}: more than one row in the table"));
        }
        if !sources.files.contains_key(name) {
            problems.push(format!(
                "{name} ({}): rule 4 (every listed script exists): no such file under \
                 redlock-core/src: drop its row, or rename it",
                class.name()
            ));
        }
    }
    for (name, text) in &sources.files {
        match rows.get(name.as_str()) {
            Some(&class) => problems.extend(check_script(name, class, text, &helpers)),
            None => problems.push(format!(
                "{name}: rule 3 (every script classified): not in the table: add a row (grant, \
                 swap, delete, extend, read-only or other) with a one-line reason"
            )),
        }
    }
    problems
}

// ---------------------------------------------------------------------------------------------
// Tests

#[test]
fn every_script_is_classified_and_keeps_the_rules_of_its_class() {
    let sources = Sources::read();
    for expected in ["prelude.lua", "dispatch.lua", "acquire.lua", "release.lua"] {
        assert!(
            sources.files.contains_key(expected),
            "{expected} not found; read: {:?}",
            sources.files.keys()
        );
    }
    let problems = audit(&sources, TABLE);
    assert!(problems.is_empty(), "{problems:#?}");
}

/// The real prelude's helpers.
fn real_helpers() -> Helpers {
    Helpers::parse(&Sources::read().files["prelude.lua"])
}

const QUARANTINE_CALL: &str = "local quarantined = quarantine_check(quarantine_ms, witness_key, \
                               marker_key)\nif quarantined then return quarantined end\n";
const GRANT_SET: &str = "redis.call(\"set\", key, token, \"NX\", \"PX\", ttl_ms)\n";
const COMPARE: &str = "if redis.pcall(\"get\", key) ~= token then return 0 end\n";
const DEL: &str = "return redis.call(\"del\", key)\n";

/// The single problem `check_script` finds in `text` of `class` (asserted single), which must
/// name `rule`.
fn the_problem(class: Class, text: &str, rule: &str, helpers: &Helpers) -> String {
    let problems = check_script("planted.lua", class, text, helpers);
    assert_eq!(problems.len(), 1, "{text}\n{problems:#?}");
    assert!(
        problems[0].starts_with(&format!("planted.lua ({}): {rule}", class.name())),
        "{problems:#?}"
    );
    problems[0].clone()
}

#[test]
fn the_checker_rejects_planted_scripts_and_passes_their_fixed_versions() {
    let helpers = real_helpers();
    let pass = |class: Class, text: &str| {
        let problems = check_script("planted.lua", class, text, &helpers);
        assert!(problems.is_empty(), "{text}\n{problems:#?}");
    };
    // Rule 1: a grant with the quarantine check, without it, after a SET, in a block, with its
    // refusal dropped; a commented-out check is none.
    pass(Class::Grant, &format!("{QUARANTINE_CALL}{GRANT_SET}"));
    let no_check = the_problem(Class::Grant, GRANT_SET, "rule 1", &helpers);
    assert!(
        no_check.contains("no call of quarantine_check()"),
        "{no_check}"
    );
    let after = the_problem(
        Class::Grant,
        &format!("{GRANT_SET}{QUARANTINE_CALL}"),
        "rule 1",
        &helpers,
    );
    assert!(
        after.contains(
            "line 1: `redis.call(\"set\", key, token, \"NX\", \"PX\", ttl_ms)` writes before \
             the quarantine check (quarantine_check() at line 2)"
        ),
        "{after}"
    );
    let commented: String = QUARANTINE_CALL
        .lines()
        .map(|l| format!("-- {l}\n"))
        .collect();
    the_problem(
        Class::Grant,
        &format!("{commented}{GRANT_SET}"),
        "rule 1",
        &helpers,
    );
    let in_block = the_problem(
        Class::Grant,
        &format!("if ARGV[9] == \"1\" then\n{QUARANTINE_CALL}end\n{GRANT_SET}"),
        "rule 1",
        &helpers,
    );
    assert!(in_block.contains("inside a block"), "{in_block}");
    let dropped = the_problem(
        Class::Grant,
        &format!("quarantine_check(quarantine_ms, witness_key, marker_key)\n{GRANT_SET}"),
        "rule 1",
        &helpers,
    );
    assert!(dropped.contains("not bound"), "{dropped}");
    let unreturned = the_problem(
        Class::Grant,
        &format!("local q = quarantine_check(quarantine_ms, witness_key, marker_key)\n{GRANT_SET}"),
        "rule 1",
        &helpers,
    );
    assert!(
        unreturned.contains("not followed by `if q then return q end`"),
        "{unreturned}"
    );
    // Any write counts for rule 1, a bookkeeping one too.
    the_problem(
        Class::Grant,
        &format!("redis.pcall(\"set\", listen_key, \"1\")\n{QUARANTINE_CALL}{GRANT_SET}"),
        "rule 1",
        &helpers,
    );

    // Rule 2: a delete with DEL and no compare, with the compare after it, an HDEL of the
    // holder's field before the HGET of it; the compared versions pass.
    pass(Class::Delete, &format!("{COMPARE}{DEL}"));
    let no_compare = the_problem(Class::Delete, DEL, "rule 2", &helpers);
    assert!(
        no_compare.contains(
            "`redis.call(\"del\", key)` writes the lock key, and the script compares no token"
        ),
        "{no_compare}"
    );
    let late = the_problem(
        Class::Delete,
        &format!("redis.call(\"del\", key)\n{COMPARE}return 1\n"),
        "rule 2",
        &helpers,
    );
    assert!(
        late.contains("before the first token compare (`~= token` at line 2)"),
        "{late}"
    );
    the_problem(
        Class::Delete,
        "redis.call(\"hdel\", key, token)\nlocal v = redis.call(\"hget\", key, token)\n",
        "rule 2",
        &helpers,
    );
    pass(
        Class::Delete,
        "local v = redis.call(\"hget\", key, token)\nif not v then return 0 end\n\
         redis.call(\"hdel\", key, token)\n",
    );
    // A compare of something else than the token is none; a waiter's own marker is no lock.
    the_problem(
        Class::Delete,
        &format!("if redis.pcall(\"get\", key) ~= tokens then return 0 end\n{DEL}"),
        "rule 2",
        &helpers,
    );
    pass(
        Class::Other,
        "redis.call(\"hdel\", key, marker)\nredis.pcall(\"zrem\", queue_key, marker)\n",
    );
    the_problem(
        Class::Other,
        "redis.call(\"set\", key, marker, \"PX\", grace_ms)\n",
        "rule 5",
        &helpers,
    );
    // An extension's PEXPIRE, and a swap's SET, without a compare.
    the_problem(
        Class::Extend,
        "redis.call(\"pexpire\", key, ttl_ms)\n",
        "rule 2",
        &helpers,
    );
    the_problem(
        Class::Swap,
        &format!("{QUARANTINE_CALL}redis.call(\"set\", key, next, \"KEEPTTL\")\n"),
        "rule 2",
        &helpers,
    );

    // Rule 5: the class must fit.
    the_problem(Class::Other, DEL, "rule 5", &helpers);
    the_problem(
        Class::ReadOnly,
        "redis.pcall(\"set\", window_key, 1)\n",
        "rule 5",
        &helpers,
    );
    the_problem(
        Class::Delete,
        "return redis.call(\"get\", key)\n",
        "rule 5",
        &helpers,
    );
    // Rule 0: an alias of redis.call hides its commands.
    let alias = check_script(
        "planted.lua",
        Class::Delete,
        &format!("local run = redis.call\n{COMPARE}run(\"del\", key)\n"),
        &helpers,
    );
    assert!(
        alias
            .iter()
            .any(|p| p.contains("rule 0 (readable): line 1")),
        "{alias:#?}"
    );
}

#[test]
fn the_checker_follows_the_prelude_helpers() {
    let prelude = Sources::read().files["prelude.lua"].clone();
    // A wrapper of the check is the check; a helper that compares is a compare; a helper that
    // writes writes where it is called.
    let extra = "\nlocal function checked(q, w, m)\n  return quarantine_check(q, w, m)\nend\n\
                 local function holds(key, token)\n  return redis.pcall(\"get\", key) == token\nend\n\
                 local function wipe(key)\n  redis.call(\"del\", key)\nend\n";
    let helpers = Helpers::parse(&format!("{prelude}{extra}"));
    let wrapped = "local q = checked(quarantine_ms, witness_key, marker_key)\n\
                   if q then return q end\n";
    let problems = check_script(
        "planted.lua",
        Class::Grant,
        &format!("{wrapped}{GRANT_SET}"),
        &helpers,
    );
    assert!(problems.is_empty(), "{problems:#?}");
    let early = the_problem(
        Class::Grant,
        &format!("wipe(key)\n{wrapped}{GRANT_SET}"),
        "rule 1",
        &helpers,
    );
    assert!(
        early.contains(
            "line 1: `redis.call(\"del\", key)` (through wipe()) writes before the quarantine \
             check (checked() at line 2)"
        ),
        "{early}"
    );
    let problems = check_script(
        "planted.lua",
        Class::Delete,
        "if not holds(key, token) then return 0 end\nwipe(key)\n",
        &helpers,
    );
    assert!(problems.is_empty(), "{problems:#?}");
    let through = the_problem(Class::Delete, "wipe(key)\n", "rule 2", &helpers);
    assert!(through.contains("(through wipe())"), "{through}");
    // A read-only script that reaches the check writes (the quarantine's keys).
    the_problem(
        Class::ReadOnly,
        &format!("{QUARANTINE_CALL}return 1\n"),
        "rule 5",
        &helpers,
    );
}

#[test]
fn the_audit_wants_every_file_classified_and_every_row_found() {
    let mut sources = Sources::read();
    sources
        .files
        .insert("brand_new.lua".to_owned(), DEL.to_owned());
    sources.files.remove("noop.lua");
    let mut problems = audit(&sources, TABLE);
    problems.sort();
    assert_eq!(
        problems,
        [
            "brand_new.lua: rule 3 (every script classified): not in the table: add a row (grant, \
             swap, delete, extend, read-only or other) with a one-line reason",
            "noop.lua (read-only): rule 4 (every listed script exists): no such file under \
             redlock-core/src: drop its row, or rename it",
        ]
    );
    // Classified, the new script is held to its class.
    let mut table = TABLE.to_vec();
    table.push(("brand_new.lua", Class::Delete, "a planted delete"));
    table.retain(|(name, _, _)| *name != "noop.lua");
    let problems = audit(&sources, &table);
    assert_eq!(problems.len(), 1, "{problems:#?}");
    assert!(
        problems[0].starts_with("brand_new.lua (delete): rule 2 (token compared first)"),
        "{problems:#?}"
    );
}

/// `source` with `from` (which it must hold) replaced by `to`.
fn mutated(source: &str, from: &str, to: &str) -> String {
    assert!(source.contains(from), "the script no longer holds {from:?}");
    source.replacen(from, to, 1)
}

#[test]
fn real_scripts_broken_in_a_copy_fail_with_a_message_naming_script_and_rule() {
    let sources = Sources::read();
    let check = |name: &str, from: &str, to: &str| {
        let mut broken = sources.clone();
        let text = mutated(&sources.files[name], from, to);
        broken.files.insert(name.to_owned(), text);
        let problems = audit(&broken, TABLE);
        for problem in &problems {
            eprintln!("{problem}");
        }
        problems
    };
    let check_line = "local quarantined = quarantine_check(quarantine_ms, witness_key, marker_key)\n\
                      if quarantined then return quarantined end\n";

    // acquire.lua without its quarantine check.
    let problems = check("acquire.lua", check_line, "");
    assert_eq!(problems.len(), 1, "{problems:#?}");
    assert!(
        problems[0].starts_with(
            "acquire.lua (grant): rule 1 (quarantine first): no call of quarantine_check()"
        ),
        "{problems:#?}"
    );
    // acquire.lua with its check moved after its SET NX (at the top level still).
    let mut moved = sources.clone();
    let text = mutated(&sources.files["acquire.lua"], check_line, "");
    moved.files.insert(
        "acquire.lua".to_owned(),
        mutated(
            &text,
            "if streak and n == 1 then return",
            &format!("{check_line}if streak and n == 1 then return"),
        ),
    );
    let problems = audit(&moved, TABLE);
    for problem in &problems {
        eprintln!("{problem}");
    }
    assert!(
        problems.len() == 1
            && problems[0].starts_with("acquire.lua (grant): rule 1 (quarantine first): line ")
            && problems[0].contains(
                "`redis.call(\"set\", key, token, \"NX\", \"PX\", ttl_ms)` writes before the quarantine check"
            ),
        "{problems:#?}"
    );
    // resume.lua without its check.
    let problems = check("resume.lua", check_line, "");
    assert!(
        problems.len() == 1 && problems[0].starts_with("resume.lua (swap): rule 1"),
        "{problems:#?}"
    );
    // release.lua deleting without its compare.
    let problems = check(
        "release.lua",
        "  if redis.pcall(\"get\", key) == token then deleted = deleted + redis.call(\"del\", key) end",
        "  deleted = deleted + redis.call(\"del\", key)",
    );
    assert!(
        problems.len() == 1
            && problems[0].starts_with("release.lua (delete): rule 2 (token compared first)")
            && problems[0].contains("compares no token"),
        "{problems:#?}"
    );
    // The dispatch script's batch loop deleting without its compare (the same compare in
    // the branch for a call alone, above it, does not stand in for it).
    let batch_release = "    ok, reply = true, 0\n    local key, token = KEYS[k], ARGV[a]\n    local value\n    if read then value = read[1] else value = redis.pcall(\"get\", key) end\n    if value == token then reply = redis.pcall(\"del\", key) end";
    let problems = check(
        "dispatch.lua",
        batch_release,
        &batch_release.replace(
            "if value == token then reply = redis.pcall(\"del\", key) end",
            "reply = redis.pcall(\"del\", key)",
        ),
    );
    assert!(
        problems.len() == 1
            && problems[0].starts_with("dispatch.lua (inline): rule 2 (token compared first)")
            && problems[0].contains("without a token compare"),
        "{problems:#?}"
    );
    // force_release.lua without the digest match of its string branch: the DEL there comes
    // before the hash branch's digest match.
    let problems = check(
        "force_release.lua",
        "  if not named[redis.sha1hex(redis.call(\"get\", key))] then return 0 end\n",
        "",
    );
    assert!(
        problems.len() == 1
            && problems[0].starts_with("force_release.lua (delete): rule 2")
            && problems[0].contains("before the first token compare"),
        "{problems:#?}"
    );
    // extend_mode.lua without the HGET of the holder's field: its writes compare nothing.
    let problems = check(
        "extend_mode.lua",
        "local value = redis.call(\"hget\", key, token)",
        "local value = redis.call(\"hget\", key, ARGV[3])",
    );
    assert!(
        problems.len() == 1 && problems[0].starts_with("extend_mode.lua (extend): rule 2"),
        "{problems:#?}"
    );
}
