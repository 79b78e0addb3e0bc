//! The client side of the web config tests: a rustls client that reports
//! the certificate the server presented, curl, and bcrypt hashes. The
//! exporter itself runs under the one harness, `common::Exporter`.

#![allow(dead_code)] // each includer uses a different part

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio_rustls::rustls::{
    self,
    pki_types::{pem::PemObject, CertificateDer, PrivateKeyDer, ServerName},
    ClientConfig, ClientConnection, RootCertStore, StreamOwned,
};

use crate::common;
use crate::pki::Pki;

impl Pki {
    /// The first certificate in PEM file `name`, as DER.
    pub fn cert_der(&self, name: &str) -> CertificateDer<'static> {
        CertificateDer::from_pem_file(self.path(name)).unwrap()
    }
}

pub fn bcrypt_hash(password: &str) -> String {
    bcrypt::hash(password, 4).unwrap()
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
            for c in CertificateDer::pem_file_iter(r).unwrap() {
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
                let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
                    .unwrap()
                    .map(|c| c.unwrap())
                    .collect();
                let key = PrivateKeyDer::from_pem_file(key).unwrap();
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
        let r = common::Response::parse(&buf)?;
        Ok(Response {
            status: r.status,
            headers: r.headers,
            body: String::from_utf8_lossy(&r.body).into_owned(),
            server_cert,
        })
    }
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
