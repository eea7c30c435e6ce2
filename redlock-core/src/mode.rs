//! Lock modes: the six modes of a distributed lock manager (as in everlution/redlock, after the
//! VMS DLM), so that readers can share a resource while writers exclude.

use std::fmt;
use std::str::FromStr;

/// A lock mode. Two holders of one resource may hold it at the same time when their modes
/// are [`compatible`](Self::compatible):
///
/// | held \ asked | NL | CR | CW | PR | PW | EX |
/// |--------------|----|----|----|----|----|----|
/// | **NL**       | ✓  | ✓  | ✓  | ✓  | ✓  | ✓  |
/// | **CR**       | ✓  | ✓  | ✓  | ✓  | ✓  |    |
/// | **CW**       | ✓  | ✓  | ✓  |    |    |    |
/// | **PR**       | ✓  | ✓  |    | ✓  |    |    |
/// | **PW**       | ✓  | ✓  |    |    |    |    |
/// | **EX**       | ✓  |    |    |    |    |    |
///
/// The usual read/write lock is [`ProtectedRead`](Self::ProtectedRead) (shared by readers)
/// and [`Exclusive`](Self::Exclusive) (alone).
///
/// Parsed from its abbreviation (`"PR"`), its name (`"protected_read"`), or `"read"` (PR) and
/// `"write"` (EX), case-insensitively:
///
/// ```
/// use redlock_core::Mode;
///
/// let read: Mode = "read".parse().unwrap();
/// assert_eq!(read, Mode::ProtectedRead);
/// assert!(read.compatible(Mode::ProtectedRead));
/// assert!(!read.compatible(Mode::Exclusive));
/// assert_eq!(Mode::ConcurrentWrite.to_string(), "CW");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Mode {
    /// NL, null: no access, only interest in the resource; compatible with every mode.
    Null,
    /// CR, concurrent read: reads while others may write (CW); excluded only by EX.
    ConcurrentRead,
    /// CW, concurrent write: writes alongside other concurrent writers and readers.
    ConcurrentWrite,
    /// PR, protected read: the shared read lock; no writer but other readers.
    ProtectedRead,
    /// PW, protected write: the update lock; one writer, concurrent readers (CR) only.
    ProtectedWrite,
    /// EX, exclusive: the write lock; no other holder but NL.
    Exclusive,
}

impl Mode {
    /// Every mode, from the weakest to the strongest.
    pub const ALL: [Mode; 6] = [
        Mode::Null,
        Mode::ConcurrentRead,
        Mode::ConcurrentWrite,
        Mode::ProtectedRead,
        Mode::ProtectedWrite,
        Mode::Exclusive,
    ];

    /// The two-letter abbreviation (`NL`, `CR`, `CW`, `PR`, `PW`, `EX`), also what the nodes
    /// store for each holder.
    pub const fn as_str(self) -> &'static str {
        match self {
            Mode::Null => "NL",
            Mode::ConcurrentRead => "CR",
            Mode::ConcurrentWrite => "CW",
            Mode::ProtectedRead => "PR",
            Mode::ProtectedWrite => "PW",
            Mode::Exclusive => "EX",
        }
    }

    /// `true` when a holder in `self` and a holder in `other` may hold one resource at the
    /// same time (the table above; symmetric).
    pub const fn compatible(self, other: Mode) -> bool {
        use Mode::{ConcurrentRead as CR, ConcurrentWrite as CW, Null as NL};
        use Mode::{ProtectedRead as PR, ProtectedWrite as PW};
        matches!(
            (self, other),
            (NL, _) | (_, NL) | (CR, CR | CW | PR | PW) | (CW | PR | PW, CR) | (CW, CW) | (PR, PR)
        )
    }

    /// `true` when `self` is a downgrade of `other`: another mode, compatible with every mode
    /// `other` is compatible with (and more), so that moving a holder from `other` to `self`
    /// only ever lets more holders in beside it. EX → PW, PR, CW, CR or NL is one; PR → EX
    /// is not. See [`LockGuard::downgrade`](crate::LockGuard::downgrade).
    ///
    /// ```
    /// use redlock_core::Mode;
    ///
    /// assert!(Mode::ProtectedRead.weaker_than(Mode::Exclusive));
    /// assert!(!Mode::Exclusive.weaker_than(Mode::ProtectedRead));
    /// assert!(!Mode::ProtectedRead.weaker_than(Mode::ProtectedRead));
    /// ```
    pub fn weaker_than(self, other: Mode) -> bool {
        self != other
            && Mode::ALL
                .into_iter()
                .all(|m| !other.compatible(m) || self.compatible(m))
    }

    /// The modes compatible with `self`, as the space-separated abbreviations the node
    /// scripts receive.
    pub(crate) fn compatible_list(self) -> String {
        let names: Vec<&str> = Mode::ALL
            .into_iter()
            .filter(|&other| self.compatible(other))
            .map(Mode::as_str)
            .collect();
        names.join(" ")
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A string that names no lock mode.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "`{0}` is not a lock mode; use read, write, or one of NL, CR, CW, PR, PW, EX (null, concurrent_read, concurrent_write, protected_read, protected_write, exclusive)"
)]
pub struct ParseModeError(pub String);

impl FromStr for Mode {
    type Err = ParseModeError;

    fn from_str(name: &str) -> Result<Self, Self::Err> {
        let mode = match name.to_ascii_lowercase().replace('-', "_").as_str() {
            "nl" | "null" => Mode::Null,
            "cr" | "concurrent_read" => Mode::ConcurrentRead,
            "cw" | "concurrent_write" => Mode::ConcurrentWrite,
            "pr" | "protected_read" | "read" => Mode::ProtectedRead,
            "pw" | "protected_write" => Mode::ProtectedWrite,
            "ex" | "exclusive" | "write" => Mode::Exclusive,
            _ => return Err(ParseModeError(name.to_owned())),
        };
        Ok(mode)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The DLM's compatibility table, row by row, written out independently of `compatible`.
    const SEED_002: [(Mode, &[&str]); 6] = [
        (Mode::Null, &["NL", "CR", "CW", "PR", "PW", "EX"]),
        (Mode::ConcurrentRead, &["NL", "CR", "CW", "PR", "PW"]),
        (Mode::ConcurrentWrite, &["NL", "CR", "CW"]),
        (Mode::ProtectedRead, &["NL", "CR", "PR"]),
        (Mode::ProtectedWrite, &["NL", "CR"]),
        (Mode::Exclusive, &["NL"]),
    ];

    #[test]
    fn compatibility_is_seed_002s_table() {
        for (held, row) in SEED_002 {
            for asked in Mode::ALL {
                assert_eq!(
                    held.compatible(asked),
                    row.contains(&asked.as_str()),
                    "{held} held, {asked} asked"
                );
                assert_eq!(held.compatible(asked), asked.compatible(held));
            }
            assert_eq!(held.compatible_list(), row.join(" "));
        }
    }

    #[test]
    fn parses_names_and_round_trips() {
        for mode in Mode::ALL {
            assert_eq!(mode.as_str().parse::<Mode>(), Ok(mode));
            assert_eq!(mode.as_str().to_lowercase().parse::<Mode>(), Ok(mode));
        }
        assert_eq!("read".parse::<Mode>(), Ok(Mode::ProtectedRead));
        assert_eq!("Write".parse::<Mode>(), Ok(Mode::Exclusive));
        assert_eq!("protected-write".parse::<Mode>(), Ok(Mode::ProtectedWrite));
        let error = "shared".parse::<Mode>().unwrap_err();
        assert!(error.to_string().contains("`shared` is not a lock mode"));
    }
}
