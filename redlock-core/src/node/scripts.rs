//! Every Lua script the lock runs on a node, in one place, and the layouts they keep.
//!
//! Each script is one `.lua` file kept beside the code that sends it (the kernel's steps in
//! `kernel/scripts/`, a slice's own in its folder; the shared helpers and the dispatch script
//! in `scripts/` here), loaded with `include_str!`. A file opens with
//! what the script does, its `KEYS` and `ARGV` by name, what it returns and the Redlock step
//! it is, then binds its keys and arguments to named locals. The helpers the scripts share
//! (the quarantine check, the window and streak reads, the fencing read, the decimal
//! comparisons, the parser of mode entries, the node's clock, the refusing holder's digest)
//! are Lua functions in `scripts/prelude.lua`, placed once at the top of the dispatch script
//! ([`BATCH`]), the only script a node is sent.
//!
//! A plain lock is a string at the lock key holding its holder's token (`SET NX PX`). Its
//! bookkeeping keys follow it ([`keys`](crate::keys)): the waiter queue (a sorted set scored by
//! wait start, also the hand-over channel), the fencing counter, the streak start and the
//! window for foreign clients.
//!
//! A resource held in modes is a hash at the resource's key: one field per holder (its token),
//! valued `"<MODE> <expiry>"`, and one field per waiter that was refused (its marker, `~…`),
//! valued `"<MODE> <expiry> <since>"`. Expiries are absolute milliseconds of the node's clock
//! (`TIME`): Redis 7.0 has no per-field ttl, so each script drops the expired entries it reads,
//! and keeps the key's own expiry at the latest entry's, so the key disappears with its last
//! holder even if nobody comes back. A string at the key is a plain holder (or a reservation
//! for one of its waiters): it counts as exclusive, and since a string cannot carry other
//! holders it refuses every mode, NL included.
//!
//! A hash at the key is ours only while every field in it is one of our entries: a holder's
//! field is a token (40 lowercase hex digits) valued `"<MODE> <expiry>"`, a waiter's is `~` and
//! 16 hex digits valued `"<MODE> <expiry> <since>"`, `<MODE>` one of the six modes and the
//! numbers decimal (`mode_entry` in `scripts/prelude.lua`). Any other field, or a key of
//! another type than a string or a hash, was written by someone else (an application sharing
//! the nodes without a key prefix): every mode script leaves such a key as it is, and
//! [`ACQUIRE_MODE`] answers `-2` (a foreign key) instead of a vote. The mode scripts delete,
//! expire and rewrite only entries they parse as ours, and set or move the key's expiry only
//! while every field is ours.
//!
//! Waiters' entries bound writer starvation: a request is also refused by an incompatible
//! waiter that started waiting before it (scores from the waiters' own clocks, the same on
//! every node, so the order is one across nodes and the first waiter is never refused by
//! another's entry). A stream of readers therefore cannot pass a waiting writer.
//!
//! A counting semaphore of K permits is K plain locks on its slots' keys
//! ([`keys`](crate::keys): the lock key followed by `permit:<i>`), whose waiters share one
//! queue (`permit-waiters`, with `permit-alive`: until when each waiter counts, on the node's
//! clock). [`ACQUIRE_PERMIT`] takes the slot a hand-over reserved for the waiter, or the first
//! free slot with `SET NX PX` unless as many earlier waiters as free slots still count; a held
//! slot is released, extended and handed over by the plain lock's scripts, and what a failed
//! (or partly granted) attempt took is released by [`RELEASE`] over every slot, one call per
//! node.
//!
//! Hand-over messages, published on the waiter queue's key: `"<named> <next>"` (the key is
//! reserved for the named waiter), `"<named> <next> <window_ms>"` (a window for foreign clients
//! opened; the named waiter attempts after it), or [`WAKE_ALL`].

/// One of the lock's Lua scripts: its body, what it may do to a holder, and its place in the
/// dispatch script ([`BATCH`]), which is the only script a node is sent.
#[derive(Debug)]
pub(crate) struct Script {
    /// Its index in [`SCRIPTS`] (checked by a test), which names it in a batch.
    pub(crate) id: usize,
    /// What it may do to a holder's entry, which fixes the check it must make first (read by
    /// the test that holds every script to it).
    #[cfg_attr(not(test), allow(dead_code))]
    pub(crate) effect: Effect,
    /// The body: it reads its own `KEYS` and `ARGV`, and returns as a script would.
    pub(crate) source: &'static str,
}

impl Script {
    /// The script at index `id` of [`SCRIPTS`], with `effect` and body `source`.
    pub(crate) const fn new(id: usize, effect: Effect, source: &'static str) -> Self {
        Self { id, effect, source }
    }
}

/// What a script may do to a holder's entry at a lock key. Every script declares one, and a
/// test holds its body to the check that effect needs ([`Effect::check`]): nothing grants a
/// lock without the quarantine check, and nothing deletes, converts, extends or swaps a
/// holder's entry without comparing the token (or the holder's digest) it was given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Effect {
    /// Grants a lock (a key, a mode entry, a slot, a reservation taken) to a new holder: it
    /// runs the quarantine check before it writes anything.
    Grants,
    /// Deletes, converts, extends or rewrites an existing holder's entry, or writes beside
    /// it: only the holder whose token (or digest) it was given.
    Compares,
    /// Both: a new holder takes the place of the one whose token it compared (a resumption).
    Swaps,
    /// Touches no holder's entry at a lock key (bookkeeping keys, waiters' own entries,
    /// reads).
    Neither,
}

impl Effect {
    /// Whether a script body makes the checks this effect needs, read from its text: `Err`
    /// names what is missing, and where. The text is read without its comments (`--` to the
    /// end of the line, outside a string; a long bracket, `--[[ ]]` or `[[ ]]`, is refused, as
    /// the check does not read it), and each command it runs (`redis.call(` or
    /// `redis.pcall(`, never under another name) is looked at on its own:
    /// - a grant: the quarantine check (`local q = quarantine_check(...)` then
    ///   `if q then return q end`, outside any block) comes before every write, whatever key;
    /// - a compare: every write of a holder's entry (any key but the bookkeeping ones, other
    ///   than a waiter's own `marker`) comes after a compare: a test of the token given
    ///   (`== token`, `~= token`, the token as a hash field) or of a named holder's digest;
    /// - neither: no write of a holder's entry at all.
    ///
    /// Text order only: a write in a helper function defined above the check counts as ahead
    /// of it, and a compare in one branch counts for the writes of the branches below it. The
    /// behavioural test (`tests/tests/effects.rs`) runs every script on a real server for what
    /// the text cannot show.
    #[cfg(test)]
    pub(crate) fn check(self, source: &str) -> Result<(), String> {
        const COMPARES: [&str; 5] = [
            "== token",
            "~= token",
            r#"("hget", key, token)"#,
            "named[redis.sha1hex(",
            "== marker",
        ];
        let code = lua_text::code(source)?;
        let commands = lua_text::commands(&code)?;
        let at = |c: &lua_text::Command<'_>| format!("line {}: `{}`", c.line, c.text);
        if matches!(self, Self::Grants | Self::Swaps) {
            let checked = lua_text::quarantine_guard(&code)?
                .ok_or_else(|| "a grant without the quarantine check".to_owned())?;
            if let Some(write) = commands.iter().find(|c| c.writes() && c.at < checked) {
                return Err(format!(
                    "{}: a write before the quarantine check",
                    at(write)
                ));
            }
        }
        if matches!(self, Self::Compares | Self::Swaps) {
            let first_compare = COMPARES
                .iter()
                .filter_map(|c| code.find(c))
                .min()
                .ok_or_else(|| {
                    "a holder's entry written without a compare of its token".to_owned()
                })?;
            if let Some(write) = commands
                .iter()
                .find(|c| c.writes_holder() && c.at < first_compare)
            {
                return Err(format!(
                    "{}: a holder's entry written before any compare of its token",
                    at(write)
                ));
            }
        }
        if self == Self::Neither
            && let Some(write) = commands.iter().find(|c| c.writes_holder())
        {
            return Err(format!(
                "{}: declared to touch no holder, but it writes the lock key",
                at(write)
            ));
        }
        Ok(())
    }
}

/// The reading of a script's text that [`Effect::check`] makes: its code without comments,
/// the commands it runs, and where its quarantine check is.
#[cfg(test)]
mod lua_text {
    /// Commands that write no key (reads, and `PUBLISH`): every other command, and one named
    /// by a variable, is taken for a write.
    const READS: [&str; 24] = [
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
        "zcard",
        "zrange",
        "zrangebyscore",
        "zscore",
        "zrank",
        "time",
        "info",
        "publish",
    ];

    /// The keys of a lock's bookkeeping (waiters, windows, streaks, fencing, quarantine), by
    /// the names the scripts bind them to: writing them writes no holder's entry.
    const BOOKKEEPING: [&str; 8] = [
        "window_key",
        "streak_key",
        "queue_key",
        "alive_key",
        "witness_key",
        "marker_key",
        "counter_key",
        "floor_key",
    ];

    /// Commands whose third argument is a field (or a member): with the waiter's own
    /// `marker` there, they write that waiter's entry, not a holder's.
    const FIELD_WRITES: [&str; 6] = ["hset", "hsetnx", "hdel", "zrem", "sadd", "srem"];

    /// One command a script runs, as its text shows it.
    #[derive(Debug)]
    pub(super) struct Command<'a> {
        /// Its offset in the code.
        pub(super) at: usize,
        /// Its line, from 1.
        pub(super) line: usize,
        /// Its text, `redis.call(...)`.
        pub(super) text: &'a str,
        /// The command's name, lowercase; `None` when a variable names it.
        name: Option<String>,
        /// Its first key argument's text, and its next argument's ("" if none).
        target: &'a str,
        field: &'a str,
    }

    impl Command<'_> {
        /// Whether it may write a key.
        pub(super) fn writes(&self) -> bool {
            self.name
                .as_deref()
                .is_none_or(|name| !READS.contains(&name))
        }

        /// Whether it may write a holder's entry: a write to a key that is not one of the
        /// bookkeeping keys, and not of the waiter's own `marker` field.
        pub(super) fn writes_holder(&self) -> bool {
            let field_write = self
                .name
                .as_deref()
                .is_none_or(|name| FIELD_WRITES.contains(&name));
            self.writes()
                && !BOOKKEEPING.contains(&self.target)
                && !(field_write && self.field == "marker")
        }
    }

    /// `source` without its comments: each `--` outside a string, to the end of its line, is
    /// cut (lines are kept, so line numbers are the file's). Err on a long bracket (a
    /// `--[[ ]]` comment or a `[[ ]]` string), which this reading does not follow.
    pub(super) fn code(source: &str) -> Result<String, String> {
        let mut out = String::with_capacity(source.len());
        for (n, line) in source.lines().enumerate() {
            let bytes = line.as_bytes();
            let (mut i, mut quote, mut cut) = (0, None::<u8>, line.len());
            while i < bytes.len() {
                let b = bytes[i];
                match quote {
                    Some(_) if b == b'\\' => i += 1,
                    Some(q) if b == q => quote = None,
                    Some(_) => {}
                    None if b == b'"' || b == b'\'' => quote = Some(b),
                    None if b == b'[' && matches!(bytes.get(i + 1), Some(b'[' | b'=')) => {
                        return Err(format!(
                            "line {}: a long bracket, which the check does not read",
                            n + 1
                        ));
                    }
                    None if b == b'-' && bytes.get(i + 1) == Some(&b'-') => {
                        if bytes.get(i + 2) == Some(&b'[')
                            && matches!(bytes.get(i + 3), Some(b'[' | b'='))
                        {
                            return Err(format!(
                                "line {}: a long comment, which the check does not read",
                                n + 1
                            ));
                        }
                        cut = i;
                        break;
                    }
                    None => {}
                }
                i += 1;
            }
            out.push_str(&line[..cut]);
            out.push('\n');
        }
        Ok(out)
    }

    /// Every command `code` runs, in order. Err on `redis.call` or `redis.pcall` not called
    /// at once (an alias of it would run commands this reading does not see).
    pub(super) fn commands(code: &str) -> Result<Vec<Command<'_>>, String> {
        let mut out = Vec::new();
        let mut from = 0;
        while let Some(found) = code[from..].find("redis.") {
            let at = from + found;
            let rest = &code[at + "redis.".len()..];
            from = at + "redis.".len();
            let after = if let Some(r) = rest.strip_prefix("pcall") {
                r
            } else if let Some(r) = rest.strip_prefix("call") {
                r
            } else {
                continue;
            };
            let line = 1 + code[..at].matches('\n').count();
            let open = code.len() - after.len();
            if !after.starts_with('(') {
                return Err(format!(
                    "line {line}: redis.call or redis.pcall not called where it is named"
                ));
            }
            let (args, close) = arguments(code, open)
                .ok_or_else(|| format!("line {line}: a command without its closing paren"))?;
            let name = args.first().and_then(|a| {
                let a = a.trim();
                let quoted = a.len() >= 2
                    && (a.starts_with('"') && a.ends_with('"')
                        || a.starts_with('\'') && a.ends_with('\''));
                quoted.then(|| a[1..a.len() - 1].to_ascii_lowercase())
            });
            out.push(Command {
                at,
                line,
                text: &code[at..=close],
                name,
                target: args.get(1).map_or("", |a| a.trim()),
                field: args.get(2).map_or("", |a| a.trim()),
            });
        }
        Ok(out)
    }

    /// The arguments of the call whose `(` is at `open`, split at its own commas, and the
    /// offset of its `)`.
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
                            args.push(&code[start..i]);
                            return Some((args, i));
                        }
                    }
                    b',' if depth == 1 => {
                        args.push(&code[start..i]);
                        start = i + 1;
                    }
                    _ => {}
                },
            }
            i += 1;
        }
        None
    }

    /// How many blocks (`function`, `if`, `do`, `repeat`, closed by `end` or `until`) are
    /// open at offset `at` of `code`.
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
                    while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_')
                    {
                        i += 1;
                    }
                    let dotted = start > 0 && bytes[start - 1] == b'.';
                    match &code[start..i] {
                        _ if dotted => {}
                        "function" | "if" | "do" | "repeat" => depth += 1,
                        "end" | "until" => depth -= 1,
                        _ => {}
                    }
                    continue;
                }
                None => {}
            }
            i += 1;
        }
        depth
    }

    /// Where the quarantine check's guard ends: the first `local q = quarantine_check(...)`
    /// outside any block, followed by the line `if q then return q end`. `None` when `code`
    /// never calls it; Err when it calls it otherwise (its refusal not returned, or inside a
    /// block, where it may be skipped).
    pub(super) fn quarantine_guard(code: &str) -> Result<Option<usize>, String> {
        let Some(call) = code.find("quarantine_check(") else {
            return Ok(None);
        };
        let line_no = 1 + code[..call].matches('\n').count();
        let start = code[..call].rfind('\n').map_or(0, |i| i + 1);
        let end = code[call..].find('\n').map_or(code.len(), |i| call + i);
        let line = code[start..end].trim();
        let bound = line
            .strip_prefix("local ")
            .and_then(|l| l.split_once(" = quarantine_check("))
            .filter(|(_, rest)| rest.ends_with(')'))
            .map(|(name, _)| name.trim());
        let Some(name) = bound else {
            return Err(format!(
                "line {line_no}: the quarantine check's answer is not bound (`local q = ...`)"
            ));
        };
        if depth(code, start) != 0 {
            return Err(format!(
                "line {line_no}: the quarantine check inside a block, where it may be skipped"
            ));
        }
        let guard = format!("if {name} then return {name} end");
        let mut offset = end;
        for next in code[end..].split_inclusive('\n') {
            offset += next.len();
            match next.trim() {
                "" => {}
                text if text == guard => return Ok(Some(offset)),
                _ => break,
            }
        }
        Err(format!(
            "line {line_no}: the quarantine check not followed by `{guard}`"
        ))
    }
}

/// The helpers the scripts share (`scripts/prelude.lua`), placed once at the top of the
/// dispatch script ([`BATCH`]) and of the inspect script.
const PRELUDE: &str = include_str!("scripts/prelude.lua");

/// The loop that runs a batch of calls (`scripts/dispatch.lua`), at the end of [`BATCH`].
const DISPATCH: &str = include_str!("scripts/dispatch.lua");

/// Compare-and-delete (`release.lua`).
pub(crate) static RELEASE: Script = Script::new(
    0,
    Effect::Compares,
    include_str!("../kernel/scripts/release.lua"),
);

/// Release with a fair hand-over to the longest waiter, or a window for foreign clients
/// (`release_handover.lua`).
pub(crate) static RELEASE_HANDOVER: Script = Script::new(
    1,
    Effect::Compares,
    include_str!("../kernel/scripts/release_handover.lua"),
);

/// Compare-and-pexpire, never shortening the key (`extend.lua`).
pub(crate) static EXTEND: Script = Script::new(
    2,
    Effect::Compares,
    include_str!("../kernel/scripts/extend.lua"),
);

/// A plain attempt, `SET key token NX PX ttl` (`acquire.lua`).
pub(crate) static ACQUIRE: Script = Script::new(
    3,
    Effect::Grants,
    include_str!("../kernel/scripts/acquire.lua"),
);

/// A queued waiter's attempt, joining the queue when refused (`acquire_queued.lua`),
/// which enforces [`MAX_QUEUED_WAITERS`](crate::MAX_QUEUED_WAITERS).
pub(crate) static ACQUIRE_QUEUED: Script = Script::new(
    4,
    Effect::Grants,
    include_str!("../kernel/scripts/acquire_queued.lua"),
);

/// The fencing write-back, a max register per resource (`fence.lua`).
pub(crate) static FENCE: Script = Script::new(
    5,
    Effect::Neither,
    include_str!("../kernel/scripts/fence.lua"),
);

/// An attempt in a lock mode (`acquire_mode.lua`).
pub(crate) static ACQUIRE_MODE: Script = Script::new(
    6,
    Effect::Grants,
    include_str!("../kernel/scripts/acquire_mode.lua"),
);

/// The extension of a lock held in a mode (`extend_mode.lua`).
pub(crate) static EXTEND_MODE: Script = Script::new(
    7,
    Effect::Compares,
    include_str!("../kernel/scripts/extend_mode.lua"),
);

/// The release of a lock held in a mode (`release_mode.lua`).
pub(crate) static RELEASE_MODE: Script = Script::new(
    8,
    Effect::Compares,
    include_str!("../kernel/scripts/release_mode.lua"),
);

/// A waiter leaves a resource's waiters (`leave.lua`).
pub(crate) static LEAVE: Script = Script::new(
    9,
    Effect::Neither,
    include_str!("../kernel/scripts/leave.lua"),
);

/// The release of a lock held for a minimum hold, keeping the key as [`KEPT`]
/// ([`LockOptions::lock_at_least_for`], `keep.lua`).
///
/// [`LockOptions::lock_at_least_for`]: crate::LockOptions::lock_at_least_for
pub(crate) static KEEP: Script = Script::new(
    10,
    Effect::Compares,
    include_str!("../kernel/scripts/keep.lua"),
);

/// A barrier ([`Node::flush`](super::Node::flush), `scripts/noop.lua`).
pub(crate) static NOOP: Script = Script::new(11, Effect::Neither, include_str!("scripts/noop.lua"));

/// The quarantine check alone, run when a handle is built (`quarantine.lua`).
pub(crate) static QUARANTINE: Script = Script::new(
    12,
    Effect::Neither,
    include_str!("../kernel/scripts/quarantine.lua"),
);

/// An attempt at one permit of a counting semaphore: the first free slot in the client's
/// order, `SET NX PX` ([`Redlock::semaphore`], `acquire_permit.lua`).
///
/// [`Redlock::semaphore`]: crate::Redlock::semaphore
pub(crate) static ACQUIRE_PERMIT: Script = Script::new(
    13,
    Effect::Grants,
    include_str!("../semaphore/acquire_permit.lua"),
);

/// A lock of several resources released by its holder, waking each key's listeners:
/// compare-and-delete over several keys in one call (`release_slots.lua`).
pub(crate) static RELEASE_SLOTS: Script = Script::new(
    14,
    Effect::Compares,
    include_str!("../kernel/scripts/release_slots.lua"),
);

/// A detached lock's token swapped for its resumed holder's (`resume.lua`).
pub(crate) static RESUME: Script =
    Script::new(15, Effect::Swaps, include_str!("../detach/resume.lua"));

/// A holder in a mode moves to a weaker mode (`downgrade.lua`).
pub(crate) static DOWNGRADE: Script = Script::new(
    16,
    Effect::Compares,
    include_str!("../kernel/scripts/downgrade.lua"),
);

/// An operator's release of the holders a [`FORCE_READ`] named (`force_release.lua`).
pub(crate) static FORCE_RELEASE: Script = Script::new(
    17,
    Effect::Compares,
    include_str!("../admin/force_release.lua"),
);

/// Who holds a resource on one node, as digests, read before a force-release
/// (`force_read.lua`).
pub(crate) static FORCE_READ: Script =
    Script::new(19, Effect::Neither, include_str!("../admin/force_read.lua"));

/// A holder's label written beside its lock (`owner.lua`).
pub(crate) static OWNER: Script = Script::new(
    18,
    Effect::Compares,
    include_str!("../kernel/scripts/owner.lua"),
);

/// What a key kept for its minimum hold holds ([`KEEP`]) begins with this, followed by `:`
/// and 16 hex digits of the SHA-1 of the holder's token ([`kept`]): never a token (tokens are
/// hex), and one hold's own, so that a force-release that read one kept key never deletes
/// another hold's.
pub(crate) const KEPT: &str = "redlock:kept";

/// What the key of `token`'s hold holds while it is kept for its minimum hold.
pub(crate) fn kept(token: &str) -> String {
    format!("{KEPT}:{}", &fred::util::sha1_hash(token)[..16])
}

/// What a wake-up message published by [`RELEASE_MODE`] says: every waiter may attempt.
pub(crate) const WAKE_ALL: &str = "*";

/// Every script, in [`Script::id`] order.
pub(crate) const SCRIPTS: [&Script; 20] = [
    &RELEASE,
    &RELEASE_HANDOVER,
    &EXTEND,
    &ACQUIRE,
    &ACQUIRE_QUEUED,
    &FENCE,
    &ACQUIRE_MODE,
    &EXTEND_MODE,
    &RELEASE_MODE,
    &LEAVE,
    &KEEP,
    &NOOP,
    &QUARANTINE,
    &ACQUIRE_PERMIT,
    &RELEASE_SLOTS,
    &RESUME,
    &DOWNGRADE,
    &FORCE_RELEASE,
    &OWNER,
    &FORCE_READ,
];

/// What a batched call that raised an error answers in place of its reply:
/// `{ERROR_MARKER, "<the error's text>"}` (no reply of ours is a table starting with a
/// string). Spelled out in `scripts/dispatch.lua` (checked by a test).
pub(crate) const ERROR_MARKER: &str = "redlock:error";

/// The dispatch script, the only script sent to a node: it runs a batch of calls to the
/// scripts above, in order, each on its own `KEYS` and `ARGV`, and answers one reply per call
/// ([`pipeline`](super::pipeline) sends the calls that concurrent lockers issue in one tick
/// as one `EVALSHA` of it). Its arguments and replies are described in
/// `scripts/dispatch.lua`.
pub(crate) struct Batch {
    /// The text: `prelude.lua`, then `script(id)`, which makes the function of the script
    /// of [`SCRIPTS`] at `id` (of its own `KEYS` and `ARGV`), then `dispatch.lua`.
    pub(crate) source: String,
    /// The SHA-1 of `source`, which `EVALSHA` names it by.
    pub(crate) sha1: String,
}

/// [`Batch`], built once from [`SCRIPTS`].
pub(crate) static BATCH: std::sync::LazyLock<Batch> = std::sync::LazyLock::new(|| {
    let mut source = String::from(PRELUDE);
    // Each script's function is made only when a call names it: making all of them at
    // every batch took more of the node's time than a plain attempt's own commands.
    source.push_str("local function script(id)\n");
    for script in SCRIPTS {
        source.push_str(&format!(
            "if id == {} then return function(KEYS, ARGV)\n{}\nend end\n",
            script.id, script.source
        ));
    }
    source.push_str("end\n");
    source.push_str(DISPATCH);
    let sha1 = fred::util::sha1_hash(&source);
    Batch { source, sha1 }
});

#[cfg(test)]
mod tests {
    use super::*;
    use crate::options::MAX_QUEUED_WAITERS;

    #[test]
    fn every_script_is_at_its_id() {
        for (i, script) in SCRIPTS.iter().enumerate() {
            assert_eq!(script.id, i);
        }
    }

    #[test]
    fn every_grant_runs_the_quarantine_check_and_every_holder_write_compares_the_token() {
        for script in SCRIPTS {
            if let Err(missing) = script.effect.check(script.source) {
                panic!("script {} ({:?}): {missing}", script.id, script.effect);
            }
        }
        // Resumption is a grant and a compare; force-release compares digests.
        assert_eq!(RESUME.effect, Effect::Swaps);
        assert_eq!(FORCE_RELEASE.effect, Effect::Compares);
    }

    #[test]
    fn the_effect_check_refuses_a_script_that_skips_its_check() {
        let set = r#"redis.call("set", key, next, "KEEPTTL")"#;
        let quarantine = "local q = quarantine_check(quarantine_ms, witness_key, marker_key)\n\
                          if q then return q end\n";
        let compare = "if redis.pcall(\"get\", key) ~= token then return 0 end\n";
        // A grant without the quarantine check, or with it after the write.
        assert!(Effect::Grants.check(set).is_err());
        assert!(
            Effect::Grants
                .check(&format!("{set}\n{quarantine}"))
                .is_err()
        );
        assert!(Effect::Grants.check(&format!("{quarantine}{set}")).is_ok());
        // A swap needs both.
        assert!(Effect::Swaps.check(&format!("{quarantine}{set}")).is_err());
        assert!(Effect::Swaps.check(&format!("{compare}{set}")).is_err());
        assert!(
            Effect::Swaps
                .check(&format!("{quarantine}{compare}{set}"))
                .is_ok()
        );
        // A delete of whatever holds the key.
        let del = r#"redis.call("del", key)"#;
        assert!(Effect::Compares.check(del).is_err());
        assert!(Effect::Compares.check(&format!("{compare}{del}")).is_ok());
        // A script that says it touches no holder, but deletes the key.
        assert!(Effect::Neither.check(del).is_err());
        assert!(Effect::Neither.check(r#"redis.call("get", key)"#).is_ok());
    }

    #[test]
    fn the_effect_check_reads_no_comment_and_every_write() {
        let set = "redis.call(\"set\", key, next, \"KEEPTTL\")\n";
        let quarantine = "local q = quarantine_check(quarantine_ms, witness_key, marker_key)\n\
                          if q then return q end\n";
        let compare = "if redis.pcall(\"get\", key) ~= token then return 0 end\n";
        // A check or a compare in a comment is none.
        let commented = |text: &str| {
            text.lines()
                .map(|l| format!("-- {l}\n"))
                .collect::<String>()
        };
        assert!(
            Effect::Grants
                .check(&format!("{}{set}", commented(quarantine)))
                .is_err()
        );
        assert!(
            Effect::Compares
                .check(&format!("{}{set}", commented(compare)))
                .is_err()
        );
        assert!(
            Effect::Compares
                .check(&format!("{set}-- {compare}"))
                .is_err()
        );
        // A `--` inside a string starts no comment; a long comment is refused, not skipped.
        let dashes = "if redis.pcall(\"get\", \"--\" .. key) ~= token then return 0 end\n";
        assert!(Effect::Compares.check(&format!("{dashes}{set}")).is_ok());
        assert!(
            Effect::Compares
                .check(&format!("{compare}--[[\n{set}]]\n"))
                .is_err()
        );
        // Every write, not only the first: a second write before the check, or before any
        // compare, is refused.
        let hset = "redis.call(\"hset\", key, token, value)\n";
        assert!(
            Effect::Grants
                .check(&format!("{set}{quarantine}{hset}"))
                .is_err()
        );
        assert!(
            Effect::Compares
                .check(&format!("{hset}{compare}{set}"))
                .is_err()
        );
        assert!(
            Effect::Compares
                .check(&format!("{compare}{hset}{set}"))
                .is_ok()
        );
        // A write of a key of the script's own bookkeeping, or of the waiter's own entry,
        // is no holder's; a write through an alias of `redis.call` is refused.
        let marker = "redis.call(\"hdel\", key, marker)\nredis.call(\"set\", window_key, 1)\n";
        assert!(Effect::Neither.check(marker).is_ok());
        assert!(
            Effect::Compares
                .check(&format!("{marker}{compare}{set}"))
                .is_ok()
        );
        assert!(
            Effect::Compares
                .check(&format!(
                    "local run = redis.call\n{compare}run(\"del\", key)"
                ))
                .is_err()
        );
        // The quarantine check's answer is returned, and it is outside any block.
        let ignored = "quarantine_check(quarantine_ms, witness_key, marker_key)\n";
        assert!(Effect::Grants.check(&format!("{ignored}{set}")).is_err());
        assert!(
            Effect::Grants
                .check(&format!("if fast then\n{quarantine}end\n{set}"))
                .is_err()
        );
    }

    /// `source` with `from` (which it must hold) replaced by `to`.
    fn mutated(source: &str, from: &str, to: &str) -> String {
        assert!(source.contains(from), "the script no longer holds {from:?}");
        source.replacen(from, to, 1)
    }

    #[test]
    fn the_effect_check_refuses_the_reviewers_mutations() {
        // force_release.lua without the digest compare of its string branch: removed, or
        // commented out.
        let digest = "  if not named[redis.sha1hex(redis.call(\"get\", key))] then return 0 end\n";
        for to in [String::new(), format!("--{digest}")] {
            let broken = mutated(FORCE_RELEASE.source, digest, &to);
            let refused = FORCE_RELEASE.effect.check(&broken);
            assert!(
                refused
                    .as_ref()
                    .is_err_and(|e| e.contains(r#"`redis.call("del", key)`: a holder's entry"#)),
                "force_release.lua without its compare: {refused:?}"
            );
        }
        // resume.lua without the token compare of its plain branch.
        let compare = "  if redis.pcall(\"get\", key) ~= token then return {0, 0} end\n";
        let broken = mutated(RESUME.source, compare, "");
        let refused = RESUME.effect.check(&broken);
        assert!(
            refused
                .as_ref()
                .is_err_and(|e| e.contains(r#"`redis.call("set", key, next, "KEEPTTL")`"#)),
            "resume.lua without its plain branch's compare: {refused:?}"
        );
        // acquire_permit.lua with the quarantine check moved below the reserved take.
        let check = "local quarantined = quarantine_check(quarantine_ms, witness_key, marker_key)\n\
                     if quarantined then return quarantined end\n";
        let take = "if reserved then return take(reserved, true) end\n";
        let broken = mutated(ACQUIRE_PERMIT.source, check, "");
        let broken = mutated(&broken, take, &format!("{take}{check}"));
        let refused = ACQUIRE_PERMIT.effect.check(&broken);
        assert!(
            refused
                .as_ref()
                .is_err_and(|e| e.ends_with("a write before the quarantine check")),
            "acquire_permit.lua with its quarantine check below the reserved take: {refused:?}"
        );
        // The same scripts as they are pass.
        for script in [&FORCE_RELEASE, &RESUME, &ACQUIRE_PERMIT] {
            assert_eq!(script.effect.check(script.source), Ok(()));
        }
    }

    #[test]
    fn a_kept_key_is_one_holds_own_and_never_its_token() {
        let (a, b) = ("a".repeat(40), "b".repeat(40));
        assert_ne!(kept(&a), kept(&b));
        assert!(kept(&a).starts_with("redlock:kept:"));
        assert!(!kept(&a).contains(&a));
        assert_eq!(kept(&a).len(), KEPT.len() + 17);
    }

    #[test]
    fn the_queue_cap_is_the_one_the_script_enforces() {
        let check = format!("< {MAX_QUEUED_WAITERS} then");
        assert!(
            ACQUIRE_QUEUED.source.contains(&check),
            "{}",
            ACQUIRE_QUEUED.source
        );
    }

    #[test]
    fn the_permit_script_enforces_the_queue_cap_and_takes_slots_with_nx() {
        let check = format!("< {MAX_QUEUED_WAITERS} then");
        assert!(ACQUIRE_PERMIT.source.contains(&check));
        assert!(
            ACQUIRE_PERMIT
                .source
                .contains(r#"token, "NX", "PX", ttl_ms"#)
        );
    }

    #[test]
    fn the_dispatch_script_answers_errors_with_the_marker() {
        let reply = format!(r#"out[i] = {{"{ERROR_MARKER}", tostring(reply)}}"#);
        assert!(DISPATCH.contains(&reply), "{DISPATCH}");
        assert!(BATCH.source.starts_with(PRELUDE));
        assert!(BATCH.source.ends_with(DISPATCH));
    }
}
