//! Setup: the builder and its checks, configuration (files and `REDLOCK_*` variables), node
//! URLs, TLS, the connection to each node and what it reports about itself, and the check
//! that every handle of a key prefix counts the same nodes.

pub(crate) mod builder;
pub(crate) mod config;
pub(crate) mod connect;
pub(crate) mod node_url;
pub(crate) mod nodeset;
pub(crate) mod server_info;
#[cfg(any(feature = "tls-rustls", feature = "tls-native"))]
pub(crate) mod tls;
