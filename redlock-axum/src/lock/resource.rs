//! Where a request's resource name comes from.

use std::fmt;
use std::sync::Arc;

use axum::extract::{FromRequestParts, RawPathParams};
use http::request::Parts;

/// A resource template could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
#[error("invalid resource template `{template}`: {reason}")]
pub struct TemplateError {
    /// The template.
    pub template: String,
    /// What is wrong with it.
    pub reason: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Piece {
    Text(String),
    Param(String),
}

/// The route lacks the path parameter a template names (a configuration error).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct MissingParam(pub(crate) String);

/// A template over the matched route's path parameters: `"order:{id}"` on a route
/// `/orders/{id}/pay` locks `order:42` for `/orders/42/pay`. `{{` and `}}` are literal braces.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Template {
    pieces: Vec<Piece>,
}

impl Template {
    /// Parses a template.
    ///
    /// # Errors
    /// [`TemplateError`] for an empty template, an empty or unclosed `{`, or a stray `}`.
    pub(crate) fn parse(template: &str) -> Result<Self, TemplateError> {
        let error = |reason| TemplateError {
            template: template.to_owned(),
            reason,
        };
        if template.is_empty() {
            return Err(error("it is empty"));
        }
        let mut pieces = Vec::new();
        let mut text = String::new();
        let mut chars = template.chars().peekable();
        while let Some(c) = chars.next() {
            match c {
                '{' if chars.peek() == Some(&'{') => {
                    chars.next();
                    text.push('{');
                }
                '}' if chars.peek() == Some(&'}') => {
                    chars.next();
                    text.push('}');
                }
                '}' => return Err(error("a `}` has no `{`; write `}}` for a literal brace")),
                '{' => {
                    let name: String = chars.by_ref().take_while(|&c| c != '}').collect();
                    if name.is_empty() || name.contains('{') {
                        return Err(error(
                            "a `{` must enclose a path parameter name, e.g. `{id}`",
                        ));
                    }
                    if !text.is_empty() {
                        pieces.push(Piece::Text(std::mem::take(&mut text)));
                    }
                    pieces.push(Piece::Param(name));
                }
                c => text.push(c),
            }
        }
        if template.matches('{').count() > template.matches('}').count() {
            return Err(error("a `{` is not closed"));
        }
        if !text.is_empty() {
            pieces.push(Piece::Text(text));
        }
        Ok(Self { pieces })
    }

    /// Fills the template from `(name, value)` path parameters.
    ///
    /// # Errors
    /// [`MissingParam`] names the first parameter the route does not have.
    pub(crate) fn render(&self, params: &[(&str, &str)]) -> Result<String, MissingParam> {
        let mut out = String::new();
        for piece in &self.pieces {
            match piece {
                Piece::Text(text) => out.push_str(text),
                Piece::Param(name) => {
                    let value = params
                        .iter()
                        .find(|(key, _)| key == name)
                        .map(|(_, value)| *value)
                        .ok_or_else(|| MissingParam(name.clone()))?;
                    out.push_str(value);
                }
            }
        }
        Ok(out)
    }
}

type ResourceFn = dyn Fn(&Parts) -> Option<String> + Send + Sync;

/// How the layer finds the resource of a request.
#[derive(Clone)]
pub(crate) enum ResourceFrom {
    Template(Template),
    Fn(Arc<ResourceFn>),
}

impl fmt::Debug for ResourceFrom {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Template(t) => f.debug_tuple("Template").field(t).finish(),
            Self::Fn(_) => f.write_str("Fn(..)"),
        }
    }
}

/// The outcome of resolving a request's resource.
pub(crate) enum Resolved {
    /// Lock this resource.
    Resource(String),
    /// The closure said this request needs no lock.
    Skip,
    /// The route lacks a parameter the template names (a configuration error).
    MissingParam(MissingParam),
}

impl ResourceFrom {
    pub(crate) async fn resolve(&self, parts: &mut Parts) -> Resolved {
        match self {
            Self::Fn(f) => f(parts).map_or(Resolved::Skip, Resolved::Resource),
            Self::Template(template) => {
                let params = RawPathParams::from_request_parts(parts, &()).await.ok();
                let pairs: Vec<(&str, &str)> = params.iter().flat_map(|p| p.iter()).collect();
                match template.render(&pairs) {
                    Ok(resource) => Resolved::Resource(resource),
                    Err(missing) => Resolved::MissingParam(missing),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates_parse_and_render() {
        let t = Template::parse("order:{id}:{{v}}:{item}").unwrap();
        let params = [("item", "a b"), ("id", "42")];
        assert_eq!(t.render(&params).unwrap(), "order:42:{v}:a b");
        assert_eq!(
            t.render(&[("id", "1")]),
            Err(MissingParam("item".to_owned()))
        );
        for bad in ["", "{}", "a}b", "{open", "x{a{b}}"] {
            assert!(Template::parse(bad).is_err(), "{bad}");
        }
    }
}
