//! `tls_server_config`: a rustls server config (ring provider, as tonic uses) with the client
//! certificate policies of Go's `tls.ClientAuthType`.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::client::danger::HandshakeSignatureValid;
use rustls::crypto::{CryptoProvider, WebPkiSupportedAlgorithms};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::server::WebPkiClientVerifier;
use rustls::{DigitallySignedStruct, DistinguishedName, RootCertStore, SignatureScheme};
use serde::Deserialize;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct TlsServerConfig {
    pub cert_file: Option<PathBuf>,
    pub key_file: Option<PathBuf>,
    #[serde(default)]
    pub client_auth_type: ClientAuthType,
    pub client_ca_file: Option<PathBuf>,
    #[serde(default)]
    pub min_version: Option<TlsVersion>,
    #[serde(default)]
    pub max_version: Option<TlsVersion>,
    /// Accepted for compatibility: rustls always picks by the server's order.
    #[serde(default)]
    #[allow(dead_code)]
    pub prefer_server_cipher_suites: Option<bool>,
}

#[derive(Debug, Default, Clone, Copy, PartialEq, Deserialize)]
pub(crate) enum ClientAuthType {
    #[default]
    NoClientCert,
    RequestClientCert,
    RequireAnyClientCert,
    VerifyClientCertIfGiven,
    RequireAndVerifyClientCert,
}

/// Go's names; rustls has no TLS 1.0/1.1, so those are refused when loading.
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd, Deserialize)]
pub(crate) enum TlsVersion {
    TLS10,
    TLS11,
    TLS12,
    TLS13,
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Builds the server config; returns it with the files it read (watched for reloads).
pub(crate) fn server_config(
    config: &TlsServerConfig,
    base: &Path,
) -> Result<(rustls::ServerConfig, Vec<PathBuf>), String> {
    let (Some(cert_file), Some(key_file)) = (&config.cert_file, &config.key_file) else {
        return Err("tls_server_config: cert_file and key_file are both required".into());
    };
    let cert_file = base.join(cert_file);
    let key_file = base.join(key_file);
    let mut files = vec![cert_file.clone(), key_file.clone()];
    let certs = read_certs(&cert_file)?;
    let key_pem = read_pem(&key_file)?;
    let key = PrivateKeyDer::from_pem_slice(&key_pem).map_err(|e| {
        format!(
            "tls_server_config.key_file {}: no usable private key: {e}",
            key_file.display()
        )
    })?;
    let min = config.min_version.unwrap_or(TlsVersion::TLS12);
    let max = config.max_version.unwrap_or(TlsVersion::TLS13);
    if min < TlsVersion::TLS12 || max < TlsVersion::TLS12 {
        return Err("tls_server_config: only TLS12 and TLS13 are supported".into());
    }
    if min > max {
        return Err("tls_server_config: min_version is above max_version".into());
    }
    let versions: Vec<&'static rustls::SupportedProtocolVersion> = [
        (TlsVersion::TLS12, &rustls::version::TLS12),
        (TlsVersion::TLS13, &rustls::version::TLS13),
    ]
    .into_iter()
    .filter(|(v, _)| (min..=max).contains(v))
    .map(|(_, p)| p)
    .collect();
    let provider = provider();
    let roots = match &config.client_ca_file {
        Some(ca) => {
            let ca = base.join(ca);
            files.push(ca.clone());
            let mut roots = RootCertStore::empty();
            for cert in read_certs(&ca)? {
                roots
                    .add(cert)
                    .map_err(|e| format!("client_ca_file {}: {e}", ca.display()))?;
            }
            Some(Arc::new(roots))
        }
        None => None,
    };
    let verified = |roots: Option<Arc<RootCertStore>>, optional: bool| {
        let roots = roots.ok_or_else(|| {
            format!(
                "tls_server_config: client_auth_type {:?} needs client_ca_file",
                config.client_auth_type
            )
        })?;
        let builder = WebPkiClientVerifier::builder_with_provider(roots, provider.clone());
        let builder = if optional {
            builder.allow_unauthenticated()
        } else {
            builder
        };
        builder
            .build()
            .map_err(|e| format!("tls_server_config.client_ca_file: {e}"))
    };
    let verifier: Arc<dyn ClientCertVerifier> = match config.client_auth_type {
        ClientAuthType::NoClientCert => WebPkiClientVerifier::no_client_auth(),
        ClientAuthType::RequestClientCert | ClientAuthType::RequireAnyClientCert => {
            Arc::new(AnyClientCert {
                mandatory: config.client_auth_type == ClientAuthType::RequireAnyClientCert,
                algorithms: provider.signature_verification_algorithms,
            })
        }
        ClientAuthType::VerifyClientCertIfGiven => verified(roots, true)?,
        ClientAuthType::RequireAndVerifyClientCert => verified(roots, false)?,
    };
    let mut server = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&versions)
        .map_err(|e| format!("tls_server_config: {e}"))?
        .with_client_cert_verifier(verifier)
        .with_single_cert(certs, key)
        .map_err(|e| format!("tls_server_config: certificate and key: {e}"))?;
    server.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok((server, files))
}

/// Largest certificate, key or CA file read: a chain is a few KiB.
const MAX_PEM_BYTES: u64 = 1 << 20;

/// Reads a PEM file like every file the exporter reads: non-blocking open, regular files only,
/// size-bounded (a FIFO or `/dev/zero` in place of a certificate is an error, not a hang).
fn read_pem(path: &Path) -> Result<Vec<u8>, String> {
    crate::bounded_read::read(path, MAX_PEM_BYTES).map_err(|e| format!("{}: {e}", path.display()))
}

fn read_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let pem = read_pem(path)?;
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("{}: {e}", path.display()))?;
    if certs.is_empty() {
        return Err(format!("{}: no PEM certificate", path.display()));
    }
    Ok(certs)
}

/// `RequestClientCert`/`RequireAnyClientCert`: any certificate is taken without a chain check,
/// but the client must still prove it holds the key.
#[derive(Debug)]
struct AnyClientCert {
    mandatory: bool,
    algorithms: WebPkiSupportedAlgorithms,
}

impl ClientCertVerifier for AnyClientCert {
    fn client_auth_mandatory(&self) -> bool {
        self.mandatory
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &[]
    }

    fn verify_client_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        Ok(ClientCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}
