//! [`RedlockBuilder::build`]: the options checked, before anything is sent, then the nodes
//! connected and checked (by `connect.rs`: independent masters, distinct servers), the node
//! set checked, and the handle started.

use std::sync::Arc;
use std::time::Duration;

use fred::interfaces::ClientLike;

use super::{MAX_FOREIGN_WINDOW, MAX_HANDOVER_GRACE, RedlockBuilder};
use crate::error::BuildError;
use crate::kernel::masters::Masters;
use crate::kernel::redlock::{Parts, Redlock};
use crate::kernel::waiters::Waiters;
use crate::node::Node;
use crate::node::transport::{Channels, FredChannels};
use crate::options::MAX_TTL;
use crate::outcome::ClientError;
use crate::setup::connect::Connect;
use crate::setup::node_url::server_label;
use crate::setup::nodeset::NodeSet;

/// Where a node's hand-over messages come from.
enum Subscriber {
    /// A subscriber client beside the node's `fred` client.
    Fred(fred::clients::Client),
    /// The channels given with its transport.
    Given(Arc<dyn Channels>),
}

impl RedlockBuilder {
    /// Validates everything, then connects to all nodes at once, with the connections that
    /// wake waiters (one subscriber per node, unless hand-over is off), each within the connect
    /// timeout, and reads each connected node's `INFO` (one command, within the connect
    /// timeout) to check that the nodes are distinct, independent masters. It does not wait
    /// the connect timeout out for a node the quorum does not need: once a quorum has
    /// connected, the others get as long again as the quorum took (at least 250 ms), and one
    /// still not connected then keeps connecting in the background and is used once it is.
    /// A node not connected at build time (allowed while a quorum is) is not checked, then or
    /// when it connects later; nor is one whose user may not run `INFO` (logged as a
    /// warning).
    ///
    /// # Cancel safety
    /// Dropping the future takes no lock and leaves none behind; what it may have written to
    /// the nodes (the node-set check's marker, the quarantine's witness) expires on its own or is
    /// read by the next handle. Build again.
    ///
    /// # Errors
    /// Before connecting: [`BuildError::NoNodes`], [`BuildError::MissingEnv`],
    /// [`BuildError::Env`], [`BuildError::ReadFile`],
    /// [`BuildError::InvalidUrl`], [`BuildError::TlsNotEnabled`],
    /// [`BuildError::UnixSocketsNotEnabled`], [`BuildError::ClusterNotSupported`],
    /// [`BuildError::SentinelNotSupported`], [`BuildError::DuplicateNode`],
    /// [`BuildError::Invalid`], [`BuildError::Option`], [`BuildError::Tls`].
    /// After connecting (the connections are closed again): [`BuildError::TooFewReachable`]
    /// if fewer than a quorum connected within the connect timeout;
    /// [`BuildError::ClusterEnabled`], [`BuildError::Replica`] or
    /// [`BuildError::EvictionPolicy`] for a node that is not an independent master;
    /// [`BuildError::DuplicateNode`] if two URLs reach the same server (same `run_id`);
    /// [`BuildError::SameReplicationGroup`] if two nodes share a replication id.
    pub async fn build(mut self) -> Result<Redlock, BuildError> {
        self.check_options()?;
        // A round waits for the nodes at most the longest of their limits; each node's own
        // commands are cut at its limit by its client.
        let longest = self
            .node_timeouts
            .0
            .iter()
            .map(|(_, timeout)| *timeout)
            .fold(self.node_timeout, Duration::max);
        let connect = Connect {
            connect_timeout: self.connect_timeout,
            require_quorum: self.require_quorum,
        };
        #[cfg(any(feature = "tls-rustls", feature = "tls-native"))]
        let tls = self
            .tls
            .connector()
            .map_err(|reason| BuildError::Tls { reason })?;
        let mut nodes = Vec::with_capacity(self.urls.len() + self.clients.len());
        for (index, url) in self.urls.iter().enumerate() {
            #[cfg(not(any(feature = "tls-rustls", feature = "tls-native")))]
            let (label, config) = crate::setup::node_url::parse_url(index, url)?;
            #[cfg(any(feature = "tls-rustls", feature = "tls-native"))]
            let (label, config) = crate::setup::tls::parse_url_with(index, url, tls.as_ref())?;
            if nodes.iter().any(|n: &Node| *n.label == *label) {
                return Err(BuildError::DuplicateNode { node: label });
            }
            let timeout = self.timeout_of(url);
            let client = connect
                .client_for(config, timeout)
                .map_err(|e| BuildError::Client {
                    node: label.clone(),
                    source: ClientError::new(e),
                })?;
            let mut node = Node::new(client, label);
            node.timeout = timeout;
            nodes.push(node);
        }
        #[cfg(any(feature = "tls-rustls", feature = "tls-native"))]
        if tls.is_some()
            && !nodes.iter().any(|n: &Node| {
                n.client
                    .as_ref()
                    .is_some_and(|c| c.client_config().uses_tls())
            })
        {
            tracing::warn!(
                "TLS settings given, but no node URL uses rediss://: they have no effect"
            );
        }
        for client in std::mem::take(&mut self.clients) {
            let label = server_label(nodes.len(), &client.client_config().server)?;
            let mut node = Node::new(client, label);
            node.timeout = self.node_timeout;
            nodes.push(node);
        }
        // Where each node's messages come from: its client's subscriber, or the channels given.
        let mut sources: Vec<Subscriber> = nodes
            .iter()
            .filter_map(|n| n.client.clone())
            .map(Subscriber::Fred)
            .collect();
        for given in std::mem::take(&mut self.transports) {
            if nodes.iter().any(|n: &Node| *n.label == *given.label) {
                return Err(BuildError::DuplicateNode { node: given.label });
            }
            let mut node = Node::through(given.transport, given.label);
            node.timeout = self.node_timeout;
            nodes.push(node);
            sources.push(Subscriber::Given(given.channels));
        }
        if nodes.is_empty() {
            return Err(BuildError::NoNodes);
        }
        // The waiters' subscriber connections open beside the nodes' own, so that a built
        // handle is ready to wake its first waiter (and sends nothing more on its own).
        let waiters = (!self.handover_grace.is_zero()).then(|| {
            let subscribers: Vec<Arc<dyn Channels>> = sources
                .into_iter()
                .map(|source| match source {
                    Subscriber::Fred(client) => Arc::new(FredChannels::start(&client)),
                    Subscriber::Given(channels) => channels,
                })
                .collect();
            Waiters::start(subscribers, longest)
        });
        let subscribers = async {
            if let Some(waiters) = &waiters {
                waiters.connected(self.connect_timeout).await;
            }
        };
        let (connected, ()) = tokio::join!(connect.connect_all(&nodes), subscribers);
        connected?;
        let masters = Masters::new(
            nodes,
            longest,
            self.quarantine,
            self.fencing_counter_ttl,
            &self.key_prefix,
        );
        let node_set = self.node_set_check.then(|| NodeSet::new(&self.key_prefix));
        if let Some(node_set) = &node_set {
            node_set.check(&masters, self.connect_timeout).await?;
        }
        masters.start_quarantine().await;
        if self.options.fencing {
            masters.warn_if_fencing_needs_every_node("fencing is on in the handle's lock options");
        }
        let redlock = Redlock::from_parts(Parts {
            masters,
            defaults: self.options,
            key_prefix: self.key_prefix,
            owner: self.owner.map(std::sync::Arc::from),
            handover_grace: self.handover_grace,
            foreign_window: match waiters {
                Some(_) if self.foreign_clients => self.foreign_window.min(MAX_FOREIGN_WINDOW),
                _ => Duration::ZERO,
            },
            waiters,
        });
        if let Some(node_set) = node_set {
            node_set.refresh(Arc::downgrade(redlock.masters()), longest);
        }
        Ok(redlock)
    }

    /// The limit of one command on the node at `url`: the one given for it
    /// ([`node_timeout_for`](Self::node_timeout_for); the last, if given twice), else the
    /// handle's.
    fn timeout_of(&self, url: &str) -> Duration {
        self.node_timeouts
            .0
            .iter()
            .rev()
            .find(|(given, _)| given == url)
            .map_or(self.node_timeout, |(_, timeout)| *timeout)
    }

    /// The checks of [`build`](Self::build) before it connects: the first input error kept
    /// by a setter, then each option's range, in the order of the options' docs.
    fn check_options(&mut self) -> Result<(), BuildError> {
        if let Some(error) = self.deferred.take() {
            return Err(error);
        }
        self.options.validate()?;
        if let Some(owner) = &self.owner {
            let reason = if owner.is_empty() {
                Some("is empty; give a label such as host/pid/application, or none".to_owned())
            } else if owner.len() > crate::MAX_OWNER_LEN {
                Some(format!(
                    "is {} bytes, more than the {} allowed",
                    owner.len(),
                    crate::MAX_OWNER_LEN
                ))
            } else if owner.chars().any(char::is_control) {
                Some("holds a control character (a newline, a tab...)".to_owned())
            } else {
                None
            };
            if let Some(reason) = reason {
                return Err(BuildError::Option {
                    name: "owner",
                    reason,
                });
            }
        }
        if self.key_prefix.contains('\0') {
            return Err(BuildError::Option {
                name: "key_prefix",
                reason: "holds a NUL byte, which the lock's bookkeeping keys reserve".into(),
            });
        }
        if let Some(at_least) = self.options.lock_at_least_for {
            return Err(BuildError::Option {
                name: "lock_at_least_for",
                reason: format!(
                    "a default minimum hold ({at_least:?}) would keep every lock of the handle (every layer route, every read or write lock, refused with it) at least that long; give it per acquisition (LockOptions::lock_at_least_for, #[redlock(lock_at_least_for = ..)])"
                ),
            });
        }
        for (url, timeout) in &self.node_timeouts.0 {
            if !self.urls.contains(url) {
                return Err(BuildError::Option {
                    name: "node_timeout_for",
                    reason: format!(
                        "no node was given the URL `{}`: give one of the URLs passed to node() or nodes(), exactly as given",
                        crate::setup::node_url::redacted(url)
                    ),
                });
            }
            if timeout.is_zero() {
                return Err(BuildError::Option {
                    name: "node_timeout_for",
                    reason: "must be more than zero".into(),
                });
            }
        }
        for (name, value) in [
            ("node_timeout", self.node_timeout),
            ("connect_timeout", self.connect_timeout),
        ] {
            if value.is_zero() {
                return Err(BuildError::Option {
                    name,
                    reason: "must be more than zero".into(),
                });
            }
        }
        if self.handover_grace > MAX_HANDOVER_GRACE {
            return Err(BuildError::Option {
                name: "handover_grace",
                reason: format!(
                    "{:?} is above {MAX_HANDOVER_GRACE:?}: a reservation that long only delays the next holder",
                    self.handover_grace
                ),
            });
        }
        if !self.quarantine.is_zero()
            && (self.quarantine < self.options.ttl || self.quarantine > MAX_TTL)
        {
            return Err(BuildError::Option {
                name: "quarantine",
                reason: format!(
                    "{:?} must be between the default ttl ({:?}) and {MAX_TTL:?}: a shorter quarantine lets a restarted node vote while a key it lost may still be held",
                    self.quarantine, self.options.ttl
                ),
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::InvalidInput;
    use crate::options::LockOptions;
    use crate::setup::builder::lookup;
    use crate::setup::config::NODES_ENV;

    #[tokio::test]
    async fn input_errors_come_before_any_connection() {
        let started = tokio::time::Instant::now();
        type Expect = fn(&BuildError) -> bool;
        let cases: Vec<(RedlockBuilder, Expect)> = vec![
            (RedlockBuilder::default(), |e| {
                matches!(e, BuildError::NoNodes)
            }),
            (
                RedlockBuilder::default()
                    .nodes(["redis://10.255.255.1:1", "redis://10.255.255.1:1"]),
                |e| matches!(e, BuildError::DuplicateNode { .. }),
            ),
            (
                RedlockBuilder::default().from_env_var("REDLOCK_TEST_SURELY_UNSET"),
                |e| matches!(e, BuildError::MissingEnv { .. }),
            ),
            (
                RedlockBuilder::default()
                    .node("redis://10.255.255.1:1")
                    .lock_options(LockOptions::default().ttl(Duration::ZERO)),
                |e| matches!(e, BuildError::Invalid(_)),
            ),
            (
                RedlockBuilder::default()
                    .node("redis://10.255.255.1:1")
                    .key_prefix("lock\0"),
                |e| {
                    matches!(
                        e,
                        BuildError::Option {
                            name: "key_prefix",
                            ..
                        }
                    )
                },
            ),
            (
                RedlockBuilder::default()
                    .node("redis://10.255.255.1:1")
                    .lock_options(LockOptions::default().lock_at_least_for(Duration::from_secs(1))),
                |e| {
                    matches!(
                        e,
                        BuildError::Option {
                            name: "lock_at_least_for",
                            ..
                        }
                    )
                },
            ),
            (
                RedlockBuilder::default()
                    .node("redis://10.255.255.1:1")
                    .node_timeout(Duration::ZERO),
                |e| {
                    matches!(
                        e,
                        BuildError::Option {
                            name: "node_timeout",
                            ..
                        }
                    )
                },
            ),
        ];
        for (builder, expected) in cases {
            let error = builder.build().await.unwrap_err();
            assert!(expected(&error), "unexpected error: {error}");
        }
        // 10.255.255.1 is unroutable: had any case tried to connect, it would have waited.
        assert!(started.elapsed() < Duration::from_millis(500));
    }

    #[tokio::test]
    async fn out_of_range_config_values_fail_build_as_the_setters_do() {
        let started = tokio::time::Instant::now();
        type Expect = fn(&BuildError) -> bool;
        let cases: [(&str, &str, Expect); 9] = [
            ("REDLOCK_TTL", "0s", |e| {
                matches!(e, BuildError::Invalid(InvalidInput::ZeroTtl))
            }),
            ("REDLOCK_TTL", "2d", |e| {
                matches!(e, BuildError::Invalid(InvalidInput::TtlAboveCap { .. }))
            }),
            ("REDLOCK_DRIFT_FACTOR", "0.5", |e| {
                matches!(e, BuildError::Invalid(InvalidInput::DriftFactor(_)))
            }),
            ("REDLOCK_LOST_MARGIN", "1h", |e| {
                matches!(e, BuildError::Invalid(InvalidInput::LostMargin { .. }))
            }),
            ("REDLOCK_MAX_HOLD", "0s", |e| {
                matches!(e, BuildError::Invalid(InvalidInput::ZeroMaxHold))
            }),
            ("REDLOCK_NODE_TIMEOUT", "0s", |e| {
                matches!(
                    e,
                    BuildError::Option {
                        name: "node_timeout",
                        ..
                    }
                )
            }),
            ("REDLOCK_CONNECT_TIMEOUT", "0ms", |e| {
                matches!(
                    e,
                    BuildError::Option {
                        name: "connect_timeout",
                        ..
                    }
                )
            }),
            ("REDLOCK_HANDOVER_GRACE", "11s", |e| {
                matches!(
                    e,
                    BuildError::Option {
                        name: "handover_grace",
                        ..
                    }
                )
            }),
            ("REDLOCK_QUARANTINE", "1s", |e| {
                matches!(
                    e,
                    BuildError::Option {
                        name: "quarantine",
                        ..
                    }
                )
            }),
        ];
        for (var, value, expected) in cases {
            let error = RedlockBuilder::default()
                .from_env_with(lookup(&[
                    (NODES_ENV, "redis://10.255.255.1:1"),
                    (var, value),
                ]))
                .build()
                .await
                .unwrap_err();
            assert!(expected(&error), "{var}={value}: unexpected error: {error}");
        }
        let extend = RedlockBuilder::default()
            .from_env_with(lookup(&[
                (NODES_ENV, "redis://10.255.255.1:1"),
                ("REDLOCK_AUTO_EXTEND", "true"),
                ("REDLOCK_EXTEND_FRACTION", "1.5"),
            ]))
            .build()
            .await
            .unwrap_err();
        assert!(
            matches!(
                extend,
                BuildError::Invalid(InvalidInput::ExtendFraction { .. })
            ),
            "{extend}"
        );
        assert!(started.elapsed() < Duration::from_millis(500));
    }
}
