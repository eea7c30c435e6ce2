//! The resource-template cases of the grammar both `#[redlock(resource = "..")]` (checked at
//! compile time) and `RedlockLayer::from_template` (checked when the layer is built) parse with
//! [`segments`](crate::segments): read by the unit tests of this crate (the grammar),
//! redlock-macros (plus the macro's rule for names) and redlock-axum (the layer's parser),
//! which turn on the `cases` feature as a dev-dependency. Not part of the API.
//!
//! The grammar. A template is a non-empty string (else `Empty`) of literal text and
//! placeholders, read left to right; the first error wins. `{{` and `}}` are a literal `{` and
//! `}`. A placeholder is `{`, a name, `}`, and whitespace around the name is ignored. A `}` that
//! closes nothing is `StrayClose`, a `{` that is never closed is `Unclosed`, a `{` inside a
//! placeholder is `Nested`, and a blank name is `EmptyName`. What a name may be is where the
//! two grammars differ, on purpose: for the macro it is a Rust place, an identifier followed by
//! `.field`s or `.0`-style tuple indexes (else `Name`), whose first identifier one of the
//! function's arguments binds (checked against the signature, so not in this table); at run
//! time it is the name of a path parameter of the matched route, and axum allows any text
//! without braces there (`{user-id}`), so every name is accepted when the layer is built and a
//! name the route lacks is answered `500` per request.
//!
//! Each case: the template, then what the macro's grammar gives, then the runtime's (the same
//! for rows built with `both`). `Ok` lists the segments: `T` literal text with its braces
//! unescaped, `P` a placeholder's trimmed name. `Err` names the error kind, as above.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
/// A segment as a case writes it.
pub enum Seg {
    /// Literal text, braces unescaped.
    T(&'static str),
    /// A placeholder's trimmed name.
    P(&'static str),
}

pub use Seg::{P, T};

use crate::Segment;

/// Segments, or the name of the error kind.
pub type Expected = Result<&'static [Seg], &'static str>;

/// One template and what each grammar makes of it.
#[derive(Debug)]
pub struct Case {
    /// The template.
    pub template: &'static str,
    /// What the macro's grammar gives.
    pub macro_grammar: Expected,
    /// What the layer's grammar gives.
    pub runtime_grammar: Expected,
}

const fn both(template: &'static str, expected: Expected) -> Case {
    differ(template, expected, expected)
}

const fn differ(
    template: &'static str,
    macro_grammar: Expected,
    runtime_grammar: Expected,
) -> Case {
    Case {
        template,
        macro_grammar,
        runtime_grammar,
    }
}

/// Every case.
pub const CASES: &[Case] = &[
    // Text and placeholders.
    both("x", Ok(&[T("x")])),
    both("{id}", Ok(&[P("id")])),
    both("order:{id}", Ok(&[T("order:"), P("id")])),
    both("a{x}b{y}", Ok(&[T("a"), P("x"), T("b"), P("y")])),
    both("{x}{y}", Ok(&[P("x"), P("y")])),
    both("{ id }", Ok(&[P("id")])),
    both(" ", Ok(&[T(" ")])),
    // Escaped braces.
    both("{{v}}", Ok(&[T("{v}")])),
    both("{{}}", Ok(&[T("{}")])),
    both("a{{b", Ok(&[T("a{b")])),
    both("a}}b", Ok(&[T("a}b")])),
    both("{{{id}", Ok(&[T("{"), P("id")])),
    both("{{{id}}}", Ok(&[T("{"), P("id"), T("}")])),
    both(
        "order:{id}:{{v}}:{item}",
        Ok(&[T("order:"), P("id"), T(":{v}:"), P("item")]),
    ),
    // Malformed, for both.
    both("", Err("Empty")),
    both("{}", Err("EmptyName")),
    both("{ }", Err("EmptyName")),
    both("}", Err("StrayClose")),
    both("a}b", Err("StrayClose")),
    both("{id}}", Err("StrayClose")),
    both("{{}", Err("StrayClose")),
    both("{open", Err("Unclosed")),
    both("a{", Err("Unclosed")),
    both("{a{b}", Err("Nested")),
    both("x{a{b}}", Err("Nested")),
    both("{a{{b}", Err("Nested")),
    // Names: Rust places for the macro, any path parameter name at run time.
    both("{job.name}", Ok(&[P("job.name")])),
    both("{self.id}:{{x}}", Ok(&[P("self.id"), T(":{x}")])),
    both("{pair.0}", Ok(&[P("pair.0")])),
    both("{r#type}", Ok(&[P("r#type")])),
    differ("{user-id}", Err("Name"), Ok(&[P("user-id")])),
    differ("{a b}", Err("Name"), Ok(&[P("a b")])),
    differ("{a.}", Err("Name"), Ok(&[P("a.")])),
    differ("{.a}", Err("Name"), Ok(&[P(".a")])),
    differ("{1x}", Err("Name"), Ok(&[P("1x")])),
    differ("{a.len()}", Err("Name"), Ok(&[P("a.len()")])),
    differ("{a.b + c}", Err("Name"), Ok(&[P("a.b + c")])),
];

/// A parsed segment in the table's terms (its text leaked: tests only).
pub fn seg(segment: &Segment) -> Seg {
    let leak = |s: &str| -> &'static str { Box::leak(s.to_owned().into_boxed_str()) };
    match segment {
        Segment::Text(text) => Seg::T(leak(text)),
        Segment::Placeholder(name) => Seg::P(leak(name)),
    }
}

/// Checks `parse` (segments, or an error kind's name) against one column of every case.
pub fn check_cases(
    column: fn(&Case) -> Expected,
    parse: impl Fn(&str) -> Result<Vec<Seg>, String>,
) {
    for case in CASES {
        let expected = column(case).map(<[Seg]>::to_vec).map_err(str::to_owned);
        assert_eq!(parse(case.template), expected, "{:?}", case.template);
    }
}
