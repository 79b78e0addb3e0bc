//! Parsing and validation of every field, and every error, against
//! certificates from the suite's certificate factory (tests/common/pki.rs).

use std::path::Path;

use tokio_rustls::rustls;
use tokio_rustls::rustls::pki_types::{pem::PemObject, CertificateDer};

use super::*;

// The suite's one certificate factory, shared with the end-to-end tests.
#[path = "../../tests/common/pki.rs"]
mod pki;
use pki::Pki;

impl Pki {
    fn load(&self, yaml: &str) -> Result<WebConfig, WebConfigError> {
        let path = self.path("web.yml");
        std::fs::write(&path, yaml).unwrap();
        WebConfig::load(&path)
    }

    fn err(&self, yaml: &str) -> String {
        match self.load(yaml) {
            Ok(_) => panic!("accepted:\n{yaml}"),
            Err(e) => e.to_string(),
        }
    }
}

const TLS: &str = "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n";

fn tls_with(extra: &str) -> String {
    format!("{TLS}{extra}")
}

fn hash(password: &str) -> String {
    bcrypt::hash(password, 4).unwrap()
}

#[test]
fn empty_and_comment_only_files_are_plain_http_without_auth() {
    let pki = Pki::new();
    for yaml in ["", "# nothing\n", "---\n", "tls_server_config:\n", "{}\n"] {
        let c = pki.load(yaml).unwrap();
        assert!(c.tls_server_config().is_none(), "{yaml:?}");
        assert!(!c.requires_auth());
        assert!(c.response_headers().is_empty());
        assert!(c.http2());
        assert_eq!(c.rate_limit(), None);
    }
}

/// A web config saved with a UTF-8 byte-order mark is read past it, as
/// YAML allows (issue 41, probe 5 D14).
#[test]
fn a_byte_order_mark_is_read_past() {
    let pki = Pki::new();
    let c = pki.load(&format!("\u{feff}{TLS}")).unwrap();
    assert!(c.tls_server_config().is_some());
}

#[test]
fn toolkit_sample_file_loads_unchanged() {
    // docs/web-config.yml of exporter-toolkit, verbatim in structure.
    let pki = Pki::new();
    let c = pki
        .load(
            "# TLS and basic authentication configuration example.\n\
             tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n\n\
             basic_auth_users:\n\
             \x20 alice: $2y$10$mDwo.lAisC94iLAyP81MCesa29IzH37oigHC/42V2pdJlUprsJPze\n\
             \x20 bob: $2y$10$hLqFl9jSjoAAy95Z/zw8Ye8wkdMBM8c5Bn1ptYqP/AXyV0.oy0S8m\n\n\
             rate_limit:\n  interval: \"1s\" # comment\n  burst: 20\n",
        )
        .unwrap();
    assert!(c.tls_server_config().is_some());
    assert_eq!(c.users(), vec!["alice", "bob"]);
    assert_eq!(
        c.rate_limit(),
        Some(RateLimit {
            interval: Duration::from_secs(1),
            burst: 20
        })
    );
    assert_eq!(
        c.referenced_files(),
        vec![pki.path("server.crt"), pki.path("server.key")]
    );
    assert_eq!(c.client_auth(), Some(ClientAuth::NoClientCert));
}

#[test]
fn errors_name_the_file() {
    let pki = Pki::new();
    let e = pki.err("bogus: 1\n");
    assert!(
        e.contains(&pki.path("web.yml").display().to_string()),
        "{e}"
    );
}

#[test]
fn unknown_keys_are_refused_with_their_line() {
    let pki = Pki::new();
    let e = pki
        .load("tls_server_config:\n  cert_filse: server.crt\n")
        .unwrap_err();
    match &e {
        WebConfigError::Yaml { line, message, .. } => {
            assert_eq!(*line, Some(2));
            assert!(message.contains("cert_filse"), "{message}");
        }
        other => panic!("{other:?}"),
    }
    assert!(pki.err("basic_auth:\n  a: b\n").contains("basic_auth"));
    assert!(pki
        .err("http_server_config:\n  http3: true\n")
        .contains("http3"));
    assert!(pki.err("rate_limit:\n  per: 1s\n").contains("per"));
}

/// What the user reads names the right fix: "invalid YAML" where the text
/// is not YAML, the schema's complaint alone where it is.
#[test]
fn only_text_that_is_not_yaml_is_called_invalid_yaml() {
    let pki = Pki::new();
    for yaml in [
        "a: b: c\n",
        "\"unterminated\n",
        ": : :\n",
        "tls_server_config:\n  cert_file: a\n  cert_file: b\n",
    ] {
        let e = pki.load(yaml).unwrap_err().to_string();
        assert!(e.contains(": invalid YAML: "), "{yaml:?}: {e}");
    }
    for yaml in [
        "tls_server_config:\n  cert_filse: server.crt\n",
        "http_server_config:\n  http2: maybe\n",
        "tls_server_config:\n  min_version: TLS9\n",
    ] {
        let e = pki.load(yaml).unwrap_err().to_string();
        assert!(!e.contains("invalid YAML"), "{yaml:?}: {e}");
        assert!(e.starts_with("web config file "), "{yaml:?}: {e}");
    }
}

#[test]
fn malformed_yaml_is_refused() {
    let pki = Pki::new();
    for yaml in [
        "hWkNKCp3fvIx3jKnsaBI\nTuEjdwNS8A2vYdFbiKqr\n",
        "tls_server_config: [1, 2]\n",
        "tls_server_config:\n  cert_file: [a]\n",
        "basic_auth_users: nope\n",
        "a: b: c\n",
        "\"unterminated\n",
        "tls_server_config:\n  cert_file: a\n  cert_file: b\n",
        "basic_auth_users:\n  a: x\n  a: y\n",
        "http_server_config:\n  headers:\n    X-Frame-Options: deny\n    X-Frame-Options: deny\n",
        "http_server_config:\n  http2: maybe\n",
        "rate_limit:\n  burst: -1\n",
        "rate_limit:\n  interval: soon\n",
    ] {
        let e = pki.load(yaml).unwrap_err();
        assert!(matches!(e, WebConfigError::Yaml { .. }), "{yaml:?}: {e:?}");
    }
}

#[test]
fn read_errors() {
    let e = WebConfig::load(Path::new("/nonexistent/web.yml")).unwrap_err();
    assert!(matches!(e, WebConfigError::Read { .. }));
    assert!(e.to_string().contains("/nonexistent/web.yml"));
    let pki = Pki::new();
    let e = WebConfig::from_yaml(&pki.path("x.yml"), b"\xff\xfe").unwrap_err();
    assert!(e.to_string().contains("UTF-8"), "{e}");
    let big = pki.path("big.yml");
    std::fs::write(&big, vec![b'#'; MAX_FILE_BYTES as usize + 1]).unwrap();
    assert!(matches!(
        WebConfig::load(&big).unwrap_err(),
        WebConfigError::TooLarge { .. }
    ));
}

#[test]
fn tls_cert_and_key_files() {
    let pki = Pki::new();
    let c = pki.load(TLS).unwrap();
    let sc = c.tls_server_config().unwrap();
    assert!(
        sc.ignore_client_order,
        "prefer_server_cipher_suites defaults to true"
    );
    assert_eq!(sc.alpn_protocols, vec![b"http/1.1".to_vec()]);
    // Absolute paths are kept; relative ones follow the config file.
    let abs = format!(
        "tls_server_config:\n  cert_file: {}\n  key_file: {}\n",
        pki.path("server.crt").display(),
        pki.path("server.key").display()
    );
    assert!(pki.load(&abs).unwrap().tls_server_config().is_some());
}

#[test]
fn tls_incomplete_or_broken_material() {
    let pki = Pki::new();
    let cases: &[(&str, &str)] = &[
        (
            "tls_server_config:\n  cert_file: server.crt\n",
            "missing one of key or key_file",
        ),
        (
            "tls_server_config:\n  key_file: server.key\n",
            "missing one of cert or cert_file",
        ),
        (
            "tls_server_config:\n  cert_file: \"\"\n  key_file: server.key\n",
            "missing one of cert or cert_file",
        ),
        (
            "tls_server_config:\n  client_auth_type: RequireAndVerifyClientCert\n",
            "missing one of cert",
        ),
        (
            "tls_server_config:\n  client_ca_file: ca.crt\n",
            "missing one of cert",
        ),
        (
            "tls_server_config:\n  cert_file: nope.crt\n  key_file: server.key\n",
            "nope.crt",
        ),
        (
            "tls_server_config:\n  cert_file: server.crt\n  key_file: nope.key\n",
            "nope.key",
        ),
        (
            "tls_server_config:\n  cert_file: junk.pem\n  key_file: server.key\n",
            "no PEM certificate",
        ),
        (
            "tls_server_config:\n  cert_file: server.crt\n  key_file: junk.pem\n",
            "no PEM private key",
        ),
        (
            "tls_server_config:\n  cert_file: server.crt\n  key_file: server.crt\n",
            "no PEM private key",
        ),
        (
            "tls_server_config:\n  cert_file: server.crt\n  key_file: other.key\n",
            "usable key pair",
        ),
    ];
    for (yaml, want) in cases {
        let e = pki.err(yaml);
        assert!(e.contains(want), "{yaml:?}: {e}");
    }
}

#[test]
fn tls_inline_cert_and_key() {
    let pki = Pki::new();
    let indent = |s: String| s.lines().map(|l| format!("    {l}\n")).collect::<String>();
    let yaml = format!(
        "tls_server_config:\n  cert: |\n{}  key: |\n{}",
        indent(pki.read("server.crt")),
        indent(pki.read("server.key"))
    );
    let c = pki.load(&yaml).unwrap();
    assert!(c.tls_server_config().is_some());
    assert!(
        c.referenced_files().is_empty(),
        "inline material has no file to watch"
    );
    // Inline client CA too.
    let yaml = format!(
        "{yaml}  client_auth_type: RequireAndVerifyClientCert\n  client_ca: |\n{}",
        indent(pki.read("ca.crt"))
    );
    assert!(pki.load(&yaml).unwrap().tls_server_config().is_some());
}

#[test]
fn client_auth_types() {
    let pki = Pki::new();
    for (name, want) in [
        ("NoClientCert", ClientAuth::NoClientCert),
        ("RequestClientCert", ClientAuth::RequestClientCert),
        ("RequireAnyClientCert", ClientAuth::RequireAnyClientCert),
        ("RequireClientCert", ClientAuth::RequireAnyClientCert),
        (
            "VerifyClientCertIfGiven",
            ClientAuth::VerifyClientCertIfGiven,
        ),
        (
            "RequireAndVerifyClientCert",
            ClientAuth::RequireAndVerifyClientCert,
        ),
    ] {
        let ca = if name == "NoClientCert" {
            ""
        } else {
            "  client_ca_file: ca.crt\n"
        };
        let c = pki
            .load(&tls_with(&format!("  client_auth_type: {name}\n{ca}")))
            .unwrap();
        assert_eq!(c.client_auth(), Some(want), "{name}");
        let verifier = c.verifier.clone().unwrap();
        assert_eq!(
            verifier.offer_client_auth(),
            name != "NoClientCert",
            "{name}"
        );
        if name != "NoClientCert" {
            assert_eq!(
                verifier.client_auth_mandatory(),
                matches!(
                    name,
                    "RequireAnyClientCert" | "RequireClientCert" | "RequireAndVerifyClientCert"
                ),
                "{name}"
            );
        }
    }
    let e = pki.err(&tls_with("  client_auth_type: RequireAndVerify\n"));
    assert!(e.contains("invalid client_auth_type"), "{e}");
}

#[test]
fn client_ca_errors() {
    let pki = Pki::new();
    let e = pki.err(&tls_with("  client_ca_file: ca.crt\n"));
    assert!(e.contains("without a Client Auth Policy"), "{e}");
    let e = pki.err(&tls_with(
        "  client_ca_file: ca.crt\n  client_auth_type: NoClientCert\n",
    ));
    assert!(e.contains("without a Client Auth Policy"), "{e}");
    let e = pki.err(&tls_with(
        "  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: missing.crt\n",
    ));
    assert!(e.contains("missing.crt"), "{e}");
    let e = pki.err(&tls_with(
        "  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: junk.pem\n",
    ));
    assert!(e.contains("no PEM certificate"), "{e}");
    // Even when certificates are not verified, a wrong CA path is an error.
    let e = pki.err(&tls_with(
        "  client_auth_type: RequireAnyClientCert\n  client_ca_file: missing.crt\n",
    ));
    assert!(e.contains("missing.crt"), "{e}");
}

#[test]
fn client_allowed_sans() {
    let pki = Pki::new();
    let c = pki
        .load(&tls_with(
            "  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: ca.crt\n  client_allowed_sans:\n  - client.example\n",
        ))
        .unwrap();
    assert!(c.verifier.as_ref().unwrap().client_auth_mandatory());
    let e = pki.err(&tls_with("  client_allowed_sans:\n  - client.example\n"));
    assert!(e.contains("client_allowed_sans"), "{e}");
}

#[test]
fn san_extraction_from_a_real_certificate() {
    let pki = Pki::new();
    let der = CertificateDer::from_pem_file(pki.path("client.crt")).unwrap();
    let names = san::subject_alt_names(der.as_ref()).unwrap();
    assert_eq!(
        names,
        vec![
            "client.example",
            "ops@example.com",
            "spiffe://example/scraper",
            "10.1.2.3"
        ]
    );
}

#[test]
fn tls_versions() {
    let pki = Pki::new();
    let versions = |extra: &str| -> Vec<rustls::ProtocolVersion> {
        let c = pki.load(&tls_with(extra)).unwrap();
        let mut v: Vec<_> = c
            .tls_settings
            .unwrap()
            .versions
            .iter()
            .map(|v| v.version)
            .collect();
        v.sort_by_key(|v| u16::from(*v));
        v
    };
    use rustls::ProtocolVersion::{TLSv1_2, TLSv1_3};
    assert_eq!(versions(""), vec![TLSv1_2, TLSv1_3]);
    assert_eq!(versions("  min_version: TLS13\n"), vec![TLSv1_3]);
    assert_eq!(versions("  max_version: TLS12\n"), vec![TLSv1_2]);
    assert_eq!(
        versions("  min_version: TLS12\n  max_version: TLS13\n"),
        vec![TLSv1_2, TLSv1_3]
    );
    let c = pki.load(&tls_with("  min_version: TLS10\n")).unwrap();
    assert!(
        c.warnings().iter().any(|w| w.contains("TLS10")),
        "{:?}",
        c.warnings()
    );
    assert!(pki.load(&tls_with("  min_version: TLS11\n")).is_ok());
    for (extra, want) in [
        ("  min_version: TLS14\n", "unknown TLS version"),
        ("  max_version: SSL3\n", "unknown TLS version"),
        ("  max_version: TLS11\n", "above max_version"),
        (
            "  min_version: TLS10\n  max_version: TLS11\n",
            "TLS11 is not supported",
        ),
        (
            "  min_version: TLS13\n  max_version: TLS12\n",
            "above max_version",
        ),
    ] {
        let e = pki.err(&tls_with(extra));
        assert!(e.contains(want), "{extra:?}: {e}");
    }
}

fn tls12_suites(c: &WebConfig) -> Vec<rustls::CipherSuite> {
    c.tls_server_config()
        .unwrap()
        .crypto_provider()
        .cipher_suites
        .iter()
        .filter(|s| s.tls13().is_none())
        .map(|s| s.suite())
        .collect()
}

#[test]
fn cipher_suites() {
    let pki = Pki::new();
    use rustls::CipherSuite as C;
    // exporter-toolkit's web_config_noAuth_allCiphers.good.yml.
    let all = pki
        .load(&tls_with(
            "  client_auth_type: VerifyClientCertIfGiven\n  client_ca_file: ca.crt\n  cipher_suites:\n\
             \x20 - TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256\n  - TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384\n\
             \x20 - TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256\n  - TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384\n\
             \x20 - TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256\n  - TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256\n\
             \x20 - TLS_AES_128_GCM_SHA256\n  - TLS_AES_256_GCM_SHA384\n  - TLS_CHACHA20_POLY1305_SHA256\n\
             \x20 - TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA\n  - TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA\n\
             \x20 - TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA\n  - TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA\n",
        ))
        .unwrap();
    assert_eq!(tls12_suites(&all).len(), 6);
    assert!(all
        .warnings()
        .iter()
        .any(|w| w.contains("TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA")));
    // Order is the operator's.
    let some = pki
        .load(&tls_with(
            "  cipher_suites:\n  - TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384\n  - TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256\n",
        ))
        .unwrap();
    assert_eq!(
        tls12_suites(&some),
        vec![
            C::TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
            C::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256
        ]
    );
    // TLS 1.3 suites are always on, as in Go.
    let tls13 = some
        .tls_server_config()
        .unwrap()
        .crypto_provider()
        .cipher_suites
        .iter()
        .filter(|s| s.tls13().is_some())
        .count();
    assert_eq!(tls13, 3);
    let e = pki.err(&tls_with("  cipher_suites:\n  - TLS_INVENTED_CIPHER\n"));
    assert!(
        e.contains("unknown cipher suite \"TLS_INVENTED_CIPHER\""),
        "{e}"
    );
    assert!(
        e.contains("TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256"),
        "lists supported ones: {e}"
    );
    // Only suites rustls lacks: TLS12 cannot be served.
    let e = pki.err(&tls_with(
        "  max_version: TLS12\n  cipher_suites:\n  - TLS_RSA_WITH_AES_128_CBC_SHA\n",
    ));
    assert!(e.contains("none of the listed cipher suites"), "{e}");
    let c = pki
        .load(&tls_with(
            "  cipher_suites:\n  - TLS_RSA_WITH_AES_128_CBC_SHA\n",
        ))
        .unwrap();
    assert!(c
        .tls_settings
        .as_ref()
        .unwrap()
        .versions
        .iter()
        .all(|v| v.version != rustls::ProtocolVersion::TLSv1_2));
    assert!(c.warnings().iter().any(|w| w.contains("only TLS13")));
}

#[test]
fn prefer_server_cipher_suites() {
    let pki = Pki::new();
    let c = pki
        .load(&tls_with("  prefer_server_cipher_suites: false\n"))
        .unwrap();
    assert!(!c.tls_server_config().unwrap().ignore_client_order);
    let c = pki
        .load(&tls_with("  prefer_server_cipher_suites: yes\n"))
        .unwrap();
    assert!(c.tls_server_config().unwrap().ignore_client_order);
}

#[test]
fn curve_preferences() {
    let pki = Pki::new();
    let groups = |c: &WebConfig| -> Vec<rustls::NamedGroup> {
        c.tls_server_config()
            .unwrap()
            .crypto_provider()
            .kx_groups
            .iter()
            .map(|g| g.name())
            .collect()
    };
    let c = pki
        .load(&tls_with("  curve_preferences:\n    - CurveP256\n    - CurveP384\n    - CurveP521\n    - X25519\n"))
        .unwrap();
    use rustls::NamedGroup as G;
    assert_eq!(groups(&c), vec![G::secp256r1, G::secp384r1, G::X25519]);
    assert!(c.warnings().iter().any(|w| w.contains("CurveP521")));
    let c = pki
        .load(&tls_with("  curve_preferences: [X25519]\n"))
        .unwrap();
    assert_eq!(groups(&c), vec![G::X25519]);
    let e = pki.err(&tls_with("  curve_preferences:\n    - CurveP257\n"));
    assert!(e.contains("unknown curve \"CurveP257\""), "{e}");
    let e = pki.err(&tls_with("  curve_preferences:\n    - CurveP521\n"));
    assert!(e.contains("none of the listed curves"), "{e}");
}

/// An unknown cipher suite or curve fails the decode, as in the toolkit
/// (its `Cipher` and `Curve` refuse the name in `UnmarshalYAML`): the error
/// names the file, the field, the line and the name itself, and lists what
/// is supported. Before names were typed at decode it came from the TLS
/// settings, after the whole file had decoded, without its line.
#[test]
fn an_unknown_name_is_a_decode_error_naming_itself_and_the_file() {
    let pki = Pki::new();
    let e = pki
        .load(&tls_with("  cipher_suites:\n  - TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256\n  - TLS_INVENTED_CIPHER\n"))
        .unwrap_err();
    let text = e.to_string();
    match &e {
        WebConfigError::Yaml {
            path,
            line,
            message,
            syntax,
        } => {
            assert!(!syntax, "{text}");
            assert!(path.ends_with("web.yml"), "{text}");
            assert_eq!(*line, Some(6), "{text}");
            assert!(message.contains("cipher_suites"), "{text}");
            assert!(
                message.contains("unknown cipher suite \"TLS_INVENTED_CIPHER\" (supported: TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256, "),
                "{text}"
            );
        }
        other => panic!("not a decode error: {other:?}"),
    }
    assert!(text.starts_with("web config file "), "{text}");
    assert!(text.contains("web.yml"), "{text}");
    // Valid YAML with a name the schema refuses: not called invalid YAML.
    assert!(!text.contains("invalid YAML"), "{text}");
    let e = pki
        .load(&tls_with("  curve_preferences: [X25519, CurveP257]\n"))
        .unwrap_err();
    match &e {
        WebConfigError::Yaml { line, message, .. } => {
            assert_eq!(*line, Some(4), "{e}");
            assert!(message.contains("curve_preferences"), "{e}");
            assert!(message.contains("unknown curve \"CurveP257\""), "{e}");
        }
        other => panic!("not a decode error: {other:?}"),
    }
}

/// Issue 50: TLS versions and client auth types are typed while the file
/// is decoded, as the toolkit's are (its `TLSVersion` unmarshals itself):
/// a bad one is refused naming itself and its field, before anything
/// decides whether TLS is on; an empty one is no value.
#[test]
fn tls_versions_and_client_auth_are_typed_at_decode() {
    let pki = Pki::new();
    for (yaml, field, value) in [
        (
            "tls_server_config:\n  client_auth_type: RequireAndVerify\n",
            "client_auth_type",
            "\"RequireAndVerify\"",
        ),
        (
            "tls_server_config:\n  max_version: TLS14\n",
            "max_version",
            "\"TLS14\"",
        ),
    ] {
        let e = pki.err(yaml);
        assert!(e.contains(field) && e.contains(value), "{yaml:?}: {e}");
        assert!(!e.contains("missing one of cert"), "{yaml:?}: {e}");
    }
    // Empty: the defaults, and TLS stays off.
    let c = pki
        .load("tls_server_config:\n  client_auth_type: \"\"\n  min_version: \"\"\n")
        .unwrap();
    assert_eq!(c.client_auth(), None);
}

#[test]
fn names_are_checked_even_without_tls() {
    // The toolkit checks names while decoding, before deciding TLS is off.
    let pki = Pki::new();
    assert!(pki
        .err("tls_server_config:\n  min_version: TLS9\n")
        .contains("unknown TLS version"));
    assert!(pki
        .err("tls_server_config:\n  cipher_suites: [NOPE]\n")
        .contains("unknown cipher"));
    // Settings without cert/key/CA/client_auth_type leave TLS off.
    let c = pki
        .load("tls_server_config:\n  min_version: TLS13\n")
        .unwrap();
    assert!(c.tls_server_config().is_none());
}

#[test]
fn http_server_config() {
    let pki = Pki::new();
    assert!(!pki
        .load("http_server_config:\n  http2: false\n")
        .unwrap()
        .http2());
    assert!(pki
        .load("http_server_config:\n  http2: true\n")
        .unwrap()
        .http2());
    let c = pki
        .load(
            "http_server_config:\n  headers:\n    Strict-Transport-Security: max-age=31536000; includeSubDomains\n\
             \x20   Content-Security-Policy: default-src 'self'\n    X-Frame-Options: deny\n\
             \x20   X-Content-Type-Options: nosniff\n    X-XSS-Protection: 1; mode=block\n",
        )
        .unwrap();
    let got: Vec<(String, String)> = c
        .response_headers()
        .iter()
        .map(|(n, v)| (n.to_string(), v.to_str().unwrap().to_string()))
        .collect();
    assert_eq!(got.len(), 5);
    assert!(got.contains(&("x-frame-options".into(), "deny".into())));
    assert!(got.contains(&(
        "strict-transport-security".into(),
        "max-age=31536000; includeSubDomains".into()
    )));
    assert!(pki
        .load("http_server_config:\n  headers:\n    X-Frame-Options: sameorigin\n")
        .is_ok());
    // Blank means unset.
    let c = pki
        .load("http_server_config:\n  headers:\n    X-XSS-Protection: \"\"\n")
        .unwrap();
    assert!(c.response_headers().is_empty());
    for (yaml, want) in [
        (
            "http_server_config:\n  headers:\n    Server: evil\n",
            "can not be configured",
        ),
        (
            "http_server_config:\n  headers:\n    x-frame-options: deny\n",
            "can not be configured",
        ),
        (
            "http_server_config:\n  headers:\n    X-Frame-Options: allow\n",
            "X-Frame-Options",
        ),
        (
            "http_server_config:\n  headers:\n    X-Content-Type-Options: sniff\n",
            "X-Content-Type-Options",
        ),
        (
            "http_server_config:\n  headers:\n    Content-Security-Policy: \"a\\nb\"\n",
            "not allowed",
        ),
    ] {
        let e = pki.err(yaml);
        assert!(e.contains(want), "{yaml:?}: {e}");
    }
}

#[test]
fn basic_auth_users() {
    let pki = Pki::new();
    let c = pki
        .load(&format!(
            "basic_auth_users:\n  alice: {}\n  bob: '{}'\n",
            hash("a"),
            hash("b")
        ))
        .unwrap();
    assert_eq!(c.users(), vec!["alice", "bob"]);
    assert!(c.requires_auth());
    assert!(c.warnings().iter().any(|w| w.contains("clear text")));
    let e = pki.err("basic_auth_users:\n  carol: notahash\n");
    assert!(e.contains("basic_auth_users") && e.contains("carol"), "{e}");
    let e = pki.err("basic_auth_users:\n  dave:\n");
    assert!(e.contains("dave") && e.contains("empty"), "{e}");
    // The toolkit's password hashes never appear in errors or debug output.
    let c = pki
        .load(&format!("basic_auth_users:\n  alice: {}\n", hash("a")))
        .unwrap();
    assert!(!format!("{c:?}").contains("$2b$"), "{c:?}");
}

#[test]
fn rate_limit() {
    let pki = Pki::new();
    let c = pki
        .load("rate_limit:\n  interval: 250ms\n  burst: 5\n")
        .unwrap();
    assert_eq!(
        c.rate_limit(),
        Some(RateLimit {
            interval: Duration::from_millis(250),
            burst: 5
        })
    );
    assert_eq!(
        pki.load("rate_limit:\n  interval: 0\n  burst: 5\n")
            .unwrap()
            .rate_limit(),
        None
    );
    // go-yaml reads a bare integer duration as nanoseconds.
    let c = pki.load("rate_limit:\n  interval: 1000000000\n").unwrap();
    assert_eq!(c.rate_limit().unwrap().interval, Duration::from_secs(1));
}

#[test]
fn watcher_follows_edits_and_keeps_the_last_good_config() {
    let pki = Pki::new();
    let path = pki.path("web.yml");
    std::fs::write(
        &path,
        format!("{TLS}basic_auth_users:\n  alice: {}\n", hash("one")),
    )
    .unwrap();
    let w = WebConfigWatcher::new_unwatched(&path).unwrap();
    let basic = |u: &str, p: &str| {
        use base64::Engine as _;
        hyper::header::HeaderValue::from_str(&format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(format!("{u}:{p}"))
        ))
        .unwrap()
    };
    assert!(w.tls_acceptor().is_some());
    assert_eq!(
        w.authorize(Some(&basic("alice", "one"))),
        AuthDecision::Allowed
    );
    assert!(!w.check_now().unwrap(), "nothing changed");

    // A good edit: new password.
    std::fs::write(
        &path,
        format!("{TLS}basic_auth_users:\n  alice: {}\n", hash("two")),
    )
    .unwrap();
    assert!(w.check_now().unwrap());
    assert_eq!(
        w.authorize(Some(&basic("alice", "one"))),
        AuthDecision::Denied
    );
    assert_eq!(
        w.authorize(Some(&basic("alice", "two"))),
        AuthDecision::Allowed
    );

    // A bad edit: the old config stays, the error is reported.
    std::fs::write(&path, "tls_server_config:\n  cert_filse: x\n").unwrap();
    assert!(w.check_now().is_err());
    assert_eq!(
        w.authorize(Some(&basic("alice", "two"))),
        AuthDecision::Allowed
    );
    assert!(w.tls_acceptor().is_some());

    // Turning TLS off at run time is refused.
    std::fs::write(&path, "basic_auth_users: {}\n").unwrap();
    let e = w.check_now().unwrap_err();
    assert!(e.to_string().contains("restart"), "{e}");
    assert!(w.tls_acceptor().is_some());

    // Certificate rotation: the cert file changes, the config file does not.
    std::fs::write(&path, TLS).unwrap();
    assert!(w.check_now().unwrap());
    let before = w.current().tls_server_config().unwrap();
    std::fs::copy(pki.path("other.crt"), pki.path("server.crt")).unwrap();
    std::fs::copy(pki.path("other.key"), pki.path("server.key")).unwrap();
    assert!(w.check_now().unwrap());
    let after = w.current().tls_server_config().unwrap();
    assert!(!Arc::ptr_eq(&before, &after));
    assert!(!w.check_now().unwrap());
}

#[test]
fn watcher_headers_and_rate_limit() {
    let pki = Pki::new();
    let path = pki.path("web.yml");
    std::fs::write(
        &path,
        "http_server_config:\n  headers:\n    X-Frame-Options: deny\nrate_limit:\n  interval: 1h\n  burst: 2\n",
    )
    .unwrap();
    let w = WebConfigWatcher::new_unwatched(&path).unwrap();
    assert!(w.tls_acceptor().is_none());
    assert!(!w.requires_auth());
    assert_eq!(w.authorize(None), AuthDecision::Allowed);
    assert_eq!(w.response_headers().len(), 1);
    assert!(w.allow_request());
    assert!(w.allow_request());
    assert!(!w.allow_request());
}

#[test]
fn background_thread_picks_up_changes() {
    let pki = Pki::new();
    let path = pki.path("web.yml");
    std::fs::write(&path, "").unwrap();
    let w = WebConfigWatcher::start_with_interval(&path, Duration::from_millis(20)).unwrap();
    assert!(!w.requires_auth());
    std::fs::write(&path, format!("basic_auth_users:\n  a: {}\n", hash("x"))).unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !w.requires_auth() {
        assert!(
            std::time::Instant::now() < deadline,
            "change never picked up"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn parse_errors_name_the_key_never_the_value() {
    let pki = Pki::new();
    for (yaml, secret, key) in [
        (
            "basic_auth_users: alice:hunter2\n",
            "hunter2",
            "basic_auth_users",
        ),
        (
            "basic_auth_users:\n  alice:\n    hash: hunter4x\n",
            "hunter4x",
            "alice",
        ),
        ("rate_limit:\n  burst: hunter5x\n", "hunter5x", "burst"),
        (
            "rate_limit:\n  burst: 98765432109876\n",
            "98765432109876",
            "burst",
        ),
        ("rate_limit:\n  burst: 1.23456789\n", "23456789", "burst"),
        (
            "tls_server_config:\n  key: [\"-----BEGIN PRIVATE KEY-----secretkeymaterial\"]\n",
            "secretkeymaterial",
            "key",
        ),
    ] {
        let e = pki.err(yaml);
        assert!(!e.contains(secret), "{yaml:?} shows the value: {e}");
        assert!(e.contains(key), "{yaml:?} does not name {key}: {e}");
        assert!(e.contains("line"), "{yaml:?}: {e}");
    }
    // Names of keys and users stay readable.
    assert!(pki
        .err("basic_auth_users:\n  a: x\n  a: y\n")
        .contains("duplicate key \"a\""));
    assert_eq!(
        crate::fsread::redact_values(r#"invalid type: string "a\"b", expected `x` at line 1"#),
        "invalid type: string (value not shown), expected `x` at line 1"
    );
    assert_eq!(
        crate::fsread::redact_values("invalid value: integer `5`, expected u8"),
        "invalid value: integer (value not shown), expected u8"
    );
}
