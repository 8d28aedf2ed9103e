//! The wire shapes by example: spellings, nulls, absent fields, redaction.

use serde_json::json;

use crate::error::*;
use crate::{AcquireBody, ExtendBody, LeaseResponse, PermitResponse, ReleaseBody};

#[test]
fn every_code_is_spelled_on_the_wire_as_as_str_says() {
    for code in ErrorCode::ALL {
        let wire = serde_json::to_value(code).expect("serializes");
        assert_eq!(wire, json!(code.as_str()));
        assert_eq!(serde_json::from_value::<ErrorCode>(wire).ok(), Some(code));
        assert_eq!(code.to_string(), code.as_str());
    }
    let mut spellings: Vec<_> = ErrorCode::ALL.iter().map(|c| c.as_str()).collect();
    spellings.sort_unstable();
    spellings.dedup();
    assert_eq!(
        spellings.len(),
        ErrorCode::ALL.len(),
        "ALL lists a code twice"
    );
}

#[test]
fn an_unknown_code_does_not_decode() {
    assert!(serde_json::from_value::<ErrorCode>(json!("lock_bussy")).is_err());
}

#[test]
fn owner_is_null_on_a_busy_answer_and_absent_elsewhere() {
    let busy = ErrorDetail {
        owner: Some(None),
        fence: Some(7),
        expires_in_ms: Some(100),
        available_in_ms: Some(100),
        ..ErrorDetail::new(ErrorCode::LockBusy, "held")
    };
    let wire = serde_json::to_value(ErrorResponse {
        error: busy.clone(),
    })
    .expect("serializes");
    assert_eq!(
        wire,
        json!({"error": {"code": "lock_busy", "message": "held", "owner": null, "fence": 7,
                         "expires_in_ms": 100, "available_in_ms": 100}})
    );
    let back: ErrorResponse = serde_json::from_value(wire).expect("decodes");
    assert_eq!(back.error, busy);

    let lost = ErrorDetail::new(ErrorCode::LeaseLost, "gone");
    let wire = serde_json::to_value(&lost).expect("serializes");
    assert_eq!(wire, json!({"code": "lease_lost", "message": "gone"}));
    let back: ErrorDetail = serde_json::from_value(wire).expect("decodes");
    assert_eq!(back.owner, None);
}

#[test]
fn requests_send_only_the_fields_that_are_set() {
    assert_eq!(
        serde_json::to_string(&AcquireBody::default()).expect("serializes"),
        "{}"
    );
    assert_eq!(
        serde_json::to_value(ExtendBody::new("t0k", Some(5))).expect("serializes"),
        json!({"token": "t0k", "ttl_ms": 5})
    );
    assert_eq!(
        serde_json::to_value(ReleaseBody::new("t0k")).expect("serializes"),
        json!({"token": "t0k"})
    );
}

#[test]
fn requests_reject_unknown_fields_and_read_null_as_absent() {
    assert!(serde_json::from_value::<AcquireBody>(json!({"ttl": 5})).is_err());
    assert!(serde_json::from_value::<ReleaseBody>(json!({"token": "a", "x": 1})).is_err());
    // An array too short to fill every field in order is refused, not
    // completed with absent fields.
    assert!(serde_json::from_value::<AcquireBody>(json!([1000])).is_err());
    let body: AcquireBody =
        serde_json::from_value(json!({"ttl_ms": null, "owner": "w"})).expect("decodes");
    assert_eq!(body.ttl_ms, None);
    assert_eq!(body.owner.as_deref(), Some("w"));
}

#[test]
fn debug_output_never_shows_a_token() {
    let lease = LeaseResponse {
        name: "job".into(),
        token: "s3cr3t".into(),
        fence: 1,
        ttl_ms: 1,
        expires_at_ms: 1,
        validity_ms: 1,
        owner: None,
        mode: "exclusive".into(),
    };
    let permit = PermitResponse {
        name: "backups".into(),
        token: "s3cr3t".into(),
        fence: 1,
        ttl_ms: 1,
        expires_at_ms: 1,
        validity_ms: 1,
        owner: None,
        limit: 3,
    };
    for shown in [
        format!("{lease:?}"),
        format!("{permit:?}"),
        format!("{:?}", ExtendBody::new("s3cr3t", None)),
        format!("{:?}", ReleaseBody::new("s3cr3t")),
        format!(
            "{:?}",
            crate::ReleaseAllBody {
                leases: Some(vec![crate::LeaseRefBody {
                    name: Some("job".into()),
                    token: Some("s3cr3t".into()),
                }]),
            }
        ),
        format!(
            "{:?}",
            crate::AcquireAllResponse {
                leases: vec![lease.clone()]
            }
        ),
    ] {
        assert!(!shown.contains("s3cr3t"), "{shown}");
        assert!(shown.contains("<redacted>"), "{shown}");
    }
}
