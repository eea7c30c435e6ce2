//! Lock tokens: the random value that signs a lock on every node.

use std::fmt;

/// Number of random bytes in a [`Token`]: 160 bits, the distlock spec's "20 bytes from
/// `/dev/urandom`".
pub(crate) const TOKEN_BYTES: usize = 20;

/// The random value written as the lock key's value on every node.
///
/// A token is drawn from the operating system's CSPRNG (`getrandom`) for every acquisition, so
/// that only the holder that wrote it can release or extend it (compare-and-delete, distlock spec
/// "Correct implementation with a single instance"). It is hex encoded (40 characters). (On a
/// thread seeded for a simulation, with the `simulation` feature, it is drawn from the seed.)
///
/// The token is a secret of the holder: `Debug` redacts it and this crate never logs it. Read it
/// with [`Token::expose`] when you need it for a check-and-set on the protected resource.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Token(String);

impl Token {
    /// Draws a fresh token from the OS CSPRNG.
    ///
    /// # Errors
    /// [`EntropyError`] when the OS has no entropy source to give.
    pub(crate) fn generate() -> Result<Self, EntropyError> {
        let mut bytes = [0u8; TOKEN_BYTES];
        crate::random::token_bytes(&mut bytes).map_err(EntropyError)?;
        let mut hex = String::with_capacity(TOKEN_BYTES * 2);
        for byte in bytes {
            hex.push(char::from(HEX[usize::from(byte >> 4)]));
            hex.push(char::from(HEX[usize::from(byte & 0x0f)]));
        }
        Ok(Self(hex))
    }

    /// `value` as a token, if it is one: 40 lowercase hex digits, as [`generate`](Self::generate)
    /// writes them.
    #[cfg(feature = "serde")]
    pub(crate) fn parse(value: &str) -> Option<Self> {
        let hex = |b: u8| b.is_ascii_digit() || (b'a'..=b'f').contains(&b);
        (value.len() == TOKEN_BYTES * 2 && value.bytes().all(hex)).then(|| Self(value.to_owned()))
    }

    /// The token's value as written to Redis. Treat it as a secret.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

/// The OS random source gave no bytes for a token (`getrandom` failed): the system has no
/// usable entropy source (e.g. a sandbox without `getrandom(2)` or `/dev/urandom`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EntropyError(getrandom::Error);

impl fmt::Display for EntropyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl std::error::Error for EntropyError {}

const HEX: &[u8; 16] = b"0123456789abcdef";

impl fmt::Debug for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Token(<redacted>)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn tokens_are_40_hex_chars_and_unique() {
        let tokens: HashSet<String> = (0..10_000)
            .map(|_| Token::generate().unwrap().expose().to_owned())
            .collect();
        assert_eq!(tokens.len(), 10_000);
        assert!(tokens.iter().all(|t| {
            t.len() == 40
                && t.bytes()
                    .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
        }));
    }

    /// The bad-input property tests' token part: 10^6 tokens are distinct, each `TOKEN_BYTES`
    /// (20) bytes.
    #[test]
    fn a_million_tokens_are_distinct() {
        let mut seen = HashSet::with_capacity(1_000_000);
        for _ in 0..1_000_000 {
            let token = Token::generate().unwrap();
            assert_eq!(token.expose().len(), 2 * TOKEN_BYTES);
            assert!(seen.insert(token.expose().to_owned()), "a token repeated");
        }
    }

    #[test]
    fn debug_redacts_the_value() {
        let token = Token::generate().unwrap();
        let debug = format!("{token:?}");
        assert!(!debug.contains(token.expose()));
        assert_eq!(debug, "Token(<redacted>)");
    }
}
