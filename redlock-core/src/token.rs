//! Lock tokens: the random value that signs a lock on every node.

use std::fmt;

/// Number of random bytes in a [`Token`]: 160 bits, the distlock spec's "20 bytes from
/// `/dev/urandom`".
pub const TOKEN_BYTES: usize = 20;

/// The random value written as the lock key's value on every node.
///
/// A token is drawn from the operating system's CSPRNG (`getrandom`) for every acquisition, so
/// that only the holder that wrote it can release or extend it (compare-and-delete, distlock spec
/// "Correct implementation with a single instance"). It is hex encoded (40 characters).
///
/// The token is a secret of the holder: `Debug` redacts it and this crate never logs it. Read it
/// with [`Token::expose`] when you need it for a check-and-set on the protected resource.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Token(String);

impl Token {
    /// Draws a fresh token from the OS CSPRNG.
    ///
    /// # Errors
    /// Returns the `getrandom` error when the OS has no entropy source to give.
    pub fn generate() -> Result<Self, getrandom::Error> {
        let mut bytes = [0u8; TOKEN_BYTES];
        getrandom::fill(&mut bytes)?;
        let mut hex = String::with_capacity(TOKEN_BYTES * 2);
        for byte in bytes {
            hex.push(char::from(HEX[usize::from(byte >> 4)]));
            hex.push(char::from(HEX[usize::from(byte & 0x0f)]));
        }
        Ok(Self(hex))
    }

    /// The token's value as written to Redis. Treat it as a secret.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

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

    #[test]
    fn debug_redacts_the_value() {
        let token = Token::generate().unwrap();
        let debug = format!("{token:?}");
        assert!(!debug.contains(token.expose()));
        assert_eq!(debug, "Token(<redacted>)");
    }
}
