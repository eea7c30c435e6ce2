//! Lines for the user on stderr, each starting with `redlock: `. A write that fails (stderr
//! closed, or full as `2>/dev/full` makes it) is ignored: telling the user must never keep
//! redlock from signalling the command or releasing the lock.

use std::fmt::Arguments;
use std::io::Write as _;

/// Writes `redlock: {message}` and a newline to stderr, ignoring a failed write.
pub(crate) fn say(message: Arguments<'_>) {
    let _ignored = writeln!(std::io::stderr(), "redlock: {message}");
}
