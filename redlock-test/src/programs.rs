//! Finds the server binaries: `$REDIS_SERVER_BIN` or `redis-server` on `PATH`,
//! `$VALKEY_SERVER_BIN` or `valkey-server` on `PATH`. They are only looked up here, never
//! installed.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, OnceLock, PoisonError};

use crate::error::StartError;

/// Environment variable naming the binary of [`ServerKind::Redis`] servers, used instead of
/// `redis-server` on `PATH`. It may name a `valkey-server`: then every default server is a
/// Valkey one, which is how a whole test suite is run against Valkey.
pub const SERVER_BIN_ENV: &str = "REDIS_SERVER_BIN";

/// Environment variable naming the binary of [`ServerKind::Valkey`] servers, used instead of
/// `valkey-server` on `PATH`.
pub const VALKEY_BIN_ENV: &str = "VALKEY_SERVER_BIN";

/// Which server program to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum ServerKind {
    /// `$REDIS_SERVER_BIN`, else `redis-server` on `PATH` (the default).
    #[default]
    Redis,
    /// `$VALKEY_SERVER_BIN`, else `valkey-server` on `PATH`.
    Valkey,
}

impl ServerKind {
    /// The environment variable that names this kind's binary.
    pub fn env_var(self) -> &'static str {
        match self {
            Self::Redis => SERVER_BIN_ENV,
            Self::Valkey => VALKEY_BIN_ENV,
        }
    }

    /// The program looked up on `PATH` when the environment variable is unset.
    pub fn program(self) -> &'static str {
        match self {
            Self::Redis => "redis-server",
            Self::Valkey => "valkey-server",
        }
    }

    /// The binary to run: the file named by [`env_var`](Self::env_var) if set, else
    /// [`program`](Self::program) on `PATH`.
    ///
    /// # Errors
    /// [`StartError::NotFound`] when the variable is unset and the program is not on `PATH`.
    pub fn binary(self) -> Result<PathBuf, StartError> {
        match std::env::var_os(self.env_var()) {
            Some(bin) if !bin.is_empty() => Ok(PathBuf::from(bin)),
            _ => on_path(self.program()).ok_or(StartError::NotFound {
                program: self.program(),
                env_var: self.env_var(),
            }),
        }
    }

    /// `true` if [`binary`](Self::binary) finds one: lets a test skip, with a message, when a
    /// server it needs is not installed.
    pub fn is_installed(self) -> bool {
        self.binary().is_ok()
    }
}

impl std::fmt::Display for ServerKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Redis => "Redis",
            Self::Valkey => "Valkey",
        })
    }
}

/// What a server binary says it is (`<bin> --version`), asked once per binary and process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct BinaryVersion {
    /// Valkey or Redis, from the first word of the answer.
    pub(crate) kind: ServerKind,
    /// The `v=` field, e.g. `7.0.15`.
    pub(crate) version: String,
}

/// `<bin> --version`, parsed: `Redis server v=7.0.15 ...` or `Valkey server v=8.1.8 ...`.
/// An answer that cannot be read counts as Redis, version `unknown`.
pub(crate) fn version_of(bin: &Path) -> BinaryVersion {
    static SEEN: OnceLock<Mutex<Vec<(PathBuf, BinaryVersion)>>> = OnceLock::new();
    let seen = SEEN.get_or_init(Mutex::default);
    if let Some((_, version)) = seen
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .iter()
        .find(|(path, _)| path == bin)
    {
        return version.clone();
    }
    let text = Command::new(bin)
        .arg("--version")
        .output()
        .map(|out| String::from_utf8_lossy(&out.stdout).into_owned())
        .unwrap_or_default();
    let version = parse_version(&text);
    seen.lock()
        .unwrap_or_else(PoisonError::into_inner)
        .push((bin.to_path_buf(), version.clone()));
    version
}

fn parse_version(text: &str) -> BinaryVersion {
    let kind = if text.trim_start().starts_with("Valkey") {
        ServerKind::Valkey
    } else {
        ServerKind::Redis
    };
    let version = text
        .split_whitespace()
        .find_map(|word| word.strip_prefix("v="))
        .unwrap_or("unknown")
        .to_owned();
    BinaryVersion { kind, version }
}

pub(crate) fn on_path(program: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join(program))
            .find(|candidate| candidate.is_file())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_are_read_from_both_servers_answers() {
        let redis = parse_version(
            "Redis server v=7.0.15 sha=00000000:0 malloc=jemalloc-5.3.0 bits=64 build=ae4d\n",
        );
        assert_eq!(redis.kind, ServerKind::Redis);
        assert_eq!(redis.version, "7.0.15");
        let valkey = parse_version("Valkey server v=8.1.8 sha=00000000:1 malloc=libc bits=64\n");
        assert_eq!(valkey.kind, ServerKind::Valkey);
        assert_eq!(valkey.version, "8.1.8");
        assert_eq!(parse_version("").version, "unknown");
    }
}
