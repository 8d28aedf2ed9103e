//! HTTPS to the broker: which certificates the client trusts, and where a
//! TLS failure hides in a transport error.
//!
//! Trusted are the system's roots, the certificates given with
//! [`ClientBuilder::ca_pem`](crate::ClientBuilder::ca_pem), and, for a
//! self-signed broker, the exact certificate given there even when it is
//! marked as a CA. `openssl req -x509` marks every certificate it makes
//! `CA:TRUE`, and webpki refuses such a certificate as a server's own (a CA
//! used as an end entity) even when it is a trust anchor; a certificate the
//! operator handed over byte for byte is trusted anyway, once its dates and
//! its names have been checked.

use std::error::Error as StdError;
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::{verify_server_name, WebPkiServerVerifier};
use rustls::crypto::{verify_tls12_signature, verify_tls13_signature, WebPkiSupportedAlgorithms};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::server::ParsedCertificate;
use rustls::{CertificateError, DigitallySignedStruct, RootCertStore, SignatureScheme};

/// The certificates in a PEM bundle; at least one.
pub(crate) fn read_pem(pem: &[u8]) -> Result<Vec<CertificateDer<'static>>, String> {
    let certificates = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|_| "CA certificate: not a PEM certificate".to_owned())?;
    if certificates.is_empty() {
        return Err("CA certificate: no certificate in the PEM".to_owned());
    }
    Ok(certificates)
}

/// A TLS client configuration trusting the system's roots plus `extra`.
pub(crate) fn client_config(
    extra: Vec<CertificateDer<'static>>,
) -> Result<rustls::ClientConfig, String> {
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

/// webpki's checks, plus the exact certificates given as CA.
#[derive(Debug)]
struct Verifier {
    /// `None` when there is no root at all (no system store, no CA given).
    webpki: Option<Arc<WebPkiServerVerifier>>,
    /// The certificates given as CA.
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
            return Err("CA certificate: no certificate that can be used as a root".to_owned());
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

/// Whether webpki refused a certificate for being a CA's (`CA:TRUE`) used
/// as a server's own: a self-signed certificate made by `openssl req -x509`
/// that was not given as CA.
pub fn is_ca_used_as_end_entity(error: &rustls::Error) -> bool {
    matches!(
        error,
        rustls::Error::InvalidCertificate(CertificateError::Other(other))
            if matches!(other.0.downcast_ref::<webpki::Error>(), Some(webpki::Error::CaUsedAsEndEntity))
    )
}

/// The TLS error somewhere in a transport error's chain, if any. An
/// `io::Error` hides the error it wraps from `source()` (and hyper-rustls
/// wraps tokio-rustls's `io::Error` in another), so look inside those too.
pub(crate) fn find_error<'a>(error: &'a (dyn StdError + 'static)) -> Option<&'a rustls::Error> {
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
    fn a_self_signed_ca_certificate_given_as_ca_is_trusted_for_its_names() {
        assert_eq!(verify(SELF_SIGNED, SELF_SIGNED, "localhost"), Ok(()));
        assert_eq!(verify(SELF_SIGNED, SELF_SIGNED, "127.0.0.1"), Ok(()));
        let elsewhere = verify(SELF_SIGNED, SELF_SIGNED, "elsewhere").expect_err("wrong name");
        assert!(
            matches!(
                elsewhere,
                rustls::Error::InvalidCertificate(CertificateError::NotValidForNameContext { .. })
            ),
            "{elsewhere:?}"
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
    }

    #[test]
    fn a_self_signed_certificate_not_given_is_a_ca_used_as_end_entity() {
        let refused = verify(EXPIRED, SELF_SIGNED, "localhost").expect_err("not the one given");
        assert!(is_ca_used_as_end_entity(&refused), "{refused:?}");
    }

    #[test]
    fn ca_files_must_hold_a_certificate() {
        assert!(read_pem(b"not a certificate").is_err());
        assert!(read_pem(b"").is_err());
        assert_eq!(read_pem(SELF_SIGNED).map(|certs| certs.len()), Ok(1));
    }
}
