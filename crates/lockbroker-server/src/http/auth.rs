//! Authentication and authorization of every routed request: one table of the
//! scope each route needs, the bearer-token check, and the per-key rate limit.
//!
//! The lock-name prefix check happens where the name is parsed
//! ([`super::extract::LockPath`]), so it covers every route with a `{name}`.

use std::collections::HashSet;
use std::sync::Arc;

use axum::extract::{FromRequestParts, MatchedPath, Request, State};
use axum::http::request::Parts;
use axum::http::{header, Method};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::error::ApiError;
use crate::auth::{Caller, KeyRing, Scope};

/// The scope a route needs, by method and route template; `None` for the
/// public probes. A route missing from this table needs `admin`, so a new
/// route is closed until it is listed here.
pub fn required_scope(method: &Method, path: &str) -> Option<Scope> {
    match (method, path) {
        (_, "/healthz" | "/readyz" | "/ui" | "/ui/" | "/ui/app.js" | "/ui/app.css") => None,
        (&Method::GET | &Method::HEAD, "/v1/locks" | "/v1/semaphores")
        | (&Method::DELETE, "/v1/locks/{name}" | "/v1/semaphores/{name}") => Some(Scope::Admin),
        (_, "/metrics") => Some(Scope::Metrics),
        (_, "/v1/events" | "/v1/locks/acquire-all" | "/v1/locks/release-all") => Some(Scope::Lock),
        (_, path)
            if path.starts_with("/v1/locks/{name}")
                || path.starts_with("/v1/semaphores/{name}")
                || path.starts_with("/v1/sessions") =>
        {
            Some(Scope::Lock)
        }
        _ => Some(Scope::Admin),
    }
}

/// Who may call which route: the API keys, and the routes they guard.
pub struct Gate {
    keys: Arc<KeyRing>,
    /// The `(method, route template)` pairs a handler serves; a request the
    /// router answers by itself (`404`, `405`) is not asked for a key.
    served: HashSet<(Method, &'static str)>,
}

impl Gate {
    /// Guards the `served` routes (a `GET` route serves `HEAD` too) with
    /// `keys`.
    pub fn new(
        keys: Arc<KeyRing>,
        served: impl IntoIterator<Item = (Method, &'static str)>,
    ) -> Self {
        let mut routes = HashSet::new();
        for (method, path) in served {
            if method == Method::GET {
                routes.insert((Method::HEAD, path));
            }
            routes.insert((method, path));
        }
        Self {
            keys,
            served: routes,
        }
    }

    /// Identifies the caller of a served route, checks the route's scope and
    /// the caller's rate limit, and hands the [`Caller`] to the handler (with
    /// no keys configured every caller is [`Caller::Anonymous`]). Returns
    /// the caller, to be named in the request's log line and per-key count
    /// (never the key itself: its id); `None` for a request no handler
    /// serves.
    pub fn admit(&self, request: &mut Request) -> Result<Option<Caller>, Refusal> {
        let Some(path) = request.extensions().get::<MatchedPath>() else {
            return Ok(None);
        };
        let route = (request.method().clone(), path.as_str());
        if !self.served.contains(&route) {
            return Ok(None);
        }
        let caller = identify(&self.keys, request, required_scope(&route.0, route.1))?;
        request.extensions_mut().insert(caller.clone());
        Ok(Some(caller))
    }
}

/// The gate's check as a middleware, for a router every route of which a
/// handler serves (the metrics listener's); a path no route matches needs
/// `admin`, so nothing there is open by accident.
pub async fn authenticate(
    State(keys): State<Arc<KeyRing>>,
    mut request: Request,
    next: Next,
) -> Response {
    let scope = match request.extensions().get::<MatchedPath>() {
        Some(path) => required_scope(request.method(), path.as_str()),
        None => Some(Scope::Admin),
    };
    match identify(&keys, &request, scope) {
        Ok(caller) => {
            request.extensions_mut().insert(caller);
            next.run(request).await
        }
        Err(refusal) => refusal.error.into_response(),
    }
}

/// Why a request is refused, and by whom it came when its key is known (a
/// known key can still lack the scope or exceed its rate limit).
pub struct Refusal {
    /// The answer.
    pub error: ApiError,
    /// The caller, when its key was accepted.
    pub caller: Option<Caller>,
}

impl From<ApiError> for Refusal {
    fn from(error: ApiError) -> Self {
        Self {
            error,
            caller: None,
        }
    }
}

fn identify(keys: &KeyRing, request: &Request, scope: Option<Scope>) -> Result<Caller, Refusal> {
    // A proxy that reads the last of several headers would disagree with a
    // broker that reads the first: refuse the ambiguity.
    let presented = request.headers().get_all(header::AUTHORIZATION);
    if presented.iter().nth(1).is_some() {
        return Err(ApiError::RepeatedAuthorization.into());
    }
    let Some(scope) = scope.filter(|_| keys.enabled()) else {
        return Ok(Caller::Anonymous);
    };
    let token = bearer_token(request).ok_or(ApiError::MissingKey)?;
    let caller = Caller::Key(keys.authenticate(token).ok_or(ApiError::KeyNotAccepted)?);
    let refused = if caller.has_scope(scope) {
        caller
            .take_request()
            .err()
            .map(|retry_after| ApiError::RateLimited { retry_after })
    } else {
        Some(ApiError::Forbidden(format!(
            "this API key lacks the {scope} scope this route needs"
        )))
    };
    match refused {
        None => Ok(caller),
        Some(error) => Err(Refusal {
            error,
            caller: Some(caller),
        }),
    }
}

/// The token of an `Authorization: Bearer <token>` header; `None` when the
/// header is absent, empty, or of another scheme.
fn bearer_token(request: &Request) -> Option<&str> {
    let value = request
        .headers()
        .get(header::AUTHORIZATION)?
        .to_str()
        .ok()?;
    let (scheme, token) = value.split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| token.trim())
        .filter(|t| !t.is_empty())
}

impl<S: Send + Sync> FromRequestParts<S> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, ApiError> {
        // Set by the gate on every request a handler serves; absent only if a
        // route was wired without it, and then nobody is let in.
        parts
            .extensions
            .get::<Caller>()
            .cloned()
            .ok_or_else(|| ApiError::Forbidden("this route is not open to callers".into()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_route_has_the_scope_it_should() {
        let table = [
            (Method::POST, "/v1/locks/acquire-all", Some(Scope::Lock)),
            (Method::POST, "/v1/locks/release-all", Some(Scope::Lock)),
            (Method::POST, "/v1/locks/{name}/acquire", Some(Scope::Lock)),
            (Method::POST, "/v1/locks/{name}/extend", Some(Scope::Lock)),
            (Method::POST, "/v1/locks/{name}/release", Some(Scope::Lock)),
            (Method::GET, "/v1/locks/{name}", Some(Scope::Lock)),
            (
                Method::GET,
                "/v1/locks/{name}/fence/{fence}",
                Some(Scope::Lock),
            ),
            (
                Method::GET,
                "/v1/semaphores/{name}/fence/{fence}",
                Some(Scope::Lock),
            ),
            (Method::DELETE, "/v1/locks/{name}", Some(Scope::Admin)),
            (Method::GET, "/v1/locks", Some(Scope::Admin)),
            (
                Method::POST,
                "/v1/semaphores/{name}/acquire",
                Some(Scope::Lock),
            ),
            (
                Method::POST,
                "/v1/semaphores/{name}/extend",
                Some(Scope::Lock),
            ),
            (
                Method::POST,
                "/v1/semaphores/{name}/release",
                Some(Scope::Lock),
            ),
            (Method::GET, "/v1/semaphores/{name}", Some(Scope::Lock)),
            (Method::DELETE, "/v1/semaphores/{name}", Some(Scope::Admin)),
            (Method::GET, "/v1/semaphores", Some(Scope::Admin)),
            (Method::GET, "/v1/locks/{name}/events", Some(Scope::Lock)),
            (
                Method::GET,
                "/v1/semaphores/{name}/events",
                Some(Scope::Lock),
            ),
            (Method::GET, "/v1/events", Some(Scope::Lock)),
            (Method::POST, "/v1/sessions", Some(Scope::Lock)),
            (
                Method::POST,
                "/v1/sessions/{id}/keepalive",
                Some(Scope::Lock),
            ),
            (Method::POST, "/v1/sessions/{id}/close", Some(Scope::Lock)),
            (Method::GET, "/v1/sessions/{id}", Some(Scope::Lock)),
            (Method::GET, "/v1/sessions/{id}/events", Some(Scope::Lock)),
            (Method::GET, "/metrics", Some(Scope::Metrics)),
            (Method::GET, "/healthz", None),
            (Method::GET, "/ui", None),
            (Method::GET, "/ui/", None),
            (Method::GET, "/ui/app.js", None),
            (Method::GET, "/ui/app.css", None),
            (Method::GET, "/readyz", None),
            (Method::GET, "/v2/unlisted", Some(Scope::Admin)),
        ];
        for (method, path, scope) in &table {
            assert_eq!(required_scope(method, path), *scope, "{method} {path}");
        }
        // A new route must take a place in the table above, so its scope is a
        // decision and not the fallback.
        for (method, path, _) in crate::http::routes() {
            assert!(
                table.iter().any(|(m, p, _)| *m == method && *p == path),
                "{method} {path} has no scope decided in this test"
            );
        }
    }
}
