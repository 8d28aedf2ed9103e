//! TLS for the HTTP listener: a rustls server configuration read once, at
//! startup, from PEM files (no reload; restart to rotate certificates).

use std::path::Path;
use std::sync::Arc;

use tokio_rustls::rustls::crypto::ring;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::rustls::ServerConfig;
use tokio_rustls::TlsAcceptor;

/// Why the certificate or key cannot be used. Printed as one line at startup.
#[derive(Debug, thiserror::Error)]
#[error("TLS {what} {path}: {message}")]
pub struct TlsError {
    what: &'static str,
    path: String,
    message: String,
}

/// An acceptor serving the certificate chain at `cert_path` with the private
/// key at `key_path`, over TLS 1.2 and 1.3, speaking HTTP/1.1.
pub fn acceptor(cert_path: &Path, key_path: &Path) -> Result<TlsAcceptor, TlsError> {
    let cert_error = |message: String| TlsError {
        what: "certificate",
        path: cert_path.display().to_string(),
        message,
    };
    let key_error = |message: String| TlsError {
        what: "key",
        path: key_path.display().to_string(),
        message,
    };
    let certs = CertificateDer::pem_file_iter(cert_path)
        .map_err(|e| cert_error(e.to_string()))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| cert_error(e.to_string()))?;
    if certs.is_empty() {
        return Err(cert_error("holds no certificate".into()));
    }
    let key = PrivateKeyDer::from_pem_file(key_path).map_err(|e| key_error(e.to_string()))?;
    // The provider is named here rather than taken from a process default,
    // so the choice cannot depend on which crates happen to be linked.
    let mut config = ServerConfig::builder_with_provider(Arc::new(ring::default_provider()))
        .with_safe_default_protocol_versions()
        .map_err(|e| cert_error(e.to_string()))?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| key_error(e.to_string()))?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(TlsAcceptor::from(Arc::new(config)))
}
