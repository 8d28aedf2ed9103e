//! Extractors that turn every malformed request into an [`ApiError`] naming the
//! field, instead of axum's plain-text rejections.

use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, Path, Request};
use axum::http::request::Parts;
use axum::http::StatusCode;
use lockbroker_core::{LockName, Space};
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
    let Path(raw) = Path::<String>::from_request_parts(parts, state)
        .await
        .map_err(|_| ApiError::BadBody {
            field: "name".into(),
            message: "is not valid UTF-8 after percent-decoding".into(),
        })?;
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

/// How long a request body may take to arrive, set on each request by the
/// limits layer.
#[derive(Clone, Copy, Debug)]
pub struct BodyReadTimeout(pub Duration);

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

/// A JSON body decoded into `T`. Any content type is accepted (so `curl -d`
/// works without a header); an empty body reads as `{}`.
pub struct JsonBody<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for JsonBody<T> {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<Self, ApiError> {
        let limit = request
            .extensions()
            .get::<BodyReadTimeout>()
            .map_or(Duration::MAX, |t| t.0);
        let bytes = tokio::time::timeout(limit, Bytes::from_request(request, state))
            .await
            .map_err(|_| ApiError::BodyTimeout { limit })?
            .map_err(|rejection| {
                if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
                    ApiError::PayloadTooLarge
                } else {
                    ApiError::BadBody {
                        field: "body".into(),
                        message: "could not be read".into(),
                    }
                }
            })?;
        let text: &[u8] = if bytes.iter().all(u8::is_ascii_whitespace) {
            b"{}"
        } else {
            &bytes
        };
        decode(text).map(JsonBody)
    }
}

/// Decodes `bytes` as one JSON value of type `T`, naming the failing field.
pub fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    let mut deserializer = serde_json::Deserializer::from_slice(bytes);
    let value = serde_path_to_error::deserialize(&mut deserializer).map_err(|error| {
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
    deserializer.end().map_err(|error| ApiError::BadBody {
        field: "body".into(),
        message: describe(&error),
    })?;
    Ok(value)
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
