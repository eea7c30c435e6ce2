//! Each command list the guide gives for an ACL user (redlock-core's guide, "ACL users"), alone:
//! the base list by itself (acquire, extend, auto-extension, release, the minimum hold, fencing,
//! a busy error's remaining ttl), and each feature's row with the base list and nothing else,
//! each feature shown to work, not only to fail soft (the scripts run their optional commands
//! under `pcall` and degrade quietly without them). With one of a row's commands left out, the
//! feature that needs it shows it: the oracles can fail.
//!
//! And each row against the commands its scripts can run, read from the `.lua` files when the
//! test runs (`every_row_grants_the_commands_its_scripts_run`): a script that gains a command
//! fails it until its row grants it, and a new script until a row lists it.

#![allow(clippy::unwrap_used)] // tests unwrap: a failure is the assertion

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;
use std::time::{Duration, Instant};

use redlock_core::{BuildError, Holder, LockOptions, Mode, Redlock};
use redlock_tests::lua::{inside_a_name, strip_comments};
use redlock_tests::{RedisServer, within};

/// The guide's table of commands for an ACL user (`redlock-core/src/guide/configuration.md`),
/// read from the guide itself so that the two cannot drift apart: each row's feature and its whole list
/// (`base and …` adds the base list, `the row above and …` the row above's whole list).
fn readme_lists() -> Vec<(String, Vec<String>)> {
    let readme = include_str!("../../redlock-core/src/guide/configuration.md");
    let start = readme
        .find("The lock needs these commands")
        .expect("the guide's ACL paragraph");
    let mut rows: Vec<(String, Vec<String>)> = Vec::new();
    for line in readme[start..]
        .lines()
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .skip(2)
    {
        let cells: Vec<&str> = line.trim_matches('|').split(" | ").collect();
        let [feature, commands] = cells[..] else {
            panic!("a row of two cells: {line}")
        };
        let mut list: Vec<String> = if commands.starts_with("base and") {
            rows[0].1.clone()
        } else if commands.starts_with("the row above and") {
            rows.last().unwrap().1.clone()
        } else {
            Vec::new()
        };
        list.extend(
            commands
                .replace("\\|", "|")
                .split(|c: char| c.is_whitespace() || c == '`')
                .filter(|word| word.len() > 1 && word.starts_with('+'))
                .map(str::to_owned),
        );
        list.sort();
        list.dedup();
        rows.push((feature.trim().to_owned(), list));
    }
    rows
}

/// The whole list of the guide's row whose feature starts with `feature`.
fn list(feature: &str) -> Vec<String> {
    readme_lists()
        .into_iter()
        .find(|(f, _)| f.starts_with(feature))
        .unwrap_or_else(|| panic!("no guide row for {feature:?}"))
        .1
}

#[test]
fn the_readme_lists_the_commands_each_feature_needs() {
    let rows = readme_lists();
    let features: Vec<&str> = rows.iter().map(|(f, _)| f.as_str()).collect();
    assert_eq!(rows.len(), 12, "{features:?}");
    let base = list("Base");
    for needed in [
        "+set",
        "+get",
        "+mget",
        "+del",
        "+pexpire",
        "+pttl",
        "+eval",
        "+evalsha",
        "+script|load",
    ] {
        assert!(
            base.iter().any(|c| c == needed),
            "{needed} missing: {base:?}"
        );
    }
    assert!(!base.iter().any(|c| c == "+info"), "{base:?}");
    assert!(list("The quarantine").iter().any(|c| c == "+info"));
    assert!(list("Waking waiters").iter().any(|c| c == "+publish"));
    let windows = list("Windows");
    assert!(windows.iter().any(|c| c == "+zadd") && windows.iter().any(|c| c == "+time"));
    // Foreign clients are declared, not detected: no connection list, no `INFO`, no names.
    for unneeded in ["+client|list", "+client|setname", "+info"] {
        assert!(
            !windows.iter().any(|c| c == unneeded),
            "{unneeded}: {windows:?}"
        );
    }
    for (_, commands) in &rows {
        assert!(
            commands.iter().all(|c| c[1..]
                .chars()
                .all(|ch| ch.is_ascii_lowercase() || ch == '|')),
            "{commands:?}"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Every row against the commands its scripts can run.
//
// The scripts are read from every folder of `redlock-core/src/` when the test runs (not when it
// is built), so a script edited since is checked as it is now. From each one the check reads
// the commands it runs (`redis.call("x"` and `redis.pcall("x"`, a container command with its
// subcommand: `redis.call("client", "list")` is `+client|list`), and the helpers of
// `prelude.lua` it calls, followed through the helpers they call in turn. [`TABLE`] says which
// scripts each guide row makes work: every command those scripts can run must be in that row.
//
// Some commands run only when another feature is on: the quarantine check only with the
// quarantine, the window's and the streak's reads only with windows for foreign clients, a
// queue's commands only for waiters. Those are the parts [`CONDITIONAL`] lists; a row that
// runs such a script leaves them out, and the row that turns the feature on names them in
// its `turns_on`, so their commands are checked against that row instead. A conditional part
// that no row needs left out (every row running it grants it) is refused, so the list stays
// the exceptions it is.
//
// Both ways: a command a row grants must be run by one of its scripts, or be one the client
// sends itself (`client`: `EVALSHA`, `SUBSCRIBE`, `INFO` at build, ...), or be in the base
// list. And every `.lua` file must be listed by a row, and every script the table names must
// exist, so a new script has to be placed before this test passes.
// ---------------------------------------------------------------------------------------------

/// What each guide row makes work, for [`row_problems`].
struct Uses {
    /// The guide row's feature, its beginning (as [`list`] finds rows).
    feature: &'static str,
    /// The scripts (file names under `scripts/`) the row makes work: every command each can
    /// run, itself or through the prelude's helpers, must be in the row, but for the
    /// conditional parts ([`CONDITIONAL`]) the row does not turn on.
    scripts: &'static [&'static str],
    /// The conditional parts the row turns on: their commands must be in it.
    turns_on: &'static [&'static str],
    /// Commands the client sends itself, outside any script.
    client: &'static [&'static str],
}

/// The parts of the scripts that run only when another row's feature is on, each spelled as
/// `name()` (a prelude helper, wherever it is called), `file.lua: name()` (a helper where
/// that script calls it itself) or `file.lua: +command` (every call of that command in that
/// script itself). Which rows turn each one on is in [`TABLE`].
const CONDITIONAL: &[&str] = &[
    // The quarantine check: with `quarantine_ms` above zero only (the quarantine's row).
    "quarantine_check()",
    // Windows for foreign clients: the window's read (acquisitions refuse a free key while
    // one is open) and the node's clock for the streak (busy_read, release_handover's
    // streak_start); the semaphores' ranking reads that clock too.
    "window_open()",
    "node_now_or_nil()",
    // The waiter queue: joined by a queued attempt, popped by a hand-over release, left by a
    // waiter that gives up, counted by a release in a mode.
    "acquire_queued.lua: +zadd",
    "acquire_queued.lua: +zcard",
    "acquire_queued.lua: +zrem",
    "release_handover.lua: +zpopmin",
    "release_handover.lua: +zrange",
    "release_handover.lua: +publish",
    "leave.lua: +zrem",
    "release_mode.lua: +zcard",
    "release_mode.lua: +publish",
    // A waiter in a mode leaves the holders' hash.
    "leave.lua: +hdel",
    // The resumption of a lock in a mode (its `mode` branch).
    "resume.lua: +type",
    "resume.lua: +hget",
    "resume.lua: +hdel",
    "resume.lua: +hset",
    "resume.lua: +pexpireat",
    "resume.lua: node_now()",
];

/// Each guide row, by its feature, and what it makes work. The rows add up: a lock in a mode
/// whose waiters are woken at its release needs the modes' row and the waking row.
const TABLE: &[Uses] = &[
    Uses {
        feature: "Base",
        // A queued attempt, a hand-over release and a waiter's leave run here too, without
        // their queue's commands (under `pcall`: they degrade).
        scripts: &[
            "acquire.lua",
            "acquire_queued.lua",
            "release.lua",
            "release_handover.lua",
            "leave.lua",
            "extend.lua",
            "keep.lua",
            "fence.lua",
            "noop.lua",
            "set_nx.lua",
            "dispatch.lua",
        ],
        turns_on: &[],
        client: &["+eval", "+evalsha", "+script|load"],
    },
    Uses {
        feature: "The node checks",
        scripts: &[],
        turns_on: &[],
        client: &["+info"],
    },
    Uses {
        feature: "The quarantine",
        scripts: &["quarantine.lua", "acquire.lua"],
        turns_on: &["quarantine_check()"],
        client: &["+info"],
    },
    Uses {
        feature: "Waking waiters",
        scripts: &[
            "acquire.lua",
            "acquire_queued.lua",
            "release_handover.lua",
            "leave.lua",
        ],
        turns_on: &[
            "acquire_queued.lua: +zadd",
            "acquire_queued.lua: +zcard",
            "acquire_queued.lua: +zrem",
            "release_handover.lua: +zpopmin",
            "release_handover.lua: +zrange",
            "release_handover.lua: +publish",
            "leave.lua: +zrem",
            // With the modes' row too, a release in a mode wakes its waiters.
            "release_mode.lua: +zcard",
            "release_mode.lua: +publish",
        ],
        client: &["+subscribe", "+unsubscribe"],
    },
    Uses {
        feature: "Windows",
        // "The row above and": the waiting, with windows.
        scripts: &[
            "acquire.lua",
            "acquire_queued.lua",
            "release_handover.lua",
            "leave.lua",
        ],
        turns_on: &[
            "window_open()",
            "node_now_or_nil()",
            "acquire_queued.lua: +zadd",
            "acquire_queued.lua: +zcard",
            "acquire_queued.lua: +zrem",
            "release_handover.lua: +zpopmin",
            "release_handover.lua: +zrange",
            "release_handover.lua: +publish",
            "leave.lua: +zrem",
        ],
        client: &["+subscribe", "+unsubscribe"],
    },
    Uses {
        feature: "Lock modes",
        scripts: &[
            "acquire_mode.lua",
            "extend_mode.lua",
            "release_mode.lua",
            "leave.lua",
        ],
        turns_on: &["leave.lua: +hdel"],
        client: &[],
    },
    Uses {
        feature: "Counting semaphores",
        // A slot is released and handed over by the plain lock's scripts, and extended by its
        // own (the slot's, and the stored number of permits beside it).
        scripts: &[
            "acquire_permit.lua",
            "extend_permit.lua",
            "release.lua",
            "release_handover.lua",
            "leave.lua",
        ],
        turns_on: &[
            "node_now_or_nil()",
            "release_handover.lua: +zpopmin",
            "release_handover.lua: +zrange",
            "release_handover.lua: +publish",
            "leave.lua: +zrem",
        ],
        client: &["+subscribe", "+unsubscribe"],
    },
    Uses {
        feature: "`Redlock::inspect`",
        scripts: &["inspect.lua"],
        turns_on: &[],
        client: &[],
    },
    Uses {
        feature: "Several resources at once",
        // The plain branch of resume.lua; its `mode` branch is the downgrade row's.
        scripts: &[
            "acquire.lua",
            "extend.lua",
            "release.lua",
            "release_slots.lua",
            "resume.lua",
        ],
        turns_on: &[],
        client: &[],
    },
    Uses {
        feature: "A downgrade",
        // A lock in a mode to begin with, its downgrade (the waiters it wakes subscribe), and
        // its detach and resume.
        scripts: &[
            "downgrade.lua",
            "resume.lua",
            "acquire_mode.lua",
            "extend_mode.lua",
            "release_mode.lua",
        ],
        turns_on: &[
            "resume.lua: +type",
            "resume.lua: +hget",
            "resume.lua: +hdel",
            "resume.lua: +hset",
            "resume.lua: +pexpireat",
            "resume.lua: node_now()",
        ],
        client: &["+subscribe", "+unsubscribe"],
    },
    Uses {
        feature: "Force-release",
        // The read of the holders, then their delete (whichever scripts are there: a script
        // the force-release gains is listed here, or the check fails).
        scripts: &["force_read.lua", "force_release.lua"],
        turns_on: &[],
        client: &[],
    },
    Uses {
        feature: "Owner labels",
        scripts: &["owner.lua"],
        turns_on: &[],
        client: &[],
    },
];

/// The Lua sources the check reads: `prelude.lua`, and every other `.lua` file under
/// `redlock-core/src/`, by its file name.
struct Sources {
    prelude: String,
    scripts: BTreeMap<String, String>,
}

impl Sources {
    /// Read now, from the tree.
    fn read() -> Self {
        fn walk(dir: &Path, under: &str, out: &mut BTreeMap<String, String>) {
            for entry in std::fs::read_dir(dir).unwrap() {
                let path = entry.unwrap().path();
                let name = format!("{under}{}", path.file_name().unwrap().to_str().unwrap());
                if path.is_dir() {
                    walk(&path, "", out);
                } else if name.ends_with(".lua") {
                    out.insert(name, std::fs::read_to_string(&path).unwrap());
                }
            }
        }
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../redlock-core/src");
        let mut scripts = BTreeMap::new();
        walk(&dir, "", &mut scripts);
        let prelude = scripts.remove("prelude.lua").expect("prelude.lua");
        assert!(
            scripts.len() > 10,
            "the scripts, read from {}",
            dir.display()
        );
        Self { prelude, scripts }
    }
}

/// Commands whose ACL rule names a subcommand (`+client|list`, `+script|load`).
const CONTAINERS: &[&str] = &[
    "acl", "client", "cluster", "command", "config", "debug", "function", "latency", "memory",
    "module", "object", "pubsub", "script", "slowlog", "xgroup", "xinfo",
];

/// One argument of a call, as the text gives it.
enum Arg {
    /// A string literal.
    Literal(String),
    /// A variable.
    Name(String),
    /// Anything else (an expression).
    Other,
}

/// The argument at the start of `s` (after blanks), and the text after it.
fn argument(s: &str) -> (Arg, &str) {
    let s = s.trim_start();
    if let Some(quote) = s.chars().next().filter(|&c| c == '"' || c == '\'')
        && let Some(end) = s[1..].find(quote)
    {
        let (literal, rest) = (&s[1..1 + end], &s[2 + end..]);
        if !literal.contains('\\') && !rest.trim_start().starts_with("..") {
            return (Arg::Literal(literal.to_owned()), rest);
        }
    }
    let name: String = s
        .chars()
        .take_while(|&c| c.is_ascii_alphanumeric() || c == '_')
        .collect();
    let rest = &s[name.len()..];
    let plain_name = name.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_');
    if plain_name && matches!(rest.trim_start().chars().next(), Some(',' | ')')) {
        return (Arg::Name(name), rest);
    }
    (Arg::Other, rest)
}

/// The string literals `name` is assigned in `code` (`local name = "zrem"`, `name = "hdel"`),
/// or none when it is assigned anything else too (or never): then no command can be named.
fn assigned(code: &str, name: &str) -> Vec<String> {
    let mut literals = Vec::new();
    for (at, _) in code.match_indices(name) {
        let after = &code[at + name.len()..];
        if inside_a_name(code, at)
            || after.starts_with(|c: char| c.is_ascii_alphanumeric() || c == '_')
        {
            continue;
        }
        let Some(value) = after.trim_start().strip_prefix('=') else {
            continue;
        };
        if value.starts_with('=') {
            continue; // a comparison
        }
        match argument(value) {
            (Arg::Literal(literal), rest)
                if !rest.trim_start().starts_with(|c: char| "..,".contains(c)) =>
            {
                literals.push(literal)
            }
            _ => return Vec::new(),
        }
    }
    literals
}

/// What one piece of Lua runs itself.
#[derive(Debug, Default, Clone)]
struct Runs {
    /// The commands, as ACL rules (`+get`, `+client|list`).
    commands: BTreeSet<String>,
    /// The prelude's helpers it calls.
    helpers: BTreeSet<String>,
    /// The calls whose command the text does not name.
    unnamed: Vec<String>,
}

/// What `code` (comments stripped) runs itself, calling helpers among `helpers`.
fn runs(code: &str, helpers: &BTreeSet<String>) -> Runs {
    let mut out = Runs::default();
    for (at, _) in code.match_indices("redis.") {
        if inside_a_name(code, at) {
            continue;
        }
        let rest = &code[at + "redis.".len()..];
        let (call, rest) = if let Some(rest) = rest.strip_prefix("pcall") {
            ("redis.pcall", rest)
        } else if let Some(rest) = rest.strip_prefix("call") {
            ("redis.call", rest)
        } else {
            continue; // redis.sha1hex, redis.error_reply, ...: no command
        };
        if rest.starts_with(|c: char| c.is_ascii_alphanumeric() || c == '_') {
            continue; // redis.callback, ...
        }
        let Some(args) = rest.trim_start().strip_prefix('(') else {
            out.unnamed.push(format!("{call} used as a value"));
            continue;
        };
        let names = |arg: Arg| match arg {
            Arg::Literal(literal) => vec![literal],
            Arg::Name(name) => assigned(code, &name),
            Arg::Other => Vec::new(),
        };
        let (first, after) = argument(args);
        let commands = names(first);
        if commands.is_empty() {
            let end = args.find([')', '\n']).map_or(args.len(), |e| e + 1).min(40);
            out.unnamed.push(format!(
                "{call}({}: no command named",
                args[..end].trim_end()
            ));
        }
        for command in commands {
            let command = command.to_ascii_lowercase();
            if !CONTAINERS.contains(&command.as_str()) {
                out.commands.insert(format!("+{command}"));
                continue;
            }
            let subcommands = match after.trim_start().strip_prefix(',') {
                Some(second) => names(argument(second).0),
                None => Vec::new(),
            };
            if subcommands.is_empty() {
                out.unnamed
                    .push(format!("{call}(\"{command}\", ..: no subcommand named"));
            }
            for sub in subcommands {
                out.commands
                    .insert(format!("+{command}|{}", sub.to_ascii_lowercase()));
            }
        }
    }
    for helper in helpers {
        let called = code.match_indices(helper.as_str()).any(|(at, _)| {
            let after = &code[at + helper.len()..];
            !inside_a_name(code, at)
                && after.trim_start().starts_with('(')
                && !code[..at].trim_end().ends_with("function")
        });
        if called {
            out.helpers.insert(helper.clone());
        }
    }
    out
}

/// What every script and every helper of the prelude runs itself.
struct Lua {
    helpers: BTreeMap<String, Runs>,
    scripts: BTreeMap<String, Runs>,
    /// What the prelude runs outside its helpers (it says it runs nothing).
    prelude: Runs,
}

impl Lua {
    /// Reads `sources`. A helper is the prelude's text from its `local function name(` line
    /// to the next line at the margin opening with `local` (a helper or a table), or the end.
    fn parse(sources: &Sources) -> Self {
        let prelude = strip_comments(&sources.prelude);
        let (mut bodies, mut outside) = (BTreeMap::<String, String>::new(), String::new());
        let mut current: Option<String> = None;
        for line in prelude.lines() {
            if let Some(rest) = line.strip_prefix("local function ") {
                let name = rest.split('(').next().unwrap().trim().to_owned();
                current = Some(name.clone());
                bodies.entry(name).or_default();
            } else if line.starts_with("local ") {
                current = None;
            }
            let text = match &current {
                Some(name) => bodies.get_mut(name).unwrap(),
                None => &mut outside,
            };
            text.push_str(line);
            text.push('\n');
        }
        let names: BTreeSet<String> = bodies.keys().cloned().collect();
        let helpers = bodies
            .iter()
            .map(|(name, body)| (name.clone(), runs(body, &names)))
            .collect();
        let scripts = sources
            .scripts
            .iter()
            .map(|(name, text)| (name.clone(), runs(&strip_comments(text), &names)))
            .collect();
        let prelude = runs(&outside, &names);
        Self {
            helpers,
            scripts,
            prelude,
        }
    }

    /// The helpers `script` reaches, through every helper (none left out).
    fn reached(&self, script: &str) -> BTreeSet<String> {
        let mut seen = BTreeSet::new();
        let mut todo: Vec<String> = self
            .scripts
            .get(script)
            .map(|r| r.helpers.iter().cloned().collect())
            .unwrap_or_default();
        while let Some(helper) = todo.pop() {
            if seen.insert(helper.clone())
                && let Some(runs) = self.helpers.get(&helper)
            {
                todo.extend(runs.helpers.iter().cloned());
            }
        }
        seen
    }

    /// Adds to `out` the commands `helper` runs, itself and through the helpers it calls that
    /// `view` does not leave out, each with the chain of calls it is run through.
    fn helper_commands(
        &self,
        helper: &str,
        view: &View<'_>,
        via: &str,
        out: &mut BTreeMap<String, String>,
    ) {
        let mut chain: Vec<&str> = via.split(" > ").collect();
        chain.pop();
        if chain.contains(&format!("{helper}()").as_str()) {
            return; // recursion: already followed
        }
        let Some(runs) = self.helpers.get(helper) else {
            return;
        };
        for command in &runs.commands {
            out.entry(command.clone()).or_insert_with(|| via.to_owned());
        }
        for inner in &runs.helpers {
            if !view.off(&Part::Helper(inner.clone())) {
                self.helper_commands(inner, view, &format!("{via} > {inner}()"), out);
            }
        }
    }

    /// The commands `script` can run under `view`, each with how (`file.lua`, or the chain of
    /// helpers it is run through).
    fn script_commands(&self, script: &str, view: &View<'_>) -> BTreeMap<String, String> {
        let mut out = BTreeMap::new();
        let Some(runs) = self.scripts.get(script) else {
            return out;
        };
        for command in &runs.commands {
            if !view.off(&Part::ScriptCommand(script.to_owned(), command.clone())) {
                out.insert(command.clone(), script.to_owned());
            }
        }
        for helper in &runs.helpers {
            let off = view.off(&Part::Helper(helper.clone()))
                || view.off(&Part::ScriptHelper(script.to_owned(), helper.clone()));
            if !off {
                self.helper_commands(helper, view, &format!("{script} > {helper}()"), &mut out);
            }
        }
        out
    }

    /// The commands of the conditional part `part`, under `view` with it turned on.
    fn part_commands(&self, part: &Part, view: &View<'_>) -> BTreeMap<String, String> {
        let mut out = BTreeMap::new();
        match part {
            Part::Helper(helper) | Part::ScriptHelper(_, helper) => {
                self.helper_commands(helper, view, &format!("{helper}()"), &mut out);
            }
            Part::ScriptCommand(script, command) => {
                out.insert(command.clone(), script.clone());
            }
        }
        out
    }
}

/// A conditional part of the scripts (see [`CONDITIONAL`]).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Part {
    /// `name()`: a prelude helper, wherever it is called.
    Helper(String),
    /// `file.lua: name()`: a helper, where that script calls it itself.
    ScriptHelper(String, String),
    /// `file.lua: +command`: a command, where that script runs it itself.
    ScriptCommand(String, String),
}

impl Part {
    fn parse(spec: &str) -> Self {
        let helper = |s: &str| s.strip_suffix("()").map(str::to_owned);
        match spec.split_once(": ") {
            None => Self::Helper(helper(spec).unwrap_or_else(|| panic!("{spec:?}"))),
            Some((script, name)) if name.starts_with('+') => {
                Self::ScriptCommand(script.to_owned(), name.to_owned())
            }
            Some((script, name)) => Self::ScriptHelper(
                script.to_owned(),
                helper(name).unwrap_or_else(|| panic!("{spec:?}")),
            ),
        }
    }
}

impl std::fmt::Display for Part {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Helper(helper) => write!(f, "{helper}()"),
            Self::ScriptHelper(script, helper) => write!(f, "{script}: {helper}()"),
            Self::ScriptCommand(script, command) => write!(f, "{script}: {command}"),
        }
    }
}

/// One row's view of the scripts: which conditional parts it leaves out.
struct View<'a> {
    conditional: &'a BTreeSet<Part>,
    on: BTreeSet<Part>,
}

impl View<'_> {
    fn off(&self, part: &Part) -> bool {
        self.conditional.contains(part) && !self.on.contains(part)
    }
}

/// Everything wrong between the scripts in `sources`, the guide's `rows`, the `table` of what
/// each row makes work and the `conditional` parts: empty when every row grants every
/// command its scripts can run, and nothing more than they and the client need.
fn row_problems(
    sources: &Sources,
    rows: &[(String, Vec<String>)],
    table: &[Uses],
    conditional: &[&str],
) -> Vec<String> {
    let lua = Lua::parse(sources);
    let mut problems = Vec::new();
    for (name, runs) in &lua.scripts {
        for unnamed in &runs.unnamed {
            problems.push(format!("{name}: {unnamed}"));
        }
    }
    for (name, runs) in &lua.helpers {
        for unnamed in &runs.unnamed {
            problems.push(format!("prelude.lua {name}(): {unnamed}"));
        }
    }
    let outside = &lua.prelude;
    if !outside.commands.is_empty() || !outside.unnamed.is_empty() {
        problems.push(format!(
            "prelude.lua runs {:?} {:?} outside its helpers",
            outside.commands, outside.unnamed
        ));
    }

    // The conditional parts are parts of the scripts.
    let conditional: BTreeSet<Part> = conditional.iter().map(|s| Part::parse(s)).collect();
    for part in &conditional {
        let real = match part {
            Part::Helper(helper) => lua.helpers.contains_key(helper),
            Part::ScriptHelper(script, helper) => lua
                .scripts
                .get(script)
                .is_some_and(|r| r.helpers.contains(helper)),
            Part::ScriptCommand(script, command) => lua
                .scripts
                .get(script)
                .is_some_and(|r| r.commands.contains(command)),
        };
        if !real {
            problems.push(format!("conditional {part}: no such call in the scripts"));
        }
    }

    // Each guide row has one entry in the table, and each entry one row.
    let mut entries: Vec<(&Uses, &Vec<String>)> = Vec::new();
    for uses in table {
        let matched: Vec<_> = rows
            .iter()
            .filter(|(feature, _)| feature.starts_with(uses.feature))
            .collect();
        match matched[..] {
            [(_, list)] => entries.push((uses, list)),
            _ => problems.push(format!(
                "table entry {:?} matches {} guide rows",
                uses.feature,
                matched.len()
            )),
        }
    }
    for (feature, _) in rows {
        let count = table
            .iter()
            .filter(|uses| feature.starts_with(uses.feature))
            .count();
        if count != 1 {
            problems.push(format!(
                "guide row {feature:?} has {count} table entries: say which scripts it makes work"
            ));
        }
    }
    let base: Vec<String> = rows
        .iter()
        .find(|(feature, _)| feature.starts_with("Base"))
        .map(|(_, list)| list.clone())
        .unwrap_or_default();

    // Every script is placed, and every script placed exists.
    let listed: BTreeSet<&str> = table
        .iter()
        .flat_map(|u| u.scripts.iter().copied())
        .collect();
    for script in &listed {
        if !lua.scripts.contains_key(*script) {
            problems.push(format!(
                "the table names {script}, which is not under scripts/"
            ));
        }
    }
    for script in lua.scripts.keys() {
        if !listed.contains(script.as_str()) {
            problems.push(format!(
                "{script} is listed by no row: add it to the rows whose feature runs it"
            ));
        }
    }

    // Each row grants what its scripts and the parts it turns on can run, and the client
    // sends; and grants nothing else beyond the base list.
    let view_of = |uses: &Uses| View {
        conditional: &conditional,
        on: uses.turns_on.iter().map(|s| Part::parse(s)).collect(),
    };
    for (uses, list) in &entries {
        let view = view_of(uses);
        for part in &view.on {
            if !conditional.contains(part) {
                problems.push(format!(
                    "{}: turns on {part}, which is not a conditional part",
                    uses.feature
                ));
            }
        }
        let mut run: BTreeMap<String, String> = BTreeMap::new();
        for script in uses.scripts {
            for (command, via) in lua.script_commands(script, &view) {
                run.entry(command).or_insert(via);
            }
        }
        for part in &view.on {
            for (command, via) in lua.part_commands(part, &view) {
                run.entry(command).or_insert(via);
            }
        }
        for (command, via) in &run {
            if !list.contains(command) {
                problems.push(format!(
                    "{}: {via} runs {command}, which the row does not grant",
                    uses.feature
                ));
            }
        }
        for command in uses.client {
            if !list.iter().any(|c| c == command) {
                problems.push(format!(
                    "{}: the client sends {command}, which the row does not grant",
                    uses.feature
                ));
            }
        }
        let is_base = uses.feature == "Base";
        for command in list.iter() {
            let needed = run.contains_key(command)
                || uses.client.contains(&command.as_str())
                || (!is_base && base.contains(command));
            if !needed {
                problems.push(format!(
                    "{}: grants {command}, which none of its scripts runs and the client does not send",
                    uses.feature
                ));
            }
        }
    }

    // Every conditional part is turned on by a row, and left out by one that needs it left
    // out (a row that runs it without granting its commands).
    for part in &conditional {
        if !entries
            .iter()
            .any(|(uses, _)| view_of(uses).on.contains(part))
        {
            problems.push(format!("conditional {part}: no row turns it on"));
        }
        let runs_it = |uses: &Uses| {
            uses.scripts.iter().any(|script| match part {
                Part::Helper(helper) => lua.reached(script).contains(helper),
                Part::ScriptHelper(s, _) | Part::ScriptCommand(s, _) => s == script,
            })
        };
        let needed = entries.iter().any(|(uses, list)| {
            let view = view_of(uses);
            !view.on.contains(part)
                && runs_it(uses)
                && lua
                    .part_commands(part, &view)
                    .keys()
                    .any(|command| !list.contains(command))
        });
        if !needed {
            problems.push(format!(
                "conditional {part}: every row that runs it grants its commands, so it is no exception: drop it"
            ));
        }
    }
    problems
}

#[test]
fn every_row_grants_the_commands_its_scripts_run() {
    let problems = row_problems(&Sources::read(), &readme_lists(), TABLE, CONDITIONAL);
    assert!(problems.is_empty(), "{problems:#?}");
}

/// What `row_problems` finds in `sources` and `rows` that it does not find in the tree as it
/// is (so that the negative tests below hold whatever else is being changed meanwhile).
fn new_problems(sources: &Sources, rows: &[(String, Vec<String>)]) -> Vec<String> {
    let before = row_problems(&Sources::read(), &readme_lists(), TABLE, CONDITIONAL);
    row_problems(sources, rows, TABLE, CONDITIONAL)
        .into_iter()
        .filter(|p| !before.contains(p))
        .collect()
}

#[test]
fn the_row_check_fails_when_a_script_gains_a_command() {
    let rows = readme_lists();
    // A script of the base row's gains an HKEYS, which the base list lacks.
    let mut sources = Sources::read();
    sources
        .scripts
        .get_mut("extend.lua")
        .unwrap()
        .push_str("\nlocal fields = redis.call(\"hkeys\", key)\n");
    let problems = new_problems(&sources, &rows);
    assert!(
        problems.contains(&"Base: extend.lua runs +hkeys, which the row does not grant".to_owned()),
        "{problems:#?}"
    );
    // extend.lua is also a lock of several's: that row lacks it too.
    assert_eq!(problems.len(), 2, "{problems:#?}");
    assert!(
        problems
            .iter()
            .all(|p| p.contains("extend.lua runs +hkeys"))
    );

    // A helper of the prelude gains one, even one called only through another helper
    // (below(), through fence_read()): every row whose scripts reach it, through it.
    let mut sources = Sources::read();
    sources.prelude = sources.prelude.replace(
        "local function below(a, b)\n",
        "local function below(a, b)\n  redis.pcall(\"hkeys\", \"x\")\n",
    );
    let problems = new_problems(&sources, &rows);
    for expected in [
        "Base: acquire.lua > fence_read() > below() runs +hkeys, which the row does not grant",
        "Lock modes: acquire_mode.lua > fence_read() > below() runs +hkeys, which the row does not grant",
    ] {
        assert!(
            problems.iter().any(|p| p == expected),
            "{expected}: {problems:#?}"
        );
    }
    assert!(
        problems.iter().all(|p| p.contains("below() runs +hkeys")),
        "{problems:#?}"
    );

    // A conditional helper gains one: only the row that turns it on.
    let mut sources = Sources::read();
    sources.prelude = sources.prelude.replace(
        "return redis.pcall(\"exists\", window_key) == 1",
        "redis.pcall(\"hkeys\", window_key)\n  return redis.pcall(\"exists\", window_key) == 1",
    );
    let problems = new_problems(&sources, &rows);
    assert_eq!(
        problems,
        ["Windows: acquire.lua > window_open() runs +hkeys, which the row does not grant"],
    );

    // The guide's downgrade row without +hkeys (the bug this check is for).
    let mut without = rows.clone();
    for (feature, list) in &mut without {
        if feature.starts_with("A downgrade") {
            list.retain(|c| c != "+hkeys");
        }
    }
    let problems = new_problems(&Sources::read(), &without);
    assert_eq!(
        problems,
        ["A downgrade: downgrade.lua runs +hkeys, which the row does not grant"],
    );
}

#[test]
fn the_row_check_fails_on_an_unlisted_script_a_missing_one_and_an_unnamed_command() {
    let rows = readme_lists();
    let mut sources = Sources::read();
    sources.scripts.insert(
        "brand_new.lua".to_owned(),
        "return redis.call(\"get\", KEYS[1])\n".to_owned(),
    );
    sources.scripts.remove("noop.lua");
    sources
        .scripts
        .get_mut("keep.lua")
        .unwrap()
        .push_str("\nlocal which = ARGV[9]\nredis.call(which, key)\nlocal f = redis.pcall\n");
    let problems = new_problems(&sources, &rows);
    let expected = [
        "brand_new.lua is listed by no row: add it to the rows whose feature runs it",
        "keep.lua: redis.call(which, key): no command named",
        "keep.lua: redis.pcall used as a value",
        "the table names noop.lua, which is not under scripts/",
    ];
    let mut problems = problems;
    problems.sort();
    assert_eq!(problems, expected);

    // A row that grants what nothing runs, and a guide row the table does not place.
    let mut rows = readme_lists();
    rows[0].1.push("+flushall".to_owned());
    rows.push(("Something new".to_owned(), vec!["+get".to_owned()]));
    let mut problems = new_problems(&Sources::read(), &rows);
    problems.sort();
    assert_eq!(
        problems,
        [
            "Base: grants +flushall, which none of its scripts runs and the client does not send",
            "guide row \"Something new\" has 0 table entries: say which scripts it makes work",
        ],
    );
}

#[test]
fn the_command_reader_names_what_lua_runs() {
    let helpers: BTreeSet<String> = ["node_now", "node_now_or_nil"].map(str::to_owned).into();
    let code = strip_comments(
        r#"
-- redis.call("flushall") in a comment is not run
--[[ nor redis.call("flushdb")
  in a long one ]]
local id = string.match(redis.call("info", "server"), "run_id:(%x+)")
local list = redis.pcall ( 'CLIENT', 'LIST' )
local command = "zrem"
if in_hash == "1" then command = "hdel" end
redis.pcall(command, key, marker)
local digest = redis.sha1hex(token)
local now = node_now_or_nil()
"#,
    );
    let found = runs(&code, &helpers);
    let commands: Vec<&str> = found.commands.iter().map(String::as_str).collect();
    assert_eq!(
        commands,
        ["+client|list", "+hdel", "+info", "+zrem"],
        "{found:?}"
    );
    assert_eq!(
        found.helpers.iter().collect::<Vec<_>>(),
        ["node_now_or_nil"]
    );
    assert!(found.unnamed.is_empty(), "{found:?}");
}

/// Three servers whose only user is `locker`, allowed `commands` on `lock:*` keys and
/// channels.
fn servers(commands: &[String]) -> Vec<RedisServer> {
    servers_with(commands, &[])
}

/// [`servers`], with `extra` server arguments.
fn servers_with(commands: &[String], extra: &[&str]) -> Vec<RedisServer> {
    let mut acl = vec![
        "--user",
        "locker",
        "on",
        ">s3cret",
        "~lock:*",
        "resetchannels",
        "&lock:*",
        "-@all",
    ];
    acl.extend(commands.iter().map(String::as_str));
    acl.extend(["--user", "default", "off"]);
    acl.extend(extra);
    (0..3).map(|_| RedisServer::start_with(&acl)).collect()
}

/// A handle as `locker`, with the key prefix the ACL allows and `quarantine` (its default ttl
/// is 1 s, which a quarantine must cover).
async fn handle_with(servers: &[RedisServer], quarantine: Duration) -> Redlock {
    Redlock::builder()
        .nodes(
            servers
                .iter()
                .map(|s| format!("redis://locker:s3cret@127.0.0.1:{}", s.port())),
        )
        .key_prefix("lock:")
        .quarantine(quarantine)
        .lock_options(LockOptions::default().ttl(Duration::from_secs(1)))
        .build()
        .await
        .unwrap()
}

async fn handle(servers: &[RedisServer]) -> Redlock {
    handle_with(servers, Duration::ZERO).await
}

/// The retry delay of [`wake_up_wait`]'s waiter.
const PATIENCE: Duration = Duration::from_secs(4);

/// The locker's URLs of `servers`.
fn urls(servers: &[RedisServer]) -> Vec<String> {
    servers
        .iter()
        .map(|s| format!("redis://locker:s3cret@127.0.0.1:{}", s.port()))
        .collect()
}

/// `command args` on every server, as the locker.
async fn on_each(
    servers: &[RedisServer],
    command: &'static str,
    args: &[&str],
) -> Vec<fred::types::Value> {
    on_each_at(urls(servers), command, args).await
}

/// A second user of the servers allowed everything, to watch the nodes without the commands
/// of the row under test ([`servers_with`]'s `extra`).
const ADMIN: [&str; 7] = ["--user", "admin", "on", ">admin", "~*", "&*", "+@all"];

/// The admin's ([`ADMIN`]) URLs of `servers`.
fn admin_urls(servers: &[RedisServer]) -> Vec<String> {
    servers
        .iter()
        .map(|s| format!("redis://admin:admin@127.0.0.1:{}", s.port()))
        .collect()
}

/// `command args` at each of `urls`.
async fn on_each_at(
    urls: Vec<String>,
    command: &'static str,
    args: &[&str],
) -> Vec<fred::types::Value> {
    use fred::interfaces::ClientLike;
    use fred::types::{ClusterHash, CustomCommand, Value};
    let mut out = Vec::new();
    for url in urls {
        let client = redlock_tests::plain_client(&url).await;
        let cmd = CustomCommand::new_static(command, ClusterHash::FirstKey, false);
        let args: Vec<Value> = args.iter().map(|a| Value::from(*a)).collect();
        out.push(client.custom(cmd, args).await.unwrap());
    }
    out
}

/// How long a waiter whose retry delay is [`PATIENCE`] waits for a lock released once it is
/// queued: well under a second when the release's message wakes it.
async fn wake_up_wait(
    servers: &[RedisServer],
    a: &Redlock,
    b: &Redlock,
    resource: &str,
) -> Duration {
    let guard = a.lock(resource).await.unwrap();
    let patient = LockOptions::default()
        .retry_count(2)
        .retry_delay(PATIENCE)
        .retry_jitter(Duration::ZERO);
    let (b, resource_owned) = (b.clone(), resource.to_owned());
    let waiter = tokio::spawn(async move {
        let started = Instant::now();
        let guard = b.lock_with(&resource_owned, &patient).await.unwrap();
        let waited = started.elapsed();
        guard.release().await.unwrap();
        waited
    });
    // Released once the waiter is queued (`ZCARD` of the queue, as the locker), so that it
    // is a release that wakes it, however slow the machine.
    let queue = redlock_tests::waiters_key(&a.key_for(resource));
    within("the waiter to queue", async {
        loop {
            let queued = on_each(servers, "ZCARD", &[&queue]).await;
            if queued.iter().any(|n| n.as_i64().unwrap_or(0) > 0) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    guard.release().await.unwrap();
    within("the waiter", waiter).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_base_list_alone_locks_extends_auto_extends_and_releases() {
    let servers = servers(&list("Base"));
    let (a, b) = (handle(&servers).await, handle(&servers).await);
    let once = LockOptions::default()
        .retry_count(0)
        .retry_delay(Duration::ZERO);

    // Plain lock, extension and release.
    let guard = a.lock("acl:plain").await.unwrap();
    assert_eq!(guard.key(), "lock:acl:plain");
    guard.extend(Duration::from_secs(20)).await.unwrap();
    // The holder's remaining ttl (PTTL under pcall): about the extension's 20 s.
    let busy = b.lock_with("acl:plain", &once).await.unwrap_err();
    assert!(busy.is_busy(), "{busy}");
    let after = busy.retry_after().expect("PTTL allowed");
    assert!(after > Duration::from_secs(15), "{after:?}");
    assert!(guard.release().await.unwrap().was_held());
    b.lock_with("acl:plain", &once)
        .await
        .unwrap()
        .release()
        .await
        .unwrap();

    // Several resources at once (GET to see a key, SET, PEXPIRE, DEL), extended and released.
    let many = a.lock_many(&["acl:x", "acl:y"]).await.unwrap();
    many.extend(Duration::from_secs(20)).await.unwrap();
    let busy = b.lock_with("acl:y", &once).await.unwrap_err();
    assert!(busy.is_busy(), "{busy}");
    assert!(many.release().await.unwrap().was_held());
    b.lock_many_with(&["acl:x", "acl:y"], &once)
        .await
        .unwrap()
        .release()
        .await
        .unwrap();

    // Detach and resume (the swap: GET, SET KEEPTTL, PTTL), then release by the new token.
    let detached = a.lock("acl:handed").await.unwrap().detach().unwrap();
    let resumed = b.resume(&detached).await.unwrap();
    assert!(resumed.release().await.unwrap().was_held());

    // Auto-extension: a 1 s lock held for 2.5 s, another handle refused all along.
    let auto = LockOptions::default()
        .ttl(Duration::from_secs(1))
        .auto_extend(true);
    let guard = a.lock_with("acl:auto", &auto).await.unwrap();
    for _ in 0..5 {
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert!(guard.is_valid() && !guard.lost().is_lost());
        let busy = b.lock_with("acl:auto", &once).await.unwrap_err();
        assert!(busy.is_busy(), "{busy}");
    }
    assert!(guard.release().await.unwrap().was_held());

    // The minimum hold (KEEP: GET, then SET PX): released at once, the key stays.
    let min_hold = LockOptions::default()
        .ttl(Duration::from_secs(5))
        .lock_at_least_for(Duration::from_secs(3));
    let guard = a.lock_with("acl:min-hold", &min_hold).await.unwrap();
    assert!(guard.release().await.unwrap().was_held());
    let busy = b.lock_with("acl:min-hold", &once).await.unwrap_err();
    assert!(busy.is_busy(), "{busy}");

    // Fencing: tokens go up.
    let fenced = LockOptions::default().fencing(true);
    let first = a.lock_with("acl:fenced", &fenced).await.unwrap();
    let t1 = first.fencing_token().unwrap();
    first.release().await.unwrap();
    let second = b.lock_with("acl:fenced", &fenced).await.unwrap();
    assert!(second.fencing_token().unwrap() > t1);
    second.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_node_checks_need_their_row() {
    // Nodes that can evict lock keys: only INFO shows it.
    let evicting = ["--maxmemory", "100mb", "--maxmemory-policy", "allkeys-lru"];
    let servers = servers_with(&list("The node checks"), &evicting);
    let built = Redlock::builder()
        .nodes(urls(&servers))
        .key_prefix("lock:")
        .build()
        .await;
    let error = built.expect_err("refused");
    assert!(
        matches!(error, BuildError::EvictionPolicy { .. }),
        "{error}"
    );
    // The control: the base list alone cannot see it (skipped with a warning).
    let servers = servers_with(&list("Base"), &evicting);
    let built = Redlock::builder()
        .nodes(urls(&servers))
        .key_prefix("lock:")
        .build()
        .await;
    assert!(built.is_ok());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_quarantine_works_with_its_row() {
    let servers = servers(&list("The quarantine"));
    // Nodes no handle with the quarantine has seen sit out one quarantine, from the build.
    let quarantine = Duration::from_secs(2);
    let c = handle_with(&servers, quarantine).await;
    let short = LockOptions::default()
        .ttl(Duration::from_secs(1))
        .retry_count(0);
    let refused = c.lock_with("acl:quarantine", &short).await.unwrap_err();
    assert!(refused.is_unavailable(), "{refused}");
    assert!(refused.to_string().contains("in quarantine"), "{refused}");
    // Once it has passed, it grants.
    let patient = short.clone().wait_timeout(Duration::from_secs(5));
    let granted = within(
        "the quarantine's end",
        c.lock_with("acl:quarantine", &patient),
    )
    .await;
    granted.unwrap().release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_are_woken_with_their_row() {
    let servers = servers(&list("Waking waiters"));
    let (a, b) = (handle(&servers).await, handle(&servers).await);
    // Woken by the release's message, not the 4 s retry delay.
    let waited = wake_up_wait(&servers, &a, &b, "acl:queue").await;
    assert!(waited < Duration::from_secs(2), "{waited:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_publish_waiters_fall_back_to_their_delay_and_releases_still_work() {
    // The same row without PUBLISH: no release can wake the waiter (its scripts run PUBLISH
    // under pcall, so they still release); it attempts again only after its retry delay.
    let mut without = list("Waking waiters");
    without.retain(|c| c != "+publish");
    let servers = servers(&without);
    let (a, b) = (handle(&servers).await, handle(&servers).await);
    let waited = wake_up_wait(&servers, &a, &b, "acl:noqueue").await;
    assert!(
        waited >= PATIENCE - Duration::from_millis(100),
        "{waited:?}"
    );
}

/// Two handles hand `resource` over to each other for `run` (20 ms holds, each queued while
/// the other holds) while a foreign client polls it with `SET NX PX` every 10 ms, as the
/// locker; how many times the foreign client got it.
async fn foreign_gets_in(servers: &[RedisServer], run: Duration) -> usize {
    let handle = || {
        Redlock::builder()
            .nodes(urls(servers))
            .key_prefix("lock:")
            .foreign_window(Duration::from_millis(60))
            .lock_options(LockOptions::default().ttl(Duration::from_secs(1)))
            .build()
    };
    let (a, b) = (handle().await.unwrap(), handle().await.unwrap());
    let key = a.key_for("acl:windows");
    let until = Instant::now() + run;
    let holder = move |redlock: Redlock| async move {
        let patient = LockOptions::default()
            .ttl(Duration::from_secs(1))
            .retry_delay(Duration::from_millis(500))
            .wait_timeout(Duration::from_secs(5));
        while Instant::now() < until {
            let guard = redlock.lock_with("acl:windows", &patient).await.unwrap();
            tokio::time::sleep(Duration::from_millis(20)).await;
            guard.release().await.unwrap();
        }
    };
    let holders = tokio::spawn(async move { tokio::join!(holder(a), holder(b)) });
    let mut got = 0;
    while Instant::now() < until {
        let replies = on_each(servers, "SET", &[&key, "foreign", "NX", "PX", "30"]).await;
        if replies
            .iter()
            .filter(|r| r.as_str().is_some_and(|s| s == "OK"))
            .count()
            >= 2
        {
            got += 1;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    within("the holders", holders).await.unwrap();
    got
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn windows_open_for_foreign_clients_with_their_row() {
    let servers = servers(&list("Windows"));
    let got = foreign_gets_in(&servers, Duration::from_millis(1_500)).await;
    assert!(got > 0, "the foreign client never got the key");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_modes_work_with_their_row() {
    let servers = servers(&list("Lock modes"));
    let (a, b) = (handle(&servers).await, handle(&servers).await);
    let once = LockOptions::default().retry_count(0);
    // Readers share, a writer is refused while they hold, then gets it.
    let ttl = Duration::from_secs(5);
    let r1 = a
        .lock_mode("acl:modes", Mode::ProtectedRead, ttl)
        .await
        .unwrap();
    let r2 = b
        .lock_mode("acl:modes", Mode::ProtectedRead, ttl)
        .await
        .unwrap();
    let writer = once.clone();
    let refused = b
        .lock_mode_with("acl:modes", Mode::Exclusive, &writer)
        .await
        .unwrap_err();
    assert!(refused.is_busy(), "{refused}");
    r1.extend(Duration::from_secs(5)).await.unwrap();
    assert!(r1.release().await.unwrap().was_held());
    assert!(r2.release().await.unwrap().was_held());
    let w = b
        .lock_mode_with("acl:modes", Mode::Exclusive, &writer)
        .await
        .unwrap();
    w.extend(Duration::from_secs(5)).await.unwrap();
    w.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn semaphores_work_with_their_row() {
    let servers = servers(&list("Counting semaphores"));
    let (a, b) = (handle(&servers).await, handle(&servers).await);
    let permits = LockOptions::default().ttl(Duration::from_secs(5));
    let (sem_a, sem_b) = (a.semaphore("acl:sem", 2), b.semaphore("acl:sem", 2));
    let first = sem_a.acquire_with(&permits).await.unwrap();
    let second = sem_b.acquire_with(&permits).await.unwrap();
    let once = permits.clone().retry_count(0);
    let refused = sem_b.acquire_with(&once).await.unwrap_err();
    assert!(refused.is_busy(), "{refused}");
    second.extend(Duration::from_secs(5)).await.unwrap();
    // A waiter queued on every node is woken by a release, not its 4 s retry delay.
    let patient = permits
        .clone()
        .retry_count(2)
        .retry_delay(PATIENCE)
        .retry_jitter(Duration::ZERO);
    let waiter = {
        let b = b.clone();
        tokio::spawn(async move {
            let started = Instant::now();
            let guard = b
                .semaphore("acl:sem", 2)
                .acquire_with(&patient)
                .await
                .unwrap();
            let waited = started.elapsed();
            guard.release().await.unwrap();
            waited
        })
    };
    let queue = format!("{}\0redlock:permit-waiters", a.key_for("acl:sem"));
    within("the waiter to queue", async {
        loop {
            let queued = on_each(&servers, "ZCARD", &[&queue]).await;
            if queued.iter().all(|n| n.as_i64().unwrap_or(0) > 0) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    assert!(first.release().await.unwrap().was_held());
    let waited = within("the waiter", waiter).await.unwrap();
    assert!(waited < Duration::from_secs(2), "{waited:?}");
    assert!(second.release().await.unwrap().was_held());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspect_works_with_its_row() {
    let servers = servers(&list("`Redlock::inspect`"));
    let a = handle(&servers).await;
    let guard = a.lock("acl:inspect").await.unwrap();
    let status = a.inspect("acl:inspect").await.unwrap();
    // Every node answers with the row's commands. The lock returned at a quorum, so the
    // third node's grant may still be on its way (another connection): a quorum holds it.
    let mut holding_nodes = 0;
    for node in &status.nodes {
        let holding = node.read.as_ref().unwrap();
        if holding.holder == Holder::Plain {
            assert!(holding.ttl.is_some(), "{holding:?}");
            holding_nodes += 1;
        } else {
            assert_eq!(holding.holder, Holder::None, "{holding:?}");
        }
    }
    assert!(holding_nodes >= 2, "{status:?}");
    assert!(status.is_held());
    guard.release().await.unwrap();
}

/// The fields of `key`'s hash on each node, with their values, as the admin ([`ADMIN`]) sees
/// them (none for a key that is not a hash).
async fn entries_on_each(servers: &[RedisServer], key: &str) -> Vec<HashMap<String, String>> {
    on_each_at(admin_urls(servers), "HGETALL", &[key])
        .await
        .into_iter()
        .map(|reply| reply.convert().unwrap())
        .collect()
}

/// Whether every node has a subscriber of `channel` (`PUBSUB NUMSUB`, as the admin).
async fn listened_to_everywhere(servers: &[RedisServer], channel: &str) -> bool {
    on_each_at(admin_urls(servers), "PUBSUB", &["NUMSUB", channel])
        .await
        .into_iter()
        .all(|reply| reply.into_array().get(1).and_then(|n| n.as_i64()) > Some(0))
}

/// Polls `done` every 10 ms until it holds, within [`within`]'s bound.
/// Waits (at most 2 s) until `count()` reaches `all`, and returns the last count: a lock
/// returns at a quorum, and a grant the node timeout cut on a loaded machine never lands on
/// the other nodes, so the caller asserts on what the nodes hold then.
async fn settle_count<F: Future<Output = usize>>(
    all: usize,
    mut count: impl FnMut() -> F,
) -> usize {
    let deadline = Instant::now() + Duration::from_secs(2);
    loop {
        let now = count().await;
        if now >= all || Instant::now() >= deadline {
            return now;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

async fn until<F: Future<Output = bool>>(what: &str, mut done: impl FnMut() -> F) {
    within(what, async {
        while !done().await {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
}

/// A downgrade with exactly the base list and its row: `Ok` (a command its script runs and
/// the row lacks made it `Unavailable` after the nodes had converted, and woke nobody),
/// converted on every node, and the reader waiting behind the writer woken by it: its "*" on
/// the waiters' channel, and the reader's grant well within its 4 s retry delay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_downgrade_with_its_row_converts_and_wakes_a_waiting_reader() {
    use fred::interfaces::{EventInterface, PubsubInterface};
    let servers = servers_with(&list("A downgrade"), &ADMIN);
    let (a, b) = (handle(&servers).await, handle(&servers).await);
    let ttl = Duration::from_secs(10);
    let key = a.key_for("acl:downgrade");
    let channel = redlock_tests::waiters_key(&key);
    let writer = a
        .lock_mode("acl:downgrade", Mode::Exclusive, ttl)
        .await
        .unwrap();
    let reader = LockOptions::default()
        .ttl(ttl)
        .retry_count(2)
        .retry_delay(PATIENCE)
        .retry_jitter(Duration::ZERO);
    let waiter = tokio::spawn(async move {
        let guard = b
            .lock_mode_with("acl:downgrade", Mode::ProtectedRead, &reader)
            .await
            .unwrap();
        let granted = Instant::now();
        guard.release().await.unwrap();
        granted
    });
    // The reader waits: the writer's entry and the reader's on a quorum of nodes (each
    // returns at a quorum; a grant the node timeout cut on a loaded machine never lands on the
    // last node), and the reader listening on every node's channel.
    let quorum = servers.len() / 2 + 1;
    until("the reader to wait", || async {
        let entries = entries_on_each(&servers, &key).await;
        let waiting = entries
            .iter()
            .filter(|fields| {
                fields.keys().any(|f| f.starts_with('~'))
                    && fields.values().any(|v| v.starts_with("EX "))
            })
            .count();
        waiting >= quorum && listened_to_everywhere(&servers, &channel).await
    })
    .await;
    // The wake-up, watched from outside too, on every node: a node publishes it when it
    // converts while the reader's entry is there. Not necessarily node 0: the writer's grant
    // there may have been cut, or the reader's second attempt (made once it listens) may land
    // after the conversion of the other two, be granted by them, and leave its entry on every
    // node before node 0 converts. But some node of the quorum that let the reader in also
    // had its entry when it converted.
    let (published, mut messages) = tokio::sync::mpsc::unbounded_channel();
    for url in admin_urls(&servers) {
        let watcher = redlock_tests::plain_client(&url).await;
        let mut received = watcher.message_rx();
        watcher.subscribe(channel.as_str()).await.unwrap();
        let published = published.clone();
        tokio::spawn(async move {
            let _watching = watcher;
            while let Ok(message) = received.recv().await {
                let _ = published.send(message);
            }
        });
    }

    let downgraded = Instant::now();
    writer.downgrade(Mode::ProtectedRead).await.unwrap();
    let message = within("the downgrade's wake-up", messages.recv())
        .await
        .unwrap();
    assert_eq!(message.value.as_str().as_deref(), Some("*"));
    let granted = within("the woken reader", waiter).await.unwrap();
    let waited = granted.duration_since(downgraded);
    assert!(waited < Duration::from_secs(2), "{waited:?}");
    // Converted in place: the writer holds it as a reader on a quorum, nobody in EX anywhere.
    until("the nodes to convert", || async {
        let entries = entries_on_each(&servers, &key).await;
        let readers = entries
            .iter()
            .filter(|fields| fields.values().any(|v| v.starts_with("PR ")))
            .count();
        readers >= quorum
            && !entries
                .iter()
                .any(|fields| fields.values().any(|v| v.starts_with("EX ")))
    })
    .await;
    assert!(writer.release().await.unwrap().was_held());
}

/// Detach and resume of a lock in a mode with exactly the base list and the downgrade's row
/// (the `mode` branch of the swap).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_in_a_mode_is_detached_and_resumed_with_the_downgrade_row() {
    let servers = servers(&list("A downgrade"));
    let (a, b) = (handle(&servers).await, handle(&servers).await);
    let ttl = Duration::from_secs(10);
    let detached = a
        .lock_mode("acl:handed-mode", Mode::ProtectedWrite, ttl)
        .await
        .unwrap()
        .detach()
        .unwrap();
    let resumed = b.resume(&detached).await.unwrap();
    assert_eq!(resumed.mode(), Some(Mode::ProtectedWrite));
    resumed.extend(ttl).await.unwrap();
    assert!(resumed.release().await.unwrap().was_held());
}

/// The operator's user: exactly the base list and the force-release row, on `lock:*` keys
/// and channels (beside the locker, whose holders it breaks).
fn operator_args() -> Vec<String> {
    let mut acl: Vec<String> = [
        "--user",
        "operator",
        "on",
        ">operator",
        "~lock:*",
        "resetchannels",
        "&lock:*",
        "-@all",
    ]
    .map(str::to_owned)
    .into();
    acl.extend(list("Force-release"));
    acl
}

/// A handle as the operator ([`operator_args`]).
async fn operator_handle(servers: &[RedisServer]) -> Redlock {
    Redlock::builder()
        .nodes(
            servers
                .iter()
                .map(|s| format!("redis://operator:operator@127.0.0.1:{}", s.port())),
        )
        .key_prefix("lock:")
        .build()
        .await
        .unwrap()
}

/// Servers whose locker has `commands`, with the operator and the admin beside it.
fn servers_with_operator(commands: &[String]) -> Vec<RedisServer> {
    let mut extra = operator_args();
    extra.extend(ADMIN.map(str::to_owned));
    let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
    servers_with(commands, &extra)
}

/// Force-release with exactly the base list and its row: a plain holder removed on every
/// node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_force_release_row_breaks_a_lock() {
    let servers = servers_with_operator(&list("Base"));
    let (a, operator) = (handle(&servers).await, operator_handle(&servers).await);
    let key = a.key_for("acl:stuck");
    let guard = a.lock("acl:stuck").await.unwrap();
    // Held on every node it will land on first (the lock returns at a quorum).
    let holding = settle_count(servers.len(), || async {
        on_each_at(admin_urls(&servers), "GET", &[&key])
            .await
            .iter()
            .filter(|v| v.as_str().is_some())
            .count()
    })
    .await;
    assert!(holding > servers.len() / 2, "held on {holding} nodes");
    let report = operator.force_release("acl:stuck").await.unwrap();
    assert!(
        report.removed == holding && report.answered == 3,
        "{report:?}"
    );
    assert!(guard.extend(Duration::from_secs(5)).await.is_err());
}

/// Force-release with exactly the base list and its row, of a holder in a mode with a
/// waiter's entry beside it (the hash outlives the holder, so its expiry is moved: the
/// branch that runs `EXISTS`): removed on every node, and the waiter then gets it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_force_release_row_breaks_a_lock_in_a_mode_beside_its_waiter() {
    let servers = servers_with_operator(&list("Lock modes"));
    let (a, b) = (handle(&servers).await, handle(&servers).await);
    let operator = operator_handle(&servers).await;
    let ttl = Duration::from_secs(30);
    let key = a.key_for("acl:stuck-mode");
    let holder = a
        .lock_mode("acl:stuck-mode", Mode::Exclusive, ttl)
        .await
        .unwrap();
    let reader = LockOptions::default()
        .ttl(ttl)
        .retry_count(2)
        .retry_delay(PATIENCE)
        .retry_jitter(Duration::ZERO);
    let waiter = tokio::spawn(async move {
        let guard = b
            .lock_mode_with("acl:stuck-mode", Mode::ProtectedRead, &reader)
            .await
            .unwrap();
        guard.release().await.unwrap();
    });
    // The holder and the waiter on a quorum (each returns at a quorum).
    let quorum = servers.len() / 2 + 1;
    until("the holder and the waiter on a quorum", || async {
        let both = entries_on_each(&servers, &key)
            .await
            .iter()
            .filter(|fields| {
                fields.keys().any(|f| f.starts_with('~'))
                    && fields.values().any(|v| v.starts_with("EX "))
            })
            .count();
        both >= quorum
    })
    .await;
    let holding = settle_count(servers.len(), || async {
        entries_on_each(&servers, &key)
            .await
            .iter()
            .filter(|fields| fields.values().any(|v| v.starts_with("EX ")))
            .count()
    })
    .await;
    let report = operator.force_release("acl:stuck-mode").await.unwrap();
    assert!(
        report.removed == holding && report.answered == 3,
        "{report:?}"
    );
    assert!(holder.extend(ttl).await.is_err());
    within("the waiter, after the force-release", waiter)
        .await
        .unwrap();
}
