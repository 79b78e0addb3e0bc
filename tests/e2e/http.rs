//! The HTTP surface of the real binary: endpoints, methods, content
//! negotiation, gzip, hostile requests, graceful shutdown.

use crate::common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use common::{Exporter, Response};

const TEXT: &str = "text/plain; version=0.0.4; charset=utf-8";
const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

fn gunzip(bytes: &[u8]) -> String {
    let mut s = String::new();
    flate2::read::GzDecoder::new(bytes)
        .read_to_string(&mut s)
        .expect("valid gzip");
    s
}

#[test]
fn endpoints() {
    let e = Exporter::serving("dgx-h100", &[]);
    let landing = e.get("/");
    assert_eq!(landing.status, 200);
    assert_eq!(
        landing.header("content-type"),
        Some("text/html; charset=utf-8")
    );
    assert!(landing.text().contains("href=\"/metrics\""));

    let healthy = e.get("/-/healthy");
    assert_eq!(healthy.status, 200);

    assert_eq!(e.get("/nope").status, 404);
    assert_eq!(e.get("/metrics/extra").status, 404);
    // The query string is not part of the path.
    assert_eq!(e.get("/metrics?x=1").status, 200);

    for method in ["POST", "PUT", "DELETE", "PATCH", "OPTIONS"] {
        for path in ["/metrics", "/", "/-/healthy", "/-/ready"] {
            let r = e.request(method, path, &[("Content-Length", "0")]);
            assert_eq!(r.status, 405, "{method} {path}");
            assert_eq!(r.header("allow"), Some("GET, HEAD"), "{method} {path}");
        }
    }
}

#[test]
fn not_ready_while_nvml_is_unavailable() {
    // A library whose nvmlInit fails (here nvml-sim told to build a fleet
    // from a file that does not exist, as a driver fails without its
    // kernel module): the exporter stays up, serves nvml_up 0 and reports
    // not ready.
    let dir = tempfile::tempdir().unwrap();
    let lib = format!("--nvml.library={}", common::sim_library().display());
    let absent = dir.path().join("absent.toml");
    let e = Exporter::start(
        &[lib.as_str(), "--collect.interval=200ms", "--state.path="],
        &[("NVML_SIM_SCENARIO", absent.to_str().unwrap())],
    );
    e.wait_serving();
    assert_eq!(e.get("/-/healthy").status, 200);
    let ready = e.get("/-/ready");
    assert_eq!(ready.status, 503);
    assert!(ready.text().contains("Not ready"));
    let metrics = e.get("/metrics").text();
    assert!(metrics.contains("\nnvml_exporter_nvml_up 0\n"), "{metrics}");
    assert_eq!(e.request("HEAD", "/-/ready", &[]).status, 503);
}

#[test]
fn head_matches_get_without_body() {
    let e = Exporter::serving("dgx-h100", &[]);
    let head = e.request("HEAD", "/metrics", &[]);
    assert_eq!(head.status, 200);
    assert!(head.body.is_empty());
    assert_eq!(head.header("content-type"), Some(TEXT));
    let len: usize = head.header("content-length").unwrap().parse().unwrap();
    assert!(len > 0);
    assert_eq!(e.request("HEAD", "/-/healthy", &[]).status, 200);
}

#[test]
fn content_negotiation() {
    let e = Exporter::serving("dgx-h100", &[]);
    let cases: &[(Option<&str>, &str)] = &[
        (None, TEXT),
        (Some("*/*"), TEXT),
        (Some("text/plain"), TEXT),
        (Some("text/plain;version=0.0.4"), TEXT),
        (Some("application/json"), TEXT),
        (Some("application/openmetrics-text"), OPENMETRICS),
        (
            Some("application/openmetrics-text; version=1.0.0"),
            OPENMETRICS,
        ),
        // What Prometheus 2.42 sends.
        (
            Some(
                "application/openmetrics-text;version=1.0.0,application/openmetrics-text;\
                 version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1",
            ),
            OPENMETRICS,
        ),
        (
            Some("text/plain;q=0.9, application/openmetrics-text;q=0.5"),
            TEXT,
        ),
        (Some("application/openmetrics-text;q=0"), TEXT),
    ];
    for (accept, want) in cases {
        let headers: Vec<(&str, &str)> = accept.iter().map(|a| ("Accept", *a)).collect();
        let r = e.request("GET", "/metrics", &headers);
        assert_eq!(r.status, 200);
        assert_eq!(r.header("content-type"), Some(*want), "Accept: {accept:?}");
        let body = r.text();
        if *want == OPENMETRICS {
            assert!(body.ends_with("# EOF\n"), "OpenMetrics must end in # EOF");
        } else {
            assert!(!body.contains("# EOF"), "text format must not carry # EOF");
        }
        assert!(r.header("vary").unwrap().contains("Accept-Encoding"));
    }
}

#[test]
fn gzip_decodes_to_the_plain_body() {
    // Ready (every GPU sampled once) and a slow interval, so that every
    // request sees the same snapshot: serving alone let the first poll land
    // between two requests on a loaded machine.
    let e = Exporter::ready("dgx-h100", &["--collect.interval=1h"]);
    for accept in ["text/plain", "application/openmetrics-text"] {
        let plain = e.request("GET", "/metrics", &[("Accept", accept)]);
        assert_eq!(plain.header("content-encoding"), None);
        let gz = e.request(
            "GET",
            "/metrics",
            &[("Accept", accept), ("Accept-Encoding", "gzip, deflate")],
        );
        assert_eq!(gz.status, 200);
        assert_eq!(gz.header("content-encoding"), Some("gzip"));
        assert_eq!(gz.header("content-type"), plain.header("content-type"));
        assert_eq!(
            gz.header("content-length")
                .map(|l| l.parse::<usize>().unwrap()),
            Some(gz.body.len())
        );
        assert!(
            gz.body.len() < plain.body.len(),
            "gzip should shrink the exposition"
        );
        assert_eq!(gunzip(&gz.body), plain.text(), "{accept}");
        let refused = e.request(
            "GET",
            "/metrics",
            &[
                ("Accept", accept),
                ("Accept-Encoding", "gzip;q=0, identity"),
            ],
        );
        assert_eq!(refused.header("content-encoding"), None);
        assert_eq!(refused.body, plain.body);
    }
}

#[test]
fn keep_alive_serves_many_requests_on_one_connection() {
    let e = Exporter::serving("workstation", &[]);
    let mut s = TcpStream::connect(e.addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    for _ in 0..3 {
        s.write_all(b"GET /-/healthy HTTP/1.1\r\nHost: x\r\n\r\n")
            .unwrap();
        let r = common::read_one_response(&mut s).unwrap();
        assert_eq!(r.status, 200);
    }
}

#[test]
fn malformed_and_oversized_requests_get_4xx_and_the_server_lives() {
    let e = Exporter::serving("workstation", &[]);
    let garbage = e.raw(b"THIS IS NOT HTTP\r\n\r\n").unwrap();
    assert_eq!(garbage.status, 400);
    let bad_version = e.raw(b"GET /metrics HTTP/9.9\r\nHost: x\r\n\r\n");
    if let Ok(r) = bad_version {
        assert!(
            (400..500).contains(&r.status) || r.status == 505,
            "{}",
            r.status
        );
    }
    let huge_header = format!(
        "GET /metrics HTTP/1.1\r\nHost: x\r\nX-Big: {}\r\n\r\n",
        "a".repeat(64 * 1024)
    );
    match e.raw(huge_header.as_bytes()) {
        Ok(r) => assert_eq!(r.status, 431),
        // The server may close while the client is still writing.
        Err(err) => assert!(err.contains("reset") || err.contains("pipe"), "{err}"),
    }
    let many_headers: String = (0..500).map(|i| format!("X-H{i}: v\r\n")).collect();
    let r = e
        .raw(format!("GET /metrics HTTP/1.1\r\nHost: x\r\n{many_headers}\r\n").as_bytes())
        .unwrap();
    assert!((400..500).contains(&r.status), "{}", r.status);
    let huge_uri = format!(
        "GET /{} HTTP/1.1\r\nHost: x\r\n\r\n",
        "a".repeat(100 * 1024)
    );
    if let Ok(r) = e.raw(huge_uri.as_bytes()) {
        assert!((400..500).contains(&r.status), "{}", r.status);
    }
    // Still serving.
    assert_eq!(e.get("/metrics").status, 200);
    assert_eq!(e.get("/-/healthy").status, 200);
}

#[test]
fn slow_clients_time_out_without_blocking_others() {
    let e = Exporter::serving("workstation", &["--web.read-header-timeout=500ms"]);
    let mut slow = TcpStream::connect(e.addr).unwrap();
    slow.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
        .unwrap();
    // Others are served while the slow one dawdles.
    assert_eq!(e.get("/metrics").status, 200);
    // The server closes the slow connection: EOF (or a 408) well before
    // the client's own 30s timeout.
    slow.set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let mut buf = Vec::new();
    let res = slow.read_to_end(&mut buf);
    assert!(
        res.is_ok()
            || matches!(res, Err(ref err) if err.kind() == std::io::ErrorKind::ConnectionReset),
        "{res:?}"
    );
    if !buf.is_empty() {
        let r = Response::parse(&buf).unwrap();
        assert_eq!(r.status, 408);
    }
    // An idle keep-alive connection is closed the same way.
    let mut idle = TcpStream::connect(e.addr).unwrap();
    idle.write_all(b"GET /-/healthy HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    idle.set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let mut first = [0u8; 1024];
    assert!(idle.read(&mut first).unwrap() > 0);
    let mut rest = Vec::new();
    let _ = idle.read_to_end(&mut rest);
    assert_eq!(e.get("/-/healthy").status, 200);
}

#[test]
fn custom_telemetry_path() {
    let e = Exporter::serving("workstation", &["--web.telemetry-path=/gpu/metrics"]);
    assert_eq!(e.get("/gpu/metrics").status, 200);
    assert_eq!(e.get("/metrics").status, 404);
    assert!(e.get("/").text().contains("href=\"/gpu/metrics\""));
}

#[test]
fn sigterm_exits_zero_and_finishes_the_request_in_flight() {
    let mut e = Exporter::serving("dgx-h100", &[]);
    let plain_len = e.get("/metrics").body.len();
    // A request whose headers are half sent when the signal arrives.
    let mut inflight = TcpStream::connect(e.addr).unwrap();
    inflight
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
        .unwrap();
    std::thread::sleep(Duration::from_millis(200));
    common::signal(e.pid(), "TERM");
    assert!(
        e.wait_log("msg=\"shutting down\"", Duration::from_secs(30)),
        "no shutdown log line:\n{}",
        e.log()
    );
    inflight.write_all(b"Accept: text/plain\r\n\r\n").unwrap();
    inflight
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let mut buf = Vec::new();
    inflight.read_to_end(&mut buf).unwrap();
    let r = Response::parse(&buf).unwrap();
    assert_eq!(r.status, 200);
    assert!(r.body.len() > plain_len / 2, "truncated body");
    let status = e.wait_exit(Duration::from_secs(30));
    assert_eq!(status.code(), Some(0), "log:\n{}", e.log());
    let log = e.log();
    assert!(log.contains("signal=SIGTERM"), "{log}");
    assert!(log.contains("msg=\"shutdown complete\""), "{log}");
    assert!(!log.contains("panicked"), "{log}");
    // Nobody listens any more.
    assert!(TcpStream::connect(e.addr).is_err());
}

#[test]
fn sigint_exits_zero() {
    let mut e = Exporter::serving("workstation", &[]);
    common::signal(e.pid(), "INT");
    let status = e.wait_exit(Duration::from_secs(30));
    assert_eq!(status.code(), Some(0), "log:\n{}", e.log());
    assert!(e.log().contains("signal=SIGINT"));
}

#[test]
fn connections_beyond_the_limit_get_503_and_the_limit_frees_up() {
    let e = Exporter::serving("workstation", &["--web.max-connections=2"]);
    // (Probes are not refused: they have connections of their own, tested
    // in e2e/hostile.rs.)
    let (idle, refused) = e.take_every_connection_slot(2);
    assert_eq!(refused.header("retry-after"), Some("1"));
    assert!(refused.text().contains("Too many connections"));
    assert!(e.wait_log("connection limit reached", Duration::from_secs(10)));
    drop(idle);
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while e.get("/-/healthy").status != 200 {
        assert!(std::time::Instant::now() < deadline, "limit never freed");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(e.get("/metrics").status, 200);
}

/// `--web.max-connections` is the process's limit, not each listener's:
/// with every slot taken through one address, a second address refuses
/// too (it used to serve up to the limit again on every listener).
#[test]
fn the_connection_limit_holds_across_every_listener() {
    let (first, second) = (common::free_port(), common::free_port());
    let e = Exporter::start(
        &[
            "--simulate=workstation".to_string(),
            format!("--web.listen-address=127.0.0.1:{first}"),
            format!("--web.listen-address=127.0.0.1:{second}"),
            "--web.max-connections=2".to_string(),
        ],
        &[],
    );
    e.wait_serving();
    let (_held, _) = e.take_every_connection_slot(2);
    let mut other = std::net::TcpStream::connect(("127.0.0.1", second)).unwrap();
    other
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    other
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let answer = common::read_one_response(&mut other).unwrap();
    assert_eq!(
        answer.status,
        503,
        "two connections on the first address hold the process's two slots, yet the second \
         address served /metrics; log:\n{}",
        e.log()
    );
}

/// The value of the first sample of `name` with `label` (any labels when
/// `None`) in a text exposition.
fn sample_value(text: &str, name: &str, label: Option<(&str, &str)>) -> Option<f64> {
    common::samples(text)
        .into_iter()
        .find(|s| s.name == name && label.is_none_or(|(k, v)| s.label(k) == Some(v)))
        .and_then(|s| s.value.parse().ok())
}

/// The `process_*` metrics every client library exports, true to the
/// process: restart and memory alerts written for node_exporter work.
#[test]
fn the_process_metrics_describe_the_exporter_itself() {
    let e = Exporter::ready("workstation", &[]);
    let text = e.scrape_until("process metrics", |t| t.contains("\nprocess_open_fds "));
    let status = std::fs::read_to_string(format!("/proc/{}/status", e.pid())).unwrap();
    let rss_kib: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap();
    let rss = sample_value(&text, "process_resident_memory_bytes", None).unwrap();
    // Same process, a moment apart: within a factor of two.
    assert!(
        rss > rss_kib * 1024.0 / 2.0 && rss < rss_kib * 1024.0 * 2.0,
        "{rss} vs {rss_kib} KiB"
    );
    let started = sample_value(&text, "process_start_time_seconds", None).unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    assert!(
        started <= now && started > now - 600.0,
        "{started} vs {now}"
    );
    assert!(sample_value(&text, "process_open_fds", None).unwrap() >= 3.0);
    assert!(sample_value(&text, "process_virtual_memory_bytes", None).unwrap() >= rss);
    assert!(sample_value(&text, "process_cpu_seconds_total", None).unwrap() >= 0.0);
    common::promtool_check(&text).unwrap();
}

/// Scrapes counted by status under promhttp's name, and refusals by
/// reason: a 503 from --web.max-requests shows, though the refused
/// scraper itself never sees a metric.
#[test]
fn scrapes_and_refusals_are_counted() {
    let e = Exporter::ready("workstation", &[]);
    for _ in 0..3 {
        e.scrape();
    }
    let _ = e.raw(b"NOT HTTP\r\n\r\n");
    let text = e.scrape_until("three scrapes and a refusal counted", |t| {
        sample_value(
            t,
            "promhttp_metric_handler_requests_total",
            Some(("code", "200")),
        )
        .is_some_and(|n| n >= 3.0)
            && sample_value(t, "nvml_exporter_http_refusals_total", None).is_some()
    });
    assert_eq!(
        sample_value(
            &text,
            "nvml_exporter_http_refusals_total",
            Some(("reason", "malformed_request"))
        ),
        Some(1.0),
        "{text}"
    );
}

/// exporter-toolkit serves every --web.listen-address given; `:PORT`
/// listens on IPv6 and IPv4 alike.
#[test]
fn every_listen_address_is_served_and_a_bare_port_is_dual_stack() {
    let (a, b) = (common::free_port(), common::free_port());
    let e = Exporter::start(
        &[
            "--simulate=workstation".to_string(),
            format!("--web.listen-address=127.0.0.1:{a}"),
            format!("--web.listen-address=:{b}"),
        ],
        &[],
    );
    for addr in [
        format!("127.0.0.1:{a}"),
        format!("127.0.0.1:{b}"),
        format!("[::1]:{b}"),
    ] {
        let mut s = TcpStream::connect(addr.as_str())
            .unwrap_or_else(|err| panic!("{addr}: {err}; log:\n{}", e.log()));
        s.write_all(b"GET /-/healthy HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .unwrap();
        let mut buf = Vec::new();
        s.read_to_end(&mut buf).unwrap();
        assert_eq!(Response::parse(&buf).unwrap().status, 200, "{addr}");
    }
    // The listeners may answer before the start-up line reaches the log.
    e.wait_log("msg=\"nvml-exporter started\"", Duration::from_secs(10));
    let log = e.log();
    let started = log
        .lines()
        .find(|l| l.contains("msg=\"nvml-exporter started\""))
        .unwrap_or_else(|| panic!("no start-up line:\n{log}"));
    for want in [
        format!("version={}", env!("CARGO_PKG_VERSION")),
        format!("127.0.0.1:{a}"),
        format!("[::]:{b}"),
        "collectors=".to_string(),
        "revision=".to_string(),
    ] {
        assert!(started.contains(&want), "{want}: {started}");
    }
}

/// `--web.systemd-socket`: the sockets systemd passes (here by
/// systemd-socket-activate, which sets LISTEN_FDS and LISTEN_PID).
#[test]
fn systemd_socket_activation() {
    common::sim_library();
    let port = common::free_port();
    let mut child = std::process::Command::new("systemd-socket-activate")
        .args(["-l", &format!("127.0.0.1:{port}"), common::EXE])
        .args(["--web.systemd-socket", "--simulate=workstation"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("systemd-socket-activate (Debian package systemd)");
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let status = loop {
        let answer = TcpStream::connect(("127.0.0.1", port))
            .ok()
            .and_then(|mut s| {
                s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
                s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                    .ok()?;
                let mut buf = Vec::new();
                s.read_to_end(&mut buf).ok()?;
                Response::parse(&buf).ok()
            });
        match answer {
            Some(r) if r.status == 200 => break r.status,
            _ if std::time::Instant::now() > deadline => break 0,
            _ => std::thread::sleep(Duration::from_millis(100)),
        }
    };
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(status, 200, "no scrape answered on the activated socket");
}

#[test]
fn systemd_socket_without_sockets_is_a_clear_error() {
    let (status, out) = common::run_to_exit(&["--web.systemd-socket", "--simulate"], &[]);
    assert_eq!(status.code(), Some(1), "{out}");
    assert!(out.contains("no sockets passed"), "{out}");
}

/// Issue 51 (probe 5): in the first moments after start `/metrics`
/// answered 200 with `nvml_exporter_nvml_up 0` for a driver that was only
/// initializing, then `nvidia_gpu_up 0` for every GPU not yet sampled.
/// Now it answers 503 "No sample taken yet" until NVML's first
/// initialization ends, and a GPU whose first sample has not ended has no
/// series at all. Made slow on purpose, not raced: nvmlInit takes 2 s
/// (a latency profile that sleeps) and GPU 3 hangs from the start.
#[test]
fn metrics_before_the_first_sample_is_503_and_no_gpu_series_not_zeros() {
    let dir = tempfile::tempdir().unwrap();
    let profile = dir.path().join("latency.tsv");
    std::fs::write(&profile, "function\tmedian_us\nnvmlInit_v2\t2000000\n").unwrap();
    let scenario = dir.path().join("hang.toml");
    std::fs::write(
        &scenario,
        "name = \"hang-3\"\nbase = \"dgx-h100\"\n\n[[timeline]]\nat = 0\naction = \"hang\"\ngpu = 3\n",
    )
    .unwrap();
    common::sim_library();
    let args = [
        format!("--simulate={}", scenario.display()),
        format!("--collect.interval={}", common::TEST_INTERVAL),
        "--collect.stuck-deadline=60s".to_string(),
    ];
    let env = [
        ("NVML_SIM_LATENCY", profile.to_str().unwrap()),
        ("NVML_SIM_LATENCY_SLEEP", "1"),
    ];
    let e = Exporter::start(&args, &env);
    let mut answers = Vec::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let text = loop {
        assert!(
            std::time::Instant::now() < deadline,
            "{answers:?}\n{}",
            e.log()
        );
        let r = e.get("/metrics");
        let text = r.text();
        if r.status != 200 {
            answers.push((r.status, text));
            continue;
        }
        assert!(
            !text.contains("nvml_exporter_nvml_up 0"),
            "NVML only initializing is not down:\n{text}"
        );
        assert!(
            !text
                .lines()
                .any(|l| l.starts_with("nvidia_gpu_up{") && l.ends_with(" 0")),
            "a GPU not yet sampled is not down:\n{text}"
        );
        if common::value(&text, "nvidia_gpu_up", &[("gpu", "0")]) == Some(1.0) {
            break text;
        }
    };
    assert!(
        answers
            .iter()
            .any(|(s, t)| *s == 503 && t.contains("No sample taken yet")),
        "503 while NVML initializes: {answers:?}"
    );
    assert!(answers.iter().all(|(s, _)| *s == 503), "{answers:?}");
    for gpu in ["0", "1", "2", "4", "5", "6", "7"] {
        assert_eq!(
            common::value(&text, "nvidia_gpu_up", &[("gpu", gpu)]),
            Some(1.0),
            "{text}"
        );
    }
    assert!(
        !text.contains("gpu=\"3\""),
        "GPU 3, never sampled, has no series:\n{text}"
    );
}
