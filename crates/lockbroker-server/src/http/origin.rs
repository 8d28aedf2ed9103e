//! Requests from this broker's own callers only: the `Host` a request names
//! must be a name this broker answers to, and the `Origin` of a web page
//! that sends one must be the broker's own (or one configured).
//!
//! Without API keys, any web page its user opens could otherwise drive the
//! broker from their browser: a page of another site sends requests the
//! browser lets through without asking the broker (cross-site requests, `403`
//! here for their `Origin`), and a page whose own name was rebound to the
//! broker's address talks to it as if same-origin (DNS rebinding, `403` here
//! for its `Host`). The `Content-Type` rule of [`super::extract::JsonBody`]
//! is the third part: no page can send `application/json` to another origin
//! without a CORS preflight, which the broker never grants.

use std::borrow::Cow;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, Uri};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::error::ApiError;

/// Which `Host` names and page origins the broker takes requests from.
#[derive(Clone, Debug)]
pub struct Sources {
    /// `localhost`, `*.localhost` and loopback addresses: when the listener
    /// is on loopback or on every address.
    loopback: bool,
    /// Any IP address literal: when the listener is on every address (a
    /// rebound name is never an IP literal, and the addresses of the
    /// machine are not known in advance).
    any_address: bool,
    /// The listener's own address.
    listen: IpAddr,
    /// `http.allowed_hosts`.
    hosts: Vec<HostPattern>,
    /// `http.allowed_origins`, as `scheme://host[:port]` in lower case.
    origins: Vec<String>,
}

/// One entry of `http.allowed_hosts`.
#[derive(Clone, Debug, PartialEq, Eq)]
enum HostPattern {
    /// `*`: any name at all (the broker relies on API keys alone).
    Any,
    /// `.example.com`: every name under `example.com`, not itself.
    Under(String),
    /// `broker.example.com` or an IP address: that one.
    Exact(String),
}

impl Sources {
    /// The sources of a broker listening on `listen`, with the names of
    /// `allowed_hosts` and the origins of `allowed_origins`. The error says
    /// which entry is not one.
    pub fn new(
        listen: SocketAddr,
        allowed_hosts: &[String],
        allowed_origins: &[String],
    ) -> Result<Self, String> {
        let ip = listen.ip();
        let hosts = allowed_hosts
            .iter()
            .map(|raw| host_pattern(raw))
            .collect::<Result<_, _>>()?;
        let origins = allowed_origins
            .iter()
            .map(|raw| origin_entry(raw))
            .collect::<Result<_, _>>()?;
        Ok(Self {
            loopback: ip.is_loopback() || ip.is_unspecified(),
            any_address: ip.is_unspecified(),
            listen: ip,
            hosts,
            origins,
        })
    }

    /// Whether this broker answers to `host`, a name or address without port.
    fn answers_to(&self, host: &str) -> bool {
        let host = host.trim_matches(['[', ']']);
        if let Ok(ip) = host.parse::<IpAddr>() {
            if self.any_address || ip == self.listen || (self.loopback && ip.is_loopback()) {
                return true;
            }
        } else if self.loopback && (host == "localhost" || host.ends_with(".localhost")) {
            // Browsers resolve these to loopback themselves, never through DNS.
            return true;
        }
        self.hosts.iter().any(|pattern| match pattern {
            HostPattern::Any => true,
            HostPattern::Under(suffix) => {
                host.len() > suffix.len() && host.ends_with(suffix.as_str())
            }
            HostPattern::Exact(name) => name == host,
        })
    }

    /// Why a request with these `headers` and `uri` is refused, if it is.
    pub(super) fn refusal(&self, uri: &Uri, headers: &HeaderMap) -> Option<ApiError> {
        let authority = match uri.authority() {
            Some(authority) => Some(authority.as_str()),
            None => match headers.get(header::HOST).map(|v| v.to_str()) {
                Some(Ok(host)) => Some(host),
                Some(Err(_)) => return Some(host_refused("(not ASCII)")),
                // HTTP/1.0 without Host: no browser sends that.
                None => None,
            },
        };
        if let Some(authority) = authority {
            let host = host_of(authority);
            if !self.answers_to(&host) {
                return Some(host_refused(&host));
            }
        }
        let origin = headers.get(header::ORIGIN)?;
        let Ok(origin) = origin.to_str() else {
            return Some(origin_refused("(not ASCII)"));
        };
        let normalized = origin.trim().to_ascii_lowercase();
        let own = authority.is_some_and(|authority| {
            let authority = authority.to_ascii_lowercase();
            ["http://", "https://"]
                .iter()
                .any(|scheme| normalized.strip_prefix(scheme) == Some(authority.as_str()))
        });
        if own || self.origins.contains(&normalized) {
            None
        } else {
            Some(origin_refused(origin))
        }
    }
}

/// Refuses every request from a host name or page origin `sources` does
/// not take, before authentication and before any body is read.
pub async fn guard(State(sources): State<Arc<Sources>>, request: Request, next: Next) -> Response {
    match sources.refusal(request.uri(), request.headers()) {
        Some(refusal) => refusal.into_response(),
        None => next.run(request).await,
    }
}

/// The host of an authority (`name:port`, `[v6]:port`), lower case, without
/// port or trailing dot: copied only when it has capitals to lower.
fn host_of(authority: &str) -> Cow<'_, str> {
    let host = if authority.starts_with('[') {
        authority
            .find(']')
            .map_or(authority, |end| &authority[..=end])
    } else {
        authority
            .rsplit_once(':')
            .map_or(authority, |(host, _)| host)
    };
    let host = host.trim_end_matches('.');
    if host.bytes().any(|b| b.is_ascii_uppercase()) {
        Cow::Owned(host.to_ascii_lowercase())
    } else {
        Cow::Borrowed(host)
    }
}

fn host_refused(host: &str) -> ApiError {
    ApiError::Forbidden(format!(
        "this broker does not answer to the host name {host:?} (a web page whose name was \
         made to point at the broker would send it): call it by a name in http.allowed_hosts"
    ))
}

fn origin_refused(origin: &str) -> ApiError {
    ApiError::Forbidden(format!(
        "requests from web pages of {origin:?} are refused: the broker takes requests from its \
         own pages and from the origins in http.allowed_origins"
    ))
}

/// Reads one entry of `http.allowed_hosts`.
fn host_pattern(raw: &str) -> Result<HostPattern, String> {
    let entry = raw.trim().trim_end_matches('.').to_ascii_lowercase();
    if entry == "*" {
        return Ok(HostPattern::Any);
    }
    let name = entry.strip_prefix('.').unwrap_or(&entry);
    let ip = name.trim_matches(['[', ']']).parse::<IpAddr>().is_ok();
    let plain = !name.is_empty()
        && name.split('.').all(|label| {
            !label.is_empty()
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        });
    if !(ip || plain) {
        return Err(format!(
            "http.allowed_hosts: {raw:?} is not a host name, an IP address, \".\" and a domain, \
             or \"*\" (leave out scheme and port)"
        ));
    }
    let name = name.trim_matches(['[', ']']).to_owned();
    Ok(if entry.starts_with('.') {
        HostPattern::Under(format!(".{name}"))
    } else {
        HostPattern::Exact(name)
    })
}

/// Reads one entry of `http.allowed_origins`: `scheme://host[:port]`.
fn origin_entry(raw: &str) -> Result<String, String> {
    let entry = raw.trim().trim_end_matches('/').to_ascii_lowercase();
    let fail = || {
        format!(
            "http.allowed_origins: {raw:?} is not an origin such as \
             \"https://ops.example.com\" or \"http://localhost:8080\" (scheme, host and port, \
             no path)"
        )
    };
    let authority = entry
        .strip_prefix("https://")
        .or_else(|| entry.strip_prefix("http://"))
        .ok_or_else(fail)?;
    if authority.is_empty() || authority.contains(['/', '?', '#', '@', '*', ' ']) {
        return Err(fail());
    }
    Ok(entry)
}

#[cfg(test)]
mod tests {
    use axum::http::HeaderValue;

    use super::*;

    fn sources(listen: &str, hosts: &[&str], origins: &[&str]) -> Sources {
        let owned = |list: &[&str]| list.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        Sources::new(
            listen.parse().expect("address"),
            &owned(hosts),
            &owned(origins),
        )
        .expect("valid sources")
    }

    fn allows(sources: &Sources, host: &str, origin: Option<&str>) -> bool {
        let mut headers = HeaderMap::new();
        headers.insert(header::HOST, HeaderValue::from_str(host).expect("host"));
        if let Some(origin) = origin {
            headers.insert(
                header::ORIGIN,
                HeaderValue::from_str(origin).expect("origin"),
            );
        }
        sources
            .refusal(&Uri::from_static("/v1/locks"), &headers)
            .is_none()
    }

    #[test]
    fn on_loopback_only_loopback_names_are_answered() {
        let on = sources("127.0.0.1:7700", &[], &[]);
        for host in [
            "127.0.0.1:7700",
            "localhost:7700",
            "LOCALHOST",
            "[::1]:7700",
            "a.localhost",
        ] {
            assert!(allows(&on, host, None), "{host}");
        }
        for host in [
            "attacker.rebind.example",
            "attacker.rebind.example:7700",
            "10.0.0.5:7700",
            "localhost.evil.example",
        ] {
            assert!(!allows(&on, host, None), "{host}");
        }
    }

    #[test]
    fn on_every_address_ip_literals_and_listed_names_are_answered() {
        let on = sources("0.0.0.0:7700", &["lockbroker", ".svc.cluster.local"], &[]);
        for host in [
            "10.0.3.4:7700",
            "[fd00::1]:7700",
            "localhost",
            "lockbroker:7700",
            "lockbroker.ops.svc.cluster.local",
        ] {
            assert!(allows(&on, host, None), "{host}");
        }
        for host in ["svc.cluster.local", "rebind.example", "lockbroker.example"] {
            assert!(!allows(&on, host, None), "{host}");
        }
        assert!(allows(
            &sources("0.0.0.0:7700", &["*"], &[]),
            "any.example",
            None
        ));
        let one = sources("10.0.0.5:7700", &[], &[]);
        assert!(allows(&one, "10.0.0.5:7700", None));
        assert!(!allows(&one, "10.0.0.6:7700", None) && !allows(&one, "localhost", None));
    }

    #[test]
    fn only_the_brokers_own_origin_or_a_listed_one_is_taken() {
        let on = sources("127.0.0.1:7700", &[], &["https://ops.example.com"]);
        assert!(allows(&on, "127.0.0.1:7700", Some("http://127.0.0.1:7700")));
        assert!(allows(
            &on,
            "localhost:7700",
            Some("https://LOCALHOST:7700")
        ));
        assert!(allows(
            &on,
            "127.0.0.1:7700",
            Some("https://ops.example.com")
        ));
        for origin in [
            "http://127.0.0.1:7701",
            "http://evil.example",
            "null",
            "http://localhost:7700",
        ] {
            assert!(!allows(&on, "127.0.0.1:7700", Some(origin)), "{origin}");
        }
    }

    #[test]
    fn entries_that_are_no_host_or_origin_are_refused() {
        let listen: SocketAddr = "127.0.0.1:7700".parse().expect("address");
        for bad in [
            "",
            "http://a.example",
            "a.example:80",
            "a b",
            "a/b",
            "*.example.com",
        ] {
            assert!(
                Sources::new(listen, &[bad.to_owned()], &[]).is_err(),
                "{bad}"
            );
        }
        for bad in [
            "",
            "*",
            "null",
            "ops.example.com",
            "https://ops.example.com/ui",
            "ftp://a",
        ] {
            assert!(
                Sources::new(listen, &[], &[bad.to_owned()]).is_err(),
                "{bad}"
            );
        }
        assert!(Sources::new(
            listen,
            &["[::1]".into(), "10.0.0.1".into()],
            &["http://localhost:8080/".into()]
        )
        .is_ok());
    }
}
