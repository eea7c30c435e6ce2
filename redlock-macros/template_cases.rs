// The resource-template cases shared by the two parsers of the grammar, so that they cannot
// drift: `include!`d by the unit tests of redlock-macros/src/template.rs (`#[redlock(resource
// = "..")]`, checked at compile time) and redlock-axum/src/lock/resource.rs
// (`RedlockLayer::from_template`, checked when the layer is built).
//
// The grammar. A template is a non-empty string (else `Empty`) of literal text and
// placeholders, read left to right; the first error wins. `{{` and `}}` are a literal `{` and
// `}`. A placeholder is `{`, a name, `}`, and whitespace around the name is ignored. A `}` that
// closes nothing is `StrayClose`, a `{` that is never closed is `Unclosed`, a `{` inside a
// placeholder is `Nested`, and a blank name is `EmptyName`. What a name may be is where the
// two grammars differ, on purpose: for the macro it is a Rust place, an identifier followed by
// `.field`s or `.0`-style tuple indexes (else `Name`), whose first identifier one of the
// function's arguments binds (checked against the signature, so not in this table); at run
// time it is the name of a path parameter of the matched route, and axum allows any text
// without braces there (`{user-id}`), so every name is accepted when the layer is built and a
// name the route lacks is answered `500` per request.
//
// Each case: the template, then what the macro's grammar gives, then the runtime's (the same
// for rows built with `both`). `Ok` lists the segments: `T` literal text with its braces
// unescaped, `P` a placeholder's trimmed name. `Err` names the error kind, as above.

#[allow(dead_code)] // each crate reads one of the two columns
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Seg {
    T(&'static str),
    P(&'static str),
}

use Seg::{P, T};

type Expected = Result<&'static [Seg], &'static str>;

#[allow(dead_code)] // each crate reads one of the two columns
struct Case {
    template: &'static str,
    macro_grammar: Expected,
    runtime_grammar: Expected,
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

const CASES: &[Case] = &[
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
    both("order:{id}:{{v}}:{item}", Ok(&[T("order:"), P("id"), T(":{v}:"), P("item")])),
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
