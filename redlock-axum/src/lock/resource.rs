//! Where a request's resource name comes from.

use std::fmt;
use std::sync::Arc;

use axum::extract::{FromRequestParts, RawPathParams};
use http::request::Parts;
use redlock_template::{Malformed, Segment, segments};

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

/// What the layer says about a malformed template.
fn reason(malformed: Malformed) -> &'static str {
    match malformed {
        Malformed::Empty => "it is empty",
        Malformed::StrayClose => "a `}` closes nothing; write `}}` for a literal brace",
        Malformed::Unclosed => "a `{` is not closed",
        Malformed::Nested => {
            "a `{` inside a `{..}` placeholder; write `{{` outside placeholders for a literal brace"
        }
        Malformed::EmptyName => "a `{` must enclose a path parameter name, e.g. `{id}`",
        _ => "it is malformed",
    }
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
    /// The metrics class of the resources it renders (redlock-template's `class`).
    class: Arc<str>,
}

impl Template {
    /// Parses a template with the grammar `#[redlock]` uses (redlock-template's `segments`),
    /// tested against redlock-template's shared cases (its `cases` module).
    ///
    /// # Errors
    /// [`TemplateError`] for an empty template, an empty, unclosed or nested `{`, or a `}`
    /// that closes nothing.
    pub(crate) fn parse(template: &str) -> Result<Self, TemplateError> {
        segments(template)
            .map(|segments| Self {
                class: redlock_template::class(&segments, template).into(),
                segments,
            })
            .map_err(|kind| TemplateError {
                template: template.to_owned(),
                reason: reason(kind),
            })
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
    /// The class a template's resources are labelled by in metrics and spans: its text up to
    /// its first `:` when no placeholder comes before it, else the template itself
    /// (redlock-template's `class`), so that no path parameter ever is one. `None` for a
    /// closure: redlock-core labels its resources ([`redlock_core::resource_class`]).
    pub(crate) fn class(&self) -> Option<&Arc<str>> {
        match self {
            Self::Template(template) => Some(&template.class),
            Self::Fn(_) => None,
        }
    }

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

    use redlock_template::cases::{Seg, check_cases, seg};

    /// The layer's parser ([`Template::parse`]) in the table's terms: its error's reason
    /// mapped back to the kind it names.
    fn parse(template: &str) -> Result<Vec<Seg>, String> {
        let kinds = [
            Malformed::Empty,
            Malformed::StrayClose,
            Malformed::Unclosed,
            Malformed::Nested,
            Malformed::EmptyName,
        ];
        let parsed = Template::parse(template).map_err(|error| {
            let kind = kinds.into_iter().find(|&k| reason(k) == error.reason);
            format!("{:?}", kind.unwrap())
        })?;
        Ok(parsed.segments.iter().map(seg).collect())
    }

    #[test]
    fn the_shared_template_cases() {
        check_cases(|case| case.runtime_grammar, parse);
    }

    #[test]
    fn the_class_is_the_templates_fixed_text_before_a_colon_or_the_template() {
        let template = |t: &str| ResourceFrom::Template(Template::parse(t).unwrap());
        let cases = [
            (template("order:{id}"), Some("order")),
            (template("order:{id}:lines"), Some("order")),
            (template("{{a}}:{id}"), Some("{a}")),
            // A path parameter before the colon, or no colon: the template, never a value.
            (template("{tenant}:order:{id}"), Some("{tenant}:order:{id}")),
            (template("ord{id}"), Some("ord{id}")),
            (template("order-{id}"), Some("order-{id}")),
            (ResourceFrom::Fn(Arc::new(|_: &Parts| None)), None),
        ];
        for (from, class) in cases {
            assert_eq!(from.class().map(|c| &**c), class, "{from:?}");
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
