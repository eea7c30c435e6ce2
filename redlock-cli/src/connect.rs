//! The lock handle, from `--nodes` or `REDLOCK_NODES`, `--key-prefix`, and the handle's other
//! `REDLOCK_*` variables.

use redlock_core::{Redlock, RedlockBuilder};

use crate::args::NodeArgs;
use crate::exit::CliError;

/// The variable of the node URLs, which `--nodes` replaces.
const NODES_VAR: &str = "REDLOCK_NODES";

/// The `REDLOCK_*` variables `redlock` reads: the handle's (where the nodes are, how to reach
/// them, the key prefix, the quarantine...). The lock options' variables (`REDLOCK_TTL`,
/// `REDLOCK_FENCING`, `REDLOCK_LOCK_AT_LEAST_FOR`...) are those of the applications sharing the
/// environment: `redlock`'s lock is set by its own flags, so it does not read them (one a
/// handle refuses as its default, such as `REDLOCK_LOCK_AT_LEAST_FOR`, would otherwise stop it).
const HANDLE_VARS: [&str; 16] = [
    NODES_VAR,
    "REDLOCK_KEY_PREFIX",
    "REDLOCK_NODE_TIMEOUT",
    "REDLOCK_NODE_TIMEOUTS",
    "REDLOCK_CONNECT_TIMEOUT",
    "REDLOCK_REQUIRE_QUORUM_AT_START",
    "REDLOCK_HANDOVER_GRACE",
    "REDLOCK_FOREIGN_WINDOW",
    "REDLOCK_FOREIGN_CLIENTS",
    "REDLOCK_QUARANTINE",
    "REDLOCK_FENCING_COUNTER_TTL",
    "REDLOCK_NODE_SET_CHECK",
    "REDLOCK_OWNER",
    "REDLOCK_TLS_CA",
    "REDLOCK_TLS_CLIENT_CERT",
    "REDLOCK_TLS_CLIENT_KEY",
];

/// A builder over the nodes of `args`: `--nodes` when given, else the URLs in
/// `REDLOCK_NODES` (its absence is reported by `build`, before connecting); the handle's
/// other `REDLOCK_*` settings ([`HANDLE_VARS`]), with `--key-prefix` over
/// `REDLOCK_KEY_PREFIX`. The owner label is `REDLOCK_OWNER`, else `<host>/<pid>`: what
/// `redlock status` shows for the locks this process takes.
pub(crate) fn builder(args: &NodeArgs) -> RedlockBuilder {
    let host = nix::unistd::gethostname()
        .ok()
        .and_then(|name| name.into_string().ok())
        .unwrap_or_else(|| "unknown-host".to_owned());
    let builder = builder_with(args, |var| std::env::var(var).ok());
    if std::env::var_os("REDLOCK_OWNER").is_some() {
        builder
    } else {
        builder.owner(format!("{host}/{}", std::process::id()))
    }
}

/// [`builder`], with `lookup` giving each variable's value instead of the process
/// environment.
fn builder_with(args: &NodeArgs, mut lookup: impl FnMut(&str) -> Option<String>) -> RedlockBuilder {
    let given = !args.nodes.is_empty();
    // `--nodes` wins over `REDLOCK_NODES`, which then is not read at all.
    let builder = Redlock::builder()
        .nodes(args.nodes.iter().map(|url| url.trim()))
        .from_env_with(|var| {
            let read = HANDLE_VARS.contains(&var) && !(given && var == NODES_VAR);
            read.then(|| lookup(var)).flatten()
        });
    match &args.key_prefix {
        Some(prefix) => builder.key_prefix(prefix.as_str()),
        None => builder,
    }
}

/// Builds `builder`: connects to the nodes, each within the connect timeout.
///
/// # Errors
/// [`CliError::Build`]: bad node list or settings (usage), too few nodes reachable
/// (unavailable).
pub(crate) async fn connect(builder: RedlockBuilder) -> Result<Redlock, CliError> {
    builder.build().await.map_err(CliError::Build)
}

#[cfg(test)]
mod tests {
    use redlock_core::RedlockConfig;

    use super::*;

    /// Every variable the core reads is either the handle's (read) or a lock option's (not
    /// read): a variable added to the core fails this test until it is placed.
    #[test]
    fn every_variable_is_read_or_left_to_the_applications() {
        let lock_vars = [
            "REDLOCK_TTL",
            "REDLOCK_RETRY_COUNT",
            "REDLOCK_RETRY_DELAY",
            "REDLOCK_RETRY_JITTER",
            "REDLOCK_WAIT_TIMEOUT",
            "REDLOCK_DRIFT_FACTOR",
            "REDLOCK_AUTO_EXTEND",
            "REDLOCK_EXTEND_FRACTION",
            "REDLOCK_MAX_HOLD",
            "REDLOCK_MAX_EXTENSIONS",
            "REDLOCK_LOCK_AT_LEAST_FOR",
            "REDLOCK_LOST_MARGIN",
            "REDLOCK_FENCING",
            "REDLOCK_REENTRANT",
        ];
        let mut placed: Vec<&str> = HANDLE_VARS.iter().chain(&lock_vars).copied().collect();
        placed.sort_unstable();
        let mut read: Vec<String> = RedlockConfig::env_vars()
            .into_iter()
            .map(|var| var.name)
            .collect();
        read.sort_unstable();
        assert_eq!(placed, read);
    }

    /// Only the handle's variables are looked up, and `REDLOCK_NODES` not when `--nodes` is
    /// given.
    #[test]
    fn only_the_handles_variables_are_read() {
        let mut asked = Vec::new();
        let args = NodeArgs {
            nodes: Vec::new(),
            key_prefix: None,
        };
        let _builder = builder_with(&args, |var| {
            asked.push(var.to_owned());
            None
        });
        assert_eq!(asked, HANDLE_VARS);
        asked.clear();
        let args = NodeArgs {
            nodes: vec!["redis://127.0.0.1:6379".to_owned()],
            key_prefix: None,
        };
        let _builder = builder_with(&args, |var| {
            asked.push(var.to_owned());
            None
        });
        assert_eq!(asked, HANDLE_VARS[1..]);
    }
}
