//! Middleware that holds a Redlock per request.
//!
//! [`RedlockLayer`] computes a resource from each request (a template over the matched
//! route's path parameters, or a closure over the request parts), takes the lock before the
//! handler runs, and keeps it until the response body has been sent or dropped.
//!
//! ```no_run
//! # async fn run(redlock: redlock_core::Redlock) -> Result<(), redlock_axum::TemplateError> {
//! use axum::{Router, routing::{get, post}};
//! use redlock_axum::RedlockLayer;
//!
//! async fn pay() -> &'static str { "paid" }
//! async fn show() -> &'static str { "the catalog" }
//! async fn edit() -> &'static str { "edited" }
//!
//! let app: Router = Router::new()
//!     .route("/orders/{id}/pay", post(pay))
//!     .route_layer(RedlockLayer::from_template(redlock.clone(), "order:{id}")?)
//!     // Reads share the catalog, writes take it alone (GET read, POST write).
//!     .merge(
//!         Router::new()
//!             .route("/catalog/{shelf}", get(show).post(edit))
//!             .route_layer(RedlockLayer::from_template(redlock, "catalog:{shelf}")?.mode_by_method()),
//!     );
//! # Ok(()) }
//! ```

mod body;
mod config;
mod future;
mod layer;
mod mode;
mod resource;
mod service;

pub use body::LockedBody;
pub use future::ResponseFuture;
pub use config::ReleaseOn;
pub use layer::RedlockLayer;
pub use mode::by_method;
pub use resource::{Template, TemplateError};
pub use service::RedlockService;
