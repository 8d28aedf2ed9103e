//! The lease types' own rules: tokens, TTLs, owners and request ids.

use super::*;

#[test]
fn generated_tokens_are_128_bit_hex_and_distinct() {
    let a = LeaseToken::generate();
    let b = LeaseToken::generate();
    assert_eq!(a.expose().len(), 32);
    assert!(a.expose().bytes().all(|c| c.is_ascii_hexdigit()));
    assert_ne!(a, b);
    assert!(LeaseToken::parse(a.expose()).is_ok());
}

#[test]
fn a_token_tells_its_kind() {
    for kind in [LeaseKind::Exclusive, LeaseKind::Shared, LeaseKind::Permit] {
        let token = LeaseToken::generate_for(kind);
        assert_eq!(token.kind(), kind);
        let parsed = LeaseToken::parse(token.expose()).expect("valid");
        assert_eq!(parsed.kind(), kind);
    }
    assert_eq!(LeaseToken::generate().expose().len(), 32);
}

#[test]
fn a_token_under_a_session_tells_its_kind_and_that_it_is_under_a_session() {
    for kind in [LeaseKind::Exclusive, LeaseKind::Shared, LeaseKind::Permit] {
        let token = LeaseToken::generate_under_session(kind);
        let parsed = LeaseToken::parse(token.expose()).expect("valid");
        assert_eq!((parsed.kind(), parsed.is_under_session()), (kind, true));
        let plain = LeaseToken::generate_for(kind);
        assert!(!plain.is_under_session());
    }
    for bad in [
        "u-",
        "u-u-0123456789abcdef0123456789abcdef",
        "r-u-0123456789abcdef0123456789abcdef",
    ] {
        assert!(LeaseToken::parse(bad).is_err(), "{bad}");
    }
}

#[test]
fn only_the_shape_of_an_issued_token_parses() {
    let real = LeaseToken::generate_for(LeaseKind::Shared);
    let upper = real.expose().to_ascii_uppercase();
    let short = &real.expose()[..20];
    for bad in [
        "X",
        "has spaces",
        upper.as_str(),
        short,
        "r-",
        "q-0123456789abcdef0123456789abcdef",
    ] {
        let error = LeaseToken::parse(bad).expect_err(bad);
        assert_eq!(error.field, "token");
        // The message names the prefixes, so only longer input can be echoed.
        assert!(
            bad.len() <= 3 || !error.message.contains(bad),
            "{}",
            error.message
        );
    }
}

#[test]
fn token_debug_is_redacted() {
    let token = LeaseToken::generate();
    assert!(!format!("{token:?}").contains(token.expose()));
}

#[test]
fn ttl_bounds() {
    assert!(Ttl::parse("ttl_ms", 0, 10).is_err());
    assert!(Ttl::parse("ttl_ms", 11, 10).is_err());
    assert_eq!(Ttl::parse("ttl_ms", 10, 10).map(Ttl::as_millis), Ok(10));
}

#[test]
fn owner_and_request_id_limits() {
    assert!(Owner::parse(&"é".repeat(256)).is_ok());
    assert!(Owner::parse(&"o".repeat(257)).is_err());
    assert!(Owner::parse("a\nb").is_err());
    assert_eq!(
        Owner::parse("\u{202e}1-rekrow-SSAP")
            .expect_err("bidi")
            .field,
        "owner"
    );
    assert_eq!(
        RequestId::parse("req\u{200b}1")
            .expect_err("zero width")
            .field,
        "request_id"
    );
    assert!(RequestId::parse("").is_err());
    assert!(RequestId::parse(&"r".repeat(129)).is_err());
    assert!(RequestId::parse("req-1").is_ok());
}
