//! Parsing `#[redlock(...)]`'s arguments and the resource template.

use std::collections::HashSet;
use std::time::Duration;

use darling::FromMeta;
use darling::ast::NestedMeta;
use proc_macro2::{Span, TokenStream};
use syn::{Expr, FnArg, LitStr, Pat, Signature};

/// The attribute's arguments, mirroring RedLock-Hyperf's `@RedLockAnnotation`.
#[derive(Debug, FromMeta)]
pub(crate) struct Args {
    /// The resource template, e.g. `"order:{order_id}"`.
    pub(crate) resource: LitStr,
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
    /// Issue a fencing token (read it through the `guard` binding).
    #[darling(default)]
    pub(crate) fencing: bool,
    /// Lock mode: `"read"`, `"write"`, or a DLM mode (`"NL"`, `"CR"`, `"CW"`, `"PR"`, `"PW"`,
    /// `"EX"`); default none, the plain exclusive lock.
    #[darling(default)]
    pub(crate) mode: Option<ModeArg>,
    /// Re-enter a lock the task already holds (default `true`).
    #[darling(default)]
    pub(crate) reentrant: Option<bool>,
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

impl Args {
    pub(crate) fn parse(attr: TokenStream) -> darling::Result<Self> {
        let items = NestedMeta::parse_meta_list(attr)?;
        let args = Self::from_list(&items)?;
        if let (Some(_), false) = (&args.max_hold, args.auto_extend) {
            return Err(darling::Error::custom(
                "`max_hold` caps auto-extension: add `auto_extend`",
            )
            .with_span(&args.resource.span()));
        }
        if let (Some(pool), Some(_)) = (&args.pool, &args.redlock) {
            return Err(
                darling::Error::custom("give either `pool` or `redlock`, not both")
                    .with_span(&pool.span()),
            );
        }
        Ok(args)
    }
}

/// A duration written the human way (`"30s"`, `"1m 30s"`, `"250ms"`) or as an integer of
/// milliseconds (Hyperf's unit), kept in milliseconds.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Millis(pub(crate) u64);

impl FromMeta for Millis {
    fn from_string(value: &str) -> darling::Result<Self> {
        let duration = humantime::parse_duration(value).map_err(|e| {
            darling::Error::custom(format!(
                "`{value}` is not a duration ({e}); write e.g. \"30s\", \"200ms\" or \"1m\""
            ))
        })?;
        Self::from_duration(duration)
    }

    fn from_value(value: &syn::Lit) -> darling::Result<Self> {
        match value {
            syn::Lit::Int(int) => {
                let ms = int.base10_parse::<u64>().map_err(darling::Error::custom)?;
                Self::from_duration(Duration::from_millis(ms))
            }
            syn::Lit::Str(s) => Self::from_string(&s.value()),
            other => Err(darling::Error::unexpected_lit_type(other)),
        }
        .map_err(|e| e.with_span(value))
    }
}

impl Millis {
    fn from_duration(duration: Duration) -> darling::Result<Self> {
        if !duration.subsec_nanos().is_multiple_of(1_000_000) {
            return Err(darling::Error::custom(
                "durations are whole milliseconds; Redis `PX` has millisecond precision",
            ));
        }
        u64::try_from(duration.as_millis())
            .map(Self)
            .map_err(|_| darling::Error::custom("duration too large"))
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

/// A resource template split into a `format!` string and its argument expressions.
pub(crate) struct Template {
    pub(crate) format: String,
    pub(crate) args: Vec<Expr>,
}

impl Template {
    /// Parses `"order:{order_id}"`: each `{path}` must start with a name the function's
    /// arguments bind (through any pattern, e.g. `Path(id): Path<u64>`), optionally followed by
    /// `.field`s; `{{` and `}}` are literal braces.
    pub(crate) fn parse(literal: &LitStr, sig: &Signature) -> syn::Result<Self> {
        let bound = bindings(sig);
        let text = literal.value();
        let error = |message: String| syn::Error::new(literal.span(), message);
        let mut format = String::new();
        let mut args = Vec::new();
        let mut chars = text.chars().peekable();
        while let Some(c) = chars.next() {
            match c {
                '{' if chars.peek() == Some(&'{') => {
                    chars.next();
                    format.push_str("{{");
                }
                '}' if chars.peek() == Some(&'}') => {
                    chars.next();
                    format.push_str("}}");
                }
                '}' => {
                    return Err(error(
                        "unmatched `}` in resource; write `}}` for a literal brace".into(),
                    ));
                }
                '{' => {
                    let mut path = String::new();
                    loop {
                        match chars.next() {
                            Some('}') => break,
                            Some(c) => path.push(c),
                            None => return Err(error("unclosed `{` in resource".into())),
                        }
                    }
                    let path = path.trim();
                    let root = path.split('.').next().unwrap_or_default();
                    if root.is_empty() {
                        return Err(error(
                            "empty `{}` in resource; name an argument, e.g. `{id}`".into(),
                        ));
                    }
                    if !bound.contains(root) {
                        let mut names: Vec<_> = bound.iter().map(String::as_str).collect();
                        names.sort_unstable();
                        return Err(error(format!(
                            "`{{{path}}}` names no argument of this function (arguments: {})",
                            if names.is_empty() {
                                "none".to_owned()
                            } else {
                                names.join(", ")
                            }
                        )));
                    }
                    let expr: Expr = syn::parse_str(path).map_err(|_| {
                        error(format!(
                            "`{{{path}}}` must be an argument name or `name.field`"
                        ))
                    })?;
                    format.push_str("{}");
                    args.push(expr);
                }
                c => format.push(c),
            }
        }
        if format.is_empty() {
            return Err(error("the resource is empty".into()));
        }
        Ok(Self { format, args })
    }
}

/// Every name the function's arguments bind, through any pattern.
fn bindings(sig: &Signature) -> HashSet<String> {
    let mut names = HashSet::new();
    for input in &sig.inputs {
        match input {
            FnArg::Receiver(_) => {
                names.insert("self".to_owned());
            }
            FnArg::Typed(typed) => collect(&typed.pat, &mut names),
        }
    }
    names
}

fn collect(pat: &Pat, names: &mut HashSet<String>) {
    match pat {
        Pat::Ident(p) => {
            names.insert(p.ident.to_string());
            if let Some((_, sub)) = &p.subpat {
                collect(sub, names);
            }
        }
        Pat::TupleStruct(p) => p.elems.iter().for_each(|p| collect(p, names)),
        Pat::Tuple(p) => p.elems.iter().for_each(|p| collect(p, names)),
        Pat::Struct(p) => p.fields.iter().for_each(|f| collect(&f.pat, names)),
        Pat::Reference(p) => collect(&p.pat, names),
        Pat::Slice(p) => p.elems.iter().for_each(|p| collect(p, names)),
        Pat::Type(p) => collect(&p.pat, names),
        Pat::Paren(p) => collect(&p.pat, names),
        _ => {}
    }
}

/// The span to blame for a missing `async`.
pub(crate) fn fn_span(sig: &Signature) -> Span {
    sig.fn_token.span
}
