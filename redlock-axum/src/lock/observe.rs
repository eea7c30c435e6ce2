//! What the layer tells an operator: a span per locked request, and (feature `metrics`) a
//! counter of the answers it gives in the handler's place. Both name the route by its
//! template (axum's [`MatchedPath`]), never by the raw path, and never the token.

use axum::extract::MatchedPath;
use http::StatusCode;
use tracing::Span;

#[cfg(feature = "metrics")]
use crate::extract::route_name;

/// The name of the counter of rejections.
#[cfg(feature = "metrics")]
pub(crate) const REJECTIONS: &str = "redlock_layer_rejections_total";

/// The span a locked request runs in, from its acquisition to the handler's answer. Field
/// names follow OpenTelemetry's HTTP conventions (`http.route`) and the lock's own
/// (`redlock.resource_class`: see `ResourceFrom::class`).
pub(crate) fn span(route: Option<&MatchedPath>, class: Option<&str>) -> Span {
    tracing::debug_span!(
        "redlock.layer",
        "http.route" = route.map(MatchedPath::as_str),
        "redlock.resource_class" = class,
    )
}

/// Counts an answer the layer gave in the handler's place.
#[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
pub(crate) fn rejected(route: Option<&MatchedPath>, status: StatusCode) {
    #[cfg(feature = "metrics")]
    metrics::counter!(
        REJECTIONS,
        "route" => route_name(route.map(MatchedPath::as_str)).to_owned(),
        "status" => status.as_str().to_owned(),
    )
    .increment(1);
}
