//! The resource template, `"order:{order_id}"`: each `{name}` or `{name.field}` placeholder is
//! checked against the names the function's arguments bind.

use std::collections::HashSet;

use syn::{Expr, FnArg, LitStr, Pat, Signature};

/// A resource template split into a `format!` string and its argument expressions.
pub(crate) struct Template {
    pub(crate) format: String,
    pub(crate) args: Vec<Expr>,
}

impl Template {
    /// Parses `"order:{order_id}"` ([`segments`]), then checks each placeholder: a Rust place
    /// ([`is_place`]) whose first identifier the function's arguments bind (through any
    /// pattern, e.g. `Path(id): Path<u64>`). Every error points at the literal.
    pub(crate) fn parse(literal: &LitStr, sig: &Signature) -> syn::Result<Self> {
        let error = |message: String| syn::Error::new(literal.span(), message);
        let segments = segments(&literal.value()).map_err(|m| error(m.message().to_owned()))?;
        let bound = bindings(sig);
        let mut format = String::new();
        let mut args = Vec::new();
        for segment in segments {
            let path = match segment {
                Segment::Text(text) => {
                    format.push_str(&text.replace('{', "{{").replace('}', "}}"));
                    continue;
                }
                Segment::Placeholder(path) => path,
            };
            let not_a_place = || {
                error(format!(
                    "`{{{path}}}` must be an argument name or `name.field`"
                ))
            };
            if !is_place(&path) {
                return Err(not_a_place());
            }
            let root = path.split('.').next().unwrap_or_default();
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
            // A keyword as a field (`{a.type}`) passes `is_place` but not syn.
            let expr: Expr = syn::parse_str(&path).map_err(|_| not_a_place())?;
            format.push_str("{}");
            args.push(expr);
        }
        Ok(Self { format, args })
    }
}

/// Why a template is malformed; the variants are the error kinds of the shared table
/// (`template_cases.rs`), the same as redlock-axum's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Malformed {
    Empty,
    StrayClose,
    Unclosed,
    Nested,
    EmptyName,
}

impl Malformed {
    fn message(self) -> &'static str {
        match self {
            Self::Empty => "the resource is empty",
            Self::StrayClose => "unmatched `}` in resource; write `}}` for a literal brace",
            Self::Unclosed => "unclosed `{` in resource",
            Self::Nested => {
                "`{` inside a `{..}` placeholder in resource; write `{{` outside placeholders for a literal brace"
            }
            Self::EmptyName => "empty `{}` in resource; name an argument, e.g. `{id}`",
        }
    }
}

/// A piece of a template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Segment {
    /// Literal text, its `{{` and `}}` unescaped.
    Text(String),
    /// A placeholder's name, trimmed.
    Placeholder(String),
}

/// Splits a template into text and placeholders: the grammar shared with redlock-axum's
/// `RedlockLayer::from_template` (described in, and tested against, `template_cases.rs`).
/// Written to match redlock-axum's `Template::parse` step for step.
pub(crate) fn segments(template: &str) -> Result<Vec<Segment>, Malformed> {
    if template.is_empty() {
        return Err(Malformed::Empty);
    }
    let mut segments = Vec::new();
    let mut text = String::new();
    let mut chars = template.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '{' if chars.next_if_eq(&'{').is_some() => text.push('{'),
            '}' if chars.next_if_eq(&'}').is_some() => text.push('}'),
            '}' => return Err(Malformed::StrayClose),
            '{' => {
                let mut name = String::new();
                loop {
                    match chars.next() {
                        Some('}') => break,
                        Some('{') => return Err(Malformed::Nested),
                        Some(c) => name.push(c),
                        None => return Err(Malformed::Unclosed),
                    }
                }
                let name = name.trim();
                if name.is_empty() {
                    return Err(Malformed::EmptyName);
                }
                if !text.is_empty() {
                    segments.push(Segment::Text(std::mem::take(&mut text)));
                }
                segments.push(Segment::Placeholder(name.to_owned()));
            }
            c => text.push(c),
        }
    }
    if !text.is_empty() {
        segments.push(Segment::Text(text));
    }
    Ok(segments)
}

/// `true` for a Rust place: an identifier (raw ones too) followed by `.field`s or `.0`-style
/// tuple indexes.
fn is_place(path: &str) -> bool {
    let is_ident = |s: &str| {
        let s = s.strip_prefix("r#").unwrap_or(s);
        let mut chars = s.chars();
        chars.next().is_some_and(|c| c == '_' || c.is_alphabetic())
            && chars.all(|c| c == '_' || c.is_alphanumeric())
    };
    let mut parts = path.split('.');
    parts.next().is_some_and(is_ident)
        && parts.all(|p| is_ident(p) || (!p.is_empty() && p.bytes().all(|b| b.is_ascii_digit())))
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

#[cfg(test)]
mod tests {
    use super::*;

    include!("../template_cases.rs");

    /// The macro's grammar in the table's terms: [`segments`], then [`is_place`] per name.
    fn parse(template: &str) -> Result<Vec<Seg>, String> {
        let segments = segments(template).map_err(|kind| format!("{kind:?}"))?;
        segments
            .iter()
            .map(|segment| match segment {
                Segment::Text(text) => Ok(Seg::T(leak(text))),
                Segment::Placeholder(path) if is_place(path) => Ok(Seg::P(leak(path))),
                Segment::Placeholder(_) => Err("Name".to_owned()),
            })
            .collect()
    }

    fn leak(s: &str) -> &'static str {
        Box::leak(s.to_owned().into_boxed_str())
    }

    #[test]
    fn the_shared_template_cases() {
        for case in CASES {
            let expected = case
                .macro_grammar
                .map(<[Seg]>::to_vec)
                .map_err(str::to_owned);
            assert_eq!(parse(case.template), expected, "{:?}", case.template);
        }
    }
}
