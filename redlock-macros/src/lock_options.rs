//! The lock options of redlock-core and `#[redlock]`'s arguments, bound by a test: each lock
//! option is an argument (parsed in `args.rs`, mapped to its setter in `expand.rs`, documented
//! in the crate docs' table) or listed here as left to the handle's defaults. This crate
//! cannot depend on redlock-core (the other way round), so the test reads core's list (its
//! `LockConfig`, declared from the one list of lock options) through the dev-dependency.

use std::collections::BTreeSet;

/// The lock options `#[redlock]` takes as arguments, each with an attribute that gives it.
/// `expand` maps each to the `LockOptions` setter of the same name.
const LOCK_OPTION_ARGS: [(&str, &str); 11] = [
    ("ttl", r#"ttl = "1s""#),
    ("retry_count", "retry_count = 3"),
    ("retry_delay", r#"retry_delay = "50ms""#),
    ("retry_jitter", r#"retry_jitter = "10ms""#),
    ("wait_timeout", r#"wait_timeout = "5s""#),
    ("drift_factor", "drift_factor = 0.02"),
    ("auto_extend", "auto_extend"),
    ("max_hold", r#"auto_extend, max_hold = "1h""#),
    ("lock_at_least_for", r#"lock_at_least_for = "1s""#),
    ("fencing", "fencing"),
    ("reentrant", "reentrant = false"),
];

/// The lock options it takes no argument for: tunings of auto-extension and of the lost
/// signal, set once on the handle's default options (`RedlockBuilder::lock_options`, or
/// `REDLOCK_*`), which every annotated function starts from.
const LEFT_TO_THE_HANDLE: [&str; 3] = ["extend_fraction", "max_extensions", "lost_margin"];

/// Its arguments that are not lock options: the resource, what to do when it is busy,
/// the guard's binding, the handle, where redlock-core is, a lock mode and a semaphore's
/// permits (each its own entry point in redlock-core, `Redlock::lock_mode_with` and
/// `Redlock::semaphore`, not an option).
const NOT_LOCK_OPTIONS: [&str; 9] = [
    "resource",
    "resources",
    "on_busy",
    "guard",
    "pool",
    "redlock",
    "crate",
    "permits",
    "mode",
];

fn set<'a>(names: impl IntoIterator<Item = &'a str>) -> BTreeSet<String> {
    names.into_iter().map(str::to_owned).collect()
}

/// The lock options of redlock-core: the fields of its `LockConfig`, the one list from
/// which its configuration and environment variables are declared.
fn core_lock_options() -> BTreeSet<String> {
    let debug = format!("{:?}", redlock_core::LockConfig::default());
    let fields = debug
        .strip_prefix("LockConfig {")
        .and_then(|rest| rest.strip_suffix('}'))
        .unwrap_or_else(|| panic!("not a LockConfig: {debug}"));
    // Every field of a default LockConfig is `None`: no comma inside a value.
    set(fields
        .split(',')
        .map(|field| field.split(':').next().unwrap().trim()))
}

/// The arguments `Args` declares (darling names them after its fields).
fn args_fields() -> BTreeSet<String> {
    let file = syn::parse_file(include_str!("args.rs")).unwrap();
    let args = file
        .items
        .iter()
        .find_map(|item| match item {
            syn::Item::Struct(s) if s.ident == "Args" => Some(s),
            _ => None,
        })
        .unwrap();
    args.fields
        .iter()
        .map(|field| {
            let renamed = field.attrs.iter().find_map(|attr| {
                let mut rename = None;
                if attr.path().is_ident("darling") {
                    let _ = attr.parse_nested_meta(|meta| {
                        if meta.path.is_ident("rename") {
                            rename = Some(meta.value()?.parse::<syn::LitStr>()?.value());
                        }
                        Ok(())
                    });
                }
                rename
            });
            renamed.unwrap_or_else(|| field.ident.as_ref().unwrap().to_string())
        })
        .collect()
}

fn expanded(attr: &str) -> String {
    let item = "async fn locked(id: u64) -> Result<(), redlock_core::LockError> { Ok(()) }";
    crate::expand::redlock(attr.parse().unwrap(), item.parse().unwrap())
        .unwrap()
        .to_string()
}

/// Adding a lock option to redlock-core fails this until it is an argument here (parsed
/// in `Args`, mapped to its setter in `expand`, documented in the crate docs' table) or
/// listed as left to the handle; an argument named like a lock option must be one.
#[test]
fn every_lock_option_is_an_argument_or_left_out_on_purpose() {
    let args = set(LOCK_OPTION_ARGS.map(|(name, _)| name));
    let left = set(LEFT_TO_THE_HANDLE);
    assert!(args.is_disjoint(&left), "{args:?} {left:?}");
    let placed: BTreeSet<String> = args.union(&left).cloned().collect();
    assert_eq!(placed, core_lock_options());

    let mut declared = args.clone();
    declared.extend(set(NOT_LOCK_OPTIONS));
    assert_eq!(args_fields(), declared);

    let documented: Vec<&str> = include_str!("lib.rs")
        .lines()
        .filter_map(|line| line.strip_prefix("//! | `"))
        .collect();
    let plain = expanded(r#"resource = "r:{id}""#);
    for (name, attr) in LOCK_OPTION_ARGS {
        assert!(
            documented.iter().any(|row| row
                .strip_prefix(name)
                .is_some_and(|rest| rest.starts_with([' ', '`']))),
            "{name} is not in the arguments' table"
        );
        let given = expanded(&format!(r#"resource = "r:{{id}}", {attr}"#));
        let setter = format!(". {name} (");
        assert!(given.contains(&setter), "{attr}: no {setter} in {given}");
        assert_ne!(given, plain, "{attr} changed nothing");
    }
}
