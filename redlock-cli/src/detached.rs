//! A detached lock as a file: the JSON `redlock hold` writes (with the lock's token, so
//! readable by its owner only) and `redlock run --resume` and `redlock release --detached`
//! read.

use std::fs::{OpenOptions, Permissions};
use std::io::Write as _;
use std::os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _};
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

/// Writes `json` to `path`, created with mode 0600, or replaced and set to mode 0600 before
/// anything is written, so that the token is never readable by others.
///
/// # Errors
/// [`CliError::CannotWrite`] when the file cannot be opened, set to 0600 or written.
pub(crate) fn write(path: &Path, json: &str) -> Result<(), CliError> {
    let cannot = |source| CliError::CannotWrite {
        path: path.to_owned(),
        source,
    };
    let mut file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(OWNER_ONLY)
        .open(path)
        .map_err(cannot)?;
    // An existing file keeps its mode on open: set it before the token goes in.
    file.set_permissions(Permissions::from_mode(OWNER_ONLY))
        .map_err(cannot)?;
    file.write_all(json.as_bytes())
        .and_then(|()| file.sync_all())
        .map_err(cannot)
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
