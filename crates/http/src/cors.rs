//! CORS for browser clients (`[http] cors_allowed_origins`): tower-http's layer, off unless
//! origins are configured. Preflights are answered by the layer before routing; answers
//! expose the headers a client needs to read (correlation id, idempotency key and status,
//! `Retry-After`).

use std::time::Duration;

use axum::http::{HeaderName, HeaderValue, Method, header};
use tower_http::cors::{AllowOrigin, CorsLayer};

use crate::{
    API_KEY_HEADER, CORRELATION_HEADER, FORCE_RETRY_HEADER, IETF_KEY_HEADER, KEY_HEADER, KEY_SOURCE_HEADER,
    STATUS_HEADER,
};

/// The layer for `origins` (exact origins, or `"*"` for any); `None` when CORS is off.
/// Origins are validated by the config; one that is not a header value is skipped.
pub(crate) fn layer(origins: &[String]) -> Option<CorsLayer> {
    if origins.is_empty() {
        return None;
    }
    let allow = if origins.iter().any(|o| o == "*") {
        AllowOrigin::any()
    } else {
        AllowOrigin::list(origins.iter().filter_map(|o| HeaderValue::from_str(o).ok()))
    };
    let name = HeaderName::from_static;
    Some(
        CorsLayer::new()
            .allow_origin(allow)
            .allow_methods([Method::GET, Method::POST])
            .allow_headers([
                header::CONTENT_TYPE,
                name(API_KEY_HEADER),
                name(KEY_HEADER),
                name(IETF_KEY_HEADER),
                name(FORCE_RETRY_HEADER),
                name(CORRELATION_HEADER),
            ])
            .expose_headers([
                name(CORRELATION_HEADER),
                name(KEY_HEADER),
                name(STATUS_HEADER),
                name(KEY_SOURCE_HEADER),
                header::RETRY_AFTER,
            ])
            .max_age(Duration::from_secs(600)),
    )
}
