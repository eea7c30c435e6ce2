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

/// Why a template is malformed; the variants are the error kinds of the shared table
/// (redlock-macros/template_cases.rs), the same as the macro's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Malformed {
    Empty,
    StrayClose,
    Unclosed,
    Nested,
    EmptyName,
}

impl Malformed {
    fn reason(self) -> &'static str {
        match self {
            Self::Empty => "it is empty",
            Self::StrayClose => "a `}` closes nothing; write `}}` for a literal brace",
            Self::Unclosed => "a `{` is not closed",
            Self::Nested => {
                "a `{` inside a `{..}` placeholder; write `{{` outside placeholders for a literal brace"
            }
            Self::EmptyName => "a `{` must enclose a path parameter name, e.g. `{id}`",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Segment {
    /// Literal text, its `{{` and `}}` unescaped.
    Text(String),
    /// A path parameter's name, trimmed.
    Placeholder(String),
}

/// The route lacks the path parameter a template names (a configuration error).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct MissingParam(pub(crate) String);

/// A template over the matched route's path parameters: `"order:{id}"` on a route
/// `/orders/{id}/pay` locks `order:42` for `/orders/42/pay`. The grammar is `#[redlock]`'s
/// (see [`RedlockLayer::from_template`](crate::RedlockLayer::from_template)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Template {
    segments: Vec<Segment>,
}

impl Template {
    /// Parses a template. Written to match redlock-macros' `template::segments` step for step;
    /// both are tested against redlock-macros/template_cases.rs.
    ///
    /// # Errors
    /// [`TemplateError`] for an empty template, an empty, unclosed or nested `{`, or a `}`
    /// that closes nothing.
    pub(crate) fn parse(template: &str) -> Result<Self, TemplateError> {
        Self::segments(template)
            .map(|segments| Self { segments })
            .map_err(|kind| TemplateError {
                template: template.to_owned(),
                reason: kind.reason(),
            })
    }

    fn segments(template: &str) -> Result<Vec<Segment>, Malformed> {
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

    /// Fills the template from `(name, value)` path parameters.
    ///
    /// # Errors
    /// [`MissingParam`] names the first parameter the route does not have.
    pub(crate) fn render(&self, params: &[(&str, &str)]) -> Result<String, MissingParam> {
        let mut out = String::new();
        for segment in &self.segments {
            match segment {
                Segment::Text(text) => out.push_str(text),
                Segment::Placeholder(name) => {
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
    #![allow(clippy::unwrap_used)] // tests unwrap: a failure is the assertion

    use super::*;

    include!("../../../redlock-macros/template_cases.rs");

    /// The runtime grammar in the table's terms.
    fn parse(template: &str) -> Result<Vec<Seg>, String> {
        let segments = Template::segments(template).map_err(|kind| format!("{kind:?}"))?;
        Ok(segments
            .iter()
            .map(|segment| match segment {
                Segment::Text(text) => Seg::T(leak(text)),
                Segment::Placeholder(name) => Seg::P(leak(name)),
            })
            .collect())
    }

    fn leak(s: &str) -> &'static str {
        Box::leak(s.to_owned().into_boxed_str())
    }

    #[test]
    fn the_shared_template_cases() {
        for case in CASES {
            let expected = case
                .runtime_grammar
                .map(<[Seg]>::to_vec)
                .map_err(str::to_owned);
            assert_eq!(parse(case.template), expected, "{:?}", case.template);
        }
    }

    #[test]
    fn templates_render_from_path_params() {
        let t = Template::parse("order:{id}:{{v}}:{ item }").unwrap();
        let params = [("item", "a b"), ("id", "42")];
        assert_eq!(t.render(&params).unwrap(), "order:42:{v}:a b");
        assert_eq!(
            t.render(&[("id", "1")]),
            Err(MissingParam("item".to_owned()))
        );
    }
}
