//! Extractors that turn every malformed request into an [`ApiError`] naming the
//! field, instead of axum's plain-text rejections.

use std::time::Duration;

use axum::extract::{FromRequest, FromRequestParts, Path, Request};
use axum::http::request::Parts;
use axum::http::{header, HeaderMap};
use http_body_util::{BodyExt, LengthLimitError, Limited};
use lockbroker_core::{Fence, LockName, SessionId, Space};
use serde::de::DeserializeOwned;

use super::error::ApiError;
use crate::auth::Caller;

/// The `{name}` path segment of a lock route, checked against the name
/// rules and against the name prefixes of the caller's API key, so no lock
/// route can forget the prefix check.
pub struct LockPath(pub LockName);

/// The `{name}` path segment of a semaphore route, checked as [`LockPath`]
/// is: a key's prefixes cover semaphore names as they cover lock names.
pub struct SemaphorePath(pub LockName);

impl<S: Send + Sync> FromRequestParts<S> for LockPath {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        name_in(Space::Lock, parts, state).await.map(Self)
    }
}

impl<S: Send + Sync> FromRequestParts<S> for SemaphorePath {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        name_in(Space::Semaphore, parts, state).await.map(Self)
    }
}

/// The checked `{name}` of a route of `space`.
async fn name_in<S: Send + Sync>(
    space: Space,
    parts: &mut Parts,
    state: &S,
) -> Result<LockName, ApiError> {
    let raw = path_param(parts, state, "name").await?;
    let name = LockName::parse_in(space, &raw)?;
    // The authentication layer puts a caller on every routed request;
    // none here means the route was wired without it, so refuse.
    let allowed = parts
        .extensions
        .get::<Caller>()
        .is_some_and(|caller| caller.may_touch(&name));
    if !allowed {
        return Err(ApiError::Forbidden(format!(
            "this API key may not touch {} {name:?}",
            space.noun()
        )));
    }
    Ok(name)
}

/// The `{fence}` path segment of a fence check: a positive integer.
pub struct FencePath(pub Fence);

/// The `{id}` path segment of a session route.
pub struct SessionPath(pub SessionId);

impl<S: Send + Sync> FromRequestParts<S> for SessionPath {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        let raw = path_param(parts, state, "id").await?;
        Ok(Self(SessionId::parse(&raw)?))
    }
}

impl<S: Send + Sync> FromRequestParts<S> for FencePath {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        let raw = path_param(parts, state, "fence").await?;
        Ok(Self(Fence::parse(&raw)?))
    }
}

/// The path parameter `field` of the matched route, percent-decoded; a
/// route may have several (`{name}` and `{fence}`).
async fn path_param<S: Send + Sync>(
    parts: &mut Parts,
    state: &S,
    field: &str,
) -> Result<String, ApiError> {
    let not_utf8 = || ApiError::BadBody {
        field: field.to_owned(),
        message: "is not valid UTF-8 after percent-decoding".into(),
    };
    let Path(params) = Path::<Vec<(String, String)>>::from_request_parts(parts, state)
        .await
        .map_err(|_| not_utf8())?;
    (params.into_iter())
        .find_map(|(key, value)| (key == field).then_some(value))
        .ok_or_else(not_utf8)
}

/// How long a request body may take to arrive and how large it may be, set
/// on each request by the limits layer.
#[derive(Clone, Copy, Debug)]
pub struct BodyLimits {
    /// How long the body may take to arrive.
    pub read_timeout: Duration,
    /// The largest body accepted, in bytes.
    pub max_bytes: usize,
}

/// The largest body read where no limits were set: the configuration's
/// default (`http.max_body_bytes`).
const DEFAULT_MAX_BODY_BYTES: usize = 16 * 1024;

/// Query parameters decoded into `T`, naming the failing parameter.
pub struct QueryParams<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequestParts<S> for QueryParams<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, ApiError> {
        let query = parts.uri.query().unwrap_or("");
        let deserializer =
            serde_urlencoded::Deserializer::new(form_urlencoded::parse(query.as_bytes()));
        serde_path_to_error::deserialize(deserializer)
            .map(QueryParams)
            .map_err(|error| {
                let message = error.inner().to_string();
                let path = error.path().to_string();
                let field = if path.is_empty() || path == "." || path == "?" {
                    quoted_field(&message).unwrap_or("query").to_owned()
                } else {
                    path
                };
                ApiError::BadBody { field, message }
            })
    }
}

/// A JSON body decoded into `T`. The body must be declared
/// `Content-Type: application/json`, which a web page of another origin
/// cannot send without the broker's consent (a CORS preflight the broker
/// never grants): a `text/plain` or form body is refused `415` however JSON
/// it looks. A request without a body may leave the header out; an empty
/// body reads as `{}`.
pub struct JsonBody<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for JsonBody<T> {
    type Rejection = ApiError;

    async fn from_request(request: Request, _state: &S) -> Result<Self, ApiError> {
        let declared = declared_json(request.headers())?;
        let limits = request.extensions().get::<BodyLimits>().copied();
        let (limit, max_bytes) = limits.map_or((Duration::MAX, DEFAULT_MAX_BODY_BYTES), |l| {
            (l.read_timeout, l.max_bytes)
        });
        let body = Limited::new(request.into_body(), max_bytes).collect();
        let bytes = tokio::time::timeout(limit, body)
            .await
            .map_err(|_| ApiError::BodyTimeout { limit })?
            .map_err(|error| {
                if error.is::<LengthLimitError>() {
                    ApiError::PayloadTooLarge
                } else {
                    ApiError::BadBody {
                        field: "body".into(),
                        message: "could not be read".into(),
                    }
                }
            })?
            .to_bytes();
        if !declared && !bytes.is_empty() {
            return Err(ApiError::UnsupportedMediaType(
                "this request has a body but no Content-Type: send it as \
                 `Content-Type: application/json`"
                    .into(),
            ));
        }
        let text: &[u8] = if bytes.iter().all(u8::is_ascii_whitespace) {
            b"{}"
        } else {
            &bytes
        };
        decode(text).map(JsonBody)
    }
}

/// Whether the request declares a JSON body: `Ok(true)` for
/// `application/json` (any parameters, such as `charset`, allowed),
/// `Ok(false)` when it names no type, `415` for any other type.
fn declared_json(headers: &HeaderMap) -> Result<bool, ApiError> {
    let mut types = headers.get_all(header::CONTENT_TYPE).iter();
    let Some(value) = types.next() else {
        return Ok(false);
    };
    let essence = value
        .to_str()
        .ok()
        .and_then(|text| text.split(';').next())
        .map(str::trim);
    match essence {
        Some(essence)
            if types.next().is_none() && essence.eq_ignore_ascii_case("application/json") =>
        {
            Ok(true)
        }
        _ => Err(ApiError::UnsupportedMediaType(
            "this route takes a JSON body: send it as `Content-Type: application/json` (one \
             header)"
                .into(),
        )),
    }
}

/// Decodes `bytes` as one JSON object of type `T`, naming the failing field.
pub fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    // serde's derive would also take an array, field by position.
    if let Some(kind) = not_an_object(bytes) {
        return Err(ApiError::BadBody {
            field: "body".into(),
            message: format!("must be a JSON object ({{...}}), not {kind}"),
        });
    }
    // A body that decodes needs no path: only a failure is decoded again,
    // tracking the path (which copies every key it passes), to name its field.
    if let Ok(value) = serde_json::from_slice(bytes) {
        return Ok(value);
    }
    let mut deserializer = serde_json::Deserializer::from_slice(bytes);
    let value = serde_path_to_error::deserialize(&mut deserializer).map_err(|error| {
        if is_syntax(error.inner()) {
            return not_json(error.inner());
        }
        let message = describe(error.inner());
        let path = error.path().to_string();
        let field = if path.is_empty() || path == "." || path == "?" {
            // serde reports a repeated key at the object, not at the key.
            quoted_field(&message).unwrap_or("body").to_owned()
        } else {
            path
        };
        ApiError::BadBody { field, message }
    })?;
    deserializer.end().map_err(|error| not_json(&error))?;
    Ok(value)
}

/// What kind of JSON value `bytes` opens with, when it is a value but not an
/// object; `None` for an object or for what is no JSON value at all.
fn not_an_object(bytes: &[u8]) -> Option<&'static str> {
    let first = bytes.iter().find(|b| !b.is_ascii_whitespace())?;
    match first {
        b'[' => Some("an array"),
        b'"' => Some("a string"),
        b'-' | b'0'..=b'9' => Some("a number"),
        b't' | b'f' if serde_json::from_slice::<bool>(bytes).is_ok() => Some("a boolean"),
        b'n' if serde_json::from_slice::<()>(bytes).is_ok() => Some("null"),
        _ => None,
    }
}

/// Whether serde_json failed on the text itself rather than on a value (a
/// number too large for any field is well-formed JSON, so it names its field).
fn is_syntax(error: &serde_json::Error) -> bool {
    let malformed = matches!(
        error.classify(),
        serde_json::error::Category::Syntax | serde_json::error::Category::Eof
    );
    malformed && describe(error) != "number out of range"
}

/// The answer to a body that is not valid JSON: where it breaks, and what
/// the parser expected there.
fn not_json(error: &serde_json::Error) -> ApiError {
    let expected = match describe(error).as_str() {
        "expected ident" => "expected `true`, `false` or `null`".to_owned(),
        "expected value" => "expected a JSON value".to_owned(),
        "trailing characters" => "expected the end of the body after one JSON object".to_owned(),
        "EOF while parsing an object" | "EOF while parsing a value" => {
            "the body ends before the JSON object is complete".to_owned()
        }
        other => other.to_owned(),
    };
    ApiError::BadBody {
        field: "body".into(),
        message: format!(
            "is not valid JSON: {expected} at line {}, column {}",
            error.line(),
            error.column()
        ),
    }
}

/// The name in "duplicate field `ttl_ms`" or "unknown field `colour`, expected ...".
fn quoted_field(message: &str) -> Option<&str> {
    let rest = message
        .strip_prefix("duplicate field `")
        .or_else(|| message.strip_prefix("unknown field `"))?;
    // An empty key names nothing a caller could look for.
    rest.split('`').next().filter(|field| !field.is_empty())
}

/// serde_json's message without the "at line 1 column 9" tail.
fn describe(error: &serde_json::Error) -> String {
    let text = error.to_string();
    match text.rfind(" at line ") {
        Some(at) => text[..at].to_owned(),
        None => text,
    }
}

#[cfg(test)]
mod tests {
    use lockbroker_api::AcquireBody;

    use super::*;

    fn refusal(body: &str) -> (String, String) {
        match decode::<AcquireBody>(body.as_bytes()) {
            Err(ApiError::BadBody { field, message }) => (field, message),
            other => panic!("{body}: {other:?}"),
        }
    }

    #[test]
    fn only_an_object_is_a_body() {
        for (body, kind) in [
            (
                r#"[60000, null, "owner", null, null, false, "shared"]"#,
                "an array",
            ),
            ("[]", "an array"),
            (r#""text""#, "a string"),
            ("42", "a number"),
            ("true", "a boolean"),
            (" null ", "null"),
        ] {
            let (field, message) = refusal(body);
            assert_eq!(field, "body", "{body}");
            assert!(message.contains(kind), "{body}: {message}");
        }
        assert!(decode::<AcquireBody>(b"{}").is_ok());
    }

    #[test]
    fn broken_json_says_where_and_what_was_expected() {
        let (field, message) = refusal("{\"ttl_ms\": tru}");
        assert_eq!(field, "body");
        assert_eq!(
            message,
            "is not valid JSON: expected `true`, `false` or `null` at line 1, column 15"
        );
        let (_, message) = refusal("{\"ttl_ms\": 1}\n{}");
        assert!(message.contains("line 2, column 1"), "{message}");
        let (_, message) = refusal("{\"ttl_ms\": ");
        assert!(message.starts_with("is not valid JSON: "), "{message}");
        // A well-formed body with a wrong value still names the field.
        assert_eq!(refusal(r#"{"ttl_ms": "x"}"#).0, "ttl_ms");
    }

    #[test]
    fn only_json_is_declared_json() {
        let with = |value: &str| {
            let mut headers = HeaderMap::new();
            headers.insert(header::CONTENT_TYPE, value.parse().expect("header"));
            declared_json(&headers)
        };
        assert!(matches!(declared_json(&HeaderMap::new()), Ok(false)));
        for ok in ["application/json", "Application/JSON; charset=utf-8"] {
            assert!(matches!(with(ok), Ok(true)), "{ok}");
        }
        for bad in [
            "text/plain",
            "application/x-www-form-urlencoded",
            "multipart/form-data; boundary=x",
            "application/jsonp",
            "",
        ] {
            assert!(
                matches!(with(bad), Err(ApiError::UnsupportedMediaType(_))),
                "{bad}"
            );
        }
    }
}
