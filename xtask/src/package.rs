//! `cargo xtask test`'s packaging step: every crate we publish must package and build from
//! its package alone, and carry what a published crate needs.
//!
//! `cargo package` (which builds each package from its `.crate` file, the workspace's other
//! published crates taken from the packages just made) does not look at what a package lacks
//! outside its library build: a licence text, a README, or a file that a unit test or a doc
//! `include!`s from another crate. So each package's file list is checked too:
//! - the two licence texts (`LICENSE-MIT`, `LICENSE-APACHE`) and `README.md` are in it;
//! - every `include!`, `include_str!`, `include_bytes!` and `#[path = ".."]` in its `.rs` files
//!   names a file that is in it.
//!
//! And every workspace member that is not in [`PUBLISHED`] says `publish = false`, so that the
//! list cannot drift from the manifests.

use std::collections::BTreeSet;
use std::path::{Component, Path, PathBuf};

use anyhow::{Context, bail};

/// The crates we publish, in dependency order.
pub(crate) const PUBLISHED: [&str; 7] = [
    "redlock-template",
    "redlock-macros",
    "redlock-core",
    "redlock-model",
    "redlock-axum",
    "redlock-test",
    "redlock-cli",
];

/// Files every published package must hold.
const REQUIRED: [&str; 3] = ["LICENSE-MIT", "LICENSE-APACHE", "README.md"];

/// The packaging step: members checked, each package's contents checked, then
/// `cargo package` of them all (which builds each from its package).
pub(crate) fn check(root: &Path) -> anyhow::Result<()> {
    unpublished_members_say_so(root)?;
    forget_builds_from_packages()?;
    for krate in PUBLISHED {
        let files = listed_files(root, krate)?;
        let dir = member_dir(root, krate)?;
        let problems = problems(&files, |file| std::fs::read_to_string(dir.join(file)).ok());
        if !problems.is_empty() {
            bail!(
                "{krate} cannot be published as it is:\n  {}",
                problems.join("\n  ")
            );
        }
    }
    forget_unpacked_packages()?;
    let mut args = vec!["package", "--allow-dirty", "--quiet"];
    for krate in PUBLISHED {
        args.extend(["-p", krate]);
    }
    crate::cargo(&args)
}

/// Forgets the builds of our crates that an earlier `cargo package` made from its packages
/// (their dep-info names sources under `$CARGO_HOME/registry/src/-<hash>/`): their sources are
/// unpacked with the packages' fixed file times, so cargo would find the build of an earlier
/// package fresh and use it for the package just made.
fn forget_builds_from_packages() -> anyhow::Result<()> {
    let target = crate::target_dir().join("debug");
    let Ok(deps) = std::fs::read_dir(target.join("deps")) else {
        return Ok(());
    };
    for entry in deps.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(stem) = name.strip_suffix(".d") else {
            continue;
        };
        let Some((krate, hash)) = PUBLISHED.iter().find_map(|krate| {
            let lib = krate.replace('-', "_");
            let hash = stem.strip_prefix(&lib)?.strip_prefix('-')?;
            Some((*krate, hash))
        }) else {
            continue;
        };
        let from_a_package = std::fs::read_to_string(entry.path())
            .is_ok_and(|info| info.contains("/registry/src/-"));
        let fingerprint = target.join(".fingerprint").join(format!("{krate}-{hash}"));
        if from_a_package && fingerprint.exists() {
            std::fs::remove_dir_all(&fingerprint)
                .with_context(|| format!("could not remove {}", fingerprint.display()))?;
        }
    }
    Ok(())
}

/// Removes our crates' sources that an earlier `cargo package` unpacked from its local
/// registry of the packages it made (`$CARGO_HOME/registry/src/-<hash>/`, a registry named by
/// the path of the target directory). Cargo unpacks a `.crate` there once per name and
/// version and reuses the directory afterwards, so a later run with the same version and target
/// directory would build the other packages against the sources of that earlier run, not the
/// packages it just made (a crate that gained an item then fails to build its dependents).
fn forget_unpacked_packages() -> anyhow::Result<()> {
    let home = match std::env::var_os("CARGO_HOME") {
        Some(home) => PathBuf::from(home),
        None => match std::env::var_os("HOME") {
            Some(home) => PathBuf::from(home).join(".cargo"),
            None => return Ok(()),
        },
    };
    let Ok(registries) = std::fs::read_dir(home.join("registry").join("src")) else {
        return Ok(());
    };
    for registry in registries.flatten() {
        // Only local registries (their names start with `-`), never crates.io's.
        if !registry.file_name().to_string_lossy().starts_with('-') {
            continue;
        }
        for unpacked in std::fs::read_dir(registry.path())?.flatten() {
            let name = unpacked.file_name().to_string_lossy().into_owned();
            let ours = PUBLISHED.iter().any(|krate| {
                name.strip_prefix(krate)
                    .and_then(|rest| rest.strip_prefix('-'))
                    .is_some_and(|version| version.starts_with(|c: char| c.is_ascii_digit()))
            });
            if ours {
                std::fs::remove_dir_all(unpacked.path())
                    .with_context(|| format!("could not remove {}", unpacked.path().display()))?;
            }
        }
    }
    Ok(())
}

/// The files `cargo package` would put in `krate`'s package, relative to its directory.
fn listed_files(root: &Path, krate: &str) -> anyhow::Result<BTreeSet<String>> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let output = std::process::Command::new(cargo)
        .args(["package", "--list", "--allow-dirty", "-p", krate])
        .current_dir(root)
        .output()
        .context("could not run cargo package --list")?;
    if !output.status.success() {
        bail!(
            "`cargo package --list -p {krate}`: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    Ok(String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(str::to_owned)
        .collect())
}

/// What is wrong with a package of `files` (paths relative to the crate directory, `/`
/// separators), whose contents `read` gives.
fn problems(files: &BTreeSet<String>, read: impl Fn(&str) -> Option<String>) -> Vec<String> {
    let mut problems: Vec<String> = REQUIRED
        .iter()
        .filter(|required| !files.contains(**required))
        .map(|required| format!("{required} is not in the package"))
        .collect();
    for file in files.iter().filter(|f| f.ends_with(".rs")) {
        let Some(text) = read(file) else {
            problems.push(format!("{file}: listed but unreadable"));
            continue;
        };
        let dir = Path::new(file).parent().unwrap_or(Path::new(""));
        for (line, target) in included_paths(&text) {
            let resolved = normalize(&dir.join(&target));
            let inside = resolved
                .as_ref()
                .is_some_and(|path| files.contains(&path_string(path)));
            if !inside {
                problems.push(format!(
                    "{file}:{line}: `{target}` is not in the package (a file outside the crate, or excluded from it)"
                ));
            }
        }
    }
    problems
}

/// The paths `include!`, `include_str!`, `include_bytes!` and `#[path = ".."]` name in `text`,
/// each with its 1-based line.
fn included_paths(text: &str) -> Vec<(usize, String)> {
    const MACROS: [&str; 3] = ["include!", "include_str!", "include_bytes!"];
    let mut found = Vec::new();
    for (number, line) in text.lines().enumerate() {
        // `include!("..")`, with any blanks before the parenthesis and the string.
        for name in MACROS {
            let mut rest = line;
            while let Some(at) = rest.find(name) {
                rest = &rest[at + name.len()..];
                if let Some(path) = rest
                    .trim_start()
                    .strip_prefix('(')
                    .and_then(|r| r.trim_start().strip_prefix('"'))
                    .and_then(|r| r.split('"').next())
                {
                    found.push((number + 1, path.to_owned()));
                }
            }
        }
        // `#[path = ".."]`.
        if let Some(path) = line
            .trim_start()
            .strip_prefix("#[path")
            .and_then(|r| r.trim_start().strip_prefix('='))
            .and_then(|r| r.trim_start().strip_prefix('"'))
            .and_then(|r| r.split('"').next())
        {
            found.push((number + 1, path.to_owned()));
        }
    }
    found
}

/// `path` with `.` and `..` resolved; `None` if it climbs above its start.
fn normalize(path: &Path) -> Option<PathBuf> {
    let mut parts: Vec<&std::ffi::OsStr> = Vec::new();
    for component in path.components() {
        match component {
            Component::Normal(part) => parts.push(part),
            Component::CurDir => {}
            Component::ParentDir => {
                parts.pop()?;
            }
            Component::RootDir | Component::Prefix(_) => return None,
        }
    }
    Some(parts.iter().collect())
}

fn path_string(path: &Path) -> String {
    path.components()
        .map(|c| c.as_os_str().to_string_lossy())
        .collect::<Vec<_>>()
        .join("/")
}

/// The directory of workspace member `krate` (its manifest's `name`).
fn member_dir(root: &Path, krate: &str) -> anyhow::Result<PathBuf> {
    for dir in members(root)? {
        if package_name(&dir)?.as_deref() == Some(krate) {
            return Ok(dir);
        }
    }
    bail!("{krate} is not a member of the workspace")
}

/// The workspace members' directories, from the root manifest's `members = [..]`.
fn members(root: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let manifest = std::fs::read_to_string(root.join("Cargo.toml"))?;
    let list = manifest
        .lines()
        .find_map(|line| line.trim().strip_prefix("members = ["))
        .and_then(|rest| rest.split_once(']'))
        .map(|(list, _)| list)
        .context("the root Cargo.toml has no one-line `members = [..]`")?;
    Ok(list
        .split(',')
        .map(|member| member.trim().trim_matches('"'))
        .filter(|member| !member.is_empty())
        .map(|member| root.join(member))
        .collect())
}

/// The `name` in the `[package]` section of `dir`'s manifest.
fn package_name(dir: &Path) -> anyhow::Result<Option<String>> {
    let manifest = std::fs::read_to_string(dir.join("Cargo.toml"))
        .with_context(|| format!("reading {}", dir.join("Cargo.toml").display()))?;
    Ok(manifest.lines().find_map(|line| {
        line.trim()
            .strip_prefix("name = \"")
            .and_then(|rest| rest.strip_suffix('"'))
            .map(str::to_owned)
    }))
}

/// Every member not in [`PUBLISHED`] has `publish = false`.
fn unpublished_members_say_so(root: &Path) -> anyhow::Result<()> {
    for dir in members(root)? {
        let name = package_name(&dir)?.unwrap_or_default();
        let manifest = std::fs::read_to_string(dir.join("Cargo.toml"))?;
        let unpublished = manifest
            .lines()
            .any(|line| line.trim() == "publish = false");
        if !PUBLISHED.contains(&name.as_str()) && !unpublished {
            bail!("{name} is neither in xtask's PUBLISHED list nor `publish = false`: say which");
        }
        if PUBLISHED.contains(&name.as_str()) && unpublished {
            bail!("{name} is in xtask's PUBLISHED list but says `publish = false`");
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // tests unwrap: a failure is the assertion

    use super::*;

    fn listing(files: &[&str]) -> BTreeSet<String> {
        files.iter().map(|f| (*f).to_owned()).collect()
    }

    const COMPLETE: [&str; 6] = [
        "Cargo.toml",
        "LICENSE-MIT",
        "LICENSE-APACHE",
        "README.md",
        "src/lib.rs",
        "src/cases.rs",
    ];

    #[test]
    fn a_complete_package_passes() {
        let files = listing(&COMPLETE);
        let read = |file: &str| {
            Some(match file {
                "src/lib.rs" => {
                    "#![doc = include_str!(\"../README.md\")]\n#[path = \"cases.rs\"]\nmod c;"
                        .to_owned()
                }
                _ => String::new(),
            })
        };
        assert_eq!(problems(&files, read), Vec::<String>::new());
    }

    #[test]
    fn a_missing_licence_or_readme_is_refused() {
        for missing in ["LICENSE-MIT", "LICENSE-APACHE", "README.md"] {
            let files: BTreeSet<String> = listing(&COMPLETE)
                .into_iter()
                .filter(|f| f != missing)
                .collect();
            let found = problems(&files, |_| Some(String::new()));
            assert_eq!(found, [format!("{missing} is not in the package")]);
        }
    }

    #[test]
    fn an_include_from_another_crate_is_refused() {
        let files = listing(&COMPLETE);
        let read = |file: &str| {
            Some(match file {
                "src/lib.rs" => {
                    "mod tests {\n    include!(\"../../redlock-template/template_cases.rs\");\n}"
                        .to_owned()
                }
                _ => String::new(),
            })
        };
        let found = problems(&files, read);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].starts_with("src/lib.rs:2: `../../redlock-template/template_cases.rs`"));
    }

    #[test]
    fn an_include_of_an_excluded_or_climbing_path_is_refused() {
        let files = listing(&COMPLETE);
        let read = |file: &str| {
            Some(match file {
                "src/lib.rs" => "const A: &str = include_str!(\"data/missing.txt\");\nconst B: &[u8] = include_bytes!(\"../../../etc/passwd\");".to_owned(),
                _ => String::new(),
            })
        };
        assert_eq!(problems(&files, read).len(), 2);
    }

    #[test]
    fn included_paths_are_read_from_every_form() {
        let text = "a include!(\"x.rs\") include_str! ( \"y.md\")\n#[path=\"z.rs\"]\ninclude_bytes!(\"w\")";
        let found: Vec<(usize, String)> = included_paths(text);
        let expected = [(1, "x.rs"), (1, "y.md"), (2, "z.rs"), (3, "w")];
        assert_eq!(
            found,
            expected
                .iter()
                .map(|(l, p)| (*l, (*p).to_owned()))
                .collect::<Vec<_>>()
        );
    }

    #[test]
    fn every_member_is_published_or_says_it_is_not() {
        let root = crate::workspace_root();
        unpublished_members_say_so(&root).unwrap();
        for krate in PUBLISHED {
            member_dir(&root, krate).unwrap();
        }
    }
}
