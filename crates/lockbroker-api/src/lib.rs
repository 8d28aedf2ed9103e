//! The JSON of the lockbroker HTTP API, shared by the broker and every Rust
//! client (lockctl, the reliability lab, the benchmarks, the tests).
//!
//! `openapi.yaml` is the contract; these types are its Rust spelling, and a
//! test holds the two in step. The crate knows serde and nothing of HTTP
//! servers, so a client pulls in no server code.
//!
//! # Layout
//!
//! - [`request`]: the bodies of acquire, extend and release, and the query of
//!   the operators' listing.
//! - [`response`]: leases, renewals, releases, lock states, listing pages,
//!   force releases and probe answers.
//! - [`session`]: the bodies and answers of sessions.
//! - [`error`]: the `{"error": {...}}` body and [`ErrorCode`], every code with
//!   its HTTP status.
//! - [`sse`]: the event streams' Server-Sent Events framing, read from bytes
//!   as they arrive.
//!
//! Request types reject unknown fields, as the broker does. Response types
//! accept them, so a client keeps working against a broker that says more.

pub mod error;
pub mod request;
pub mod response;
pub mod session;
pub mod sse;

pub use error::{ErrorCode, ErrorDetail, ErrorResponse};
pub use request::{
    AcquireAllBody, AcquireBody, ExtendBody, LeaseRefBody, ListQuery, LockAskBody, LockMode,
    ReleaseAllBody, ReleaseBody, Secret, SemaphoreAcquireBody,
};
pub use response::{
    AcquireAllResponse, FenceCheckResponse, ForceReleaseResponse, HealthResponse, HealthStatus,
    HolderResponse, LeaseResponse, ListResponse, PermitResponse, ReleaseAllResponse,
    ReleaseAllResult, ReleaseResponse, RenewalResponse, SemaphoreListResponse,
    SemaphoreStatusResponse, StatusResponse,
};
pub use session::{
    SessionClosedResponse, SessionLeaseRef, SessionOpenBody, SessionRenewalResponse,
    SessionResponse, SessionStatusResponse, SessionTokenBody,
};

#[cfg(test)]
mod tests;
