//! How a configuration struct is declared: the `options!` macro, and the [`Options`] trait it
//! implements, through which the environment is read without naming any option by hand.

use std::fmt;

use super::parse::Value;

/// Declares a configuration struct from one list: its options, each an `Option<T>` field
/// (`None` keeps the builder's value) whose `T` is a [`Value`], then its sections (nested
/// structs declared the same way, read as tables from files and flat from the environment).
/// It derives the struct (with `Deserialize` under the `serde` feature), a `Debug` that shows
/// no credential, and [`Options`]: the names and the setting from the environment's text.
///
/// The paths in the expansion are absolute, so a module that invokes it needs no import.
macro_rules! options {
    (
        $(#[$meta:meta])*
        pub struct $name:ident {
            $( $(#[$doc:meta])* $field:ident: $ty:ty, )*
        }
        sections {
            $( $(#[$section_doc:meta])* $section:ident: $section_ty:ty, )*
        }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Default, PartialEq)]
        #[cfg_attr(feature = "serde", derive(serde::Deserialize))]
        #[cfg_attr(feature = "serde", serde(deny_unknown_fields))]
        #[non_exhaustive]
        pub struct $name {
            $(
                $(#[$doc])*
                #[cfg_attr(
                    feature = "serde",
                    serde(default, deserialize_with = "crate::setup::config::parse::deserialize_option")
                )]
                pub $field: Option<$ty>,
            )*
            $(
                $(#[$section_doc])*
                #[cfg_attr(feature = "serde", serde(default))]
                pub $section: $section_ty,
            )*
        }

        impl ::std::fmt::Debug for $name {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                let mut out = f.debug_struct(stringify!($name));
                $( out.field(stringify!($field), &self.$field.as_ref().map($crate::setup::config::declare::Shown)); )*
                $( out.field(stringify!($section), &self.$section); )*
                out.finish()
            }
        }

        impl $crate::setup::config::declare::Options for $name {
            #[cfg(test)]
            const FIELDS: &'static [&'static str] = &[$(stringify!($field)),*];
            #[cfg(test)]
            const SECTIONS: &'static [&'static str] = &[$(stringify!($section)),*];

            fn names(out: &mut Vec<(&'static str, &'static str)>) {
                $( out.push((stringify!($field), <$ty as $crate::setup::config::parse::Value>::EXPECTED)); )*
                $( <$section_ty as $crate::setup::config::declare::Options>::names(out); )*
            }

            fn set(&mut self, name: &str, text: &str) -> Option<Result<(), String>> {
                $(
                    if name == stringify!($field) {
                        return Some(
                            <$ty as $crate::setup::config::parse::Value>::parse(text)
                                .map(|v| self.$field = Some(v)),
                        );
                    }
                )*
                $(
                    if let Some(done) =
                        $crate::setup::config::declare::Options::set(&mut self.$section, name, text)
                    {
                        return Some(done);
                    }
                )*
                None
            }
        }
    };
}

pub(crate) use options;

/// A struct declared by `options!`.
pub(crate) trait Options {
    /// Its own options' names, in order.
    #[cfg(test)]
    const FIELDS: &'static [&'static str];
    /// Its sections' names, in order.
    #[cfg(test)]
    const SECTIONS: &'static [&'static str];
    /// Every option's name and expected form, its sections' included, in order.
    fn names(out: &mut Vec<(&'static str, &'static str)>);
    /// Sets the option `name` (its own or a section's) from the environment's `text`; `None`
    /// if it has no such option.
    fn set(&mut self, name: &str, text: &str) -> Option<Result<(), String>>;
}

/// A value shown by [`Value::shown`].
pub(crate) struct Shown<'a, T>(pub(crate) &'a T);

impl<T: Value> fmt::Debug for Shown<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.shown(f)
    }
}
