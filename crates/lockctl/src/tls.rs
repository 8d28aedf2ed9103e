//! TLS failures told in words, with advice in lockctl's terms.
//!
//! Which certificates are trusted is [`lockbroker_client::tls`]'s: the
//! system's roots, the certificates in `--ca-cert`, and, for a self-signed
//! broker, the exact certificate given with `--ca-cert` even when it is
//! marked as a CA (as `openssl req -x509` marks every certificate it makes).

use lockbroker_client::tls::is_ca_used_as_end_entity;
use rustls::CertificateError;

/// What went wrong in a TLS handshake, in words; `with_ca_cert` says whether
/// `--ca-cert` was given, which changes the advice.
pub fn explain(error: &rustls::Error, with_ca_cert: bool) -> String {
    use rustls::Error as E;
    use CertificateError as C;
    let advice = if with_ca_cert {
        "; it is not signed by the --ca-cert given, nor is it that certificate"
    } else {
        "; pass the CA that signed it (or, if self-signed, the certificate itself) with --ca-cert"
    };
    match error {
        E::InvalidCertificate(problem) => match problem {
            C::UnknownIssuer => {
                format!(
                    "the broker's certificate is not signed by a CA this machine trusts{advice}"
                )
            }
            C::NotValidForName => "the broker's certificate is not valid for this host name".into(),
            C::NotValidForNameContext {
                expected,
                presented,
            } => format!(
                "the broker's certificate is for {}, not for {}",
                if presented.is_empty() {
                    "no host name".to_owned()
                } else {
                    presented
                        .iter()
                        .map(|name| plain_name(name))
                        .collect::<Vec<_>>()
                        .join(", ")
                },
                expected.to_str()
            ),
            C::Expired => "the broker's certificate has expired".into(),
            C::ExpiredContext { time, not_after } => format!(
                "the broker's certificate expired {} ago",
                ago(time.as_secs().saturating_sub(not_after.as_secs()))
            ),
            C::NotValidYet | C::NotValidYetContext { .. } => {
                "the broker's certificate is not valid yet; check this machine's clock".into()
            }
            C::Revoked => "the broker's certificate has been revoked".into(),
            C::BadSignature => {
                "the broker's certificate has a signature that does not verify".into()
            }
            C::BadEncoding => "the broker's certificate is malformed".into(),
            C::InvalidPurpose | C::InvalidPurposeContext { .. } => {
                "the broker's certificate is not meant for a TLS server (extended key usage)".into()
            }
            C::UnhandledCriticalExtension => {
                "the broker's certificate has a critical extension lockctl does not know".into()
            }
            C::Other(_) if is_ca_used_as_end_entity(error) => format!(
                "the broker's certificate is a CA certificate (CA:TRUE) used as a server's own{}",
                if with_ca_cert {
                    "; lockctl trusts that only when it is the very certificate given with --ca-cert"
                } else {
                    "; to trust a self-signed certificate, pass that certificate with --ca-cert"
                }
            ),
            other => format!(
                "the broker's certificate was refused: {}",
                E::InvalidCertificate(other.clone())
            ),
        },
        E::InvalidMessage(_) => {
            "the answer is not TLS; if the broker serves plain HTTP, use an http:// URL".into()
        }
        E::AlertReceived(alert) => {
            format!("the broker refused the handshake (TLS alert {alert:?})")
        }
        E::NoCertificatesPresented => "the broker presented no certificate".into(),
        E::PeerIncompatible(_) => {
            format!("the broker's TLS settings and lockctl's have nothing in common ({error})")
        }
        other => format!("the handshake failed: {other}"),
    }
}

/// webpki lists the names a certificate presents as `DnsName("host")` or
/// `IpAddress(10.0.0.1)`: keep only the name.
fn plain_name(presented: &str) -> &str {
    presented
        .split_once('(')
        .and_then(|(_, rest)| rest.strip_suffix(')'))
        .map_or(presented, |inner| inner.trim_matches('"'))
}

/// A span of seconds in the largest fitting unit.
fn ago(seconds: u64) -> String {
    match seconds {
        0..120 => format!("{seconds} s"),
        120..7_200 => format!("{} min", seconds / 60),
        7_200..172_800 => format!("{} h", seconds / 3_600),
        _ => format!("{} days", seconds / 86_400),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use rustls::pki_types::{ServerName, UnixTime};

    use super::*;

    #[test]
    fn a_certificate_for_other_names_lists_them_plainly() {
        let elsewhere =
            rustls::Error::InvalidCertificate(CertificateError::NotValidForNameContext {
                expected: ServerName::try_from("elsewhere").expect("a host name"),
                presented: vec![
                    r#"DnsName("localhost")"#.to_owned(),
                    "IpAddress(127.0.0.1)".to_owned(),
                ],
            });
        assert_eq!(
            explain(&elsewhere, true),
            "the broker's certificate is for localhost, 127.0.0.1, not for elsewhere"
        );
    }

    #[test]
    fn an_expired_certificate_says_how_long_ago() {
        let expired = rustls::Error::InvalidCertificate(CertificateError::ExpiredContext {
            time: UnixTime::since_unix_epoch(Duration::from_secs(1_000_000 + 3_000)),
            not_after: UnixTime::since_unix_epoch(Duration::from_secs(1_000_000)),
        });
        assert_eq!(
            explain(&expired, true),
            "the broker's certificate expired 50 min ago"
        );
    }

    #[test]
    fn failures_are_told_in_words_with_advice() {
        let unknown = rustls::Error::InvalidCertificate(CertificateError::UnknownIssuer);
        let words = explain(&unknown, false);
        assert!(
            words.contains("not signed by a CA this machine trusts"),
            "{words}"
        );
        assert!(words.contains("--ca-cert"), "{words}");
        assert!(!words.contains("UnknownIssuer"), "{words}");
        let corrupt = rustls::Error::InvalidMessage(rustls::InvalidMessage::InvalidContentType);
        assert!(explain(&corrupt, false).contains("http://"));
    }

    #[test]
    fn ages_read_naturally() {
        assert_eq!(ago(59), "59 s");
        assert_eq!(ago(3_000), "50 min");
        assert_eq!(ago(86_400), "24 h");
        assert_eq!(ago(864_000), "10 days");
    }
}
