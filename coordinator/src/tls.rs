//! HTTPS for the coordinator API: a certificate chain and key from PEM files, served with
//! rustls (ring). Without them the API is plain HTTP, e.g. behind an ingress that terminates TLS.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// The PEM files of the API's certificate chain and private key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// Why the TLS settings cannot be used; each names the file and the fix.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("{}: cannot read a PEM certificate chain: {message}", .path.display())]
    Cert { path: PathBuf, message: String },
    #[error("{}: cannot read a PEM private key (PKCS#8, PKCS#1 or SEC1): {message}", .path.display())]
    Key { path: PathBuf, message: String },
    #[error("the certificate in {} does not go with the key in {}: {message}", .cert.display(), .key.display())]
    Mismatch {
        cert: PathBuf,
        key: PathBuf,
        message: String,
    },
}

/// A rustls server configuration for `files`, offering HTTP/2 and HTTP/1.1.
pub fn server_config(files: &TlsFiles) -> Result<Arc<rustls::ServerConfig>, TlsError> {
    let chain = read_chain(&files.cert)?;
    let key = PrivateKeyDer::from_pem_file(&files.key).map_err(|error| TlsError::Key {
        path: files.key.clone(),
        message: error.to_string(),
    })?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|error| TlsError::Mismatch {
            cert: files.cert.clone(),
            key: files.key.clone(),
            message: error.to_string(),
        })?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .map_err(|error| TlsError::Mismatch {
            cert: files.cert.clone(),
            key: files.key.clone(),
            message: error.to_string(),
        })?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

fn read_chain(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let error = |message: String| TlsError::Cert {
        path: path.to_path_buf(),
        message,
    };
    let chain = CertificateDer::pem_file_iter(path)
        .map_err(|e| error(e.to_string()))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| error(e.to_string()))?;
    if chain.is_empty() {
        return Err(error("no CERTIFICATE block".to_owned()));
    }
    Ok(chain)
}
