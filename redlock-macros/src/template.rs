//! The resource template, `"order:{order_id}"`: each `{name}` or `{name.field}` placeholder is
//! checked against the names the function's arguments bind.

use std::collections::HashSet;

use redlock_template::{Malformed, Segment, segments};
use syn::{Expr, FnArg, LitStr, Pat, Signature};

/// A resource template split into a `format!` string and its argument expressions.
pub(crate) struct Template {
    pub(crate) format: String,
    pub(crate) args: Vec<Expr>,
    /// The metrics class of its resources (redlock-template's `class`).
    pub(crate) class: String,
}

impl Template {
    /// Parses `"order:{order_id}"` (redlock-template's `segments`), then checks each placeholder: a Rust place
    /// ([`is_place`]) whose first identifier the function's arguments bind (through any
    /// pattern, e.g. `Path(id): Path<u64>`). Every error points at the literal.
    pub(crate) fn parse(literal: &LitStr, sig: &Signature) -> syn::Result<Self> {
        let error = |message: String| syn::Error::new(literal.span(), message);
        let source = literal.value();
        let segments = segments(&source).map_err(|m| error(message(m).to_owned()))?;
        let class = redlock_template::class(&segments, &source);
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
        Ok(Self {
            format,
            args,
            class,
        })
    }
}

/// What the macro says about a malformed template.
fn message(malformed: Malformed) -> &'static str {
    match malformed {
        Malformed::Empty => "the resource is empty",
        Malformed::StrayClose => "unmatched `}` in resource; write `}}` for a literal brace",
        Malformed::Unclosed => "unclosed `{` in resource",
        Malformed::Nested => {
            "`{` inside a `{..}` placeholder in resource; write `{{` outside placeholders for a literal brace"
        }
        Malformed::EmptyName => "empty `{}` in resource; name an argument, e.g. `{id}`",
        _ => "malformed resource template",
    }
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

    use redlock_template::cases::{Seg, check_cases, seg};

    /// The macro's grammar in the table's terms: `segments`, then [`is_place`] per name.
    fn parse(template: &str) -> Result<Vec<Seg>, String> {
        let segments = segments(template).map_err(|kind| format!("{kind:?}"))?;
        segments
            .iter()
            .map(|segment| match segment {
                Segment::Placeholder(path) if !is_place(path) => Err("Name".to_owned()),
                segment => Ok(seg(segment)),
            })
            .collect()
    }

    #[test]
    fn the_shared_template_cases() {
        check_cases(|case| case.macro_grammar, parse);
    }
}
