//! A detached lock as a file: the JSON `redlock hold` writes (with the lock's token, so
//! readable by its owner only) and `redlock run --resume` and `redlock release --detached`
//! read.

use std::fs::OpenOptions;
use std::io::Write as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::Path;

use redlock_core::DetachedLock;

use crate::exit::CliError;

/// The file's mode: read and write by its owner only (it holds a bearer secret).
const OWNER_ONLY: u32 = 0o600;

/// `detached` as the JSON `redlock hold` prints: pretty, with a newline. The token is in it.
///
/// # Errors
/// [`CliError::Os`] if it cannot be serialized (never: every field is plain).
pub(crate) fn to_json(detached: &DetachedLock) -> Result<String, CliError> {
    let mut text = serde_json::to_string_pretty(detached).map_err(|source| CliError::Os {
        what: "could not serialize the detached lock",
        source: source.into(),
    })?;
    text.push('\n');
    Ok(text)
}

/// Writes `json` to `path` with mode 0600: to a new file beside it (created with that mode,
/// so the token is never readable by others, and never through a link planted there),
/// synced, then renamed over `path`, which a reader opening it sees whole or not at all.
///
/// # Errors
/// [`CliError::CannotWrite`] when the file cannot be created, written or renamed (the new
/// file is then removed).
pub(crate) fn write(path: &Path, json: &str) -> Result<(), CliError> {
    let cannot = |source| CliError::CannotWrite {
        path: path.to_owned(),
        source,
    };
    let name = path.file_name().map_or_else(
        || std::ffi::OsString::from("detached"),
        std::ffi::OsStr::to_owned,
    );
    let mut new_name = std::ffi::OsString::from(".");
    new_name.push(&name);
    new_name.push(format!(".{}.tmp", std::process::id()));
    let new = path.with_file_name(new_name);
    let written = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(OWNER_ONLY)
        .open(&new)
        .and_then(|mut file| {
            file.write_all(json.as_bytes())?;
            file.sync_all()
        })
        .and_then(|()| std::fs::rename(&new, path));
    if written.is_err() {
        let _removed = std::fs::remove_file(&new);
    }
    written.map_err(cannot)
}

/// Reads the detached lock in `path`.
///
/// # Errors
/// [`CliError::DetachedUnreadable`] when the file cannot be read; [`CliError::DetachedInvalid`]
/// when it is not a detached lock's JSON (the parser's message says where, and what it
/// expected).
pub(crate) fn read(path: &Path) -> Result<DetachedLock, CliError> {
    let text = std::fs::read_to_string(path).map_err(|source| CliError::DetachedUnreadable {
        path: path.to_owned(),
        source,
    })?;
    serde_json::from_str(&text).map_err(|source| CliError::DetachedInvalid {
        path: path.to_owned(),
        source,
    })
}
