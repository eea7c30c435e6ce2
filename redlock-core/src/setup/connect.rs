//! Connecting to the nodes: node URLs to `fred` configurations (never echoing credentials),
//! clients configured for locking, connecting within the connect timeout, and checking that
//! the nodes are distinct, independent masters.

use std::time::Duration;

use fred::clients::Client;
use fred::interfaces::{ClientLike, EventInterface};
use fred::types::config::{Config, ReconnectPolicy};
use fred::types::{Builder, Value};

use crate::error::BuildError;
use crate::node::Node;
use crate::outcome::NodeError;
use crate::setup::server_info::{self, ServerInfo};
use crate::timing;

/// How [`RedlockBuilder::build`](crate::RedlockBuilder::build) connects.
pub(crate) struct Connect {
    pub(crate) connect_timeout: Duration,
    pub(crate) require_quorum: bool,
}

impl Connect {
    /// A client configured for locking rather than caching: a default command timeout (also
    /// applied to `EVAL`), one attempt per command, reconnection forever with backoff, and
    /// no failure on the first connect so that a node down at start-up joins later.
    /// `node_timeout` is the node's own limit (the handle's, or one given for its URL).
    pub(crate) fn client_for(
        &self,
        mut config: Config,
        node_timeout: Duration,
    ) -> Result<Client, fred::error::Error> {
        config.fail_fast = false;
        let mut builder = Builder::from_config(config);
        builder
            .with_connection_config(|c| {
                c.connection_timeout = self.connect_timeout;
                c.internal_command_timeout = self.connect_timeout;
                c.max_command_attempts = 1;
                c.tcp.nodelay = Some(true);
            })
            .with_performance_config(|p| p.default_command_timeout = node_timeout)
            .set_policy(ReconnectPolicy::new_exponential(0, 50, 2_000, 2));
        builder.build()
    }

    /// Connects every node at once, each within the connect timeout, and returns once all
    /// have connected, or once a quorum has and the others had a grace
    /// ([`timing::until_quorum_ready`]): a node that is down costs the start-up no more, and
    /// keeps connecting in the background. Then checks the nodes that connected.
    pub(crate) async fn connect_all(&self, nodes: &[Node]) -> Result<(), BuildError> {
        let timeout = self.connect_timeout;
        let failed: Vec<std::sync::Mutex<Option<String>>> =
            nodes.iter().map(|_| std::sync::Mutex::new(None)).collect();
        let tasks = nodes.iter().zip(&failed).map(|(node, failed)| async move {
            let outcome = Self::connect_one(node, timeout).await;
            let ok = outcome.is_ok();
            if let Err(failure) = outcome {
                *failed
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(failure);
            }
            ok
        });
        let quorum = timing::quorum(nodes.len());
        let ready = timing::until_quorum_ready(tasks.collect(), quorum, timeout).await;
        let failures: Vec<String> = nodes
            .iter()
            .zip(&ready)
            .zip(failed)
            .filter(|((_, ready), _)| !**ready)
            .map(|((node, _), failed)| {
                failed
                    .into_inner()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .unwrap_or_else(|| {
                        format!(
                            "{}: not connected when a quorum was (still connecting)",
                            node.label
                        )
                    })
            })
            .collect();
        let reachable = nodes.len() - failures.len();
        if self.require_quorum && reachable < quorum {
            disconnect(nodes).await;
            return Err(BuildError::TooFewReachable {
                reachable,
                nodes: nodes.len(),
                quorum,
                timeout,
                failures,
            });
        }
        for failure in &failures {
            tracing::warn!(%failure, "node unreachable at start-up; reconnecting in the background");
        }
        let connected: Vec<Node> = nodes
            .iter()
            .zip(&ready)
            .filter(|(_, ready)| **ready)
            .map(|(node, _)| node.clone())
            .collect();
        let checked = self.check_nodes(&connected).await;
        if checked.is_err() {
            disconnect(nodes).await;
        }
        checked
    }

    /// Connects `node` (its scripts loaded) within `timeout`; why not, for the report. A node
    /// reached through a transport of the user's is reachable when it answers the scripts'
    /// `SCRIPT LOAD` (even with an error reply).
    async fn connect_one(node: &Node, timeout: Duration) -> Result<(), String> {
        // Subscribed before connecting, so no (re)connection is missed.
        node.keep_scripts_loaded(timeout);
        if let Some(client) = node.client.as_ref().filter(|c| !c.is_connected()) {
            // The client retries in the background: a refusal (a TLS certificate not
            // trusted, a wrong password) shows only there.
            let mut errors = client.error_rx();
            match tokio::time::timeout(timeout, client.init()).await {
                Ok(Ok(_task)) => {}
                Ok(Err(e)) => return Err(format!("{}: {}", node.label, e.details())),
                Err(_) => {
                    let mut last = None;
                    loop {
                        match errors.try_recv() {
                            Ok((error, _server)) => last = Some(error),
                            Err(tokio::sync::broadcast::error::TryRecvError::Lagged(_)) => {}
                            Err(_) => break,
                        }
                    }
                    let last = last
                        .map(|e| format!(" (last error: {})", e.details()))
                        .unwrap_or_default();
                    return Err(format!(
                        "{}: no connection within {timeout:?}{last}",
                        node.label
                    ));
                }
            }
        }
        let loaded = node.load_scripts(timeout).await;
        // A node reached through a transport of the user's has no connection to wait for:
        // its first answer says whether it can be reached.
        match loaded {
            Err(error @ (NodeError::Disconnected | NodeError::Io(_) | NodeError::Timeout(_)))
                if node.client.is_none() =>
            {
                Err(format!("{}: {}", node.label, error.detailed()))
            }
            _ => Ok(()),
        }
    }

    /// Refuses nodes that are not distinct, independent masters (see
    /// [`server_info::check`]), from one `INFO` per node read within the connect timeout.
    /// Two URLs for one server (e.g. `localhost` and `127.0.0.1`) would count twice towards
    /// the quorum, as would a master and its replica; a replica or a cluster node cannot take
    /// the lock's writes; an evicting policy can drop a held lock's key.
    async fn check_nodes(&self, nodes: &[Node]) -> Result<(), BuildError> {
        let infos = futures_util::future::join_all(
            nodes
                .iter()
                .map(|node| server_info(node, self.connect_timeout)),
        )
        .await;
        let answered: Vec<(&str, ServerInfo)> = nodes
            .iter()
            .zip(infos)
            .filter_map(|(node, info)| Some((&*node.label, info?)))
            .collect();
        server_info::check(&answered)
    }
}

/// One node's `INFO` (the sections the checks read), within `limit`: one command on Redis 7
/// and Valkey, and the default `INFO` after an error (older servers take one section only).
/// `None` if the node did not answer: unreachable (already reported), or `INFO` refused.
async fn server_info(node: &Node, limit: Duration) -> Option<ServerInfo> {
    let sections = server_info::SECTIONS.map(Value::from).to_vec();
    let reply = tokio::time::timeout(limit, async {
        match node.call("INFO", sections).await {
            Err(NodeError::Reply(_)) => node.call("INFO", Vec::new()).await,
            other => other,
        }
    })
    .await
    .unwrap_or(Err(NodeError::Timeout(limit)));
    match reply.map(|value| value.into_string()) {
        Ok(Some(text)) => Some(ServerInfo::parse(&text)),
        result => {
            if node.is_connected() {
                let error = match result {
                    Err(error) => error.detailed(),
                    Ok(_) => "not a text reply".to_owned(),
                };
                tracing::warn!(
                    node = %node.label,
                    %error,
                    "could not read INFO: this node is not checked for being a distinct, independent master (the lock's ACL user needs +info)"
                );
            }
            None
        }
    }
}

/// Closes the nodes' connections, each within 100 ms, when `build` fails after connecting.
async fn disconnect(nodes: &[Node]) {
    futures_util::future::join_all(nodes.iter().map(|node| async move {
        if let Some(client) = &node.client {
            let _ = tokio::time::timeout(Duration::from_millis(100), client.quit()).await;
        }
    }))
    .await;
}
