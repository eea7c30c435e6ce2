//! The middleware: [`RedlockLayer`] makes a [`RedlockService`] per route, whose
//! [`ResponseFuture`] takes the lock, calls the handler, and hands the lock to the response
//! body. The crate root re-exports the public items; this module is private so that each has
//! one path.

mod body;
mod config;
mod future;
mod layer;
mod mode;
mod observe;
mod resource;
mod service;

pub use body::BodyError;
pub use config::{DEFAULT_MAX_HOLD, ReleaseOn};
pub use future::ResponseFuture;
pub use layer::RedlockLayer;
pub use mode::by_method;
pub use resource::TemplateError;
pub use service::RedlockService;
