//! The lock handle, from `--nodes` or `REDLOCK_NODES` and `--key-prefix`.

use redlock_core::{Redlock, RedlockBuilder};

use crate::args::NodeArgs;
use crate::exit::CliError;

/// A builder over the nodes of `args`: `--nodes` when given, else the URLs in
/// `REDLOCK_NODES` (its absence is reported by `build`, before connecting).
pub(crate) fn builder(args: &NodeArgs) -> RedlockBuilder {
    let builder = Redlock::builder().key_prefix(args.key_prefix.as_str());
    if args.nodes.is_empty() {
        builder.from_env()
    } else {
        builder.nodes(args.nodes.iter().map(|url| url.trim()))
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
