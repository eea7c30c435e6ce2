//! How the layer picks the lock mode of a request.

use std::fmt;
use std::sync::Arc;

use http::Method;
use http::request::Parts;
use redlock_core::Mode;

type ModeFn = dyn Fn(&Parts) -> Mode + Send + Sync;

/// Where a request's lock mode comes from.
#[derive(Clone, Default)]
pub(crate) enum ModeFrom {
    /// No mode: the plain exclusive lock.
    #[default]
    Plain,
    /// One mode for every request.
    Fixed(Mode),
    /// Safe methods read, the others write ([`by_method`]).
    Method,
    /// A closure over the request parts.
    Fn(Arc<ModeFn>),
}

impl fmt::Debug for ModeFrom {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Plain => f.write_str("Plain"),
            Self::Fixed(mode) => write!(f, "Fixed({mode})"),
            Self::Method => f.write_str("Method"),
            Self::Fn(_) => f.write_str("Fn(..)"),
        }
    }
}

impl ModeFrom {
    /// The mode for this request; `None`: the plain lock.
    pub(crate) fn resolve(&self, parts: &Parts) -> Option<Mode> {
        match self {
            Self::Plain => None,
            Self::Fixed(mode) => Some(*mode),
            Self::Method => Some(by_method(&parts.method)),
            Self::Fn(f) => Some(f(parts)),
        }
    }
}

/// The mode [`RedlockLayer::mode_by_method`](super::RedlockLayer::mode_by_method) gives a
/// request: [`Mode::ProtectedRead`] for the safe methods (`GET`, `HEAD`, `OPTIONS`, `TRACE`:
/// RFC 9110 §9.2.1, they do not change the resource), [`Mode::Exclusive`] for every other.
pub fn by_method(method: &Method) -> Mode {
    if method.is_safe() {
        Mode::ProtectedRead
    } else {
        Mode::Exclusive
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn safe_methods_read_and_the_others_write() {
        for method in [Method::GET, Method::HEAD, Method::OPTIONS, Method::TRACE] {
            assert_eq!(by_method(&method), Mode::ProtectedRead, "{method}");
        }
        for method in [Method::POST, Method::PUT, Method::PATCH, Method::DELETE] {
            assert_eq!(by_method(&method), Mode::Exclusive, "{method}");
        }
    }
}
