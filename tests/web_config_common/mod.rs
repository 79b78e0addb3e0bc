//! Helpers for the web config end-to-end tests: certificates generated per
//! test, the real exporter binary on the simulator, and a rustls client.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair, SanType};
use tokio_rustls::rustls::{
    self,
    pki_types::{pem::PemObject, CertificateDer, PrivateKeyDer, ServerName},
    ClientConfig, ClientConnection, RootCertStore, StreamOwned,
};

pub const EXE: &str = env!("CARGO_BIN_EXE_nvml-exporter");

/// A CA with server and client certificates under `dir`:
/// ca.crt, server.crt/.key (localhost, 127.0.0.1), server2.crt/.key (same
/// names, for rotation), client.crt/.key, rogue-client.crt/.key (another CA).
pub struct Pki {
    pub dir: tempfile::TempDir,
}

fn issue(
    names: &[&str],
    cn: &str,
    ca: Option<&CertifiedIssuer<'static, KeyPair>>,
) -> (rcgen::Certificate, KeyPair) {
    let key = KeyPair::generate().unwrap();
    let mut p = CertificateParams::new(
        names
            .iter()
            .filter(|n| n.parse::<std::net::IpAddr>().is_err())
            .map(|n| n.to_string())
            .collect::<Vec<_>>(),
    )
    .unwrap();
    for n in names {
        if let Ok(ip) = n.parse() {
            p.subject_alt_names.push(SanType::IpAddress(ip));
        }
    }
    p.distinguished_name.push(DnType::CommonName, cn);
    let cert = match ca {
        Some(ca) => p.signed_by(&key, ca).unwrap(),
        None => p.self_signed(&key).unwrap(),
    };
    (cert, key)
}

fn make_ca(cn: &str) -> CertifiedIssuer<'static, KeyPair> {
    let key = KeyPair::generate().unwrap();
    let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
    p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    p.distinguished_name.push(DnType::CommonName, cn);
    CertifiedIssuer::self_signed(p, key).unwrap()
}

impl Pki {
    pub fn new() -> Pki {
        let dir = tempfile::tempdir().unwrap();
        let ca = make_ca("nvml-exporter test CA");
        let rogue_ca = make_ca("rogue CA");
        let write = |name: &str, body: String| std::fs::write(dir.path().join(name), body).unwrap();
        write("ca.crt", ca.pem());
        for (name, cn) in [("server", "server one"), ("server2", "server two")] {
            let (c, k) = issue(&["localhost", "127.0.0.1"], cn, Some(&ca));
            write(&format!("{name}.crt"), c.pem());
            write(&format!("{name}.key"), k.serialize_pem());
        }
        let (c, k) = issue(&["scraper.example"], "scraper", Some(&ca));
        write("client.crt", c.pem());
        write("client.key", k.serialize_pem());
        let (c, k) = issue(&["other.example"], "other scraper", Some(&ca));
        write("other-client.crt", c.pem());
        write("other-client.key", k.serialize_pem());
        let (c, k) = issue(&["scraper.example"], "rogue", Some(&rogue_ca));
        write("rogue-client.crt", c.pem());
        write("rogue-client.key", k.serialize_pem());
        Pki { dir }
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    pub fn write_config(&self, yaml: &str) -> PathBuf {
        let p = self.path("web.yml");
        // Write-then-rename, as config management does, so the watcher
        // never reads a half-written file.
        let tmp = self.path("web.yml.tmp");
        std::fs::write(&tmp, yaml).unwrap();
        std::fs::rename(&tmp, &p).unwrap();
        p
    }

    pub fn cert_der(&self, name: &str) -> CertificateDer<'static> {
        let pem = std::fs::read(self.path(name)).unwrap();
        CertificateDer::pem_slice_iter(&pem)
            .next()
            .unwrap()
            .unwrap()
    }
}

pub fn bcrypt_hash(password: &str) -> String {
    bcrypt::hash(password, 4).unwrap()
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// libnvml_sim.so next to the exporter binary, built if missing.
pub fn ensure_simulator() {
    let exe_dir = Path::new(EXE).parent().unwrap();
    if exe_dir.join("libnvml_sim.so").exists() {
        return;
    }
    let status = Command::new(env!("CARGO"))
        .args(["build", "-p", "nvml-sim"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .status()
        .unwrap();
    assert!(status.success(), "building nvml-sim failed");
}

pub struct Exporter {
    child: Child,
    pub addr: SocketAddr,
    log: Arc<Mutex<String>>,
}

impl Exporter {
    /// Runs the exporter on the simulator with `--web.config.file` and
    /// `extra`, and waits until it accepts TCP connections.
    pub fn start(config: &Path, extra: &[&str]) -> Exporter {
        ensure_simulator();
        let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
        let mut child = Command::new(EXE)
            .arg("--simulate")
            .arg(format!("--web.listen-address={addr}"))
            .arg(format!("--web.config.file={}", config.display()))
            .arg("--log.level=debug")
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn nvml-exporter");
        let log = Arc::new(Mutex::new(String::new()));
        let stderr = child.stderr.take().unwrap();
        {
            let log = log.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(stderr).lines() {
                    let Ok(line) = line else { break };
                    let mut l = log.lock().unwrap();
                    l.push_str(&line);
                    l.push('\n');
                }
            });
        }
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if TcpStream::connect(addr).is_ok() {
                return Exporter { child, addr, log };
            }
            if let Ok(Some(status)) = child.try_wait() {
                std::thread::sleep(Duration::from_millis(200));
                panic!(
                    "exporter exited with {status}; log:\n{}",
                    log.lock().unwrap()
                );
            }
            assert!(
                Instant::now() < deadline,
                "exporter did not listen; log:\n{}",
                log.lock().unwrap()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    pub fn https(&self, path: &str) -> String {
        format!("https://127.0.0.1:{}{path}", self.addr.port())
    }

    pub fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }
}

impl Drop for Exporter {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs the exporter expecting it to refuse to start; returns its exit
/// status and everything it wrote.
pub fn run_to_exit(config: &Path) -> (ExitStatus, String) {
    ensure_simulator();
    let out = Command::new(EXE)
        .arg("--simulate")
        .arg(format!("--web.listen-address=127.0.0.1:{}", free_port()))
        .arg(format!("--web.config.file={}", config.display()))
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let mut text = String::from_utf8_lossy(&out.stderr).into_owned();
    text.push_str(&String::from_utf8_lossy(&out.stdout));
    (out.status, text)
}

#[derive(Debug)]
pub struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
    /// The certificate the server presented.
    pub server_cert: CertificateDer<'static>,
}

impl Response {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

pub struct Client {
    pub roots: Vec<PathBuf>,
    pub identity: Option<(PathBuf, PathBuf)>,
    pub basic: Option<(String, String)>,
    pub versions: Vec<&'static rustls::SupportedProtocolVersion>,
}

impl Client {
    pub fn new(pki: &Pki) -> Client {
        Client {
            roots: vec![pki.path("ca.crt")],
            identity: None,
            basic: None,
            versions: vec![&rustls::version::TLS13, &rustls::version::TLS12],
        }
    }

    pub fn with_cert(mut self, pki: &Pki, name: &str) -> Client {
        self.identity = Some((
            pki.path(&format!("{name}.crt")),
            pki.path(&format!("{name}.key")),
        ));
        self
    }

    pub fn with_basic(mut self, user: &str, pass: &str) -> Client {
        self.basic = Some((user.into(), pass.into()));
        self
    }

    fn config(&self) -> ClientConfig {
        let mut roots = RootCertStore::empty();
        for r in &self.roots {
            let pem = std::fs::read(r).unwrap();
            for c in CertificateDer::pem_slice_iter(&pem) {
                roots.add(c.unwrap()).unwrap();
            }
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = ClientConfig::builder_with_provider(provider)
            .with_protocol_versions(&self.versions)
            .unwrap()
            .with_root_certificates(roots);
        match &self.identity {
            Some((cert, key)) => {
                let cpem = std::fs::read(cert).unwrap();
                let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&cpem)
                    .map(|c| c.unwrap())
                    .collect();
                let kpem = std::fs::read(key).unwrap();
                let key = PrivateKeyDer::from_pem_slice(&kpem).unwrap();
                builder.with_client_auth_cert(certs, key).unwrap()
            }
            None => builder.with_no_client_auth(),
        }
    }

    /// One HTTPS GET over a fresh connection. Err: the TLS or HTTP exchange
    /// failed (handshake refused, connection closed).
    pub fn get(&self, addr: SocketAddr, path: &str) -> Result<Response, String> {
        let server_name = ServerName::try_from("localhost").unwrap();
        let conn = ClientConnection::new(Arc::new(self.config()), server_name)
            .map_err(|e| e.to_string())?;
        let sock = TcpStream::connect(addr).map_err(|e| e.to_string())?;
        sock.set_read_timeout(Some(Duration::from_secs(20)))
            .unwrap();
        let mut tls = StreamOwned::new(conn, sock);
        let mut req = format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n");
        if let Some((u, p)) = &self.basic {
            use base64::Engine as _;
            let b64 = base64::engine::general_purpose::STANDARD.encode(format!("{u}:{p}"));
            req.push_str(&format!("Authorization: Basic {b64}\r\n"));
        }
        req.push_str("\r\n");
        tls.write_all(req.as_bytes()).map_err(|e| e.to_string())?;
        let mut buf = Vec::new();
        match tls.read_to_end(&mut buf) {
            Ok(_) => {}
            // Servers may close without close_notify after Connection: close.
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof && !buf.is_empty() => {}
            Err(e) => return Err(e.to_string()),
        }
        let server_cert = tls
            .conn
            .peer_certificates()
            .and_then(|c| c.first().cloned())
            .ok_or("no server certificate")?
            .into_owned();
        parse_response(&buf, server_cert)
    }
}

fn parse_response(buf: &[u8], server_cert: CertificateDer<'static>) -> Result<Response, String> {
    let text = String::from_utf8_lossy(buf);
    let (head, body) = text.split_once("\r\n\r\n").ok_or("no end of headers")?;
    let mut lines = head.lines();
    let status_line = lines.next().ok_or("empty response")?;
    let status = status_line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or(format!("bad status line {status_line:?}"))?;
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect();
    let chunked = headers
        .iter()
        .any(|(k, v)| k.eq_ignore_ascii_case("transfer-encoding") && v.contains("chunked"));
    let body = if chunked {
        dechunk(body)
    } else {
        body.to_string()
    };
    Ok(Response {
        status,
        headers,
        body,
        server_cert,
    })
}

fn dechunk(mut s: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = s.split_once("\r\n") {
        let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if n == 0 || rest.len() < n {
            break;
        }
        out.push_str(&rest[..n]);
        s = rest[n..].trim_start_matches("\r\n");
    }
    out
}

/// Runs curl; returns (exit code, stdout, stderr).
pub fn curl(args: &[&str]) -> (i32, String, String) {
    let out = Command::new("curl")
        .args(["-sS", "--max-time", "20"])
        .args(args)
        .output()
        .expect("curl is installed by scripts/install-test-deps");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Polls `f` until it returns Some, or panics after `timeout`.
pub fn eventually<T>(timeout: Duration, what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}
