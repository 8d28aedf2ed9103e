//! Label values of the request histogram, from a fixed set: each value is
//! a series kept for as long as the broker runs.

/// HTTP's own methods by name and any other as `other`: a caller may send a
/// method of its own making, and each new label would be a series kept for
/// good.
pub(super) fn method_label(method: &str) -> &str {
    match method {
        "GET" | "HEAD" | "POST" | "PUT" | "DELETE" | "PATCH" | "OPTIONS" | "CONNECT" | "TRACE" => {
            method
        }
        _ => "other",
    }
}

/// Static status labels for the statuses the broker answers, so the label
/// needs no allocation per request.
pub(super) fn status_label(status: u16) -> &'static str {
    match status {
        200 => "200",
        400 => "400",
        401 => "401",
        403 => "403",
        404 => "404",
        405 => "405",
        408 => "408",
        409 => "409",
        413 => "413",
        423 => "423",
        429 => "429",
        500 => "500",
        503 => "503",
        s if s < 300 => "2xx",
        s if s < 500 => "4xx",
        _ => "5xx",
    }
}
