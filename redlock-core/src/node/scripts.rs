//! The machinery of the Lua scripts the lock runs on a node: what a [`Script`] is, the check
//! its [`Effect`] needs, the helpers every script shares, and the dispatch script ([`BATCH`]),
//! the only script a node is sent, built from every script there is.
//!
//! Each script is one `.lua` file kept beside the code that sends it, loaded with
//! `include_str!`, and declared there as a `static` [`Script`] with its id, submitted with
//! `inventory::submit!`: the kernel's steps in [`kernel::scripts`](crate::kernel::scripts)
//! (their `.lua` files in `kernel/scripts/`), a slice's own in its folder (`semaphore/`,
//! `detach/`, `admin/`, each in its `node.rs` beside the command that sends it), and [`NOOP`],
//! the pipeline's barrier, here. A new script needs nothing here: [`scripts`] reads every
//! submitted one, sorted by id, and [`BATCH`] is built from them, so its text and SHA-1 do not
//! depend on the link order. The ids are the dispatch script's names of the scripts, which the
//! model crate and the tests name too: a new script takes the next free id (a test checks that
//! the ids are unique and run from 0 without a gap).
//!
//! A file opens with what the script does, its `KEYS` and `ARGV` by name, what it returns and
//! the Redlock step it is, then binds its keys and arguments to named locals. The helpers the
//! scripts share (the quarantine check, the window and streak reads, the fencing read, the
//! decimal comparisons, the parser of mode entries, the node's clock, the refusing holder's
//! digest) are Lua functions in `scripts/prelude.lua` here, placed once at the top of the
//! dispatch script. The layouts the scripts keep at a resource's keys are described with the
//! scripts: the plain lock's and the modes' in [`kernel::scripts`](crate::kernel::scripts),
//! the semaphore's in `semaphore/node.rs`.

/// One of the lock's Lua scripts: its body, what it may do to a holder, and its place in the
/// dispatch script ([`BATCH`]), which is the only script a node is sent.
#[derive(Debug)]
pub(crate) struct Script {
    /// Its number, which names it in a batch (and in the model crate and the tests): the
    /// submitted scripts' ids are unique and run from 0 without a gap (checked by a test).
    pub(crate) id: usize,
    /// What it may do to a holder's entry, which fixes the check it must make first (read by
    /// the test that holds every script to it).
    #[cfg_attr(not(test), allow(dead_code))]
    pub(crate) effect: Effect,
    /// The body: it reads its own `KEYS` and `ARGV`, and returns as a script would.
    pub(crate) source: &'static str,
    /// The one-key form the dispatch script runs in its loop, without the body, when a batched
    /// call to this script names one key ([`Inline`]); `None` for the others.
    pub(crate) inline: Option<Inline>,
}

impl Script {
    /// The script numbered `id`, with `effect` and body `source`; submitted where it is
    /// declared (`inventory::submit!`), it is in [`scripts`] and [`BATCH`].
    pub(crate) const fn new(id: usize, effect: Effect, source: &'static str) -> Self {
        Self {
            id,
            effect,
            source,
            inline: None,
        }
    }

    /// The same script, whose calls of the shape `inline` names the dispatch script runs as
    /// commands, without the script's body.
    pub(crate) const fn inlined(self, inline: Inline) -> Self {
        Self {
            inline: Some(inline),
            ..self
        }
    }
}

/// The distlock spec's own two commands, which the dispatch script runs for the calls that
/// are only these instead of making the script's function, its `KEYS` and `ARGV` tables and
/// a protected call: most calls under load are these, and that set-up cost a node more than
/// the commands. The script's body still runs every other call. Each is the same as its
/// script's body on the calls it takes (checked against a real server beside the body).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Inline {
    /// `SET key token NX PX ttl_ms GET`: [`SET_NX`] with the quarantine off and no owner label
    /// (the call then names the lock key alone, with the token and the ttl).
    SetNx,
    /// Compare-and-delete of one key ([`RELEASE`](crate::kernel::scripts::RELEASE)).
    CompareAndDelete,
    /// [`RELEASE_HANDOVER`](crate::kernel::scripts::RELEASE_HANDOVER) with all five keys, on a
    /// node where nobody listens for the release (no listen flag): compare-and-delete of the
    /// lock key, as the script's body does then. With the flag there (a waiter may be
    /// queued), or unreadable (an ACL user without `MGET`), the body runs. A flag key holding
    /// another type than a string reads as missing: no waiter of ours writes one.
    Handover,
}

impl Inline {
    /// The Lua local that holds the id of the script inlined as `self` in the dispatch script.
    fn local(self) -> &'static str {
        match self {
            Self::SetNx => "INLINE_SET_NX",
            Self::CompareAndDelete => "INLINE_RELEASE",
            Self::Handover => "INLINE_HANDOVER",
        }
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

/// `source` with `from` (which it must hold) replaced by `to`: a script broken on purpose, for
/// the tests that hold each [`Effect::check`] to the mutations it must refuse.
#[cfg(test)]
pub(crate) fn mutated(source: &str, from: &str, to: &str) -> String {
    assert!(source.contains(from), "the script no longer holds {from:?}");
    source.replacen(from, to, 1)
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

/// A barrier ([`Node::flush`](super::Node::flush), `scripts/noop.lua`).
pub(crate) static NOOP: Script = Script::new(11, Effect::Neither, include_str!("scripts/noop.lua"));
inventory::submit!(&NOOP);

/// The node's own `SET key token NX PX ttl GET` as a script call (`scripts/set_nx.lua`): a
/// plain attempt made while the pipeline holds calls not yet sent, or made by a handle with an
/// owner label, which it writes with the grant.
pub(crate) static SET_NX: Script =
    Script::new(21, Effect::Grants, include_str!("scripts/set_nx.lua")).inlined(Inline::SetNx);
inventory::submit!(&SET_NX);

/// What a key kept for its minimum hold holds ([`KEEP`]) begins with this, followed by `:`
/// and 16 hex digits of the SHA-1 of the holder's token ([`kept`]): never a token (tokens are
/// hex), and one hold's own, so that a force-release that read one kept key never deletes
/// another hold's.
///
/// [`KEEP`]: crate::kernel::scripts::KEEP
pub(crate) const KEPT: &str = "redlock:kept";

/// What the key of `token`'s hold holds while it is kept for its minimum hold.
pub(crate) fn kept(token: &str) -> String {
    format!("{KEPT}:{}", &fred::util::sha1_hash(token)[..16])
}

/// What a wake-up message published by [`RELEASE_MODE`] says: every waiter may attempt.
///
/// [`RELEASE_MODE`]: crate::kernel::scripts::RELEASE_MODE
pub(crate) const WAKE_ALL: &str = "*";

inventory::collect!(&'static Script);

/// Every script submitted (`inventory::submit!`, where each is declared), in [`Script::id`]
/// order.
pub(crate) fn scripts() -> impl Iterator<Item = &'static Script> {
    let mut all: Vec<&'static Script> = inventory::iter::<&'static Script>
        .into_iter()
        .copied()
        .collect();
    all.sort_by_key(|script| script.id);
    all.into_iter()
}

/// A batched call's head in the dispatch script's `ARGV`: one number for its script's id, its
/// number of keys and its number of arguments, `id + 64 × (keys + 2²⁰ × args)`, decoded by
/// `scripts/dispatch.lua` (one value for the client to encode and the node to read, not
/// three). `None` for a call too large for it (an id from 64, 2²⁰ keys, or 2²⁷ arguments:
/// the number stays exact in Lua's doubles), which is sent alone, in the layout of a call
/// alone.
pub(crate) fn batch_head(id: usize, keys: usize, args: usize) -> Option<i64> {
    const IDS: i64 = 64;
    const KEYS: i64 = 1 << 20;
    const ARGS: i64 = 1 << 27;
    let (id, keys, args) = (
        i64::try_from(id).ok()?,
        i64::try_from(keys).ok()?,
        i64::try_from(args).ok()?,
    );
    if id >= IDS || keys >= KEYS || args >= ARGS {
        return None;
    }
    // At most 2⁵³ − 1: no overflow, on any target.
    Some(id + IDS * (keys + KEYS * args))
}

/// What a batched call that raised an error answers in place of its reply:
/// `{ERROR_MARKER, "<the error's text>"}` (no reply of ours is a table starting with a
/// string). Spelled out in `scripts/dispatch.lua` (checked by a test).
pub(crate) const ERROR_MARKER: &str = "redlock:error";

/// The dispatch script, the only script sent to a node: it runs a batch of calls to the
/// scripts ([`scripts`]), in order, each on its own `KEYS` and `ARGV`, and answers one reply
/// per call ([`pipeline`](super::pipeline) sends the calls that concurrent lockers issue in
/// one tick as one `EVALSHA` of it). Its arguments and replies are described in
/// `scripts/dispatch.lua`.
pub(crate) struct Batch {
    /// The text: the ids of the scripts run inline ([`Inline`]), then `make_scripts()`,
    /// which holds `prelude.lua` and returns `script(id)`, the maker of the function of the
    /// script numbered `id` (of its own `KEYS` and `ARGV`), then `dispatch.lua`.
    pub(crate) source: String,
    /// The SHA-1 of `source`, which `EVALSHA` names it by.
    pub(crate) sha1: String,
    /// The `ARGV` head of a call alone to each script, `=<id>`, at the script's id.
    pub(crate) heads: Vec<String>,
}

/// [`Batch`], built once from every script ([`scripts`], in id order).
pub(crate) static BATCH: std::sync::LazyLock<Batch> = std::sync::LazyLock::new(|| {
    let mut source = String::new();
    // The ids of the scripts the loop runs inline (-1: none).
    for inline in [Inline::SetNx, Inline::CompareAndDelete, Inline::Handover] {
        let id = scripts()
            .find(|script| script.inline == Some(inline))
            .map_or(-1, |script| script.id as i64);
        source.push_str(&format!("local {} = {id}\n", inline.local()));
    }
    // The helpers and the scripts' table are made only when a call needs a script's body:
    // a call run inline (a release alone, a batch of plain attempts and releases) skips
    // them, which took a node as long as the commands.
    source.push_str("local function make_scripts()\n");
    source.push_str(PRELUDE);
    // Each script's function is made only when a call names it: making all of them at
    // every batch took more of the node's time than a plain attempt's own commands.
    source.push_str("local function script(id)\n");
    for script in scripts() {
        source.push_str(&format!(
            "if id == {} then return function(KEYS, ARGV)\n{}\nend end\n",
            script.id, script.source
        ));
    }
    source.push_str("end\nreturn script\nend\n");
    source.push_str(DISPATCH);
    let sha1 = fred::util::sha1_hash(&source);
    let heads = scripts().map(|script| format!("={}", script.id)).collect();
    Batch {
        source,
        sha1,
        heads,
    }
});

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_head_holds_its_three_numbers_and_refuses_what_does_not_fit() {
        let decode = |h: i64| {
            let h = h as usize;
            (h % 64, (h / 64) % (1 << 20), h / (64 << 20))
        };
        for (id, keys, args) in [(0, 0, 0), (21, 1, 2), (63, (1 << 20) - 1, (1 << 27) - 1)] {
            let head = batch_head(id, keys, args).unwrap();
            assert_eq!(decode(head), (id, keys, args));
            assert!(head < 1 << 53, "exact in a double");
        }
        assert_eq!(batch_head(64, 1, 1), None);
        assert_eq!(batch_head(1, 1 << 20, 1), None);
        assert_eq!(batch_head(1, 1, 1 << 27), None);
        assert!(scripts().count() < 64, "every id fits a head");
    }

    #[test]
    fn the_submitted_ids_are_unique_and_run_from_zero_without_a_gap() {
        let ids: Vec<usize> = scripts().map(|script| script.id).collect();
        let dense: Vec<usize> = (0..ids.len()).collect();
        assert_eq!(ids, dense, "the submitted scripts' ids, sorted");
    }

    #[test]
    fn every_script_file_is_submitted_once() {
        // Not scripts of the batch: its own frame, and inspect's read sent as `EVAL`.
        const NOT_BATCHED: [&str; 3] = ["dispatch.lua", "prelude.lua", "inspect.lua"];
        fn lua_files(dir: &std::path::Path, found: &mut Vec<std::path::PathBuf>) {
            for entry in std::fs::read_dir(dir).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    lua_files(&path, found);
                } else if path.extension().is_some_and(|e| e == "lua") {
                    found.push(path);
                }
            }
        }
        let mut files = Vec::new();
        lua_files(
            &std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src"),
            &mut files,
        );
        files.retain(|f| !NOT_BATCHED.iter().any(|n| f.ends_with(n)));
        assert!(files.len() >= 20, "script files found: {files:?}");
        for file in &files {
            let text = std::fs::read_to_string(file).unwrap();
            let submitted = scripts().filter(|s| s.source == text).count();
            assert_eq!(
                submitted,
                1,
                "{} submitted {submitted} times",
                file.display()
            );
        }
        assert_eq!(scripts().count(), files.len(), "a script with no file");
    }

    #[test]
    fn every_grant_runs_the_quarantine_check_and_every_holder_write_compares_the_token() {
        for script in scripts() {
            if let Err(missing) = script.effect.check(script.source) {
                panic!("script {} ({:?}): {missing}", script.id, script.effect);
            }
        }
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

    #[test]
    fn a_kept_key_is_one_holds_own_and_never_its_token() {
        let (a, b) = ("a".repeat(40), "b".repeat(40));
        assert_ne!(kept(&a), kept(&b));
        assert!(kept(&a).starts_with("redlock:kept:"));
        assert!(!kept(&a).contains(&a));
        assert_eq!(kept(&a).len(), KEPT.len() + 17);
    }

    #[test]
    fn the_dispatch_script_answers_errors_with_the_marker() {
        let reply = format!(r#"out[i] = {{"{ERROR_MARKER}", tostring(reply)}}"#);
        assert!(DISPATCH.contains(&reply), "{DISPATCH}");
        assert!(BATCH.source.contains(PRELUDE));
        assert!(BATCH.source.ends_with(DISPATCH));
    }
}
