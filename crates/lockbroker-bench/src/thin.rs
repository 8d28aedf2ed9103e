//! The `thin` target: the thinnest correct HTTP lock broker, for what the
//! broker's HTTP side and its Redis scripts cost beside the least a broker
//! must do. hyper's HTTP/1.1 server, one fred client on one multiplexed Redis
//! connection, and two scripts ([`store`]): acquire is `SET NX PX` of a
//! 128-bit token and `INCR` of the fence, release a compare-and-delete.
//! Nothing else: no waiting, no lock-delay, no fair queue, no release memo,
//! no time floor under the fences (a Redis that loses its data restarts
//! them), no metrics, no logs.
//!
//! It answers the broker's paths with the parts of the broker's JSON the
//! bench's client reads (`{name, token, fence, ttl_ms}` and `{name,
//! released}`) and the broker's error shape and codes, so the same
//! [`crate::http1`] client drives both. It runs as a process of its own
//! (`lockbroker-bench __thin --port P --redis URL`, started by
//! [`crate::procs::thin`]) with a Tokio runtime like the broker's (one worker
//! per core), so its CPU and memory are metered like the broker's.

mod store;
#[cfg(test)]
mod tests;

use std::borrow::Cow;
use std::convert::Infallible;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use hyper::header::{HeaderValue, CONTENT_TYPE};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use lockbroker_api::{AcquireBody, ErrorCode, ErrorDetail, ErrorResponse, LockMode, ReleaseBody};
use lockbroker_core::{LeaseToken, LockName, Ttl, ValidationError};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

use store::{AcquireCall, Failure, ReleaseCall, Store};

/// The hidden subcommand that runs the thin broker.
pub const SUBCOMMAND: &str = "__thin";

/// The broker's default TTL, for an acquire that names none.
const DEFAULT_TTL_MS: u64 = 30_000;
/// The broker's default maximum TTL.
const MAX_TTL_MS: u64 = 86_400_000;
/// Largest request body read; a lock request is well under 200 bytes.
const MAX_BODY: usize = 4_096;
/// A connection must send its request headers within this.
const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// Connections served at once; the next waits in the accept queue.
const MAX_CONNECTIONS: usize = 20_000;

/// Runs the thin broker from its arguments, `--port P --redis URL`, until
/// killed.
pub fn main(args: &[String]) -> ExitCode {
    let value = |flag: &str| {
        let at = args.iter().position(|a| a == flag)?;
        args.get(at + 1)
    };
    let (Some(port), Some(url)) = (
        value("--port").and_then(|p| p.parse::<u16>().ok()),
        value("--redis"),
    ) else {
        eprintln!("lockbroker-bench {SUBCOMMAND}: needs --port P --redis URL");
        return ExitCode::from(64);
    };
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("lockbroker-bench {SUBCOMMAND}: no runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        // Redis first: the port opens once the broker can answer.
        let store = Store::connect(url).await?;
        let listener = TcpListener::bind(("127.0.0.1", port))
            .await
            .map_err(|e| format!("cannot listen on {port}: {e}"))?;
        serve(listener, Arc::new(store)).await;
        Ok::<_, String>(())
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("lockbroker-bench {SUBCOMMAND}: {error}");
            ExitCode::FAILURE
        }
    }
}

/// Serves `listener` until the listener fails: one task per connection, at
/// most [`MAX_CONNECTIONS`] at once.
pub async fn serve(listener: TcpListener, store: Arc<Store>) {
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    let mut http = http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT);
    loop {
        let Ok(slot) = Arc::clone(&slots).acquire_owned().await else {
            return;
        };
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(_) => {
                // Out of file descriptors and the like: pause, do not spin.
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let (http, store) = (http.clone(), Arc::clone(&store));
        tokio::spawn(async move {
            let _slot = slot;
            let service = service_fn(move |request| {
                let store = Arc::clone(&store);
                async move { Ok::<_, Infallible>(handle(&store, request).await) }
            });
            // A connection that breaks ends only itself.
            let _ = http.serve_connection(TokioIo::new(stream), service).await;
        });
    }
}

/// A request the thin broker answers with an error.
struct Refusal {
    code: ErrorCode,
    message: Cow<'static, str>,
    field: Option<&'static str>,
}

impl Refusal {
    fn new(code: ErrorCode, message: impl Into<Cow<'static, str>>) -> Self {
        Self {
            code,
            message: message.into(),
            field: None,
        }
    }

    /// `invalid_request` naming `field`.
    fn invalid(field: &'static str, message: impl Into<Cow<'static, str>>) -> Self {
        Self {
            field: Some(field),
            ..Self::new(ErrorCode::InvalidRequest, message)
        }
    }
}

impl From<ValidationError> for Refusal {
    fn from(error: ValidationError) -> Self {
        Self::invalid(error.field, error.message)
    }
}

impl From<Failure> for Refusal {
    fn from(failure: Failure) -> Self {
        match failure {
            Failure::Unavailable => Self::new(
                ErrorCode::BackendUnavailable,
                "Redis did not answer in time",
            ),
            Failure::Protocol => Self::new(ErrorCode::Internal, "internal error"),
        }
    }
}

/// What a request asks for.
enum Step {
    Acquire,
    Release,
}

/// Answers one request: a JSON body, `200` or the broker's error shape.
async fn handle(store: &Store, request: Request<Incoming>) -> Response<String> {
    let (status, body) = match answer(store, request).await {
        Ok(body) => (StatusCode::OK, body),
        Err(refusal) => {
            let mut error = ErrorDetail::new(refusal.code, refusal.message);
            error.field = refusal.field.map(str::to_owned);
            let body = serde_json::to_string(&ErrorResponse { error }).unwrap_or_default();
            let status = StatusCode::from_u16(refusal.code.status())
                .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            (status, body)
        }
    };
    let mut response = Response::new(body);
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

async fn answer(store: &Store, request: Request<Incoming>) -> Result<String, Refusal> {
    let (name, step) = route(request.uri().path())?;
    if request.method() != Method::POST {
        return Err(Refusal::new(ErrorCode::MethodNotAllowed, "use POST"));
    }
    let name = LockName::parse(name)?;
    let body = Limited::new(request.into_body(), MAX_BODY)
        .collect()
        .await
        .map_err(|_| Refusal::new(ErrorCode::PayloadTooLarge, "the body is too large"))?
        .to_bytes();
    // An empty body reads as `{}`, as on the broker.
    let body: &[u8] = if body.is_empty() { b"{}" } else { &body };
    // serde's message can quote the body back, token and all: a fixed one.
    let invalid_json =
        |_: serde_json::Error| Refusal::invalid("body", "not the JSON this route takes");
    match step {
        Step::Acquire => {
            let request: AcquireBody = serde_json::from_slice(body).map_err(invalid_json)?;
            acquire(store, &name, &request).await
        }
        Step::Release => {
            let request: ReleaseBody = serde_json::from_slice(body).map_err(invalid_json)?;
            let token = request
                .token
                .ok_or_else(|| Refusal::invalid("token", "is required"))?;
            let call = ReleaseCall {
                name: &name,
                token: &token,
            };
            if !store.release(&call).await? {
                return Err(Refusal::new(
                    ErrorCode::LeaseLost,
                    "the token holds no lease on this lock",
                ));
            }
            let released = serde_json::json!({"name": name.as_str(), "released": true});
            Ok(released.to_string())
        }
    }
}

/// The lock name and step of `/v1/locks/{name}/acquire|release`.
fn route(path: &str) -> Result<(&str, Step), Refusal> {
    let not_found = || Refusal::new(ErrorCode::NotFound, "no such route");
    let (name, step) = path
        .strip_prefix("/v1/locks/")
        .and_then(|rest| rest.rsplit_once('/'))
        .ok_or_else(not_found)?;
    match step {
        "acquire" => Ok((name, Step::Acquire)),
        "release" => Ok((name, Step::Release)),
        _ => Err(not_found()),
    }
}

/// Grants a fresh lease on `name`, or answers `lock_busy` at once.
async fn acquire(store: &Store, name: &LockName, request: &AcquireBody) -> Result<String, Refusal> {
    // What the broker offers beyond a plain lease is refused, not ignored.
    let unsupported = [
        ("wait_ms", request.wait_ms.is_some_and(|ms| ms > 0)),
        ("owner", request.owner.is_some()),
        ("request_id", request.request_id.is_some()),
        (
            "lock_delay_ms",
            request.lock_delay_ms.is_some_and(|ms| ms > 0),
        ),
        ("fair", request.fair == Some(true)),
        ("mode", request.mode == Some(LockMode::Shared)),
    ];
    if let Some((field, _)) = unsupported.iter().find(|(_, set)| *set) {
        return Err(Refusal::invalid(
            field,
            "the thin broker does not support it",
        ));
    }
    let ttl = Ttl::parse(
        "ttl_ms",
        request.ttl_ms.unwrap_or(DEFAULT_TTL_MS),
        MAX_TTL_MS,
    )?;
    let token = LeaseToken::generate();
    let call = AcquireCall {
        name,
        token: &token,
        ttl,
    };
    let Some(fence) = store.acquire(&call).await? else {
        return Err(Refusal::new(
            ErrorCode::LockBusy,
            "another lease holds the lock",
        ));
    };
    let granted = serde_json::json!({
        "name": name.as_str(),
        "token": token.expose(),
        "fence": fence,
        "ttl_ms": ttl.as_millis(),
    });
    Ok(granted.to_string())
}
