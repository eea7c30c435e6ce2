//! Output on stdout: the text (or JSON) a subcommand prints, written at once and flushed.

use std::io::Write as _;

use crate::exit::CliError;

/// Writes `text` to stdout and flushes it.
///
/// # Errors
/// [`CliError::Os`], saying `what` could not be written (stdout closed, or full as
/// `>/dev/full` makes it).
pub(crate) fn print(text: &str, what: &'static str) -> Result<(), CliError> {
    let mut stdout = std::io::stdout().lock();
    stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
        .map_err(|source| CliError::Os { what, source })
}

/// Writes `value` as pretty JSON and a newline to stdout ([`print()`]).
///
/// # Errors
/// As [`print()`]; a value JSON cannot hold (none of this crate's) is reported the same way.
pub(crate) fn print_json(
    value: &impl serde::Serialize,
    what: &'static str,
) -> Result<(), CliError> {
    let text = serde_json::to_string_pretty(value).map_err(|source| CliError::Os {
        what,
        source: source.into(),
    })?;
    print(&format!("{text}\n"), what)
}
