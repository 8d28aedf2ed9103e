//! HTTPS to the broker: which certificates lockctl trusts, and TLS failures
//! told in words.
//!
//! Trusted are the system's roots, the certificates in `--ca-cert`, and,
//! for a self-signed broker, the exact certificate given with `--ca-cert`
//! even when it is marked as a CA. `openssl req -x509` marks every
//! certificate it makes `CA:TRUE`, and webpki refuses such a certificate as a
//! server's own (a CA used as an end entity) even when it is a trust anchor;
//! a certificate the operator handed over byte for byte is trusted anyway,
//! once its dates and its names have been checked.

use std::error::Error as StdError;
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::{verify_server_name, WebPkiServerVerifier};
use rustls::crypto::{verify_tls12_signature, verify_tls13_signature, WebPkiSupportedAlgorithms};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::server::ParsedCertificate;
use rustls::{CertificateError, DigitallySignedStruct, RootCertStore, SignatureScheme};

/// The certificates in a `--ca-cert` PEM file.
pub fn read_pem(pem: &[u8]) -> Result<Vec<CertificateDer<'static>>, String> {
    let certificates = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|_| "--ca-cert is not a PEM certificate".to_owned())?;
    if certificates.is_empty() {
        return Err("--ca-cert holds no PEM certificate".to_owned());
    }
    Ok(certificates)
}

/// A TLS client configuration trusting the system's roots plus `extra`.
pub fn client_config(extra: Vec<CertificateDer<'static>>) -> Result<rustls::ClientConfig, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let verifier = Verifier::new(extra, &provider)?;
    rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS settings: {e}"))
        .map(|builder| {
            builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(verifier))
                .with_no_client_auth()
        })
}

/// webpki's checks, plus the exact certificates of `--ca-cert`.
#[derive(Debug)]
struct Verifier {
    /// `None` when there is no root at all (no system store, no --ca-cert).
    webpki: Option<Arc<WebPkiServerVerifier>>,
    /// The certificates given with `--ca-cert`.
    pinned: Vec<CertificateDer<'static>>,
    algorithms: WebPkiSupportedAlgorithms,
}

impl Verifier {
    fn new(
        extra: Vec<CertificateDer<'static>>,
        provider: &Arc<rustls::crypto::CryptoProvider>,
    ) -> Result<Self, String> {
        let mut roots = RootCertStore::empty();
        roots.add_parsable_certificates(rustls_native_certs::load_native_certs().certs);
        let (added, _ignored) = roots.add_parsable_certificates(extra.iter().cloned());
        if added == 0 && !extra.is_empty() {
            return Err("--ca-cert holds no certificate lockctl can use".to_owned());
        }
        let webpki = if roots.is_empty() {
            None
        } else {
            let built =
                WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone())
                    .build()
                    .map_err(|e| format!("TLS settings: {e}"))?;
            Some(built)
        };
        Ok(Self {
            webpki,
            pinned: extra,
            algorithms: provider.signature_verification_algorithms,
        })
    }
}

impl ServerCertVerifier for Verifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let Some(webpki) = &self.webpki else {
            return Err(CertificateError::UnknownIssuer.into());
        };
        let error = match webpki.verify_server_cert(
            end_entity,
            intermediates,
            server_name,
            ocsp_response,
            now,
        ) {
            Ok(verified) => return Ok(verified),
            Err(error) => error,
        };
        // webpki checks the dates before the CA flag, so a certificate refused
        // only for being a CA is within its validity period.
        if is_ca_used_as_end_entity(&error) && self.pinned.iter().any(|pin| pin == end_entity) {
            verify_server_name(&ParsedCertificate::try_from(end_entity)?, server_name)?;
            return Ok(ServerCertVerified::assertion());
        }
        Err(error)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

fn is_ca_used_as_end_entity(error: &rustls::Error) -> bool {
    matches!(
        error,
        rustls::Error::InvalidCertificate(CertificateError::Other(other))
            if matches!(other.0.downcast_ref::<webpki::Error>(), Some(webpki::Error::CaUsedAsEndEntity))
    )
}

/// The TLS error somewhere in a transport error's chain, if any. An
/// `io::Error` hides the error it wraps from `source()` (and hyper-rustls
/// wraps tokio-rustls's `io::Error` in another), so look inside those too.
pub fn find_error<'a>(error: &'a (dyn StdError + 'static)) -> Option<&'a rustls::Error> {
    let mut current = Some(error);
    while let Some(error) = current {
        let mut inner = Some(error);
        while let Some(candidate) = inner {
            if let Some(tls) = candidate.downcast_ref::<rustls::Error>() {
                return Some(tls);
            }
            inner = candidate
                .downcast_ref::<std::io::Error>()
                .and_then(std::io::Error::get_ref)
                .map(|wrapped| wrapped as &(dyn StdError + 'static));
        }
        current = error.source();
    }
    None
}

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
    use super::*;

    /// Self-signed and `CA:TRUE`, as `openssl req -x509` makes them.
    const SELF_SIGNED: &[u8] = include_bytes!("../testdata/self-signed-ca-true.pem");
    const EXPIRED: &[u8] = include_bytes!("../testdata/self-signed-expired.pem");

    fn verify(pinned: &[u8], presented: &[u8], host: &str) -> Result<(), rustls::Error> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let verifier = Verifier::new(read_pem(pinned).expect("PEM"), &provider).expect("verifier");
        let presented = read_pem(presented).expect("PEM").remove(0);
        let host = ServerName::try_from(host.to_owned()).expect("a host name");
        verifier
            .verify_server_cert(&presented, &[], &host, &[], UnixTime::now())
            .map(|_| ())
    }

    #[test]
    fn a_self_signed_ca_certificate_given_with_ca_cert_is_trusted_for_its_names() {
        assert_eq!(verify(SELF_SIGNED, SELF_SIGNED, "localhost"), Ok(()));
        assert_eq!(verify(SELF_SIGNED, SELF_SIGNED, "127.0.0.1"), Ok(()));
        let elsewhere = verify(SELF_SIGNED, SELF_SIGNED, "elsewhere").expect_err("wrong name");
        assert_eq!(
            explain(&elsewhere, true),
            "the broker's certificate is for localhost, 127.0.0.1, not for elsewhere"
        );
    }

    #[test]
    fn an_expired_self_signed_certificate_is_refused_even_when_given() {
        let expired = verify(EXPIRED, EXPIRED, "localhost").expect_err("expired");
        assert!(
            matches!(
                expired,
                rustls::Error::InvalidCertificate(CertificateError::ExpiredContext { .. })
            ),
            "{expired:?}"
        );
        assert!(explain(&expired, true).starts_with("the broker's certificate expired "));
    }

    #[test]
    fn a_self_signed_certificate_not_given_is_refused_in_words() {
        let refused = verify(EXPIRED, SELF_SIGNED, "localhost").expect_err("not the one given");
        let words = explain(&refused, true);
        assert!(words.contains("CA certificate"), "{words}");
        assert!(!words.contains("CaUsedAsEndEntity"), "{words}");
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
    fn ca_cert_files_must_hold_a_certificate() {
        assert!(read_pem(b"not a certificate").is_err());
        assert!(read_pem(b"").is_err());
        assert_eq!(read_pem(SELF_SIGNED).map(|certs| certs.len()), Ok(1));
    }

    #[test]
    fn ages_read_naturally() {
        assert_eq!(ago(59), "59 s");
        assert_eq!(ago(3_000), "50 min");
        assert_eq!(ago(86_400), "24 h");
        assert_eq!(ago(864_000), "10 days");
    }
}
