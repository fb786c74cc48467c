//! The S3 SDK client of a store: static credentials from the config, rustls with ring (and the
//! config's CA file, checked up front), a single SDK retry and the config's timeouts.

use std::time::Duration;

use aws_sdk_s3::Client;
use aws_sdk_s3::config::retry::RetryConfig;
use aws_sdk_s3::config::timeout::TimeoutConfig;
use aws_sdk_s3::config::{
    BehaviorVersion, Credentials, Region, RequestChecksumCalculation, ResponseChecksumValidation,
};
use aws_smithy_http_client::tls;

use super::config::S3Config;
use crate::artifacts::ArtifactError;

/// Attempts per request, first one included. Two absorbs a single dropped pooled connection
/// (common after a server restart) without delaying the caller's own backoff.
const SDK_MAX_ATTEMPTS: u32 = 2;
/// The SDK's wait before its one retry; short because the caller's backoff does the real waiting.
const SDK_INITIAL_BACKOFF: Duration = Duration::from_millis(200);
/// Builds the SDK client: static credentials, rustls with ring, small SDK retry, and the
/// config's timeouts.
pub(super) async fn build_client(
    config: &S3Config,
    location: &str,
) -> Result<Client, ArtifactError> {
    let failed = |message: String| ArtifactError::Failed {
        key: location.to_owned(),
        message,
    };
    let mut http = aws_smithy_http_client::Builder::new().tls_provider(tls::Provider::Rustls(
        tls::rustls_provider::CryptoMode::Ring,
    ));
    let plain_http = config
        .endpoint
        .as_deref()
        .is_some_and(|endpoint| endpoint.starts_with("http://"));
    if let Some(ca_file) = &config.ca_file {
        let pem = tokio::fs::read(ca_file).await.map_err(|error| {
            failed(format!("reading s3 ca_file {}: {error}", ca_file.display()))
        })?;
        check_ca_pem(&pem)
            .map_err(|reason| failed(format!("s3 ca_file {}: {reason}", ca_file.display())))?;
        http = http.tls_context(trust(tls::TrustStore::empty().with_pem_certificate(pem))?);
    } else if plain_http {
        // No TLS to verify: skip loading the system's roots, which the HTTP client otherwise
        // insists on finding even for plain http (and which a scratch image lacks).
        http = http.tls_context(trust(tls::TrustStore::empty())?);
    }
    let credentials = Credentials::new(
        &config.access_key_id,
        config.secret_access_key.expose(),
        None,
        None,
        "cowork-s3-config",
    );
    let mut builder = aws_sdk_s3::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new(config.region.clone()))
        .credentials_provider(credentials)
        .force_path_style(config.path_style)
        .http_client(http.build_https())
        .retry_config(
            RetryConfig::standard()
                .with_max_attempts(SDK_MAX_ATTEMPTS)
                .with_initial_backoff(SDK_INITIAL_BACKOFF),
        )
        .timeout_config(
            TimeoutConfig::builder()
                .connect_timeout(config.connect_timeout)
                .operation_timeout(config.operation_timeout)
                .build(),
        )
        // The SDK's own CRC checksums are off unless an operation requires them: several
        // S3-compatible servers reject or mishandle them, and the sha256 metadata already
        // guards every object end to end.
        .request_checksum_calculation(RequestChecksumCalculation::WhenRequired)
        .response_checksum_validation(ResponseChecksumValidation::WhenRequired);
    if let Some(endpoint) = &config.endpoint {
        builder = builder.endpoint_url(endpoint);
    }
    Ok(Client::from_conf(builder.build()))
}

fn trust(store: tls::TrustStore) -> Result<tls::TlsContext, ArtifactError> {
    tls::TlsContext::builder()
        .with_trust_store(store)
        .build()
        .map_err(|error| ArtifactError::Failed {
            key: "s3 tls".to_owned(),
            message: format!("building the tls context: {error}"),
        })
}

/// Checks that `pem` holds at least one certificate usable as a trust anchor. The HTTP client
/// parses the file only when it opens its first connection, and panics there on a bad file.
fn check_ca_pem(pem: &[u8]) -> Result<(), String> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;

    let certificates = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|error| format!("not a PEM certificate bundle: {error}"))?;
    if certificates.is_empty() {
        return Err("contains no PEM certificate".to_owned());
    }
    let mut roots = rustls::RootCertStore::empty();
    for (index, certificate) in certificates.into_iter().enumerate() {
        roots
            .add(certificate)
            .map_err(|error| format!("certificate {} is not usable: {error}", index + 1))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ca_files_must_hold_usable_certificates() {
        assert!(check_ca_pem(b"").is_err());
        assert!(check_ca_pem(b"not a certificate").is_err());
        let garbage = b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n";
        assert!(check_ca_pem(garbage).is_err());
        assert!(check_ca_pem(TEST_CA_PEM.as_bytes()).is_ok());
    }

    /// A self-signed CA made with `openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256
    /// -subj /CN=cowork-test-ca -days 36500 -nodes`; only its parsing matters here.
    const TEST_CA_PEM: &str = "\
-----BEGIN CERTIFICATE-----\n\
MIIBiTCCAS+gAwIBAgIUVVBlKB4zPjns9WO+5dCsAaWdvskwCgYIKoZIzj0EAwIw\n\
GTEXMBUGA1UEAwwOY293b3JrLXRlc3QtY2EwIBcNMjYxMTMwMDUyNjI2WhgPMjEy\n\
NjExMDYwNTI2MjZaMBkxFzAVBgNVBAMMDmNvd29yay10ZXN0LWNhMFkwEwYHKoZI\n\
zj0CAQYIKoZIzj0DAQcDQgAE4ceQG12ggUw4bpRRbWXdLsS4Gu8zGv4EYwmIiQQ/\n\
/sGjjNcgu5NmvPKgO4Z0DFSZUiKA+ouw/Kp2TX9aqDKgGKNTMFEwHQYDVR0OBBYE\n\
FIMzSoH3pSfnFq4qVAvzRdtOlCuyMB8GA1UdIwQYMBaAFIMzSoH3pSfnFq4qVAvz\n\
RdtOlCuyMA8GA1UdEwEB/wQFMAMBAf8wCgYIKoZIzj0EAwIDSAAwRQIgT/ZcW5m2\n\
zDgQfkj6BzLLCs112GCNVF95u+lB5jlfnzUCIQCtVlPui38/I7uK6v8wUkCLYkbn\n\
XwZl3Fdm2r2ZJv4Sjg==\n\
-----END CERTIFICATE-----\n\
";
}
