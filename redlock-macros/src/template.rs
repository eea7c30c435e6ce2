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
