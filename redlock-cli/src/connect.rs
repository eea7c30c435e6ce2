//! The lock handle, from `--nodes` or `REDLOCK_NODES` and `--key-prefix`.

use redlock_core::{NODES_ENV, Redlock, RedlockBuilder};

use crate::args::NodeArgs;
use crate::exit::CliError;

/// A builder over the nodes of `args`: `--nodes` when given, else the URLs in
/// `REDLOCK_NODES` (its absence is reported by `build`, before connecting); the other
/// `REDLOCK_*` settings, with `--key-prefix` over `REDLOCK_KEY_PREFIX`.
pub(crate) fn builder(args: &NodeArgs) -> RedlockBuilder {
    let given = !args.nodes.is_empty();
    // `--nodes` wins over `REDLOCK_NODES`, which then is not read at all.
    let builder = Redlock::builder()
        .nodes(args.nodes.iter().map(|url| url.trim()))
        .from_env_with(|var| {
            (!(given && var == NODES_ENV))
                .then(|| std::env::var(var).ok())
                .flatten()
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
