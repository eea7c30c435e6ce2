//! `#[redlock(...)]`'s arguments (parsed with darling) and their value types: [`Millis`],
//! [`ModeArg`], [`DriftFactor`], [`OnBusy`].

use std::time::Duration;

use darling::FromMeta;
use darling::ast::NestedMeta;
use proc_macro2::{Span, TokenStream};
use syn::{Expr, LitStr};

/// The attribute's arguments, mirroring RedLock-Hyperf's `@RedLockAnnotation`.
#[derive(Debug, FromMeta)]
pub(crate) struct Args {
    /// The resource template, e.g. `"order:{order_id}"`.
    #[darling(default)]
    pub(crate) resource: Option<LitStr>,
    /// Several resource templates, taken together, all or none (`Redlock::lock_many`), e.g.
    /// `["account:{from}", "account:{to}"]`.
    #[darling(default)]
    pub(crate) resources: Option<Vec<LitStr>>,
    /// Lock ttl (`"30s"`, `"500ms"`, or an integer of milliseconds).
    #[darling(default)]
    pub(crate) ttl: Option<Millis>,
    /// Retries after the first attempt.
    #[darling(default)]
    pub(crate) retry_count: Option<u32>,
    /// Base delay between attempts.
    #[darling(default)]
    pub(crate) retry_delay: Option<Millis>,
    /// Maximum random extra per delay.
    #[darling(default)]
    pub(crate) retry_jitter: Option<Millis>,
    /// Keep retrying until this deadline.
    #[darling(default)]
    pub(crate) wait_timeout: Option<Millis>,
    /// Clock drift factor.
    #[darling(default)]
    pub(crate) drift_factor: Option<DriftFactor>,
    /// Keep the lock extended while the body runs, and stop the body if it is lost.
    #[darling(default)]
    pub(crate) auto_extend: bool,
    /// Longest hold with `auto_extend`.
    #[darling(default)]
    pub(crate) max_hold: Option<Millis>,
    /// Keep the lock at least this long after it was taken, even when the body ends sooner.
    #[darling(default)]
    pub(crate) lock_at_least_for: Option<Millis>,
    /// Issue a fencing token (read it through the `guard` binding).
    #[darling(default)]
    pub(crate) fencing: bool,
    /// Lock mode: `"read"`, `"write"`, or a DLM mode (`"NL"`, `"CR"`, `"CW"`, `"PR"`, `"PW"`,
    /// `"EX"`); default none, the plain exclusive lock.
    #[darling(default)]
    pub(crate) mode: Option<ModeArg>,
    /// Re-enter a lock the task already holds (default `true`; `false` with `permits`).
    #[darling(default)]
    pub(crate) reentrant: Option<bool>,
    /// Take one of this many permits of a counting semaphore on the resource.
    #[darling(default)]
    pub(crate) permits: Option<u32>,
    /// What a busy resource does: `"error"` (return `LockError::Busy`, the default) or
    /// `"skip"` (skip the body and return `Ok(None)` / `Ok(T::default())`).
    #[darling(default)]
    pub(crate) on_busy: OnBusy,
    /// A name bound in the body to the lock's `LockInfo` (fencing token, lost signal).
    #[darling(default)]
    pub(crate) guard: Option<syn::Ident>,
    /// Name of a registered handle (Hyperf's `poolName`); default `"default"`.
    #[darling(default)]
    pub(crate) pool: Option<LitStr>,
    /// An expression giving the handle (`&Redlock`, `Redlock` or `Arc<Redlock>`).
    #[darling(default)]
    pub(crate) redlock: Option<Expr>,
    /// Path to redlock-core, for re-exports (default `::redlock_core`).
    #[darling(default, rename = "crate")]
    pub(crate) krate: Option<syn::Path>,
}

/// Every argument [`Args`] takes, for the suggestion made for a misspelt one.
const ARGUMENTS: &[&str] = &[
    "resource",
    "resources",
    "ttl",
    "retry_count",
    "retry_delay",
    "retry_jitter",
    "wait_timeout",
    "drift_factor",
    "auto_extend",
    "max_hold",
    "lock_at_least_for",
    "fencing",
    "mode",
    "reentrant",
    "permits",
    "on_busy",
    "guard",
    "pool",
    "redlock",
    "crate",
];

/// An unknown argument close to a known one (`tll`, `resourse`): an error naming the known
/// one, at the argument. Further from every known name, darling's own error stands.
fn misspelt(items: &[NestedMeta]) -> Option<darling::Error> {
    items.iter().find_map(|item| {
        let NestedMeta::Meta(meta) = item else {
            return None;
        };
        let name = meta.path().get_ident()?.to_string();
        if ARGUMENTS.contains(&name.as_str()) {
            return None;
        }
        let (distance, known) = ARGUMENTS
            .iter()
            .map(|known| (strsim::damerau_levenshtein(&name, known), *known))
            .min()?;
        (distance <= 2 && distance < name.len()).then(|| {
            darling::Error::custom(format!(
                "unknown argument `{name}`: did you mean `{known}`?"
            ))
            .with_span(meta.path())
        })
    })
}

impl Args {
    pub(crate) fn parse(attr: TokenStream) -> darling::Result<Self> {
        let items = NestedMeta::parse_meta_list(attr)?;
        if let Some(error) = misspelt(&items) {
            return Err(error);
        }
        let args = Self::from_list(&items)?;
        match (&args.resource, &args.resources) {
            (None, None) => {
                return Err(darling::Error::custom(
                    "name what to lock: `resource = \"order:{id}\"`, or `resources = [\"account:{from}\", \"account:{to}\"]` for several at once",
                ));
            }
            (Some(resource), Some(_)) => {
                return Err(darling::Error::custom(
                    "give either `resource` or `resources`, not both",
                )
                .with_span(&resource.span()));
            }
            (None, Some(list)) if list.is_empty() => {
                return Err(darling::Error::custom(
                    "`resources` is empty: name at least one resource template",
                ));
            }
            _ => {}
        }
        if args.resources.is_some()
            && let Some(option) = args.given(&[
                "mode",
                "fencing",
                "permits",
                "lock_at_least_for",
                "reentrant",
            ])
        {
            return Err(darling::Error::custom(format!(
                "`resources` (a lock of several resources) cannot be combined with `{option}`: remove one of the two"
            )));
        }
        if let (Some(max_hold), false) = (&args.max_hold, args.auto_extend) {
            return Err(max_hold.error("`max_hold` caps auto-extension: add `auto_extend`"));
        }
        if let (Some(at_least), Some(_)) = (&args.lock_at_least_for, &args.mode) {
            return Err(at_least.error(
                "`lock_at_least_for` applies to the plain exclusive lock only: remove `mode`, or the minimum hold",
            ));
        }
        if let (Some(at_least), Some(ttl)) = (&args.lock_at_least_for, &args.ttl)
            && at_least.ms > ttl.ms
        {
            return Err(at_least.error(
                "`lock_at_least_for` is longer than the `ttl`: the minimum hold must fit in the ttl",
            ));
        }
        if args.permits.is_some() {
            if let Some(option) = args.given(&["mode", "fencing", "reentrant"]) {
                return Err(darling::Error::custom(format!(
                    "`permits` cannot be combined with `{option}`: remove one of the two"
                )));
            }
            if args.permits == Some(0) {
                return Err(darling::Error::custom(
                    "`permits` is zero: a semaphore needs at least one permit",
                ));
            }
        }
        if let (Some(pool), Some(_)) = (&args.pool, &args.redlock) {
            return Err(
                darling::Error::custom("give either `pool` or `redlock`, not both")
                    .with_span(&pool.span()),
            );
        }
        args.check_durations()?;
        Ok(args)
    }

    /// The first of `options` this attribute gives (`reentrant` counts only as `true`).
    fn given(&self, options: &[&'static str]) -> Option<&'static str> {
        options.iter().copied().find(|option| match *option {
            "mode" => self.mode.is_some(),
            "fencing" => self.fencing,
            "permits" => self.permits.is_some(),
            "lock_at_least_for" => self.lock_at_least_for.is_some(),
            "reentrant" => self.reentrant == Some(true),
            _ => false,
        })
    }

    /// Refuses literal durations that cannot work: a ttl `LockOptions::validate` refuses
    /// whatever the handle's options, a zero `max_hold` or `wait_timeout`, and retries with
    /// neither delay nor jitter. Each error points at its literal.
    fn check_durations(&self) -> darling::Result<()> {
        let mut errors = darling::Error::accumulator();
        if let Some(ttl) = self.ttl
            && let Err(message) = check_ttl(ttl.ms, self.drift_factor.map(|f| f.0))
        {
            errors.push(ttl.error(message));
        }
        if let Some(max_hold) = self.max_hold.filter(Millis::is_zero) {
            errors.push(max_hold.error(
                "`max_hold` is zero: the lock would run out as soon as it is taken; give a cap such as \"10m\", or leave `max_hold` out for none",
            ));
        }
        if let Some(wait) = self.wait_timeout.filter(Millis::is_zero) {
            errors.push(wait.error(
                "a zero `wait_timeout` is meaningless (it would be a single attempt); use retry_count = 0 for a single attempt",
            ));
        }
        let retries = self.wait_timeout.is_some() || self.retry_count != Some(0);
        if let (Some(delay), Some(jitter)) = (self.retry_delay, self.retry_jitter)
            && delay.is_zero()
            && jitter.is_zero()
            && retries
        {
            errors.push(delay.error(
                "`retry_delay` and `retry_jitter` are both zero: the retries would hammer every node in a hot loop; give a delay, e.g. retry_delay = \"50ms\"",
            ));
        }
        errors.finish()
    }
}

/// `redlock_core::MAX_TTL` in milliseconds (this crate cannot depend on redlock-core;
/// the test `compile_time_duration_checks_agree_with_validate` binds these copies to core's).
const MAX_TTL_MS: u64 = 24 * 60 * 60 * 1000;
/// `redlock_core::DRIFT_FLOOR`.
const DRIFT_FLOOR: Duration = Duration::from_millis(2);

/// Why `LockOptions::validate` refuses a ttl of `ms` milliseconds with any drift factor at least
/// `drift_factor` (0 when not given: the handle's factor is unknown here). The arithmetic is
/// core's own (`Duration::mul_f64`), so the boundaries agree to the nanosecond. The lost-margin
/// check is left to run time: the handle's options may set a margin smaller than the default.
fn check_ttl(ms: u64, drift_factor: Option<f64>) -> Result<(), String> {
    if ms == 0 {
        return Err("the ttl is zero; a lock needs a ttl of a few milliseconds or more".into());
    }
    if ms > MAX_TTL_MS {
        return Err(format!(
            "the ttl of {ms} ms is above the cap of 24h ({MAX_TTL_MS} ms, `redlock_core::MAX_TTL`); check the unit"
        ));
    }
    let ttl = Duration::from_millis(ms);
    let drift = ttl.mul_f64(drift_factor.unwrap_or(0.0)) + DRIFT_FLOOR;
    if ttl <= drift {
        let how = match drift_factor {
            Some(factor) => format!("{drift:?} (ttl × {factor} + 2 ms)"),
            None => format!("at least {drift:?} (ttl × drift_factor + 2 ms)"),
        };
        return Err(format!(
            "ttl too short: leaves no validity after the drift allowance of {how}; use a longer ttl"
        ));
    }
    Ok(())
}

const NEGATIVE: &str = "durations cannot be negative; write e.g. \"200ms\"";

/// A duration written the human way (`"30s"`, `"1m 30s"`, `"250ms"`) or as an integer of
/// milliseconds (Hyperf's unit), kept in milliseconds with the literal's span.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Millis {
    pub(crate) ms: u64,
    span: Span,
}

impl FromMeta for Millis {
    fn from_expr(expr: &Expr) -> darling::Result<Self> {
        match expr {
            Expr::Lit(lit) => Self::from_value(&lit.lit),
            Expr::Group(group) => Self::from_expr(&group.expr),
            Expr::Unary(syn::ExprUnary {
                op: syn::UnOp::Neg(_),
                ..
            }) => Err(darling::Error::custom(NEGATIVE)),
            other => Err(darling::Error::unexpected_expr_type(other)),
        }
        .map_err(|e| e.with_span(expr))
    }

    fn from_value(value: &syn::Lit) -> darling::Result<Self> {
        let duration = match value {
            // syn reads `-1` as one literal.
            syn::Lit::Int(int) if int.base10_digits().starts_with('-') => {
                Err(darling::Error::custom(NEGATIVE))
            }
            syn::Lit::Str(s) if s.value().trim_start().starts_with('-') => {
                Err(darling::Error::custom(NEGATIVE))
            }
            syn::Lit::Int(int) => int
                .base10_parse::<u64>()
                .map(Duration::from_millis)
                .map_err(darling::Error::custom),
            syn::Lit::Str(s) => {
                let text = s.value();
                humantime::parse_duration(&text).map_err(|e| {
                    darling::Error::custom(format!(
                        "`{text}` is not a duration ({e}); write e.g. \"30s\", \"200ms\" or \"1m\""
                    ))
                })
            }
            other => Err(darling::Error::unexpected_lit_type(other)),
        };
        duration
            .and_then(|duration| Self::from_duration(duration, value.span()))
            .map_err(|e| e.with_span(value))
    }
}

impl Millis {
    fn from_duration(duration: Duration, span: Span) -> darling::Result<Self> {
        if !duration.subsec_nanos().is_multiple_of(1_000_000) {
            return Err(darling::Error::custom(
                "durations are whole milliseconds; Redis `PX` has millisecond precision",
            ));
        }
        u64::try_from(duration.as_millis())
            .map(|ms| Self { ms, span })
            .map_err(|_| darling::Error::custom("duration too large"))
    }

    fn is_zero(&self) -> bool {
        self.ms == 0
    }

    /// An error pointing at the literal.
    fn error(&self, message: impl std::fmt::Display) -> darling::Error {
        darling::Error::custom(message).with_span(&self.span)
    }
}

/// A lock mode, kept as the name of its `redlock_core::Mode` variant. The spellings are
/// `Mode`'s `FromStr` ones (this crate cannot depend on redlock-core, which re-exports it).
#[derive(Debug, Clone)]
pub(crate) struct ModeArg(pub(crate) syn::Ident);

impl FromMeta for ModeArg {
    fn from_string(value: &str) -> darling::Result<Self> {
        let variant = match value.to_ascii_lowercase().replace('-', "_").as_str() {
            "nl" | "null" => "Null",
            "cr" | "concurrent_read" => "ConcurrentRead",
            "cw" | "concurrent_write" => "ConcurrentWrite",
            "pr" | "protected_read" | "read" => "ProtectedRead",
            "pw" | "protected_write" => "ProtectedWrite",
            "ex" | "exclusive" | "write" => "Exclusive",
            _ => {
                return Err(darling::Error::custom(format!(
                    "`{value}` is not a lock mode; use \"read\", \"write\", or one of \"NL\", \"CR\", \"CW\", \"PR\", \"PW\", \"EX\""
                )));
            }
        };
        Ok(Self(syn::Ident::new(variant, Span::call_site())))
    }
}

/// What the function does when the resource is busy (`LockError::is_busy`): other holders kept
/// it on every attempt.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) enum OnBusy {
    /// Return the lock error converted into the function's error type.
    #[default]
    Error,
    /// Skip the body and return the "nothing done" value: `Ok(None)` for
    /// `Result<Option<T>, E>`, `Ok(T::default())` for `Result<T, E>`.
    Skip,
}

impl FromMeta for OnBusy {
    fn from_string(value: &str) -> darling::Result<Self> {
        match value {
            "error" => Ok(Self::Error),
            "skip" => Ok(Self::Skip),
            _ => Err(darling::Error::custom(format!(
                "`{value}` is not an `on_busy` action; use \"skip\" (skip the body, return `Ok(None)` or `Ok(T::default())`) or \"error\" (return `LockError::Busy`, the default)"
            ))),
        }
    }
}

/// A drift factor literal in `[0, 0.5)`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct DriftFactor(pub(crate) f64);

impl FromMeta for DriftFactor {
    fn from_value(value: &syn::Lit) -> darling::Result<Self> {
        let factor = match value {
            syn::Lit::Float(f) => f.base10_parse::<f64>().map_err(darling::Error::custom),
            other => Err(darling::Error::unexpected_lit_type(other)),
        }
        .map_err(|e| e.with_span(value))?;
        if !(0.0..0.5).contains(&factor) {
            return Err(darling::Error::custom(
                "drift_factor must be in [0, 0.5); the usual value is 0.01",
            )
            .with_span(value));
        }
        Ok(Self(factor))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn items(text: &str) -> Vec<NestedMeta> {
        NestedMeta::parse_meta_list(text.parse().unwrap()).unwrap()
    }

    #[test]
    fn every_argument_suggested_is_one_darling_takes() {
        for name in ARGUMENTS {
            let error = Args::from_list(&items(&format!("{name} = 1")))
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default();
            assert!(!error.contains("Unknown field"), "{name}: {error}");
        }
    }

    #[test]
    fn a_misspelt_argument_names_the_one_meant() {
        let suggestion = |text: &str| misspelt(&items(text)).map(|e| e.to_string());
        assert_eq!(
            suggestion(r#"resource = "x", tll = "1s""#).as_deref(),
            Some("unknown argument `tll`: did you mean `ttl`?")
        );
        assert_eq!(
            suggestion(r#"resourse = "x""#).as_deref(),
            Some("unknown argument `resourse`: did you mean `resource`?")
        );
        assert_eq!(
            suggestion("auto_extned").as_deref(),
            Some("unknown argument `auto_extned`: did you mean `auto_extend`?")
        );
        // Known arguments, and names close to none, are left to darling.
        assert_eq!(suggestion(r#"resource = "x", ttl = "1s""#), None);
        assert_eq!(suggestion("frobnicate = 1"), None);
        assert_eq!(suggestion("x = 1"), None);
    }
}
