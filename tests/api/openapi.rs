//! `openapi.yaml` is the contract: it parses, lists exactly the served routes,
//! and its schemas and error codes are the ones `lockbroker-api` spells.

use std::collections::{BTreeMap, BTreeSet};

use lockbroker_api::{
    AcquireAllBody, AcquireAllResponse, AcquireBody, ErrorCode, ErrorDetail, ErrorResponse,
    ExtendBody, ForceReleaseResponse, HealthResponse, HealthStatus, HolderResponse, LeaseRefBody,
    LeaseResponse, ListQuery, ListResponse, LockAskBody, LockMode, PermitResponse, ReleaseAllBody,
    ReleaseAllResponse, ReleaseAllResult, ReleaseBody, ReleaseResponse, RenewalResponse, Secret,
    SemaphoreAcquireBody, SemaphoreListResponse, SemaphoreStatusResponse, SessionClosedResponse,
    SessionLeaseRef, SessionOpenBody, SessionRenewalResponse, SessionResponse,
    SessionStatusResponse, SessionTokenBody, StatusResponse,
};
use lockbroker_server::http::served_routes;
use serde::Serialize;
use serde_yaml::Value;

fn spec() -> Value {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../openapi.yaml");
    let text = std::fs::read_to_string(path).expect("read openapi.yaml");
    serde_yaml::from_str(&text).expect("openapi.yaml parses")
}

#[test]
fn openapi_lists_exactly_the_routes_the_router_serves() {
    let spec = spec();
    assert!(spec["openapi"]
        .as_str()
        .is_some_and(|v| v.starts_with("3.")));

    let mut documented = BTreeSet::new();
    for (path, item) in spec["paths"].as_mapping().expect("paths") {
        let path = path.as_str().expect("path key");
        for (method, _) in item.as_mapping().expect("path item") {
            let method = method.as_str().expect("method key");
            if ["get", "post", "put", "patch", "delete", "head", "options"].contains(&method) {
                documented.insert((method.to_uppercase(), path.to_owned()));
            }
        }
    }
    let served: BTreeSet<(String, String)> = served_routes()
        .into_iter()
        .map(|(method, path)| (method.to_string(), path.to_owned()))
        .collect();

    assert_eq!(documented, served);
}

/// The fields of `value` as JSON, each with whether it is `null`.
fn fields(value: &impl Serialize) -> BTreeMap<String, bool> {
    let json = serde_json::to_value(value).expect("serializes");
    json.as_object()
        .expect("an object")
        .iter()
        .map(|(key, value)| (key.clone(), value.is_null()))
        .collect()
}

/// The property names of an object schema, and the required ones.
fn shape(schema: &Value) -> (BTreeSet<String>, BTreeSet<String>) {
    let names = |value: &Value| -> BTreeSet<String> {
        value
            .as_sequence()
            .map(|seq| {
                seq.iter()
                    .filter_map(Value::as_str)
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default()
    };
    let properties = schema["properties"]
        .as_mapping()
        .expect("an object schema with properties")
        .keys()
        .filter_map(Value::as_str)
        .map(str::to_owned)
        .collect();
    (properties, names(&schema["required"]))
}

/// A response type against its schema: every property is always sent, the
/// ones that may be unknown as `null`, exactly where the spec says `nullable`.
fn check_response(name: &str, schema: &Value, full: &impl Serialize, empty: &impl Serialize) {
    let (properties, required) = shape(schema);
    let full = fields(full);
    let empty = fields(empty);
    let keys = |fields: &BTreeMap<String, bool>| fields.keys().cloned().collect::<BTreeSet<_>>();
    assert_eq!(keys(&full), properties, "{name}: the properties");
    assert_eq!(keys(&empty), required, "{name}: the required properties");
    for (field, null) in empty {
        let nullable = schema["properties"][field.as_str()]["nullable"] == Value::Bool(true);
        assert_eq!(null, nullable, "{name}.{field}: null exactly when nullable");
    }
    assert_eq!(
        schema["additionalProperties"],
        Value::Bool(false),
        "{name}: closed"
    );
}

/// A request type against its schema: a full body sends every property, the
/// smallest body a client can build sends exactly the required ones, and an
/// unknown field is refused.
fn check_request<T>(name: &str, schema: &Value, full: &T, smallest: &T)
where
    T: Serialize + serde::de::DeserializeOwned,
{
    let (properties, required) = shape(schema);
    let keys = |value: &T| fields(value).into_keys().collect::<BTreeSet<_>>();
    assert_eq!(keys(full), properties, "{name}: the properties");
    assert_eq!(keys(smallest), required, "{name}: the required properties");
    assert_eq!(
        schema["additionalProperties"],
        Value::Bool(false),
        "{name}: closed"
    );
    let mut extra = serde_json::to_value(full).expect("serializes");
    extra["colour"] = serde_json::json!("blue");
    assert!(
        serde_json::from_value::<T>(extra).is_err(),
        "{name}: refuses unknown fields"
    );
}

fn status(fence: Option<u64>, owner: Option<&str>) -> StatusResponse {
    StatusResponse {
        name: "job".into(),
        held: fence.is_some(),
        owner: owner.map(str::to_owned),
        fence,
        expires_in_ms: 0,
        available_in_ms: 0,
        mode: owner.map(|_| "exclusive".to_owned()),
        holders: vec![holder()],
        holder_count: 1,
        waiting: 0,
    }
}

fn holder() -> HolderResponse {
    HolderResponse {
        owner: None,
        fence: 1,
        mode: "shared".into(),
        expires_in_ms: 1,
        available_in_ms: 1,
    }
}

#[test]
fn the_api_types_have_the_fields_of_the_spec_schemas() {
    let spec = spec();
    let schemas = &spec["components"]["schemas"];

    let lease = |owner: Option<&str>| LeaseResponse {
        name: "job".into(),
        token: "t0k3n".into(),
        fence: 1,
        ttl_ms: 1,
        expires_at_ms: 1,
        validity_ms: 1,
        owner: owner.map(str::to_owned),
        mode: "shared".into(),
    };
    check_response("Lease", &schemas["Lease"], &lease(Some("w")), &lease(None));
    let permit = |owner: Option<&str>| PermitResponse {
        name: "job".into(),
        token: "s-t0k3n".into(),
        fence: 1,
        ttl_ms: 1,
        expires_at_ms: 1,
        validity_ms: 1,
        owner: owner.map(str::to_owned),
        limit: 3,
    };
    check_response(
        "Permit",
        &schemas["Permit"],
        &permit(Some("w")),
        &permit(None),
    );
    check_response("LeaseHolder", &schemas["LeaseHolder"], &holder(), &holder());
    let semaphore = |limit: Option<u32>| SemaphoreStatusResponse {
        name: "backups".into(),
        limit,
        held: 1,
        available: limit.map(|_| 2),
        fence: limit.map(|_| 1),
        holders: vec![holder()],
        available_in_ms: 0,
        waiting: 2,
    };
    check_response(
        "SemaphoreStatus",
        &schemas["SemaphoreStatus"],
        &semaphore(Some(3)),
        &semaphore(None),
    );
    let semaphores = |cursor: Option<&str>| SemaphoreListResponse {
        semaphores: vec![semaphore(Some(3))],
        next_cursor: cursor.map(str::to_owned),
    };
    check_response(
        "SemaphoreList",
        &schemas["SemaphoreList"],
        &semaphores(Some("7")),
        &semaphores(None),
    );
    let renewal = |owner: Option<&str>| RenewalResponse {
        name: "job".into(),
        fence: 1,
        ttl_ms: 1,
        expires_at_ms: 1,
        validity_ms: 1,
        owner: owner.map(str::to_owned),
    };
    check_response(
        "Renewal",
        &schemas["Renewal"],
        &renewal(Some("w")),
        &renewal(None),
    );
    let released = |acknowledged: Option<bool>| ReleaseResponse {
        name: "job".into(),
        released: true,
        fence: 1,
        acknowledged,
    };
    check_response(
        "Released",
        &schemas["Released"],
        &released(Some(false)),
        &released(None),
    );
    check_response(
        "LockStatus",
        &schemas["LockStatus"],
        &status(Some(1), Some("w")),
        &status(None, None),
    );
    let page = |cursor: Option<&str>| ListResponse {
        locks: vec![status(Some(1), None)],
        next_cursor: cursor.map(str::to_owned),
    };
    check_response(
        "LockList",
        &schemas["LockList"],
        &page(Some("7")),
        &page(None),
    );
    let forced = |fence: Option<u64>, owner: Option<&str>| ForceReleaseResponse {
        name: "job".into(),
        released: fence.is_some(),
        fence,
        owner: owner.map(str::to_owned),
        leases_ended: u64::from(fence.is_some()),
    };
    check_response(
        "ForceReleased",
        &schemas["ForceReleased"],
        &forced(Some(1), Some("w")),
        &forced(None, None),
    );
    let health = HealthResponse {
        status: HealthStatus::Ready,
    };
    check_response("Health", &schemas["Health"], &health, &health);
    let spelled: BTreeSet<String> = [HealthStatus::Ok, HealthStatus::Ready]
        .iter()
        .map(|s| {
            serde_json::to_value(s)
                .expect("serializes")
                .as_str()
                .expect("a string")
                .to_owned()
        })
        .collect();
    let listed: BTreeSet<String> = schemas["Health"]["properties"]["status"]["enum"]
        .as_sequence()
        .expect("enum")
        .iter()
        .filter_map(Value::as_str)
        .map(str::to_owned)
        .collect();
    assert_eq!(spelled, listed, "Health.status values");

    let acquire = AcquireBody {
        mode: Some(LockMode::Shared),
        ttl_ms: Some(1),
        wait_ms: Some(0),
        owner: Some("w".into()),
        request_id: Some("r".into()),
        lock_delay_ms: Some(0),
        fair: Some(true),
        session: Some(Secret("s".into())),
    };
    check_request(
        "AcquireRequest",
        &schemas["AcquireRequest"],
        &acquire,
        &AcquireBody::default(),
    );
    let permit = SemaphoreAcquireBody {
        limit: Some(3),
        ttl_ms: Some(1),
        wait_ms: Some(0),
        owner: Some("w".into()),
        request_id: Some("r".into()),
        lock_delay_ms: Some(0),
        fair: Some(true),
        session: Some(Secret("s".into())),
    };
    let smallest = SemaphoreAcquireBody {
        limit: Some(3),
        ..SemaphoreAcquireBody::default()
    };
    check_request(
        "SemaphoreAcquireRequest",
        &schemas["SemaphoreAcquireRequest"],
        &permit,
        &smallest,
    );
    check_request(
        "ExtendRequest",
        &schemas["ExtendRequest"],
        &ExtendBody::new("t0k3n", Some(1)),
        &ExtendBody::new("t0k3n", None),
    );
    check_request(
        "ReleaseRequest",
        &schemas["ReleaseRequest"],
        &ReleaseBody::new("t0k3n"),
        &ReleaseBody::new("t0k3n"),
    );

    // Over several locks.
    let ask = |mode: Option<LockMode>| LockAskBody {
        name: Some("ledger:a".into()),
        mode,
    };
    check_request(
        "AcquireAllRequest.locks[]",
        &schemas["AcquireAllRequest"]["properties"]["locks"]["items"],
        &ask(Some(LockMode::Shared)),
        &ask(None),
    );
    let all = AcquireAllBody {
        locks: Some(vec![ask(None)]),
        ttl_ms: Some(1),
        wait_ms: Some(0),
        owner: Some("w".into()),
        request_id: Some("r".into()),
        lock_delay_ms: Some(0),
        session: Some(Secret("s".into())),
    };
    let smallest = AcquireAllBody {
        locks: Some(vec![ask(None)]),
        ..AcquireAllBody::default()
    };
    check_request(
        "AcquireAllRequest",
        &schemas["AcquireAllRequest"],
        &all,
        &smallest,
    );
    let leases = AcquireAllResponse {
        leases: vec![lease(None)],
    };
    check_response(
        "AcquireAllResponse",
        &schemas["AcquireAllResponse"],
        &leases,
        &leases,
    );
    let lease_ref = LeaseRefBody {
        name: Some("ledger:a".into()),
        token: Some("t0k3n".into()),
    };
    check_request(
        "ReleaseAllRequest.leases[]",
        &schemas["ReleaseAllRequest"]["properties"]["leases"]["items"],
        &lease_ref,
        &lease_ref,
    );
    let release_all = ReleaseAllBody {
        leases: Some(vec![lease_ref]),
    };
    check_request(
        "ReleaseAllRequest",
        &schemas["ReleaseAllRequest"],
        &release_all,
        &release_all,
    );
    let result = |released: bool| ReleaseAllResult {
        name: "ledger:a".into(),
        released,
        fence: released.then_some(1),
        error: released.then(|| ErrorDetail::new(ErrorCode::LeaseLost, "lost")),
    };
    check_response(
        "ReleaseAllResponse.results[]",
        &schemas["ReleaseAllResponse"]["properties"]["results"]["items"],
        &result(true),
        &result(false),
    );
    let results = ReleaseAllResponse {
        results: vec![result(true)],
    };
    check_response(
        "ReleaseAllResponse",
        &schemas["ReleaseAllResponse"],
        &results,
        &results,
    );
}

#[test]
fn the_session_types_have_the_fields_of_the_spec_schemas() {
    let spec = spec();
    let schemas = &spec["components"]["schemas"];
    let open = SessionOpenBody {
        ttl_ms: Some(1),
        owner: Some("w".into()),
        lock_delay_ms: Some(0),
    };
    check_request(
        "SessionOpenRequest",
        &schemas["SessionOpenRequest"],
        &open,
        &SessionOpenBody::default(),
    );
    let token = SessionTokenBody::new("t0k3n");
    check_request(
        "SessionTokenRequest",
        &schemas["SessionTokenRequest"],
        &token,
        &token,
    );
    let session = |owner: Option<&str>| SessionResponse {
        id: "0123456789abcdef".into(),
        token: "t0k3n".into(),
        ttl_ms: 1,
        expires_at_ms: 1,
        validity_ms: 1,
        lock_delay_ms: 0,
        owner: owner.map(str::to_owned),
    };
    check_response(
        "Session",
        &schemas["Session"],
        &session(Some("w")),
        &session(None),
    );
    let forced = SessionLeaseRef {
        name: "job".into(),
        space: "lock".into(),
        reason: Some("force_released".into()),
        force_released_by: Some("ops".into()),
    };
    let ended = SessionLeaseRef {
        name: "job".into(),
        space: "lock".into(),
        reason: Some("lost".into()),
        force_released_by: None,
    };
    check_response(
        "SessionLeaseRef",
        &schemas["SessionLeaseRef"],
        &forced,
        &ended,
    );
    let renewal = SessionRenewalResponse {
        id: "0123456789abcdef".into(),
        ttl_ms: 1,
        expires_at_ms: 1,
        validity_ms: 1,
        leases: 2,
        ended: vec![ended],
    };
    check_response(
        "SessionRenewal",
        &schemas["SessionRenewal"],
        &renewal,
        &renewal,
    );
    let closed = SessionClosedResponse {
        id: "0123456789abcdef".into(),
        closed: true,
        leases_released: 2,
    };
    check_response("SessionClosed", &schemas["SessionClosed"], &closed, &closed);
    let state = |open: bool| SessionStatusResponse {
        id: "0123456789abcdef".into(),
        open,
        owner: open.then(|| "w".to_owned()),
        expires_in_ms: 1,
        ttl_ms: open.then_some(1),
        lock_delay_ms: open.then_some(0),
        leases: 2,
    };
    check_response(
        "SessionStatus",
        &schemas["SessionStatus"],
        &state(true),
        &state(false),
    );
}

#[test]
fn the_list_query_has_the_parameters_of_the_spec() {
    let spec = spec();
    let parameters = spec["paths"]["/v1/locks"]["get"]["parameters"]
        .as_sequence()
        .expect("parameters");
    let documented: BTreeSet<String> = parameters
        .iter()
        .filter(|p| p["in"] == "query")
        .filter_map(|p| p["name"].as_str())
        .map(str::to_owned)
        .collect();
    let full = ListQuery {
        prefix: Some("billing:".into()),
        limit: Some(10),
        cursor: Some("0".into()),
    };
    assert_eq!(
        fields(&full).into_keys().collect::<BTreeSet<_>>(),
        documented
    );
    assert!(
        parameters
            .iter()
            .all(|p| p["required"] != Value::Bool(true)),
        "every listing parameter is optional, as every ListQuery field is"
    );
}

#[test]
fn the_error_body_has_the_fields_of_the_spec() {
    let spec = spec();
    let schema = &spec["components"]["schemas"]["Error"];
    let (outer, outer_required) = shape(schema);
    let body = ErrorResponse {
        error: ErrorDetail::new(ErrorCode::Internal, "internal error"),
    };
    let keys = fields(&body).into_keys().collect::<BTreeSet<_>>();
    assert_eq!(keys, outer);
    assert_eq!(keys, outer_required);

    let (properties, required) = shape(&schema["properties"]["error"]);
    let full = ErrorDetail {
        field: Some("ttl_ms".into()),
        owner: Some(Some("w".into())),
        fence: Some(1),
        expires_in_ms: Some(1),
        available_in_ms: Some(1),
        holders: Some(vec![holder()]),
        limit: Some(3),
        force_released_by: Some("ops".into()),
        lock: Some("ledger:a".into()),
        ..ErrorDetail::new(ErrorCode::LockBusy, "held")
    };
    let keys = |detail: &ErrorDetail| fields(detail).into_keys().collect::<BTreeSet<_>>();
    assert_eq!(keys(&full), properties);
    assert_eq!(keys(&ErrorDetail::new(ErrorCode::Internal, "m")), required);
}

/// Every `(code, status)` pair the spec states: as "`423 lock_busy`" in any
/// description, and as a response whose description opens a paragraph with
/// "`code`:" under the statuses the operations list it.
fn stated_statuses(
    spec: &Value,
    text: &str,
    codes: &BTreeSet<String>,
) -> BTreeMap<String, BTreeSet<u16>> {
    let mut stated: BTreeMap<String, BTreeSet<u16>> = BTreeMap::new();
    for quoted in text.split('`') {
        if let Some((status, code)) = quoted.split_once(' ') {
            if let (Ok(status), true) = (status.parse::<u16>(), codes.contains(code)) {
                stated.entry(code.to_owned()).or_default().insert(status);
            }
        }
    }
    let responses = spec["components"]["responses"]
        .as_mapping()
        .expect("responses");
    let codes_of = |reference: &str| -> Vec<&String> {
        let name = reference.trim_start_matches("#/components/responses/");
        let description = responses
            .get(name)
            .and_then(|r| r["description"].as_str())
            .unwrap_or_else(|| panic!("no response {name}"));
        codes
            .iter()
            .filter(|code| description.contains(&format!("`{code}`:")))
            .collect()
    };
    for (_, item) in spec["paths"].as_mapping().expect("paths") {
        for (_, operation) in item.as_mapping().expect("path item") {
            let Some(answers) = operation["responses"].as_mapping() else {
                continue;
            };
            for (status, answer) in answers {
                let (Some(status), Some(reference)) = (
                    status.as_str().and_then(|s| s.parse::<u16>().ok()),
                    answer["$ref"].as_str(),
                ) else {
                    continue;
                };
                for code in codes_of(reference) {
                    stated.entry(code.clone()).or_default().insert(status);
                }
            }
        }
    }
    stated
}

#[test]
fn error_codes_and_their_statuses_are_the_specs() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../openapi.yaml");
    let text = std::fs::read_to_string(path).expect("read openapi.yaml");
    let spec = spec();
    let listed: BTreeSet<String> = spec["components"]["schemas"]["Error"]["properties"]["error"]
        ["properties"]["code"]["enum"]
        .as_sequence()
        .expect("the error code enum")
        .iter()
        .filter_map(Value::as_str)
        .map(str::to_owned)
        .collect();
    let ours: BTreeSet<String> = ErrorCode::ALL
        .iter()
        .map(|code| code.as_str().to_owned())
        .collect();
    assert_eq!(ours, listed, "ErrorCode lists exactly the spec's codes");

    let stated = stated_statuses(&spec, &text, &listed);
    for code in ErrorCode::ALL {
        match stated.get(code.as_str()) {
            Some(statuses) => assert_eq!(
                statuses,
                &BTreeSet::from([code.status()]),
                "{code}: the spec's statuses"
            ),
            // No operation documents an unknown path, so the spec gives
            // `not_found` no status; every other code has one.
            None => assert_eq!(
                code,
                ErrorCode::NotFound,
                "{code}: the spec states no status"
            ),
        }
    }
}
