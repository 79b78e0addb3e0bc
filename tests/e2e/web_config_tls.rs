//! `--web.config.file` end to end: the real exporter on the simulator,
//! spoken to by curl and by a rustls client, with certificates generated per
//! test (issue 4, item 9; bad files: item 8).

use crate::common;
use crate::pki;
use crate::tls;

use std::io::{Read, Write};
use std::time::Duration;

use common::{refuses_web_config, Exporter};
use pki::Pki;
use tls::*;
use tokio_rustls::rustls;

const TLS: &str = "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n";
const MTLS: &str = "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n  \
                    client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: ca.crt\n";

fn metrics_ok(client: &Client, e: &Exporter) -> Response {
    eventually(Duration::from_secs(30), "/metrics 200 over TLS", || {
        client
            .get(e.addr, "/metrics")
            .ok()
            .filter(|r| r.status == 200)
    })
}

#[test]
fn scrape_over_tls_with_rust_client_and_curl() {
    let pki = Pki::new();
    let e = Exporter::web_config(&pki.write_config(TLS), &[]);
    let r = metrics_ok(&Client::new(&pki), &e);
    assert!(r.body.contains("nvml_exporter_"), "{}", r.body);
    assert_eq!(r.server_cert, pki.cert_der("server.crt"));

    let ca = pki.path("ca.crt");
    let (code, out, err) = curl(&[
        "--cacert",
        ca.to_str().unwrap(),
        "-o",
        "/dev/null",
        "-w",
        "%{http_code} %{scheme}",
        &e.https("/metrics"),
    ]);
    // curl spells %{scheme} "HTTPS" up to 8.x (bookworm) and "https" later
    // (sid, where the aarch64 run under qemu has its curl).
    assert_eq!(
        (code, out.to_ascii_lowercase().as_str()),
        (0, "200 https"),
        "{err}"
    );
    // Without the CA, curl refuses the certificate.
    let (code, _, _) = curl(&["-o", "/dev/null", &e.https("/metrics")]);
    assert_ne!(code, 0);
}

#[test]
fn failed_handshakes_do_not_harm_the_server() {
    let pki = Pki::new();
    let mut e = Exporter::web_config(&pki.write_config(TLS), &[]);
    let client = Client::new(&pki);
    metrics_ok(&client, &e);
    // Plain HTTP to the TLS port, garbage, a silent client, an abrupt close.
    let (code, out, _) = curl(&[
        "-o",
        "/dev/null",
        "-w",
        "%{http_code}",
        &format!("http://{}/metrics", e.addr),
    ]);
    assert!(
        code != 0 || out != "200",
        "plain HTTP must not be served on a TLS port"
    );
    let mut s = std::net::TcpStream::connect(e.addr).unwrap();
    s.write_all(b"\x16\x03\x01\x00\x05garbage garbage garbage\r\n\r\n")
        .unwrap();
    let _ = s.read(&mut [0u8; 64]);
    let _silent = std::net::TcpStream::connect(e.addr).unwrap();
    drop(std::net::TcpStream::connect(e.addr).unwrap());
    // A client that trusts another CA aborts the handshake itself.
    let rogue = Client {
        roots: vec![pki.path("rogue-client.crt")],
        ..Client::new(&pki)
    };
    assert!(rogue.get(e.addr, "/metrics").is_err());
    assert!(e.alive());
    assert_eq!(client.get(e.addr, "/metrics").unwrap().status, 200);
}

#[test]
fn mutual_tls_required_and_refused_without_client_cert() {
    let pki = Pki::new();
    let mut e = Exporter::web_config(&pki.write_config(MTLS), &[]);
    let with_cert = Client::new(&pki).with_cert(&pki, "client");
    metrics_ok(&with_cert, &e);
    assert!(
        Client::new(&pki).get(e.addr, "/metrics").is_err(),
        "no client cert must be refused"
    );
    let rogue = Client::new(&pki).with_cert(&pki, "rogue-client");
    assert!(
        rogue.get(e.addr, "/metrics").is_err(),
        "cert from another CA must be refused"
    );

    let p = |n: &str| pki.path(n).to_str().unwrap().to_string();
    let (code, out, err) = curl(&[
        "--cacert",
        &p("ca.crt"),
        "--cert",
        &p("client.crt"),
        "--key",
        &p("client.key"),
        "-o",
        "/dev/null",
        "-w",
        "%{http_code}",
        &e.https("/metrics"),
    ]);
    assert_eq!((code, out.as_str()), (0, "200"), "{err}");
    let (code, out, _) = curl(&[
        "--cacert",
        &p("ca.crt"),
        "-o",
        "/dev/null",
        "-w",
        "%{http_code}",
        &e.https("/metrics"),
    ]);
    assert!(
        code != 0 && out != "200",
        "curl without client cert got {out}"
    );
    assert!(e.alive());
}

#[test]
fn client_allowed_sans_filter_client_certificates() {
    let pki = Pki::new();
    let cfg = format!("{MTLS}  client_allowed_sans:\n    - client.example\n");
    let e = Exporter::web_config(&pki.write_config(&cfg), &[]);
    metrics_ok(&Client::new(&pki).with_cert(&pki, "client"), &e);
    let other = Client::new(&pki).with_cert(&pki, "other-client");
    assert!(
        other.get(e.addr, "/metrics").is_err(),
        "SAN other.example is not allowed"
    );
}

#[test]
fn basic_auth_401_and_200() {
    let pki = Pki::new();
    let cfg = format!(
        "{TLS}basic_auth_users:\n  prometheus: {}\nhttp_server_config:\n  headers:\n    \
         X-Content-Type-Options: nosniff\n    Strict-Transport-Security: max-age=63072000\n",
        bcrypt_hash("scrape-me")
    );
    let e = Exporter::web_config(&pki.write_config(&cfg), &[]);
    let good = Client::new(&pki).with_basic("prometheus", "scrape-me");
    let r = metrics_ok(&good, &e);
    assert_eq!(r.header("x-content-type-options"), Some("nosniff"));
    assert_eq!(
        r.header("strict-transport-security"),
        Some("max-age=63072000")
    );

    for client in [
        Client::new(&pki),
        Client::new(&pki).with_basic("prometheus", "wrong"),
        Client::new(&pki).with_basic("nobody", "scrape-me"),
        Client::new(&pki).with_basic("", ""),
    ] {
        let r = client.get(e.addr, "/metrics").unwrap();
        assert_eq!(r.status, 401, "{:?}", client.basic);
        assert_eq!(
            r.header("www-authenticate"),
            Some("Basic realm=\"nvml-exporter\"")
        );
        assert_eq!(
            r.header("x-content-type-options"),
            Some("nosniff"),
            "configured headers on 401 too"
        );
        assert!(!r.body.contains("nvml_exporter_"));
    }
    // Without the operator's say-so, probes need credentials too.
    assert_eq!(
        Client::new(&pki).get(e.addr, "/-/healthy").unwrap().status,
        401
    );
    // Each refusal logged at debug with the user it claimed, never the
    // password, and counted.
    let log = e.log();
    let denied: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("wrong user or password"))
        .collect();
    assert!(
        denied.iter().any(|l| l.contains("user=prometheus"))
            && denied.iter().any(|l| l.contains("user=nobody")),
        "{log}"
    );
    assert!(log.contains("basic auth: no credentials"), "{log}");
    assert!(
        !log.contains("scrape-me") && !log.contains("wrong\""),
        "{log}"
    );
    let counted = good.get(e.addr, "/metrics").unwrap();
    eventually(Duration::from_secs(20), "the 401s counted", || {
        let body = good.get(e.addr, "/metrics").ok()?.body;
        body.lines()
            .find(|l| l.starts_with("nvml_exporter_http_refusals_total{reason=\"unauthorized\"}"))
            .and_then(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .filter(|n| *n >= 5.0)
    });
    assert_eq!(counted.status, 200);

    let ca = pki.path("ca.crt");
    let ca = ca.to_str().unwrap();
    let (code, out, err) = curl(&[
        "--cacert",
        ca,
        "-u",
        "prometheus:scrape-me",
        "-o",
        "/dev/null",
        "-w",
        "%{http_code}",
        &e.https("/metrics"),
    ]);
    assert_eq!((code, out.as_str()), (0, "200"), "{err}");
    let (_, out, _) = curl(&[
        "--cacert",
        ca,
        "-u",
        "prometheus:nope",
        "-D",
        "-",
        "-o",
        "/dev/null",
        &e.https("/metrics"),
    ]);
    assert!(out.starts_with("HTTP/1.1 401"), "{out}");
    assert!(
        out.to_ascii_lowercase()
            .contains("www-authenticate: basic realm=\"nvml-exporter\""),
        "{out}"
    );
}

#[test]
fn health_endpoint_without_auth_only_when_asked() {
    let pki = Pki::new();
    let cfg = format!(
        "{TLS}basic_auth_users:\n  prometheus: {}\n",
        bcrypt_hash("x")
    );
    let e = Exporter::web_config(&pki.write_config(&cfg), &["--web.health-without-auth"]);
    let anon = Client::new(&pki);
    let r = eventually(Duration::from_secs(30), "/-/healthy", || {
        anon.get(e.addr, "/-/healthy").ok()
    });
    assert_eq!(r.status, 200);
    assert_eq!(anon.get(e.addr, "/metrics").unwrap().status, 401);
    assert_eq!(anon.get(e.addr, "/-/ready").unwrap().status, 401);
}

#[test]
fn certificate_rotation_and_bad_edits_without_restart() {
    let pki = Pki::new();
    let cfg = format!("{TLS}basic_auth_users:\n  u: {}\n", bcrypt_hash("one"));
    let config = pki.write_config(&cfg);
    let mut e = Exporter::web_config(&config, &[]);
    let one = Client::new(&pki).with_basic("u", "one");
    assert_eq!(metrics_ok(&one, &e).server_cert, pki.cert_der("server.crt"));

    // Rotate: new certificate and key in place, config file untouched.
    let new_cert = pki.cert_der("server2.crt");
    std::fs::copy(pki.path("server2.key"), pki.path("server.key.new")).unwrap();
    std::fs::copy(pki.path("server2.crt"), pki.path("server.crt.new")).unwrap();
    std::fs::rename(pki.path("server.key.new"), pki.path("server.key")).unwrap();
    std::fs::rename(pki.path("server.crt.new"), pki.path("server.crt")).unwrap();
    eventually(Duration::from_secs(20), "the rotated certificate", || {
        one.get(e.addr, "/metrics")
            .ok()
            .filter(|r| r.server_cert == new_cert)
    });

    // A bad edit: the last good config keeps serving; the error is logged once.
    pki.write_config("tls_server_config:\n  cert_filse: server.crt\n");
    eventually(
        Duration::from_secs(20),
        "the reload error in the log",
        || e.log().contains("cert_filse").then_some(()),
    );
    // Two more checks find the same bad file (each says so at debug level).
    eventually(
        Duration::from_secs(20),
        "two more checks of the bad file",
        || (e.log().matches("still invalid as logged").count() >= 2).then_some(()),
    );
    assert_eq!(one.get(e.addr, "/metrics").unwrap().status, 200);
    assert_eq!(
        e.log().matches("unknown field `cert_filse`").count(),
        1,
        "{}",
        e.log()
    );

    // A good edit: the new password works, the old one no longer does.
    pki.write_config(&format!(
        "{TLS}basic_auth_users:\n  u: {}\n",
        bcrypt_hash("two")
    ));
    let two = Client::new(&pki).with_basic("u", "two");
    eventually(Duration::from_secs(20), "the new password", || {
        two.get(e.addr, "/metrics").ok().filter(|r| r.status == 200)
    });
    assert_eq!(one.get(e.addr, "/metrics").unwrap().status, 401);
    assert!(e.alive());
}

#[test]
fn tls_versions_are_enforced() {
    let pki = Pki::new();
    let e = Exporter::web_config(
        &pki.write_config(&format!("{TLS}  min_version: TLS13\n")),
        &[],
    );
    let tls13 = Client {
        versions: vec![&rustls::version::TLS13],
        ..Client::new(&pki)
    };
    metrics_ok(&tls13, &e);
    let tls12 = Client {
        versions: vec![&rustls::version::TLS12],
        ..Client::new(&pki)
    };
    assert!(tls12.get(e.addr, "/metrics").is_err());
    let ca = pki.path("ca.crt");
    let (code, _, _) = curl(&[
        "--cacert",
        ca.to_str().unwrap(),
        "--tls-max",
        "1.2",
        "-o",
        "/dev/null",
        &e.https("/metrics"),
    ]);
    assert_ne!(code, 0, "curl limited to TLS 1.2 must fail");
}

#[test]
fn bad_web_config_at_startup_is_a_clear_error_and_non_zero_exit() {
    let pki = Pki::new();
    let cases: &[(&str, &str)] = &[
        (
            "tls_server_config:\n  cert_filse: server.crt\n",
            "cert_filse",
        ),
        (
            "tls_server_config:\n  cert_file: server.crt\n",
            "missing one of key or key_file",
        ),
        (
            "tls_server_config:\n  cert_file: nope.crt\n  key_file: server.key\n",
            "nope.crt",
        ),
        (
            "tls_server_config:\n  cert_file: server.crt\n  key_file: client.key\n",
            "key pair",
        ),
        ("basic_auth_users:\n  alice: hunter2-in-clear\n", "alice"),
        // Issue 51 (probe 6, D8): a cost of 31 pinned a core for hours per
        // unknown user; refused at load, naming the user and the cost.
        (
            "basic_auth_users:\n  prom: $2y$31$QOauhQNbBCuQDKes6eFzPeMqBSjb7Mr5DUmpZ/VcEd00UAV/LDeSi\n",
            "prom\\\": bcrypt cost 31 is above the exporter's ceiling of 15",
        ),
        ("http_server_config:\n  headers:\n    Server: x\n", "Server"),
        (
            "tls_server_config:\n  cipher_suites: [TLS_BOGUS]\n",
            "TLS_BOGUS",
        ),
        (": : :\n", "invalid YAML"),
    ];
    for (yaml, want) in cases {
        let path = pki.write_config(yaml);
        let (status, out) = refuses_web_config(&path);
        assert!(!status.success(), "{yaml:?} started");
        assert!(
            out.contains(want),
            "{yaml:?}: output lacks {want:?}:\n{out}"
        );
        assert!(
            out.contains("web.yml"),
            "{yaml:?}: output does not name the file:\n{out}"
        );
        assert!(!out.contains("panicked"), "{out}");
        // No value of the file reaches the log when it is a password.
        assert!(
            !out.contains("hunter2"),
            "{yaml:?} logs the password:\n{out}"
        );
    }
    let (status, out) = refuses_web_config(&pki.path("missing.yml"));
    assert!(!status.success());
    assert!(out.contains("missing.yml"), "{out}");
}

fn mkfifo(path: &std::path::Path) {
    let made = std::process::Command::new("mkfifo")
        .arg(path)
        .status()
        .expect("run mkfifo");
    assert!(made.success(), "mkfifo {}", path.display());
}

/// A FIFO blocks whoever opens it for reading until a writer comes, as a
/// file on a hung mount blocks: named as the web config or as one of its
/// files, it is refused at start with a clear error, and while running
/// neither the 3 s change check nor a SIGHUP reload can hold up SIGTERM.
#[test]
fn web_config_files_that_would_block_are_refused_and_never_hold_up_sigterm() {
    let pki = Pki::new();
    let fifo = pki.path("fifo.yml");
    mkfifo(&fifo);
    let (status, out) = refuses_web_config(&fifo);
    assert_eq!(status.code(), Some(1), "{out}");
    assert!(
        out.contains("fifo.yml") && out.contains("not a regular file (a FIFO)"),
        "{out}"
    );
    mkfifo(&pki.path("fifo.key"));
    let config =
        pki.write_config("tls_server_config:\n  cert_file: server.crt\n  key_file: fifo.key\n");
    let (status, out) = refuses_web_config(&config);
    assert_eq!(status.code(), Some(1), "{out}");
    assert!(
        out.contains("fifo.key") && out.contains("not a regular file (a FIFO)"),
        "{out}"
    );

    let config = pki.write_config(TLS);
    let mut e = Exporter::web_config(&config, &[]);
    std::fs::remove_file(pki.path("server.key")).unwrap();
    mkfifo(&pki.path("server.key"));
    common::signal(e.pid(), "HUP");
    assert!(
        e.wait_log("trigger=SIGHUP", Duration::from_secs(30)),
        "no word on the SIGHUP reload:\n{}",
        e.log()
    );
    assert!(
        e.log().contains("not a regular file (a FIFO)"),
        "{}",
        e.log()
    );
    let status = e.terminate(Duration::from_secs(30));
    assert_eq!(status.code(), Some(0), "{}", e.log());
}

/// Peak resident memory of a process, from /proc (VmHWM).
fn peak_rss_bytes(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .expect("VmHWM in /proc/<pid>/status");
    kib * 1024
}

/// A 300 MB file swapped in for the certificate: the change check looks
/// at metadata and the reload reads at most the 4 MiB cap, so memory stays
/// where it was (it once read the whole file every 3 s).
#[test]
fn a_huge_file_swapped_in_is_never_read_whole() {
    let pki = Pki::new();
    let config = pki.write_config(TLS);
    let e = Exporter::web_config(&config, &[]);
    let huge = std::fs::File::create(pki.path("huge.crt")).unwrap();
    huge.set_len(300 << 20).unwrap();
    std::fs::rename(pki.path("huge.crt"), pki.path("server.crt")).unwrap();
    eventually(Duration::from_secs(20), "the refused reload", || {
        e.log()
            .contains("is larger than 4194304 bytes")
            .then_some(())
    });
    // Two more checks find the same file (each says so at debug level), or
    // memory grows by the file's size: whichever comes first.
    eventually(Duration::from_secs(20), "two more checks", || {
        (e.log().matches("still invalid as logged").count() >= 2
            || peak_rss_bytes(e.pid()) >= 100 << 20)
            .then_some(())
    });
    let peak = peak_rss_bytes(e.pid());
    assert!(
        peak < 100 << 20,
        "peak resident memory {} MiB: the file was read",
        peak >> 20
    );
}

/// Plain HTTP to the TLS port gets a 400 that says so, as Go's servers
/// answer, not TLS alert bytes; the log and errors speak in words.
#[test]
fn plain_http_on_the_tls_port_gets_a_clear_400() {
    let pki = Pki::new();
    let e = Exporter::web_config(&pki.write_config(TLS), &[]);
    let r = e
        .raw(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap_or_else(|err| panic!("{err}; log:\n{}", e.log()));
    assert_eq!(r.status, 400);
    assert!(
        r.text().contains("HTTP request to an HTTPS server"),
        "{}",
        r.text()
    );
    // TLS still works on the same port.
    metrics_ok(&Client::new(&pki), &e);
    let log = e.log();
    assert!(log.contains("client_auth=NoClientCert"), "{log}");
    assert!(!log.contains("Some("), "{log}");

    let mismatched =
        pki.write_config("tls_server_config:\n  cert_file: server.crt\n  key_file: client.key\n");
    let (status, out) = refuses_web_config(&mismatched);
    assert_eq!(status.code(), Some(1));
    assert!(
        out.contains("the private key is not the certificate's"),
        "{out}"
    );
    assert!(!out.contains("KeyMismatch"), "{out}");
    let not_a_mapping = pki.write_config("tls_server_config: 5\n");
    let (_, out) = refuses_web_config(&not_a_mapping);
    assert!(
        out.contains("expected a tls_server_config mapping"),
        "{out}"
    );
    assert!(!out.contains("RawTls"), "{out}");
}

#[test]
fn optional_and_unverified_client_certificate_modes() {
    let pki = Pki::new();
    let base = "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n";
    // VerifyClientCertIfGiven: none is fine, a good one is fine, a bad one is refused.
    let e = Exporter::web_config(
        &pki.write_config(&format!(
            "{base}  client_auth_type: VerifyClientCertIfGiven\n  client_ca_file: ca.crt\n"
        )),
        &[],
    );
    metrics_ok(&Client::new(&pki), &e);
    metrics_ok(&Client::new(&pki).with_cert(&pki, "client"), &e);
    let rogue = Client::new(&pki).with_cert(&pki, "rogue-client");
    assert!(rogue.get(e.addr, "/metrics").is_err());
    drop(e);
    // RequireAnyClientCert: some certificate is required, any will do.
    let e = Exporter::web_config(
        &pki.write_config(&format!("{base}  client_auth_type: RequireAnyClientCert\n")),
        &[],
    );
    metrics_ok(&Client::new(&pki).with_cert(&pki, "rogue-client"), &e);
    assert!(Client::new(&pki).get(e.addr, "/metrics").is_err());
    drop(e);
    // RequestClientCert: asked for, neither required nor verified.
    let e = Exporter::web_config(
        &pki.write_config(&format!("{base}  client_auth_type: RequestClientCert\n")),
        &[],
    );
    metrics_ok(&Client::new(&pki), &e);
    metrics_ok(&Client::new(&pki).with_cert(&pki, "rogue-client"), &e);
}

#[test]
fn basic_auth_without_tls_and_rate_limit() {
    // The toolkit allows basic auth over plain HTTP (with a warning here).
    let pki = Pki::new();
    let cfg = format!(
        "basic_auth_users:\n  u: {}\nrate_limit:\n  interval: 1h\n  burst: 3\n",
        bcrypt_hash("p")
    );
    let e = Exporter::web_config(&pki.write_config(&cfg), &[]);
    let url = format!("http://{}/-/healthy", e.addr);
    let status = |args: &[&str]| {
        let mut all = vec!["-o", "/dev/null", "-w", "%{http_code}"];
        all.extend_from_slice(args);
        all.push(&url);
        curl(&all).1
    };
    assert_eq!(status(&[]), "401");
    assert_eq!(status(&["-u", "u:p"]), "200");
    assert_eq!(status(&["-u", "u:p"]), "200");
    // The bucket of 3 is spent: 429 even with the right password.
    assert_eq!(status(&["-u", "u:p"]), "429");
    assert!(e.log().contains("clear text"), "{}", e.log());
}

#[test]
fn a_silent_client_is_dropped_after_the_handshake_timeout() {
    let pki = Pki::new();
    let e = Exporter::web_config(&pki.write_config(TLS), &["--web.read-header-timeout=1s"]);
    let mut silent = std::net::TcpStream::connect(e.addr).unwrap();
    // Generous: the point is that the server closes, not how fast.
    silent
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let mut buf = [0u8; 16];
    match silent.read(&mut buf) {
        Ok(0) => {}
        Err(err) if err.kind() == std::io::ErrorKind::ConnectionReset => {}
        other => panic!("silent TLS client not dropped: {other:?}"),
    }
    assert_eq!(metrics_ok(&Client::new(&pki), &e).status, 200);
}
