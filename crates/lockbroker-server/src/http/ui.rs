//! The operator page: three files embedded in the binary, served without a
//! key (the page asks for one when the API wants it) under a strict
//! Content-Security-Policy: nothing inline, nothing from elsewhere.

use axum::http::{header, HeaderValue, StatusCode, Uri};
use axum::response::{IntoResponse, Response};

/// Scripts and styles only from the broker itself, nothing inline, no
/// framing, no forms posting elsewhere.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; \
    style-src 'self'; connect-src 'self'; img-src 'self'; base-uri 'none'; \
    form-action 'none'; frame-ancestors 'none'";

/// `GET /ui`: a permanent redirect to `/ui/`, the query kept (the page
/// reads its prefix from it). The page's own links are absolute, so it would
/// load from `/ui` too; the redirect gives it one address.
pub async fn to_page(uri: Uri) -> Response {
    let location = match uri.query() {
        Some(query) => format!("/ui/?{query}"),
        None => "/ui/".to_owned(),
    };
    let mut response = StatusCode::PERMANENT_REDIRECT.into_response();
    // Built from "/ui/" and a query the request line already carried, which
    // is valid in a header value; a failure would leave the bare 308.
    if let Ok(value) = HeaderValue::try_from(location) {
        response.headers_mut().insert(header::LOCATION, value);
    }
    response
}

/// `GET /ui/`
pub async fn page() -> Response {
    embedded(
        include_str!("../../ui/index.html"),
        "text/html; charset=utf-8",
    )
}

/// `GET /ui/app.js`
pub async fn script() -> Response {
    embedded(
        include_str!("../../ui/app.js"),
        "text/javascript; charset=utf-8",
    )
}

/// `GET /ui/app.css`
pub async fn style() -> Response {
    embedded(include_str!("../../ui/app.css"), "text/css; charset=utf-8")
}

fn embedded(body: &'static str, content_type: &'static str) -> Response {
    let mut response = body.into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CONTENT_SECURITY_POLICY),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}
