//! A test harness for code that uses [`redlock_core`]: real Redis or Valkey servers on free
//! loopback ports, or [in-memory nodes](memory) that need no server and follow tokio's paused
//! clock; a [`Redlock`](redlock_core::Redlock) pointed at them, views of who holds a
//! resource on each node, and faults (a proxy that cuts or delays a node, or the in-memory
//! nodes' own knobs).
//!
//! Tests against real servers catch what a mock cannot: the scripts, the key layout, the ttls
//! and the server's own checks. Each [`TestServer`] is a child process on a port of its own,
//! so tests run in parallel (threads or processes) without sharing data. Unix only: servers
//! are paused, resumed and killed with signals.
//!
//! # Example
//!
//! ```
//! use redlock_test::{TestNodes, redlock};
//!
//! # fn main() {
//! # if !redlock_test::ServerKind::Redis.is_installed() { return; }
//! # tokio::runtime::Runtime::new().unwrap().block_on(async {
//! // Three servers on free ports, killed when `nodes` drops.
//! let nodes = TestNodes::start(3);
//! let lock = redlock(&nodes).await;
//!
//! let guard = lock.lock("order:42").await.unwrap();
//! // Who holds it, seen from the outside: the same token on a quorum of nodes.
//! let holder = nodes.holder("order:42").await;
//! assert_eq!(holder.as_deref(), Some(guard.token().expose()));
//! assert!(nodes.holdings("order:42").await.iter().all(|h| h.ttl.is_some()));
//! assert!(!nodes.is_free("order:42").await);
//!
//! guard.release().await.unwrap();
//! assert!(nodes.is_free("order:42").await);
//! # });
//! # }
//! ```
//!
//! # The server binary
//!
//! A server of [`ServerKind::Redis`] (the default) runs the file named by the environment
//! variable `REDIS_SERVER_BIN`, else `redis-server` found on `PATH`; one of
//! [`ServerKind::Valkey`] runs `VALKEY_SERVER_BIN`, else `valkey-server` on `PATH`
//! ([`ServerOptions::kind`]; [`ServerOptions::binary`] names a file directly). Pointing
//! `REDIS_SERVER_BIN` at a `valkey-server` runs a whole suite against Valkey. Nothing is
//! downloaded or installed: without a binary, starting a server panics with a message that
//! says so ([`TestServer::try_start`] returns [`StartError::NotFound`] instead, and
//! [`ServerKind::is_installed`] lets a test skip).
//!
//! # Lifetime
//!
//! Servers are killed (`kill -9`) when their [`TestServer`] or [`TestNodes`] drops, also when
//! a test panics, and their working directories (under the temp directory) are removed. A
//! process that is itself killed leaves its servers running: nothing can clean up after
//! `kill -9` of the test.
//!
//! # Faults
//!
//! [`TestServer::kill`], [`restart`](TestServer::restart) (with or without
//! [AOF](ServerOptions::aof)), [`pause`](TestServer::pause) and
//! [`resume`](TestServer::resume) act on one node's process; a [`Proxy`] in front of a node
//! ([`TestNodes::proxies`]) delays or cuts its traffic, per direction, while the lock keeps
//! its connections.
//!
//! # Features
//!
//! `tls`: `Certificates` (a throw-away CA and certificates, made with rcgen) and
//! `ServerOptions::tls`, for servers built with TLS that also serve it.
#![cfg_attr(docsrs, feature(doc_cfg))]

// The servers are paused, resumed and killed with Unix signals.
#[cfg(not(unix))]
compile_error!("redlock-test runs servers on Unix only (Linux, macOS, the BSDs)");

mod clients;
mod error;
pub mod memory;
mod nodes;
mod programs;
mod proxy;
mod server;
#[cfg(feature = "tls")]
mod tls;

pub use clients::{fencing_key, foreign_set_nx, free_within, is_free, plain_client, waiters_key};
pub use error::StartError;
pub use memory::MemoryNodes;
pub use nodes::{HeldValue, Holding, TestNodes, proxy_urls, redlock, redlock_with};
pub use programs::{SERVER_BIN_ENV, ServerKind, VALKEY_BIN_ENV};
pub use proxy::{Direction, Fault, Proxy};
pub use server::{ServerOptions, TestServer, free_port};
#[cfg(feature = "tls")]
pub use tls::Certificates;

/// The README's snippet, compiled as a doctest.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeSnippets;
