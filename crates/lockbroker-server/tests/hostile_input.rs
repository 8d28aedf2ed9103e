//! Property tests over everything a caller controls before a lock is touched:
//! lock names, prefixes, tokens, JSON bodies and API keys. Whatever the input,
//! parsing answers (never panics), and what it accepts obeys the rules.

use lockbroker_api::{AcquireBody, ExtendBody, ReleaseBody};
use lockbroker_core::{LeaseToken, ListCursor, LockName, LockPrefix};
use lockbroker_server::auth::{hash_token, ApiKeyConfig, KeyRing, Scope};
use lockbroker_server::http::error::ApiError;
use lockbroker_server::http::extract::decode;
use proptest::prelude::*;

fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | ':')
}

/// Strings with a good share of the characters that matter here: braces,
/// globs, slashes, percent signs, control and non-ASCII characters.
fn hostile_text() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<String>(),
        "[a-z:{}*?\\[\\]/%. \\x00\\n\u{e9}\u{2603}-]{0,260}",
        "[A-Za-z0-9._:-]{195,205}",
    ]
}

/// JSON-ish text: valid bodies, near-misses and garbage.
fn hostile_json() -> impl Strategy<Value = String> {
    let field = prop_oneof![
        Just("ttl_ms"),
        Just("wait_ms"),
        Just("owner"),
        Just("request_id"),
        Just("lock_delay_ms"),
        Just("token"),
        Just("colour"),
    ];
    let value = prop_oneof![
        any::<i64>().prop_map(|n| n.to_string()),
        any::<u64>().prop_map(|n| n.to_string()),
        any::<f64>().prop_map(|f| format!("{f:e}")),
        Just("1e400".to_owned()),
        Just("123456789012345678901234567890".to_owned()),
        Just("null".to_owned()),
        "\"[a-z0-9_ -]{0,40}\"",
        (1usize..200).prop_map(|depth| format!("{}{}", "[".repeat(depth), "]".repeat(depth))),
    ];
    prop_oneof![
        prop::collection::vec((field, value), 0..6).prop_map(|pairs| {
            let inner: Vec<String> = pairs
                .into_iter()
                .map(|(k, v)| format!("\"{k}\": {v}"))
                .collect();
            format!("{{{}}}", inner.join(", "))
        }),
        any::<String>(),
        (1usize..100_000).prop_map(|depth| "[".repeat(depth)),
    ]
}

proptest! {
    // No regression files: a failure prints its minimal input, which becomes
    // a plain test case.
    #![proptest_config(ProptestConfig {
        cases: 2_000,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn lock_names_are_exactly_the_documented_alphabet(raw in hostile_text()) {
        let valid = !raw.is_empty() && raw.len() <= 200 && raw.chars().all(is_name_char);
        match LockName::parse(&raw) {
            Ok(name) => {
                prop_assert!(valid);
                prop_assert_eq!(name.as_str(), raw.as_str());
            }
            Err(error) => {
                prop_assert!(!valid);
                prop_assert_eq!(error.field, "name");
            }
        }
    }

    #[test]
    fn prefixes_never_carry_glob_or_brace_characters(raw in hostile_text()) {
        if let Ok(prefix) = LockPrefix::parse("prefix", &raw) {
            prop_assert!(prefix.as_str().chars().all(is_name_char));
            prop_assert!(prefix.as_str().len() <= 200);
        }
    }

    #[test]
    fn tokens_and_cursors_parse_without_echoing_input(raw in hostile_text()) {
        if let Err(error) = LeaseToken::parse(&raw) {
            prop_assert_eq!(error.field, "token");
            if raw.len() > 3 {
                prop_assert!(!error.message.contains(raw.as_str()));
            }
        }
        let _ = ListCursor::parse(&raw);
    }

    #[test]
    fn bodies_decode_or_name_a_field(body in prop_oneof![hostile_json(), Just("{\"\"".to_owned())]) {
        for result in [
            decode::<AcquireBody>(body.as_bytes()).map(|_| ()),
            decode::<ExtendBody>(body.as_bytes()).map(|_| ()),
            decode::<ReleaseBody>(body.as_bytes()).map(|_| ()),
        ] {
            if let Err(error) = result {
                let ApiError::BadBody { field, message } = error else {
                    return Err(TestCaseError::fail("a body error that names no field"));
                };
                prop_assert!(!field.is_empty());
                prop_assert!(!message.is_empty());
            }
        }
    }

    #[test]
    fn only_the_exact_key_authenticates(token in "[ -~]{1,80}", other in "[ -~]{1,80}") {
        let ring = KeyRing::new(
            &[ApiKeyConfig {
                id: "k".into(),
                sha256: hash_token(&token),
                scopes: vec![Scope::Lock],
                prefixes: vec!["*".into()],
                rate_limit_per_sec: None,
            }],
            0,
            1,
        )
        .expect("valid key");
        prop_assert!(ring.authenticate(&token).is_some());
        prop_assert_eq!(ring.authenticate(&other).is_some(), other == token);
    }
}
