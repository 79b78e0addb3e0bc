//! The one certificate factory of the test suite, for the web config unit
//! tests (`src/web_config/tests.rs` includes this file) and the end-to-end
//! TLS tests alike: a CA and certificates issued per test, as PEM files in
//! a temporary directory.
//!
//! Uses only std, rcgen and tempfile, so that both can include it.

#![allow(dead_code)] // each includer uses a different part

use std::path::PathBuf;

use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair, SanType};

/// Under `dir`:
/// - `ca.crt`: the CA every certificate below is signed by, except where
///   said otherwise;
/// - `server.crt`/`.key`, `server2.crt`/`.key`: `localhost` and
///   `127.0.0.1` (two, for rotation);
/// - `client.crt`/`.key`: SANs `client.example`, `ops@example.com`,
///   `spiffe://example/scraper` and `10.1.2.3`, in that order;
/// - `other-client.crt`/`.key`: `other.example`;
/// - `rogue-client.crt`/`.key`: signed by another CA;
/// - `other.crt`/`.key`: self-signed, unrelated to everything else;
/// - `junk.pem`: not PEM at all.
pub struct Pki {
    pub dir: tempfile::TempDir,
}

enum San {
    Dns(&'static str),
    Email(&'static str),
    Uri(&'static str),
    Ip(&'static str),
}

fn issue(
    sans: &[San],
    cn: &str,
    ca: Option<&CertifiedIssuer<'static, KeyPair>>,
) -> (rcgen::Certificate, KeyPair) {
    let key = KeyPair::generate().unwrap();
    let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
    for san in sans {
        p.subject_alt_names.push(match *san {
            San::Dns(n) => SanType::DnsName(n.try_into().unwrap()),
            San::Email(n) => SanType::Rfc822Name(n.try_into().unwrap()),
            San::Uri(n) => SanType::URI(n.try_into().unwrap()),
            San::Ip(n) => SanType::IpAddress(n.parse().unwrap()),
        });
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
        let ours = Some(&ca);
        let write = |name: &str, (cert, key): (rcgen::Certificate, KeyPair)| {
            std::fs::write(dir.path().join(format!("{name}.crt")), cert.pem()).unwrap();
            std::fs::write(dir.path().join(format!("{name}.key")), key.serialize_pem()).unwrap();
        };
        std::fs::write(dir.path().join("ca.crt"), ca.pem()).unwrap();
        let server = [San::Dns("localhost"), San::Ip("127.0.0.1")];
        write("server", issue(&server, "server one", ours));
        write("server2", issue(&server, "server two", ours));
        let client = [
            San::Dns("client.example"),
            San::Email("ops@example.com"),
            San::Uri("spiffe://example/scraper"),
            San::Ip("10.1.2.3"),
        ];
        write("client", issue(&client, "scraper", ours));
        write(
            "other-client",
            issue(&[San::Dns("other.example")], "other scraper", ours),
        );
        write(
            "rogue-client",
            issue(&[San::Dns("client.example")], "rogue", Some(&rogue_ca)),
        );
        write("other", issue(&[San::Dns("other")], "other", None));
        std::fs::write(dir.path().join("junk.pem"), "not a pem file\n").unwrap();
        Pki { dir }
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    pub fn read(&self, name: &str) -> String {
        std::fs::read_to_string(self.path(name)).unwrap()
    }

    /// Writes `web.yml` and returns its path. Write-then-rename, as config
    /// management does, so a watcher never reads a half-written file.
    pub fn write_config(&self, yaml: &str) -> PathBuf {
        let p = self.path("web.yml");
        let tmp = self.path("web.yml.tmp");
        std::fs::write(&tmp, yaml).unwrap();
        std::fs::rename(&tmp, &p).unwrap();
        p
    }
}
