//! Hostile clients and bad input against the real binary (issue 13): a
//! wrong-password flood, clients that stop reading, a connection flood
//! against the probes, secrets in logs, huge limit flags, SIGHUP, certificate
//! dates, and a scenario "file" that never ends.
//!
//! Every flood is bounded in count and time. Assertions are about what the
//! clients receive and in which order, never about how fast: the figures
//! (latencies, memory) are measured by `scripts/load --mode auth-flood` and
//! `--mode stalled-readers` and recorded in docs/load.md.

use crate::common;

use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use base64::Engine as _;
use common::{Exporter, Response};

/// bcrypt cost 12 of "scrape-me" and "fresh-login": slow enough (seconds in
/// a debug build) that a flood is still queued while the test looks.
const PROM_HASH: &str = "$2b$12$.btanyQFvu0dHmvi2fGjkuWSyFPRdid0k5LrUHAFCICtt4cNwlXhm";
const FRESH_HASH: &str = "$2b$12$0U5m.z/AsUXOOlq8kUKB5O911h0hcdhkSHuqZnj9qm.tdaS6x5RxO";
/// bcrypt cost 4 of "cheap".
const CHEAP_HASH: &str = "$2b$04$QotYE59fnkNBqSXEE8XBneg5z1aAzXq/gK5Wcox3vdDTwUFQNJ8NO";

/// The exporter's bcrypt queue: places per client address (src/web_config/gate.rs).
const PLACES_PER_PEER: usize = 1;
/// Connections kept for probes beyond --web.max-connections (src/http/mod.rs).
const PROBE_RESERVED: usize = 4;

const WAIT: Duration = Duration::from_secs(60);

fn write_config(dir: &Path, yaml: &str) -> PathBuf {
    let path = dir.join("web.yml");
    // Write, then rename, as configuration management does.
    let tmp = dir.join("web.yml.tmp");
    std::fs::write(&tmp, yaml).unwrap();
    std::fs::rename(&tmp, &path).unwrap();
    path
}

fn basic(user: &str, password: &str) -> String {
    let b64 = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
    format!("Basic {b64}")
}

/// A connection to `addr` from the local address `source` (any 127.x.y.z
/// is this host's loopback, so two "hosts" can be told apart).
fn connect_from(source: IpAddr, addr: SocketAddr) -> std::io::Result<TcpStream> {
    let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)?;
    s.bind(&SocketAddr::new(source, 0).into())?;
    s.connect(&addr.into())?;
    Ok(s.into())
}

/// One GET with `Connection: close` from `source`, read to the end.
fn get_from(
    source: IpAddr,
    addr: SocketAddr,
    path: &str,
    headers: &[(&str, &str)],
) -> Result<Response, String> {
    let mut s = connect_from(source, addr).map_err(|e| e.to_string())?;
    s.set_read_timeout(Some(WAIT)).map_err(|e| e.to_string())?;
    let mut req = format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n");
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes()).map_err(|e| e.to_string())?;
    let mut buf = Vec::new();
    s.read_to_end(&mut buf).map_err(|e| e.to_string())?;
    Response::parse(&buf)
}

fn local(last: u8) -> IpAddr {
    IpAddr::from([127, 0, 0, last])
}

/// Polls `f` until it returns `Some`, failing with `what` after `WAIT`.
fn eventually<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + WAIT;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_cached_login_never_waits_behind_a_wrong_password_flood() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(
        dir.path(),
        &format!(
            "basic_auth_users:\n  prom: '{PROM_HASH}'\n  fresh: '{FRESH_HASH}'\n\
             http_server_config:\n  headers:\n    X-Content-Type-Options: nosniff\n"
        ),
    );
    let e = Exporter::simulate(
        "workstation",
        &[&format!("--web.config.file={}", config.display())],
    );
    let good = basic("prom", "scrape-me");
    // The first login runs bcrypt once; from then on it is remembered.
    eventually("a first good login", || {
        (e.request("GET", "/metrics", &[("Authorization", &good)])
            .status
            == 200)
            .then_some(())
    });

    // The flood: wrong passwords from one host, all at once. Each answer is
    // recorded in the order it arrives.
    const FLOOD: usize = 12;
    let answers: Arc<Mutex<Vec<Response>>> = Arc::default();
    let flood: Vec<_> = (0..FLOOD)
        .map(|i| {
            let (answers, addr) = (answers.clone(), e.addr);
            std::thread::spawn(move || {
                let wrong = basic("prom", &format!("guess-{i}"));
                let r = get_from(local(1), addr, "/metrics", &[("Authorization", &wrong)])
                    .expect("a flood request gets an answer");
                answers.lock().unwrap().push(r);
            })
        })
        .collect();
    let statuses = |answers: &Mutex<Vec<Response>>| -> Vec<u16> {
        answers.lock().unwrap().iter().map(|r| r.status).collect()
    };
    // Only PLACES_PER_PEER of them can be queued for bcrypt; the rest are
    // refused at once, so they are all answered before the first bcrypt
    // check of the flood finishes.
    let early = eventually("the flood's immediate answers", || {
        let s = statuses(&answers);
        (s.len() >= FLOOD - PLACES_PER_PEER || s.contains(&401)).then_some(s)
    });
    assert!(
        early.iter().all(|&s| s == 429),
        "answers before any bcrypt check of the flood finished: {early:?} \
         (wrong passwords beyond the queue must get 429 at once, not wait)"
    );
    // While the queued checks run, the remembered login is answered, from
    // the very host that floods: it does not queue behind them.
    let cached = e.request("GET", "/metrics", &[("Authorization", &good)]);
    assert_eq!(cached.status, 200, "{}", e.log());
    let before_cached = statuses(&answers);
    assert!(
        !before_cached.contains(&401),
        "a bcrypt check of the flood finished before the cached login was answered: \
         {before_cached:?}; the cached login waited behind bcrypt"
    );
    // A fresh login from another host is queued (its host has its own
    // places), not refused, though the flooding host's places are taken.
    let fresh = get_from(
        local(2),
        e.addr,
        "/metrics",
        &[("Authorization", &basic("fresh", "fresh-login"))],
    )
    .unwrap();
    assert_eq!(fresh.status, 200, "{}", e.log());

    for t in flood {
        t.join().unwrap();
    }
    let answers = answers.lock().unwrap();
    let refused: Vec<&Response> = answers.iter().filter(|r| r.status == 429).collect();
    let checked = answers.iter().filter(|r| r.status == 401).count();
    assert_eq!(refused.len() + checked, FLOOD, "only 401 and 429");
    assert!(checked >= PLACES_PER_PEER, "{checked} checked");
    for r in refused {
        assert_eq!(r.header("retry-after"), Some("1"));
        assert_eq!(r.header("x-content-type-options"), Some("nosniff"));
        assert_eq!(r.header("www-authenticate"), None);
    }
    assert!(
        e.log().contains("too many password checks queued"),
        "{}",
        e.log()
    );
}

#[test]
fn a_client_that_stops_reading_is_cut_off_by_the_write_timeout() {
    // Ready: every GPU sampled, so each answer is the full exposition.
    let e = Exporter::ready("dgx-h100", &["--web.write-timeout=1s", "--log.level=debug"]);
    let one = e
        .request("GET", "/metrics", &[("Accept-Encoding", "identity")])
        .body
        .len();
    // Asks for many answers, with a tiny receive window, and never reads:
    // 32 MiB of answers, far more than the kernel buffers on both sides can
    // hold (Linux lets a socket's send buffer grow to 4 MiB by default).
    let asked = (32 << 20) / one + 1;
    let stalled = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    stalled.set_recv_buffer_size(4096).unwrap();
    stalled.connect(&e.addr.into()).unwrap();
    let mut stalled: TcpStream = stalled.into();
    let request = "GET /metrics HTTP/1.1\r\nHost: x\r\nAccept-Encoding: identity\r\n\r\n";
    stalled.write_all(request.repeat(asked).as_bytes()).unwrap();
    // Others are served meanwhile.
    assert_eq!(e.get("/-/healthy").status, 200);
    assert_eq!(e.get("/metrics").status, 200);
    assert!(
        e.wait_log("write timed out", WAIT),
        "the stalled client was never cut off:\n{}",
        e.log()
    );
    // The connection ends: what the kernel already held drains, then EOF
    // (or a reset), well short of everything that was asked for.
    stalled.set_read_timeout(Some(WAIT)).unwrap();
    let mut got = 0usize;
    let mut buf = vec![0u8; 1 << 16];
    loop {
        match stalled.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(err) if err.kind() == std::io::ErrorKind::ConnectionReset => break,
            Err(err) => panic!("the connection was not closed: {err}"),
        }
    }
    assert!(
        got < asked * one,
        "received {got} bytes, all {asked} answers: not cut off"
    );
    assert_eq!(e.get("/metrics").status, 200);
}

#[test]
fn probes_keep_connections_of_their_own_when_the_limit_is_reached() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(
        dir.path(),
        "http_server_config:\n  headers:\n    X-Content-Type-Options: nosniff\n",
    );
    // A long header timeout: the idle connections below hold their slots
    // for the whole test.
    let e = Exporter::ready(
        "workstation",
        &[
            &format!("--web.config.file={}", config.display()),
            "--web.max-connections=2",
            "--web.read-header-timeout=2m",
        ],
    );
    let (idle, refused) = e.take_every_connection_slot(2);
    assert!(refused.text().contains("Too many connections"));
    assert_eq!(refused.header("retry-after"), Some("1"));
    assert_eq!(refused.header("x-content-type-options"), Some("nosniff"));
    assert!(e.wait_log("connection limit reached", WAIT));

    // More silent connections than there are slots kept for probes: each
    // is refused with the canned 503 (once it has shown no request line),
    // and none of them takes a probe's slot.
    let silent: Vec<TcpStream> = (0..PROBE_RESERVED + 4)
        .map(|_| TcpStream::connect(e.addr).unwrap())
        .collect();
    // Probes are answered all along.
    for _ in 0..3 {
        assert_eq!(e.get("/-/healthy").status, 200, "{}", e.log());
        let ready = e.get("/-/ready");
        assert_eq!(ready.status, 200, "{}", ready.text());
        assert_eq!(e.request("HEAD", "/-/healthy", &[]).status, 200);
    }
    for mut s in silent {
        s.set_read_timeout(Some(WAIT)).unwrap();
        let mut buf = Vec::new();
        s.read_to_end(&mut buf).unwrap();
        let canned = Response::parse(&buf).unwrap();
        assert_eq!(canned.status, 503);
        assert_eq!(canned.header("retry-after"), Some("1"));
        assert_eq!(canned.header("x-content-type-options"), Some("nosniff"));
        assert!(canned.text().contains("Too many connections"));
    }
    assert_eq!(e.get("/-/healthy").status, 200);

    drop(idle);
    eventually("the slots to free up", || {
        (e.get("/metrics").status == 200).then_some(())
    });
}

#[test]
fn the_parsers_own_answers_carry_the_configured_headers() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(
        dir.path(),
        "http_server_config:\n  headers:\n    X-Content-Type-Options: nosniff\n    \
         X-Frame-Options: deny\n",
    );
    let e = Exporter::serving(
        "workstation",
        &[&format!("--web.config.file={}", config.display())],
    );
    let garbage = e.raw(b"THIS IS NOT HTTP\r\n\r\n").unwrap();
    assert_eq!(garbage.status, 400);
    let huge = format!(
        "GET /metrics HTTP/1.1\r\nHost: x\r\nX-Big: {}\r\n\r\n",
        "a".repeat(20 * 1024)
    );
    let too_large = e.raw(huge.as_bytes()).unwrap();
    assert_eq!(too_large.status, 431);
    for r in [&garbage, &too_large] {
        assert_eq!(r.header("x-content-type-options"), Some("nosniff"), "{r:?}");
        assert_eq!(r.header("x-frame-options"), Some("deny"), "{r:?}");
        assert_eq!(r.header("connection"), Some("close"), "{r:?}");
    }
    // Handlers' answers have them once, not twice.
    let ok = e.get("/metrics");
    let n = ok
        .headers
        .iter()
        .filter(|(k, _)| k == "x-frame-options")
        .count();
    assert_eq!(n, 1);
}

/// Values a bad `basic_auth_users` entry may carry: each must never appear
/// in any log line.
fn secret_cases() -> Vec<(String, &'static str)> {
    let truncated = &PROM_HASH[..59];
    vec![
        (
            "basic_auth_users:\n  alice: hunter2plaintext\n".to_string(),
            "hunter2plaintext",
        ),
        (
            format!("basic_auth_users:\n  alice: '{truncated}'\n"),
            truncated,
        ),
        (
            format!("basic_auth_users:\n  alice: '{PROM_HASH}x'\n"),
            PROM_HASH,
        ),
        (
            "basic_auth_users:\n  alice: 8675309183\n".to_string(),
            "8675309183",
        ),
        (
            "basic_auth_users: alice:hunter3plaintext\n".to_string(),
            "hunter3plaintext",
        ),
        (
            "basic_auth_users:\n  alice:\n    password: hunter4plaintext\n".to_string(),
            "hunter4plaintext",
        ),
    ]
}

/// `secret` and its 12-character pieces: a log line must hold none.
fn assert_not_logged(log: &str, secret: &str, case: &str) {
    let pieces: Vec<&str> = if secret.len() <= 12 {
        vec![secret]
    } else {
        (0..=secret.len() - 12)
            .map(|i| &secret[i..i + 12])
            .collect()
    };
    for line in log.lines() {
        for piece in &pieces {
            assert!(
                !line.contains(piece),
                "{case:?}: the log shows {piece:?} of the value:\n{line}"
            );
        }
    }
}

#[test]
fn bad_basic_auth_values_never_reach_the_log() {
    let dir = tempfile::tempdir().unwrap();
    for (yaml, secret) in secret_cases() {
        let config = write_config(dir.path(), &yaml);
        let (status, out) = common::run_to_exit(
            &[
                "--simulate=workstation",
                "--web.listen-address=127.0.0.1:0",
                &format!("--web.config.file={}", config.display()),
            ],
            &[],
        );
        assert_eq!(status.code(), Some(1), "{yaml:?}:\n{out}");
        assert!(out.contains("basic_auth_users"), "{yaml:?}:\n{out}");
        assert_not_logged(&out, secret, &yaml);
    }
    // The same values arriving by a reload, while serving.
    let good = format!("basic_auth_users:\n  alice: '{CHEAP_HASH}'\n");
    let config = write_config(dir.path(), &good);
    let e = Exporter::simulate(
        "workstation",
        &[
            &format!("--web.config.file={}", config.display()),
            "--log.level=debug",
        ],
    );
    // One SIGHUP per case, each waited for, so every value is read once
    // (the file poll may read some of them too).
    let refused_on_sighup = || {
        e.log()
            .lines()
            .filter(|l| l.contains("web config reload failed") && l.contains("trigger=SIGHUP"))
            .count()
    };
    for (n, (yaml, _)) in secret_cases().into_iter().enumerate() {
        write_config(dir.path(), &yaml);
        common::signal(e.pid(), "HUP");
        eventually("the reload to be refused", || {
            (refused_on_sighup() > n).then_some(())
        });
    }
    write_config(dir.path(), &good);
    let log = e.log();
    for (yaml, secret) in secret_cases() {
        assert_not_logged(&log, secret, &yaml);
    }
    assert!(log.contains("user \\\"alice\\\""), "{log}");
}

#[test]
fn mixed_bcrypt_costs_are_warned_about_without_the_hashes() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(
        dir.path(),
        &format!("basic_auth_users:\n  prom: '{PROM_HASH}'\n  cheap: '{CHEAP_HASH}'\n"),
    );
    let e = Exporter::simulate(
        "workstation",
        &[&format!("--web.config.file={}", config.display())],
    );
    assert!(
        e.wait_log("bcrypt costs differ", WAIT),
        "no warning:\n{}",
        e.log()
    );
    let log = e.log();
    assert!(
        log.contains("cost 4: cheap") && log.contains("cost 12: prom"),
        "{log}"
    );
    assert_not_logged(&log, &PROM_HASH[7..], "prom's hash");
    assert_not_logged(&log, &CHEAP_HASH[7..], "cheap's hash");
}

#[test]
fn huge_limits_are_usage_errors() {
    for flag in ["--web.max-connections", "--web.max-requests"] {
        let (status, out) = common::run_to_exit(&["--simulate", flag, "18446744073709551615"], &[]);
        assert_eq!(status.code(), Some(2), "{flag}:\n{out}");
        assert!(out.contains(flag), "{out}");
        assert!(out.contains("1000000"), "{out}");
        assert!(!out.contains("panicked"), "{out}");
    }
    let (status, out) = common::run_to_exit(
        &["--simulate"],
        &[("NVML_EXPORTER_WEB_MAX_CONNECTIONS", "99999999999")],
    );
    assert_eq!(status.code(), Some(2), "{out}");
}

#[test]
fn sighup_reloads_the_web_config_and_keeps_serving() {
    let dir = tempfile::tempdir().unwrap();
    let headers = |v: &str| format!("http_server_config:\n  headers:\n    X-Frame-Options: {v}\n");
    let config = write_config(dir.path(), &headers("deny"));
    let mut e = Exporter::serving(
        "workstation",
        &[&format!("--web.config.file={}", config.display())],
    );
    assert_eq!(e.get("/").header("x-frame-options"), Some("deny"));
    write_config(dir.path(), &headers("sameorigin"));
    common::signal(e.pid(), "HUP");
    assert!(
        e.wait_log("trigger=SIGHUP", WAIT),
        "no reload on SIGHUP:\n{}",
        e.log()
    );
    assert_eq!(e.get("/").header("x-frame-options"), Some("sameorigin"));
    // A bad file on SIGHUP: said, and the last good config stays.
    write_config(
        dir.path(),
        "http_server_config:\n  headers:\n    Server: x\n",
    );
    common::signal(e.pid(), "HUP");
    eventually("the refused reload", || {
        e.log()
            .lines()
            .any(|l| l.contains("reload failed") && l.contains("trigger=SIGHUP"))
            .then_some(())
    });
    assert_eq!(e.get("/").header("x-frame-options"), Some("sameorigin"));
    let status = e.terminate(WAIT);
    assert_eq!(status.code(), Some(0), "{}", e.log());

    // Without a web config there is nothing to reload, and nothing dies.
    let mut plain = Exporter::serving("workstation", &[]);
    common::signal(plain.pid(), "HUP");
    assert!(
        plain.wait_log("no --web.config.file to reload", WAIT),
        "{}",
        plain.log()
    );
    assert_eq!(plain.get("/-/healthy").status, 200);
    assert_eq!(plain.terminate(WAIT).code(), Some(0));
}

/// A self-signed certificate for localhost valid between the two dates,
/// written as `name`.crt and `name`.key under `dir`.
fn certificate(dir: &Path, name: &str, from: (i32, u8, u8), to: (i32, u8, u8)) -> String {
    let key = rcgen::KeyPair::generate().unwrap();
    let mut p = rcgen::CertificateParams::new(vec!["localhost".to_string()]).unwrap();
    p.not_before = rcgen::date_time_ymd(from.0, from.1, from.2);
    p.not_after = rcgen::date_time_ymd(to.0, to.1, to.2);
    let cert = p.self_signed(&key).unwrap();
    std::fs::write(dir.join(format!("{name}.crt")), cert.pem()).unwrap();
    std::fs::write(dir.join(format!("{name}.key")), key.serialize_pem()).unwrap();
    format!("tls_server_config:\n  cert_file: {name}.crt\n  key_file: {name}.key\n")
}

#[test]
fn certificates_outside_their_dates_load_with_a_warning_naming_file_and_date() {
    let dir = tempfile::tempdir().unwrap();
    for (name, from, to, want) in [
        (
            "expired",
            (2020, 1, 1),
            (2021, 1, 1),
            "certificate expired on 2021-01-01 00:00:00 UTC",
        ),
        (
            "future",
            (2090, 1, 1),
            (2091, 1, 1),
            "certificate is not valid before 2090-01-01 00:00:00 UTC",
        ),
    ] {
        let config = write_config(dir.path(), &certificate(dir.path(), name, from, to));
        let e = Exporter::simulate(
            "workstation",
            &[&format!("--web.config.file={}", config.display())],
        );
        assert!(e.wait_log(want, WAIT), "{name}: no warning:\n{}", e.log());
        let line = e
            .log()
            .lines()
            .find(|l| l.contains(want))
            .unwrap()
            .to_string();
        assert!(line.contains("level=warn"), "{line}");
        assert!(line.contains(&format!("{name}.crt")), "{line}");
    }
    // A certificate inside its dates: no such warning.
    let config = write_config(
        dir.path(),
        &certificate(dir.path(), "current", (2020, 1, 1), (2090, 1, 1)),
    );
    let e = Exporter::simulate(
        "workstation",
        &[&format!("--web.config.file={}", config.display())],
    );
    assert!(e.wait_log("web config loaded", WAIT), "{}", e.log());
    assert!(!e.log().contains("certificate expired"), "{}", e.log());
    assert!(!e.log().contains("not valid before"), "{}", e.log());
}

#[test]
fn a_scenario_file_too_large_is_refused_unread() {
    let dir = tempfile::tempdir().unwrap();
    // A valid scenario, padded far past any real one.
    let big = dir.path().join("padded.toml");
    let mut text = String::from("[[gpu]]\nmodel = \"rtx-4090\"\n");
    let line = "# padding padding padding padding padding padding padding padding\n";
    text.push_str(&line.repeat((2 << 20) / line.len()));
    std::fs::write(&big, text).unwrap();
    // Refused before it is read whole, at start: exit 1, one line; a
    // device (which never ends) before it is opened.
    for (scenario, why) in [
        (big.to_str().unwrap(), "larger than 1048576 bytes"),
        ("/dev/zero", "not a regular file (a character device)"),
    ] {
        let flag = format!("--simulate={scenario}");
        let (status, out) = common::run_to_exit(&[&flag, "--web.listen-address=127.0.0.1:0"], &[]);
        assert_eq!(status.code(), Some(1), "{scenario}: {out}");
        assert!(out.contains(why), "{scenario}: {out}");
    }
}
