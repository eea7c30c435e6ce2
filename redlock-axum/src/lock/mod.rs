//! Middleware that holds a Redlock per request.
//!
//! [`RedlockLayer`] computes a resource from each request (a template over the matched
//! route's path parameters, or a closure over the request parts), takes the lock before the
//! handler runs, and keeps it until the response body has been sent or dropped.
//!
//! ```no_run
//! # async fn run(redlock: redlock_core::Redlock) -> Result<(), redlock_axum::TemplateError> {
//! use axum::{Router, routing::post};
//! use redlock_axum::RedlockLayer;
//!
//! async fn pay() -> &'static str { "paid" }
//!
//! let app: Router = Router::new()
//!     .route("/orders/{id}/pay", post(pay))
//!     .route_layer(RedlockLayer::from_template(redlock, "order:{id}")?);
//! # Ok(()) }
//! ```

mod body;
mod future;
mod layer;
mod resource;
mod service;

pub use body::LockedBody;
pub use future::ResponseFuture;
pub use layer::{RedlockLayer, ReleaseOn};
pub use resource::{Template, TemplateError};
pub use service::RedlockService;
