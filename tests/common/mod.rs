//! The Rust tests' one harness for the real `nvml-exporter` binary: runs
//! it on the simulated driver, bound to 127.0.0.1 on a port the kernel
//! picks (read back from the `listening` log line, so parallel tests never
//! race for ports), and kills it when dropped; plus the tools the tests
//! check its output with (promtool, the strict OpenMetrics parser).
//!
//! Beside it in `tests/common/`, included where needed: `pki.rs` (the one
//! certificate factory, also used by the web config unit tests), `tls.rs`
//! (the TLS client side), `snapshots.rs` (snapshot fixtures) and
//! `metrics_doc.rs` (docs/metrics.md as data).

#![allow(dead_code)] // each test binary uses a different part of it

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub const EXE: &str = env!("CARGO_BIN_EXE_nvml-exporter");

/// How long a start or a readiness wait may take before the test fails
/// with the exporter's log. Generous: CI machines are slow and shared.
const START_TIMEOUT: Duration = Duration::from_secs(60);

/// Fast polling so tests do not wait on the default 5s interval.
pub const TEST_INTERVAL: &str = "200ms";

/// What the exporter says of its own process and HTTP server, node_exporter's
/// way: node-level samples, with no `gpu` label, whose values move with
/// every run and every scrape.
pub const PROCESS_SAMPLES: &[&str] = &[
    "promhttp_metric_handler_requests_total",
    "nvml_exporter_http_refusals_total",
    "process_cpu_seconds_total",
    "process_resident_memory_bytes",
    "process_virtual_memory_bytes",
    "process_start_time_seconds",
    "process_open_fds",
    "process_max_fds",
];

/// A /dev/kmsg record logged `ago` seconds before now, at NVRM's level
/// (4): what the kernel-log tests write for the exporter to follow.
pub fn kmsg_record(seq: u64, ago: f64, message: &str) -> String {
    let ts = ((nvml_exporter::kmsg::uptime().unwrap() - ago).max(0.0) * 1e6) as u64;
    nvml_exporter::kmsg::format_record(4, seq, ts, message)
}

/// Appends `text` to the file at `path`, creating it: a log growing while
/// the exporter follows it.
pub fn append(path: &Path, text: &str) {
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
}

pub fn target_dir() -> PathBuf {
    Path::new(EXE)
        .parent()
        .expect("exe has a directory")
        .to_path_buf()
}

/// A file of the simulator crate built beside the exporter. Built by
/// `cargo build --workspace`; `cargo test` alone does not build another
/// package's cdylib or binary, so fail with the fix instead of a confusing
/// error.
fn sim_built(file: &str) -> PathBuf {
    let path = target_dir().join(file);
    assert!(
        path.exists(),
        "{} is missing: run `cargo build --workspace` before the end-to-end tests",
        path.display()
    );
    path
}

/// The simulated driver the exporter loads for `--simulate`.
pub fn sim_library() -> PathBuf {
    sim_built("libnvml_sim.so")
}

pub struct Exporter {
    child: Child,
    pub addr: SocketAddr,
    log: Arc<Mutex<String>>,
    reader: Option<std::thread::JoinHandle<()>>,
    telemetry_path: String,
}

/// The `nvml-sim` CLI built beside the exporter.
pub fn sim_cli() -> PathBuf {
    sim_built("nvml-sim")
}

/// The first column of an offline `nvml-sim` listing (`drivers`,
/// `scenarios`): the simulator's own data, so a branch or scenario added
/// there is tested without touching a test.
pub fn sim_listing(command: &str) -> Vec<String> {
    let out = std::process::Command::new(sim_cli())
        .arg(command)
        .output()
        .expect("nvml-sim runs");
    assert!(out.status.success(), "nvml-sim {command}: {out:?}");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_string)
        .collect()
}

/// How many GPUs a scenario has, as `nvml-sim check` counts them.
pub fn sim_gpu_count(scenario: &str) -> usize {
    let out = std::process::Command::new(sim_cli())
        .args(["check", scenario])
        .output()
        .expect("nvml-sim runs");
    assert!(out.status.success(), "nvml-sim check {scenario}: {out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    text.split(": ok: ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("nvml-sim check {scenario}: {text}"))
}

/// One version of every driver behaviour nvml-sim models (its
/// `drivers.toml`), both sides of R580's 580.82 field renumbering included.
pub fn driver_versions() -> Vec<String> {
    let versions = sim_listing("drivers");
    assert!(
        versions.len() >= 7 && versions.iter().any(|v| v == "580.95.05"),
        "{versions:?}"
    );
    versions
}

impl Exporter {
    /// Starts the exporter on `scenario` with a fast interval, plus `extra`
    /// flags, and waits until it listens.
    pub fn simulate(scenario: &str, extra: &[&str]) -> Exporter {
        Exporter::simulate_env(scenario, extra, &[])
    }

    /// `simulate` with environment variables (e.g. `NVML_SIM_CONTROL`).
    pub fn simulate_env(scenario: &str, extra: &[&str], env: &[(&str, &str)]) -> Exporter {
        sim_library();
        let mut args = vec![
            format!("--simulate={scenario}"),
            format!("--collect.interval={TEST_INTERVAL}"),
        ];
        args.extend(extra.iter().map(|s| s.to_string()));
        Exporter::start(&args, env)
    }

    /// The exporter on the default scenario with `--web.config.file` and
    /// `extra`, logging at debug level, at the default interval.
    pub fn web_config(config: &Path, extra: &[&str]) -> Exporter {
        sim_library();
        let mut args = vec![
            "--simulate".to_string(),
            format!("--web.config.file={}", config.display()),
            "--log.level=debug".to_string(),
        ];
        args.extend(extra.iter().map(|s| s.to_string()));
        Exporter::start(&args, &[])
    }

    /// Like `simulate`, then waits for `/-/ready`.
    pub fn ready(scenario: &str, extra: &[&str]) -> Exporter {
        let e = Exporter::simulate(scenario, extra);
        e.wait_ready();
        e
    }

    /// Starts the binary with exactly `args` (plus a loopback listen address
    /// and logfmt logs unless given) and `env`.
    pub fn start<S: AsRef<str>>(args: &[S], env: &[(&str, &str)]) -> Exporter {
        Exporter::start_exe(Path::new(EXE), args, env)
    }

    /// `start` with another build of the exporter (scripts/cross: the
    /// x86_64 one beside the aarch64 one under test).
    pub fn start_exe<S: AsRef<str>>(exe: &Path, args: &[S], env: &[(&str, &str)]) -> Exporter {
        let args: Vec<&str> = args.iter().map(|s| s.as_ref()).collect();
        let mut cmd = Command::new(exe);
        // With an address given, readiness to accept is found by connecting
        // (the `listening` log line is info and may be filtered out).
        let given: Option<SocketAddr> = args
            .iter()
            .find_map(|a| a.strip_prefix("--web.listen-address="))
            .map(|a| a.parse().expect("tests pass a literal IP:PORT"));
        let telemetry_path = args
            .iter()
            .rev()
            .find_map(|a| a.strip_prefix("--web.telemetry-path="))
            .or_else(|| {
                env.iter()
                    .find(|(k, _)| *k == "NVML_EXPORTER_WEB_TELEMETRY_PATH")
                    .map(|(_, v)| *v)
            })
            .unwrap_or("/metrics")
            .to_string();
        if given.is_none() {
            cmd.arg("--web.listen-address=127.0.0.1:0");
        }
        if !args.iter().any(|a| a.starts_with("--log.format")) {
            cmd.arg("--log.format=logfmt");
        }
        cmd.args(&args)
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().expect("spawn nvml-exporter");
        let stderr = child.stderr.take().expect("piped stderr");
        let log = Arc::new(Mutex::new(String::new()));
        let (tx, rx) = std::sync::mpsc::channel();
        let reader = {
            let log = log.clone();
            std::thread::spawn(move || {
                let mut tx = Some(tx);
                for line in BufReader::new(stderr).lines() {
                    let Ok(line) = line else { break };
                    if let Some(addr) = listening_address(&line) {
                        if let Some(tx) = tx.take() {
                            let _ = tx.send(addr);
                        }
                    }
                    let mut l = log.lock().unwrap();
                    l.push_str(&line);
                    l.push('\n');
                }
            })
        };
        let mut reader = Some(reader);
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            let found = match given {
                Some(addr) => {
                    std::thread::sleep(Duration::from_millis(50));
                    TcpStream::connect(addr).ok().map(|_| addr)
                }
                None => rx.recv_timeout(Duration::from_millis(50)).ok(),
            };
            match found {
                Some(addr) => {
                    return Exporter {
                        child,
                        addr,
                        log,
                        reader: reader.take(),
                        telemetry_path,
                    };
                }
                None => {
                    if let Ok(Some(status)) = child.try_wait() {
                        std::thread::sleep(Duration::from_millis(100));
                        panic!(
                            "nvml-exporter {args:?} exited with {status} before listening; log:\n{}",
                            log.lock().unwrap()
                        );
                    }
                    if Instant::now() > deadline {
                        let _ = child.kill();
                        panic!(
                            "nvml-exporter {args:?} did not listen within {START_TIMEOUT:?}; log:\n{}",
                            log.lock().unwrap()
                        );
                    }
                }
            }
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.addr, path)
    }

    /// The URL by the name the test certificates carry.
    pub fn https(&self, path: &str) -> String {
        format!("https://127.0.0.1:{}{path}", self.addr.port())
    }

    /// Still running (not exited by itself).
    pub fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    pub fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Like `simulate`, then waits for the first exposition (`/metrics`
    /// 200), ready or not: for tests of the HTTP layer, which do not care
    /// what the driver says.
    pub fn serving(scenario: &str, extra: &[&str]) -> Exporter {
        let e = Exporter::simulate(scenario, extra);
        e.wait_serving();
        e
    }

    pub fn wait_serving(&self) {
        self.wait_status(&self.telemetry_path(), 200);
    }

    /// Waits until `/-/ready` answers 200.
    pub fn wait_ready(&self) {
        self.wait_status("/-/ready", 200);
    }

    pub fn wait_status(&self, path: &str, status: u16) {
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if self.get(path).status == status {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{path} did not answer {status} within {START_TIMEOUT:?}; log:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// A plain GET with no Accept and no Accept-Encoding.
    pub fn get(&self, path: &str) -> Response {
        self.request("GET", path, &[])
    }

    pub fn request(&self, method: &str, path: &str, headers: &[(&str, &str)]) -> Response {
        let mut req = format!(
            "{method} {path} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n",
            self.addr
        );
        for (k, v) in headers {
            req.push_str(&format!("{k}: {v}\r\n"));
        }
        req.push_str("\r\n");
        self.raw(req.as_bytes())
            .unwrap_or_else(|e| panic!("{method} {path}: {e}; log:\n{}", self.log()))
    }

    /// Sends raw bytes and reads until the server closes. For requests no
    /// well-behaved client library would send.
    pub fn raw(&self, bytes: &[u8]) -> Result<Response, String> {
        let mut s = TcpStream::connect(self.addr).map_err(|e| e.to_string())?;
        s.set_read_timeout(Some(Duration::from_secs(30)))
            .map_err(|e| e.to_string())?;
        s.write_all(bytes).map_err(|e| e.to_string())?;
        let mut buf = Vec::new();
        s.read_to_end(&mut buf).map_err(|e| e.to_string())?;
        Response::parse(&buf)
    }

    /// For an exporter started with `--web.max-connections=<slots>`: opens
    /// connections until `slots` of them hold a regular slot each, then
    /// GETs `/metrics`, which must be refused. Returns the connections
    /// (idle keep-alive connections, holding their slots until dropped or
    /// until `--web.read-header-timeout`) and the refusal.
    ///
    /// A connection is not known to hold a slot when it is accepted: the
    /// request that found the exporter serving may hold its own slot a
    /// moment after its answer arrived, and a connection accepted then is
    /// over the limit. Over the limit, a probe is answered once and the
    /// connection closed; so a connection that answers two probes in a row
    /// holds a regular slot.
    pub fn take_every_connection_slot(&self, slots: usize) -> (Vec<TcpStream>, Response) {
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut held = Vec::new();
        while held.len() < slots {
            match self.connection_holding_a_slot() {
                Some(conn) => held.push(conn),
                None => {
                    assert!(
                        Instant::now() < deadline,
                        "no connection got one of {slots} slots; log:\n{}",
                        self.log()
                    );
                    std::thread::sleep(Duration::from_millis(20));
                }
            }
        }
        let refused = self.get("/metrics");
        assert_eq!(
            refused.status,
            503,
            "{slots} connections hold every slot, yet one more was served; log:\n{}",
            self.log()
        );
        (held, refused)
    }

    /// A new connection that has answered two probes, or None if the
    /// exporter closed it after one (it was over the connection limit).
    fn connection_holding_a_slot(&self) -> Option<TcpStream> {
        let mut conn = TcpStream::connect(self.addr).unwrap();
        conn.set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        for _ in 0..2 {
            conn.write_all(b"GET /-/healthy HTTP/1.1\r\nHost: x\r\n\r\n")
                .ok()?;
            if read_one_response(&mut conn).ok()?.status != 200 {
                return None;
            }
        }
        Some(conn)
    }

    /// Scrapes until `pred` holds (some readings need two polls, e.g. GPM
    /// rates), returning that scrape; fails after a minute showing the last
    /// scrape and the log.
    pub fn scrape_until(&self, what: &str, pred: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let text = self.scrape();
            if pred(&text) {
                return text;
            }
            assert!(
                Instant::now() < deadline,
                "timed out waiting for {what}; last scrape:\n{text}\nlog:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The text-format exposition (no gzip), asserting a 200.
    pub fn scrape(&self) -> String {
        let r = self.get(&self.telemetry_path());
        assert_eq!(
            r.status,
            200,
            "scrape failed: {}\nlog:\n{}",
            r.text(),
            self.log()
        );
        r.text()
    }

    /// The OpenMetrics exposition (no gzip), asserting a 200.
    pub fn scrape_openmetrics(&self) -> String {
        let r = self.request(
            "GET",
            &self.telemetry_path(),
            &[("Accept", "application/openmetrics-text; version=1.0.0")],
        );
        assert_eq!(r.status, 200, "scrape failed: {}", r.text());
        r.text()
    }

    fn telemetry_path(&self) -> String {
        self.telemetry_path.clone()
    }

    /// Sends SIGTERM and waits for the exit (killing it after `timeout`);
    /// the whole log is in `log()` afterwards.
    pub fn terminate(&mut self, timeout: Duration) -> ExitStatus {
        signal(self.child.id(), "TERM");
        self.wait_exit(timeout)
    }

    pub fn wait_exit(&mut self, timeout: Duration) -> ExitStatus {
        let status = wait_timeout(&mut self.child, timeout).unwrap_or_else(|| {
            let _ = self.child.kill();
            panic!(
                "exporter did not exit within {timeout:?}; log:\n{}",
                self.log()
            )
        });
        if let Some(r) = self.reader.take() {
            let _ = r.join();
        }
        status
    }

    /// Waits until the sampler has finished `n` more polls (the newest
    /// `nvml_exporter_last_sample_timestamp_seconds` moved `n` times): an
    /// event to wait on where a test shows something did *not* happen in
    /// the polls since, instead of a fixed sleep.
    pub fn wait_polls(&self, n: usize) {
        let newest = |text: &str| {
            samples(text)
                .iter()
                .filter(|s| s.name == "nvml_exporter_last_sample_timestamp_seconds")
                .filter_map(|s| s.value.parse::<f64>().ok())
                .fold(f64::MIN, f64::max)
        };
        let mut seen = vec![newest(&self.scrape())];
        let deadline = Instant::now() + START_TIMEOUT;
        while seen.len() <= n {
            assert!(
                Instant::now() < deadline,
                "the sampler did not finish {n} polls; log:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(20));
            let t = newest(&self.scrape());
            if t > *seen.last().unwrap() {
                seen.push(t);
            }
        }
    }

    /// Waits for the log to contain `needle`.
    pub fn wait_log(&self, needle: &str, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if self.log().contains(needle) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    }
}

impl Drop for Exporter {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn signal(pid: u32, sig: &str) {
    let ok = Command::new("kill")
        .args([format!("-{sig}"), pid.to_string()])
        .status()
        .expect("run kill")
        .success();
    assert!(ok, "kill -{sig} {pid} failed");
}

pub fn wait_timeout(child: &mut Child, timeout: Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return Some(status);
        }
        if Instant::now() > deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A port free right now on 127.0.0.1, for the few tests that must name
/// the address themselves.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// `address=127.0.0.1:PORT` from the `msg=listening` logfmt line.
fn listening_address(line: &str) -> Option<SocketAddr> {
    if !line.contains("msg=listening") {
        return None;
    }
    line.split(' ')
        .find_map(|kv| kv.strip_prefix("address="))
        .and_then(|a| a.parse().ok())
}

/// Runs the binary expecting it to exit by itself (bad flags, startup
/// errors): returns the exit status and stderr. Kills it and fails if it is
/// still running after 30s, i.e. if it started serving.
pub fn run_to_exit(args: &[&str], env: &[(&str, &str)]) -> (ExitStatus, String) {
    let mut child = Command::new(EXE)
        .args(args)
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn nvml-exporter");
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let out_t = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        s
    });
    let err_t = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let Some(status) = wait_timeout(&mut child, Duration::from_secs(30)) else {
        let _ = child.kill();
        let _ = child.wait();
        panic!("nvml-exporter {args:?} kept running; expected it to exit");
    };
    let stdout = out_t.join().unwrap();
    let stderr = err_t.join().unwrap();
    (status, stdout + &stderr)
}

/// Runs the exporter with `--web.config.file=config`, expecting it to
/// refuse to start: its exit status and everything it wrote.
pub fn refuses_web_config(config: &Path) -> (ExitStatus, String) {
    sim_library();
    run_to_exit(
        &[
            "--simulate",
            &format!("--web.listen-address=127.0.0.1:{}", free_port()),
            &format!("--web.config.file={}", config.display()),
        ],
        &[],
    )
}

/// An HTTP/1.1 response read off the wire, body de-chunked if needed.
#[derive(Debug, Clone)]
pub struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Response {
    pub fn parse(buf: &[u8]) -> Result<Response, String> {
        let end = buf
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .ok_or_else(|| format!("no header end in {:?}", String::from_utf8_lossy(buf)))?;
        let head = std::str::from_utf8(&buf[..end]).map_err(|e| e.to_string())?;
        let mut lines = head.split("\r\n");
        let status_line = lines.next().unwrap_or_default();
        let status = status_line
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| format!("bad status line {status_line:?}"))?;
        let headers: Vec<(String, String)> = lines
            .filter_map(|l| l.split_once(':'))
            .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
            .collect();
        let mut body = buf[end + 4..].to_vec();
        let chunked = headers
            .iter()
            .any(|(k, v)| k == "transfer-encoding" && v.contains("chunked"));
        if chunked {
            body = dechunk(&body)?;
        }
        Ok(Response {
            status,
            headers,
            body,
        })
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers
            .iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v.as_str())
    }

    pub fn text(&self) -> String {
        String::from_utf8(self.body.clone()).expect("utf-8 body")
    }
}

fn dechunk(mut b: &[u8]) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    loop {
        let nl = b.windows(2).position(|w| w == b"\r\n").ok_or("bad chunk")?;
        let size = usize::from_str_radix(
            std::str::from_utf8(&b[..nl])
                .map_err(|e| e.to_string())?
                .trim(),
            16,
        )
        .map_err(|e| e.to_string())?;
        b = &b[nl + 2..];
        if size == 0 {
            return Ok(out);
        }
        out.extend_from_slice(&b[..size]);
        b = &b[size + 2..];
    }
}

/// Series parsed from the text format: name, labels, value.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub name: String,
    pub labels: Vec<(String, String)>,
    pub value: String,
}

impl Sample {
    pub fn label(&self, name: &str) -> Option<&str> {
        self.labels
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// Parses the sample lines of a text exposition (comments skipped). Enough
/// for assertions on our own output; promtool does the strict checking.
pub fn samples(text: &str) -> Vec<Sample> {
    text.lines()
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| parse_sample(l).unwrap_or_else(|| panic!("unparsable sample line {l:?}")))
        .collect()
}

fn parse_sample(line: &str) -> Option<Sample> {
    let (name_end, labels, rest) = match line.find('{') {
        Some(open) if open < line.find(' ').unwrap_or(usize::MAX) => {
            let (labels, after) = parse_labels(&line[open + 1..])?;
            (open, labels, after)
        }
        _ => {
            let sp = line.find(' ')?;
            (sp, Vec::new(), &line[sp..])
        }
    };
    let value = rest.split_whitespace().next()?.to_string();
    Some(Sample {
        name: line[..name_end].to_string(),
        labels,
        value,
    })
}

fn parse_labels(mut s: &str) -> Option<(Vec<(String, String)>, &str)> {
    let mut out = Vec::new();
    loop {
        s = s.trim_start_matches(',');
        if let Some(rest) = s.strip_prefix('}') {
            return Some((out, rest));
        }
        let eq = s.find('=')?;
        let key = s[..eq].to_string();
        s = s[eq + 1..].strip_prefix('"')?;
        let mut value = String::new();
        let mut chars = s.char_indices();
        let end = loop {
            let (i, c) = chars.next()?;
            match c {
                '\\' => match chars.next()?.1 {
                    'n' => value.push('\n'),
                    c => value.push(c),
                },
                '"' => break i,
                c => value.push(c),
            }
        };
        out.push((key, value));
        s = &s[end + 1..];
    }
}

/// The value of the first series of `name` whose labels include `labels`.
pub fn value(text: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    samples(text)
        .into_iter()
        .find(|s| s.name == name && labels.iter().all(|(k, v)| s.label(k) == Some(v)))
        .map(|s| s.value.parse().unwrap())
}

/// XIDs counted per GPU: (gpu, xid) -> count.
pub fn xid_counts(text: &str) -> std::collections::BTreeMap<(String, String), f64> {
    samples(text)
        .into_iter()
        .filter(|s| s.name == "nvidia_gpu_xid_errors_total")
        .map(|s| {
            (
                (
                    s.label("gpu").unwrap().to_string(),
                    s.label("xid").unwrap().to_string(),
                ),
                s.value.parse().unwrap(),
            )
        })
        .collect()
}

/// An expected `gpu_verdicts` entry: (action, reason).
pub fn verdict(action: &str, reason: &str) -> (String, String) {
    (action.to_string(), reason.to_string())
}

/// gpu -> (action, reason) of each named GPU's own verdict (not its MIG
/// instances', not an unnamed address's).
pub fn gpu_verdicts(text: &str) -> std::collections::BTreeMap<String, (String, String)> {
    samples(text)
        .into_iter()
        .filter(|s| {
            s.name == "nvidia_gpu_recommended_action"
                && s.label("gpu_instance").is_none()
                && s.label("gpu").is_some()
        })
        .map(|s| {
            (
                s.label("gpu").unwrap().to_string(),
                (
                    s.label("action").unwrap().to_string(),
                    s.label("reason").unwrap().to_string(),
                ),
            )
        })
        .collect()
}

/// Metric family names declared by `# TYPE` lines.
pub fn families(text: &str) -> std::collections::BTreeSet<String> {
    text.lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split(' ').next())
        .map(str::to_string)
        .collect()
}

/// Finds a program the tests shell out to (promtool, python in .venv).
pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Runs `cmd` with `input` on its stdin: its exit code (-1 when killed by
/// a signal) and stdout followed by stderr.
pub fn run_with_stdin(mut cmd: Command, input: &[u8]) -> (i32, String) {
    let program = cmd.get_program().display().to_string();
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| {
            panic!("cannot run {program} (scripts/install-test-deps installs it): {e}")
        });
    let mut stdin = child.stdin.take().unwrap();
    let input = input.to_vec();
    let writer = std::thread::spawn(move || {
        let _ = stdin.write_all(&input);
    });
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap();
    let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.push_str(&String::from_utf8_lossy(&out.stderr));
    (out.status.code().unwrap_or(-1), text)
}

/// `promtool check metrics` on a text exposition: Err with promtool's
/// complaints unless it exits 0 and prints nothing (lint warnings exit 3).
pub fn promtool_check(text: &str) -> Result<(), String> {
    let mut cmd = Command::new("promtool");
    cmd.args(["check", "metrics"]);
    let (code, out) = run_with_stdin(cmd, text.as_bytes());
    if code == 0 && out.trim().is_empty() {
        Ok(())
    } else {
        Err(format!("promtool check metrics exited {code}:\n{out}"))
    }
}

pub fn venv_python() -> PathBuf {
    let py = repo_root().join(".venv/bin/python");
    assert!(
        py.exists(),
        "{} is missing: run scripts/install-test-deps",
        py.display()
    );
    py
}

/// Parses an OpenMetrics exposition with the strict parser of the Python
/// prometheus_client; returns `(family, type)` pairs or the parser's error.
pub fn openmetrics_parse(text: &str) -> Result<Vec<(String, String)>, String> {
    const SCRIPT: &str = r#"
import sys
from prometheus_client.openmetrics.parser import text_string_to_metric_families
text = sys.stdin.buffer.read().decode("utf-8")
for fam in text_string_to_metric_families(text):
    print(fam.name, fam.type)
"#;
    let mut cmd = Command::new(venv_python());
    cmd.args(["-c", SCRIPT]);
    let (code, out) = run_with_stdin(cmd, text.as_bytes());
    if code != 0 {
        return Err(format!("OpenMetrics parser exited {code}:\n{out}"));
    }
    Ok(out
        .lines()
        .filter_map(|l| l.split_once(' '))
        .map(|(n, t)| (n.to_string(), t.to_string()))
        .collect())
}

/// Runs the nvml-sim control CLI against `socket`.
pub fn sim_control(socket: &Path, args: &[&str]) {
    let cli = target_dir().join("nvml-sim");
    let out = Command::new(&cli)
        .arg("--socket")
        .arg(socket)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("run {}: {e}", cli.display()));
    assert!(
        out.status.success(),
        "nvml-sim {args:?} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// GPM readings need two polls: true once the dgx-h100 exposition has them
/// for every GPU (per MIG instance on GPUs 0 and 1, per GPU on 2-7).
pub fn dgx_h100_gpm_complete(text: &str) -> bool {
    (0..2).all(|g| text.contains(&format!("\nnvidia_gpu_mig_activity_ratio{{gpu=\"{g}\"")))
        && (2..8).all(|g| text.contains(&format!("\nnvidia_gpu_activity_ratio{{gpu=\"{g}\"")))
}

/// One response read from a connection that stays open: headers, then as
/// many body bytes as `content-length` says.
pub fn read_one_response(conn: &mut TcpStream) -> Result<Response, String> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = Response::parse(&buf[..end + 4])?;
            let length: usize = head
                .header("content-length")
                .ok_or("no content-length")?
                .parse()
                .map_err(|e| format!("content-length: {e}"))?;
            if buf.len() >= end + 4 + length {
                return Response::parse(&buf[..end + 4 + length]);
            }
        }
        match conn.read(&mut chunk) {
            Ok(0) => return Err("closed".into()),
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) => return Err(e.to_string()),
        }
    }
}
