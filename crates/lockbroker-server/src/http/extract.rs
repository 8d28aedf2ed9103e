//! Extractors that turn every malformed request into an [`ApiError`] naming the
//! field, instead of axum's plain-text rejections.

use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, Path, Request};
use axum::http::request::Parts;
use axum::http::StatusCode;
use lockbroker_core::LockName;
use serde::de::DeserializeOwned;

use super::error::ApiError;

/// The `{name}` path segment, checked against the lock name rules.
pub struct LockPath(pub LockName);

impl<S: Send + Sync> FromRequestParts<S> for LockPath {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        let Path(raw) = Path::<String>::from_request_parts(parts, state)
            .await
            .map_err(|_| ApiError::BadBody {
                field: "name".into(),
                message: "is not valid UTF-8 after percent-decoding".into(),
            })?;
        Ok(Self(LockName::parse(&raw)?))
    }
}

/// A JSON body decoded into `T`. Any content type is accepted (so `curl -d`
/// works without a header); an empty body reads as `{}`.
pub struct JsonBody<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for JsonBody<T> {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<Self, ApiError> {
        let bytes = Bytes::from_request(request, state)
            .await
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

/// The name in "duplicate field `ttl_ms`".
fn quoted_field(message: &str) -> Option<&str> {
    let rest = message.strip_prefix("duplicate field `")?;
    rest.split('`').next()
}

/// serde_json's message without the "at line 1 column 9" tail.
fn describe(error: &serde_json::Error) -> String {
    let text = error.to_string();
    match text.rfind(" at line ") {
        Some(at) => text[..at].to_owned(),
        None => text,
    }
}
