//! Throws arbitrary input at the web config parser: it must answer Ok or a
//! clear error naming the file, never panic. Seeds come from the kept corpus in
//! `tests/web_config_corpus/` (`*.good.yml` must load, `*.bad.yml` must not);
//! proptest stores any failing case it finds next to this file.

use std::path::{Path, PathBuf};

use nvml_exporter::web_config::{san, WebConfig};
use proptest::prelude::*;

fn corpus_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/web_config_corpus")
}

fn corpus() -> Vec<(String, Vec<u8>)> {
    let mut files: Vec<_> = std::fs::read_dir(corpus_dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yml"))
        .collect();
    files.sort();
    files
        .into_iter()
        .map(|p| {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            (name, std::fs::read(&p).unwrap())
        })
        .collect()
}

/// Parses as if the text were the file `fuzz.yml` in the corpus directory,
/// and checks the error (if any) is a readable one naming that file.
fn check(text: &[u8]) -> bool {
    let path = corpus_dir().join("fuzz.yml");
    match WebConfig::from_yaml(&path, text) {
        Ok(_) => true,
        Err(e) => {
            let msg = e.to_string();
            assert!(
                msg.contains("fuzz.yml"),
                "error does not name the file: {msg}"
            );
            assert!(
                msg.len() < 64 * 1024,
                "runaway error message ({} bytes)",
                msg.len()
            );
            false
        }
    }
}

#[test]
fn corpus_files_load_or_fail_as_named() {
    let corpus = corpus();
    assert!(corpus.len() >= 20, "corpus went missing");
    for (name, text) in corpus {
        let path = corpus_dir().join(&name);
        let result = WebConfig::from_yaml(&path, &text);
        if name.ends_with(".good.yml") {
            assert!(result.is_ok(), "{name}: {result:?}");
        } else if name.ends_with(".bad.yml") {
            let e = result.expect_err(&name).to_string();
            assert!(e.contains(&name), "{name}: {e}");
        }
    }
}

/// YAML built from the toolkit's own keys with hostile values, so the
/// generator reaches the validation code rather than stopping at the
/// first unknown key.
fn scalar() -> impl Strategy<Value = String> {
    prop_oneof![
        Just(String::new()),
        Just("~".to_string()),
        Just("true".to_string()),
        Just("yes".to_string()),
        Just("0".to_string()),
        Just("-1".to_string()),
        Just("18446744073709551616".to_string()),
        Just("1.5".to_string()),
        Just("TLS12".to_string()),
        Just("TLS13".to_string()),
        Just("RequireAndVerifyClientCert".to_string()),
        Just("RequestClientCert".to_string()),
        Just("TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256".to_string()),
        Just("TLS_RSA_WITH_AES_128_CBC_SHA".to_string()),
        Just("X25519".to_string()),
        Just("CurveP521".to_string()),
        Just("junk.pem".to_string()),
        Just("/dev/null".to_string()),
        Just("/dev/zero".to_string()),
        Just("/proc/self/status".to_string()),
        Just("$2y$10$mDwo.lAisC94iLAyP81MCesa29IzH37oigHC/42V2pdJlUprsJPze".to_string()),
        Just("$2y$31$mDwo.lAisC94iLAyP81MCesa29IzH37oigHC/42V2pdJlUprsJPze".to_string()),
        Just("$2y$03$mDwo.lAisC94iLAyP81MCesa29IzH37oigHC/42V2pdJlUprsJPze".to_string()),
        Just("1h".to_string()),
        Just("999999999999h".to_string()),
        Just("nosniff".to_string()),
        Just("deny".to_string()),
        Just("\"a\\u0000b\\nc\"".to_string()),
        Just("[a, b]".to_string()),
        Just("{a: b}".to_string()),
        Just("&x [1]".to_string()),
        Just("*x".to_string()),
        "[ -~]{0,40}".prop_map(|s| format!("{s:?}")),
        "[a-zA-Z0-9_$./-]{0,70}",
    ]
}

const TOP_KEYS: &[&str] = &[
    "tls_server_config",
    "http_server_config",
    "basic_auth_users",
    "rate_limit",
    "bogus",
];
const TLS_KEYS: &[&str] = &[
    "cert",
    "key",
    "client_ca",
    "cert_file",
    "key_file",
    "client_auth_type",
    "client_ca_file",
    "cipher_suites",
    "curve_preferences",
    "min_version",
    "max_version",
    "prefer_server_cipher_suites",
    "client_allowed_sans",
];
const HTTP_KEYS: &[&str] = &["http2", "headers"];
const HEADER_KEYS: &[&str] = &[
    "Strict-Transport-Security",
    "X-Content-Type-Options",
    "X-Frame-Options",
    "X-XSS-Protection",
    "Content-Security-Policy",
    "Server",
];
const RATE_KEYS: &[&str] = &["interval", "burst"];

fn value() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => scalar().prop_map(|s| format!(" {s}")),
        1 => prop::collection::vec(scalar(), 0..4)
            .prop_map(|v| v.iter().map(|s| format!("\n    - {s}")).collect()),
        1 => prop::collection::vec((prop::sample::select(HEADER_KEYS), scalar()), 0..4)
            .prop_map(|v| v.iter().map(|(k, s)| format!("\n    {k}: {s}")).collect()),
    ]
}

fn section(keys: &'static [&'static str]) -> impl Strategy<Value = String> {
    prop::collection::vec((prop::sample::select(keys), value()), 0..6)
        .prop_map(|v| v.iter().map(|(k, val)| format!("\n  {k}:{val}")).collect())
}

fn document() -> impl Strategy<Value = String> {
    prop::collection::vec(
        prop::sample::select(TOP_KEYS).prop_flat_map(|k| {
            let body = match k {
                "tls_server_config" => section(TLS_KEYS).boxed(),
                "http_server_config" => section(HTTP_KEYS).boxed(),
                "rate_limit" => section(RATE_KEYS).boxed(),
                _ => prop::collection::vec(("[a-z]{1,6}", scalar()), 0..4)
                    .prop_map(|v| v.iter().map(|(u, h)| format!("\n  {u}: {h}")).collect())
                    .boxed(),
            };
            body.prop_map(move |b| format!("{k}:{b}\n"))
        }),
        0..5,
    )
    .prop_map(|parts| parts.concat())
}

/// Byte-level mutations of a corpus file.
fn mutated_corpus() -> impl Strategy<Value = Vec<u8>> {
    let seeds = corpus();
    (
        0..seeds.len(),
        prop::collection::vec((any::<prop::sample::Index>(), any::<u8>(), 0u8..3), 1..8),
    )
        .prop_map(move |(i, edits)| {
            let mut bytes = seeds[i].1.clone();
            for (at, b, op) in edits {
                let pos = if bytes.is_empty() {
                    0
                } else {
                    at.index(bytes.len())
                };
                match op {
                    0 if !bytes.is_empty() => bytes[pos] = b,
                    1 => bytes.insert(pos, b),
                    _ if !bytes.is_empty() => {
                        bytes.remove(pos);
                    }
                    _ => bytes.push(b),
                }
            }
            bytes
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        check(&bytes);
    }

    #[test]
    fn structured_documents_never_panic(doc in document()) {
        check(doc.as_bytes());
    }

    #[test]
    fn mutated_corpus_never_panics(bytes in mutated_corpus()) {
        check(&bytes);
    }

    #[test]
    fn san_parser_never_panics(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
        let _ = san::subject_alt_names(&bytes);
    }
}

/// Mutations of a real certificate, so the DER walker sees inputs that get
/// deep into the structure before going wrong.
#[test]
fn san_parser_survives_mutated_certificates() {
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::new(vec!["a.example".to_string()]).unwrap();
    params
        .subject_alt_names
        .push(rcgen::SanType::IpAddress("::1".parse().unwrap()));
    let der = params.self_signed(&key).unwrap().der().to_vec();
    assert_eq!(
        san::subject_alt_names(&der),
        Some(vec!["a.example".to_string(), "::1".to_string()])
    );
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig {
        cases: 2048,
        ..ProptestConfig::default()
    });
    runner
        .run(
            &prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..4),
            |edits| {
                let mut d = der.clone();
                for (at, b) in edits {
                    let i = at.index(d.len());
                    d[i] = b;
                }
                let _ = san::subject_alt_names(&d);
                let _ = san::subject_alt_names(&d[..d.len() / 2]);
                Ok(())
            },
        )
        .unwrap();
}
