//! The resource-template grammar shared by `#[redlock(resource = "order:{id}")]` (checked at
//! compile time) and redlock-axum's `RedlockLayer::from_template` (checked when the layer is
//! built), so that the two cannot drift: one parser, [`segments`].
//!
//! A template is a non-empty string of literal text and placeholders, read left to right; the
//! first error wins. `{{` and `}}` are a literal `{` and `}`. A placeholder is `{`, a name, `}`;
//! whitespace around the name is ignored. What a name may be is each user's rule: the macro
//! wants a Rust place bound by the function's arguments (`{id}`, `{job.name}`, `{pair.0}`), the
//! layer a path parameter of the matched route. The cases both are tested against are in
//! `src/cases.rs`.

#[cfg(any(test, feature = "cases"))]
#[doc(hidden)]
pub mod cases;

/// A piece of a template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Segment {
    /// Literal text, its `{{` and `}}` unescaped.
    Text(String),
    /// A placeholder's name, trimmed.
    Placeholder(String),
}

/// Why a template is malformed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Malformed {
    /// The template is empty.
    Empty,
    /// A `}` closes nothing (a literal brace is `}}`).
    StrayClose,
    /// A `{` is never closed.
    Unclosed,
    /// A `{` inside a placeholder (a literal brace outside placeholders is `{{`).
    Nested,
    /// A placeholder with a blank name: `{}`.
    EmptyName,
}

/// The metrics class of every resource `template` renders (redlock-core's `resource_class`
/// label): its fixed text up to the first `:` when a `:` comes before any placeholder
/// (`order:{id}` → `order`), else the template itself (`{tenant}:sync`, `report-{day}`). Either
/// way it comes from the code, never from a placeholder's value, so the label set stays as
/// small as the set of templates.
pub fn class(segments: &[Segment], template: &str) -> String {
    let mut fixed = String::new();
    for segment in segments {
        match segment {
            Segment::Text(text) => fixed.push_str(text),
            Segment::Placeholder(_) => break,
        }
    }
    match fixed.split_once(':') {
        Some((class, _)) => class.to_owned(),
        None => template.to_owned(),
    }
}

/// Splits `template` into text and placeholders.
///
/// # Errors
/// [`Malformed`]: the first thing wrong, reading left to right.
pub fn segments(template: &str) -> Result<Vec<Segment>, Malformed> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cases::{check_cases, seg};

    #[test]
    fn the_shared_template_cases() {
        // The grammar alone never refuses a name: the runtime column.
        check_cases(
            |case| case.runtime_grammar,
            |template| {
                let segments = segments(template).map_err(|kind| format!("{kind:?}"))?;
                Ok(segments.iter().map(seg).collect())
            },
        );
    }
}
