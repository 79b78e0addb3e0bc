//! `tls_server_config`: names validated as the toolkit validates them (cipher
//! suites and curves typed at decode, `names.rs`), then mapped onto rustls. Where rustls cannot do what Go can (CBC and RSA key
//! exchange cipher suites, P-521, TLS 1.0/1.1) the name is still accepted so an
//! existing file keeps working, and a warning says what was left out; a file
//! that would leave nothing usable is refused.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use tokio_rustls::rustls::{
    self,
    client::danger::HandshakeSignatureValid,
    crypto::{ring as provider, CryptoProvider, SupportedKxGroup},
    pki_types::pem::{Error as PemError, PemObject},
    pki_types::{CertificateDer, PrivateKeyDer, UnixTime},
    server::danger::{ClientCertVerified, ClientCertVerifier},
    server::{ClientHello, ResolvesServerCert, WebPkiClientVerifier},
    sign::CertifiedKey,
    DigitallySignedStruct, DistinguishedName, RootCertStore, ServerConfig, SignatureScheme,
    SupportedCipherSuite,
};

use super::names::{supported_cipher_names, ClientAuth, GoName, TlsVersion};
use super::raw::RawTls;
use super::{san, Problem};
use crate::fsread::ReadError;

/// Certificates, keys and CA bundles larger than this are refused: no real
/// one comes near it, and it bounds what a mistaken path can make us read.
pub(crate) const MAX_PEM_BYTES: u64 = 4 << 20;

/// Where a PEM blob comes from: a file (re-read on change) or inline text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum PemSource {
    File(PathBuf),
    Inline(String),
}

/// Chooses from a list of names the file gave (cipher suites, curves),
/// already known (`names.rs` refused the unknown ones at decode): a name
/// the toolkit knows but rustls does not offer is dropped with a warning,
/// repeats and those `keep` turns down are dropped. `None` when the list is
/// absent or empty (the library's defaults apply).
fn choose<T: Copy>(
    field: &'static str,
    names: Option<&[GoName<T>]>,
    keep: impl Fn(&T) -> bool,
    same: impl Fn(&T, &T) -> bool,
    warnings: &mut Vec<String>,
) -> Option<Vec<T>> {
    let names = names.filter(|n| !n.is_empty())?;
    let mut chosen: Vec<T> = Vec::new();
    let mut skipped = Vec::new();
    for n in names {
        match n.value {
            None => skipped.push(n.name.as_str()),
            Some(v) => {
                if keep(&v) && !chosen.iter().any(|c| same(c, &v)) {
                    chosen.push(v);
                }
            }
        }
    }
    if !skipped.is_empty() {
        warnings.push(format!(
            "{field}: {} not supported by this exporter's TLS library, ignored",
            skipped.join(", ")
        ));
    }
    Some(chosen)
}

/// `tls_server_config` after the checks that need no file: every name known,
/// the combination coherent.
#[derive(Debug, Clone)]
pub(crate) struct TlsSettings {
    pub cert: PemSource,
    pub key: PemSource,
    pub client_ca: Option<PemSource>,
    pub client_auth: ClientAuth,
    pub allowed_sans: Option<Vec<String>>,
    pub versions: Vec<&'static rustls::SupportedProtocolVersion>,
    pub tls12_suites: Option<Vec<SupportedCipherSuite>>,
    pub kx_groups: Option<Vec<&'static dyn SupportedKxGroup>>,
    pub prefer_server_cipher_suites: bool,
}

fn join(base: &Path, p: &str) -> PathBuf {
    // Relative paths are relative to the web config file, as in the toolkit.
    let p = Path::new(p);
    if p.is_absolute() {
        p.to_path_buf()
    } else {
        base.join(p)
    }
}

fn non_empty(s: &Option<String>) -> Option<&str> {
    s.as_deref().filter(|s| !s.is_empty())
}

/// `Ok(None)`: no TLS. As in the toolkit, TLS counts as configured when any of
/// cert, key, client CA or client_auth_type is set; other settings alone
/// leave the server on plain HTTP.
pub(crate) fn settings(
    raw: RawTls,
    base: &Path,
    warnings: &mut Vec<String>,
) -> Result<Option<TlsSettings>, Problem> {
    // Names were checked while decoding (`names.rs`), as the toolkit does.
    let min = raw.min_version.unwrap_or(TlsVersion::Tls12);
    let max = raw.max_version.unwrap_or(TlsVersion::Tls13);
    // Go ignores cipher_suites for TLS 1.3; so do we.
    let tls12_suites = choose(
        "tls_server_config.cipher_suites",
        raw.cipher_suites.as_deref(),
        |suite| suite.tls13().is_none(),
        |a, b| a == b,
        warnings,
    );
    let kx_groups = choose(
        "tls_server_config.curve_preferences",
        raw.curve_preferences.as_deref(),
        |_| true,
        |a, b| a.name() == b.name(),
        warnings,
    );
    if kx_groups.as_ref().is_some_and(Vec::is_empty) {
        return Err(Problem::new(
            "tls_server_config.curve_preferences",
            "none of the listed curves is supported (supported: CurveP256, CurveP384, X25519)",
        ));
    }

    let cert = match (non_empty(&raw.cert_file), non_empty(&raw.cert)) {
        (Some(f), _) => Some(PemSource::File(join(base, f))),
        (None, Some(pem)) => Some(PemSource::Inline(pem.to_string())),
        (None, None) => None,
    };
    let key = match (non_empty(&raw.key_file), non_empty(&raw.key)) {
        (Some(f), _) => Some(PemSource::File(join(base, f))),
        (None, Some(pem)) => Some(PemSource::Inline(pem.to_string())),
        (None, None) => None,
    };
    let client_ca = match (non_empty(&raw.client_ca_file), non_empty(&raw.client_ca)) {
        (Some(f), _) => Some(PemSource::File(join(base, f))),
        (None, Some(pem)) => Some(PemSource::Inline(pem.to_string())),
        (None, None) => None,
    };
    let enabled =
        cert.is_some() || key.is_some() || client_ca.is_some() || raw.client_auth_type.is_some();
    if !enabled {
        return Ok(None);
    }
    let cert =
        cert.ok_or_else(|| Problem::new("tls_server_config", "missing one of cert or cert_file"))?;
    let key =
        key.ok_or_else(|| Problem::new("tls_server_config", "missing one of key or key_file"))?;
    let client_auth = raw.client_auth_type.unwrap_or(ClientAuth::NoClientCert);
    if client_ca.is_some() && client_auth == ClientAuth::NoClientCert {
        return Err(Problem::new(
            "tls_server_config.client_auth_type",
            "client CA's have been configured without a Client Auth Policy \
             (set client_auth_type, e.g. RequireAndVerifyClientCert)",
        ));
    }
    let allowed_sans = raw.client_allowed_sans.filter(|s| !s.is_empty());
    if allowed_sans.is_some() && client_auth == ClientAuth::NoClientCert {
        return Err(Problem::new(
            "tls_server_config.client_allowed_sans",
            "client_allowed_sans needs a client_auth_type that asks for client certificates \
             (RequireAndVerifyClientCert)",
        ));
    }

    if min > max {
        return Err(Problem::new(
            "tls_server_config",
            format!("min_version {min} is above max_version {max}"),
        ));
    }
    if max < TlsVersion::Tls12 {
        return Err(Problem::new(
            "tls_server_config.max_version",
            format!("{max} is not supported: this exporter speaks TLS12 and TLS13 only"),
        ));
    }
    if min < TlsVersion::Tls12 {
        warnings.push(format!(
            "tls_server_config.min_version: {min} is not supported by this exporter's TLS library; TLS12 is the minimum"
        ));
    }
    let mut versions: Vec<&'static rustls::SupportedProtocolVersion> = Vec::new();
    if max >= TlsVersion::Tls13 {
        versions.push(&rustls::version::TLS13);
    }
    if min <= TlsVersion::Tls12 {
        let tls12_usable = !matches!(&tls12_suites, Some(s) if s.is_empty());
        if tls12_usable {
            versions.push(&rustls::version::TLS12);
        } else if versions.is_empty() {
            return Err(Problem::new(
                "tls_server_config.cipher_suites",
                format!(
                    "none of the listed cipher suites is supported for TLS12 (supported: {})",
                    supported_cipher_names()[..6].join(", ")
                ),
            ));
        } else {
            warnings.push(
                "tls_server_config.cipher_suites: no listed TLS12 suite is supported; only TLS13 is served"
                    .to_string(),
            );
        }
    }

    Ok(Some(TlsSettings {
        cert,
        key,
        client_ca,
        client_auth,
        allowed_sans,
        versions,
        tls12_suites,
        kx_groups,
        prefer_server_cipher_suites: raw.prefer_server_cipher_suites.unwrap_or(true),
    }))
}

/// Reads a referenced file: a regular file, bounded in size and time.
pub(crate) fn read_limited(field: &str, path: &Path) -> Result<Vec<u8>, Problem> {
    super::reader()
        .read_regular(path, MAX_PEM_BYTES, super::READ_DEADLINE)
        .map_err(|e| match e {
            ReadError::TooLarge { .. } => Problem::new(
                field,
                format!("{} is larger than {MAX_PEM_BYTES} bytes", path.display()),
            ),
            e => Problem::new(field, format!("cannot read {}: {e}", path.display())),
        })
}

fn pem_bytes(
    field_file: &str,
    field_inline: &str,
    src: &PemSource,
) -> Result<(Vec<u8>, String), Problem> {
    match src {
        PemSource::File(p) => Ok((
            read_limited(field_file, p)?,
            format!("{field_file} {}", p.display()),
        )),
        PemSource::Inline(s) => Ok((s.as_bytes().to_vec(), field_inline.to_string())),
    }
}

fn certs_from_pem(
    field: &str,
    what: &str,
    pem: &[u8],
) -> Result<Vec<CertificateDer<'static>>, Problem> {
    let mut certs = Vec::new();
    for item in CertificateDer::pem_slice_iter(pem) {
        let cert = item.map_err(|e| Problem::new(field, format!("{what}: invalid PEM: {e}")))?;
        certs.push(cert);
    }
    if certs.is_empty() {
        return Err(Problem::new(
            field,
            format!("{what}: no PEM certificate found"),
        ));
    }
    Ok(certs)
}

/// Reads the certificate, key and CA files and builds the rustls config.
pub(crate) struct Built {
    pub config: Arc<ServerConfig>,
    /// Kept beside the config for tests: rustls does not expose it.
    pub verifier: Arc<dyn ClientCertVerifier>,
}

pub(crate) fn build(s: &TlsSettings, warnings: &mut Vec<String>) -> Result<Built, Problem> {
    let (cert_pem, cert_what) = pem_bytes(
        "tls_server_config.cert_file",
        "tls_server_config.cert",
        &s.cert,
    )?;
    let chain = certs_from_pem("tls_server_config", &cert_what, &cert_pem)?;
    super::validity::check_chain(&chain, &cert_what, std::time::SystemTime::now(), warnings);
    let (key_pem, key_what) = pem_bytes(
        "tls_server_config.key_file",
        "tls_server_config.key",
        &s.key,
    )?;
    let key = PrivateKeyDer::from_pem_slice(&key_pem).map_err(|e| {
        let problem = match e {
            PemError::NoItemsFound => "no PEM private key found (PKCS#1, PKCS#8 or SEC1)".into(),
            e => format!("invalid PEM: {e}"),
        };
        Problem::new("tls_server_config", format!("{key_what}: {problem}"))
    })?;

    let mut crypto = provider::default_provider();
    let mut suites: Vec<SupportedCipherSuite> = crypto
        .cipher_suites
        .iter()
        .copied()
        .filter(|cs| cs.tls13().is_some())
        .collect();
    match &s.tls12_suites {
        Some(chosen) => suites.extend(chosen.iter().copied()),
        None => suites.extend(
            crypto
                .cipher_suites
                .iter()
                .copied()
                .filter(|cs| cs.tls13().is_none()),
        ),
    }
    crypto.cipher_suites = suites;
    if let Some(groups) = &s.kx_groups {
        crypto.kx_groups = groups.clone();
    }
    let crypto = Arc::new(crypto);

    let certified = CertifiedKey::from_der(chain, key, &crypto).map_err(|e| {
        Problem::new(
            "tls_server_config",
            format!(
                "{cert_what} and {key_what} do not form a usable key pair: {}",
                key_pair_problem(&e)
            ),
        )
    })?;

    let verifier = client_verifier(s, &crypto, warnings)?;
    let mut config = ServerConfig::builder_with_provider(crypto.clone())
        .with_protocol_versions(&s.versions)
        .map_err(|e| {
            Problem::new(
                "tls_server_config",
                format!("inconsistent TLS settings: {e}"),
            )
        })?
        .with_client_cert_verifier(verifier.clone())
        .with_cert_resolver(Arc::new(FixedCert(Arc::new(certified))));
    config.ignore_client_order = s.prefer_server_cipher_suites;
    // Only HTTP/1.1 is served; saying so stops clients from trying h2.
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Built {
        config: Arc::new(config),
        verifier,
    })
}

/// rustls' reason a certificate and key do not go together, in words
/// (its own Display prints enum names such as `KeyMismatch`).
fn key_pair_problem(e: &rustls::Error) -> String {
    use rustls::InconsistentKeys;
    match e {
        rustls::Error::InconsistentKeys(InconsistentKeys::KeyMismatch) => {
            "the private key is not the certificate's (its public key differs)".into()
        }
        rustls::Error::InconsistentKeys(InconsistentKeys::Unknown) => {
            "the certificate's public key cannot be compared with the private key".into()
        }
        rustls::Error::General(m) => m.clone(),
        other => other.to_string(),
    }
}

fn client_verifier(
    s: &TlsSettings,
    crypto: &Arc<CryptoProvider>,
    warnings: &mut Vec<String>,
) -> Result<Arc<dyn ClientCertVerifier>, Problem> {
    let inner: Arc<dyn ClientCertVerifier> = match s.client_auth {
        ClientAuth::NoClientCert => return Ok(Arc::new(rustls::server::NoClientAuth)),
        ClientAuth::RequestClientCert | ClientAuth::RequireAnyClientCert => Arc::new(AnyCert {
            mandatory: s.client_auth.requires_cert(),
            algorithms: crypto.signature_verification_algorithms,
        }),
        ClientAuth::VerifyClientCertIfGiven | ClientAuth::RequireAndVerifyClientCert => {
            let roots = client_roots(s, warnings)?;
            let builder =
                WebPkiClientVerifier::builder_with_provider(Arc::new(roots), crypto.clone());
            let builder = if s.client_auth.requires_cert() {
                builder
            } else {
                builder.allow_unauthenticated()
            };
            builder.build().map_err(|e| {
                Problem::new(
                    "tls_server_config.client_ca_file",
                    format!("unusable client CA: {e}"),
                )
            })?
        }
    };
    // The CA is read even when not verifying, so a wrong path is still caught.
    if !s.client_auth.verifies() && s.client_ca.is_some() {
        client_roots(s, warnings)?;
    }
    Ok(match &s.allowed_sans {
        Some(sans) => Arc::new(SanCheck {
            inner,
            allowed: sans.clone(),
        }),
        None => inner,
    })
}

/// Go verifies client certificates against the system pool when no client CA
/// is given; do the same with the usual Linux bundle locations.
const SYSTEM_BUNDLES: &[&str] = &[
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
    "/etc/ssl/ca-bundle.pem",
    "/etc/pki/tls/cacert.pem",
    "/etc/ssl/cert.pem",
];

fn client_roots(s: &TlsSettings, warnings: &mut Vec<String>) -> Result<RootCertStore, Problem> {
    let (pem, what) = match &s.client_ca {
        Some(src) => pem_bytes(
            "tls_server_config.client_ca_file",
            "tls_server_config.client_ca",
            src,
        )?,
        None => {
            let env = std::env::var_os("SSL_CERT_FILE").map(PathBuf::from);
            let found = env
                .into_iter()
                .chain(SYSTEM_BUNDLES.iter().map(PathBuf::from))
                .find(|p| p.is_file())
                .ok_or_else(|| {
                    Problem::new(
                        "tls_server_config.client_ca_file",
                        "client_auth_type verifies client certificates but neither client_ca_file nor \
                         client_ca is set and no system trust store was found",
                    )
                })?;
            warnings.push(format!(
                "tls_server_config: no client CA configured; verifying client certificates against the system trust store {}",
                found.display()
            ));
            (
                read_limited("tls_server_config.client_ca_file", &found)?,
                format!("system trust store {}", found.display()),
            )
        }
    };
    let certs = certs_from_pem("tls_server_config.client_ca_file", &what, &pem)?;
    let mut roots = RootCertStore::empty();
    let (added, _ignored) = roots.add_parsable_certificates(certs);
    if added == 0 {
        return Err(Problem::new(
            "tls_server_config.client_ca_file",
            format!("{what}: no usable CA certificate"),
        ));
    }
    Ok(roots)
}

#[derive(Debug)]
struct FixedCert(Arc<CertifiedKey>);

impl ResolvesServerCert for FixedCert {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.0.clone())
    }
}

/// RequestClientCert / RequireAnyClientCert: any certificate is taken as-is
/// (as Go does), but the client must still prove it holds the key.
#[derive(Debug)]
struct AnyCert {
    mandatory: bool,
    algorithms: rustls::crypto::WebPkiSupportedAlgorithms,
}

impl ClientCertVerifier for AnyCert {
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

/// `client_allowed_sans`: after the usual verification, one SAN of the client
/// certificate must equal one listed entry. A certificate is then required:
/// the toolkit cannot accept a connection without one either.
#[derive(Debug)]
struct SanCheck {
    inner: Arc<dyn ClientCertVerifier>,
    allowed: Vec<String>,
}

impl ClientCertVerifier for SanCheck {
    fn offer_client_auth(&self) -> bool {
        true
    }
    fn client_auth_mandatory(&self) -> bool {
        true
    }
    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        self.inner.root_hint_subjects()
    }
    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        let verified = self
            .inner
            .verify_client_cert(end_entity, intermediates, now)?;
        let names = san::subject_alt_names(end_entity.as_ref()).ok_or(
            rustls::Error::InvalidCertificate(rustls::CertificateError::BadEncoding),
        )?;
        if names.iter().any(|n| self.allowed.contains(n)) {
            Ok(verified)
        } else {
            Err(rustls::Error::InvalidCertificate(
                rustls::CertificateError::ApplicationVerificationFailure,
            ))
        }
    }
    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }
    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }
    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}
