//! The toolkit's names for TLS cipher suites, curves, versions and client
//! auth types, turned into values while the file is decoded, as
//! prometheus/exporter-toolkit does (`web/tls_config.go`: `Cipher`, `Curve`
//! and `TLSVersion` implement `UnmarshalYAML` over Go's names, and refuse
//! any other; `ClientAuth` is looked up in the toolkit's table of Go's
//! `tls.ClientAuthType` names). An unknown name fails the decode, naming
//! itself; a cipher suite or curve the toolkit knows but rustls does not
//! offer decodes to a `GoName` without a value, which `tls.rs` leaves out
//! with a warning (a TLS version it does not offer, likewise, by `tls.rs`).

use std::fmt;
use std::marker::PhantomData;

use serde::{Deserialize, Deserializer};
use tokio_rustls::rustls::{
    crypto::{ring as provider, SupportedKxGroup},
    SupportedCipherSuite,
};

/// One name of the file and what it stands for: `None` for a name the
/// toolkit accepts that this exporter's TLS library does not offer.
pub(crate) struct GoName<T> {
    pub name: String,
    pub value: Option<T>,
}

impl<T> fmt::Debug for GoName<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} ({})",
            self.name,
            if self.value.is_some() {
                "offered"
            } else {
                "not offered"
            }
        )
    }
}

/// A kind of name (cipher suite, curve): its lookup and how an unknown
/// name is refused.
pub(crate) trait GoNamed: Sized {
    /// `None`: not a name the toolkit accepts. `Some(None)`: accepted
    /// there, not offered by rustls.
    fn by_go_name(name: &str) -> Option<Option<Self>>;
    /// The decode error's text for a name the toolkit does not accept.
    fn unknown(name: &str) -> String;
}

impl<'de, T: GoNamed> Deserialize<'de> for GoName<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<T>(PhantomData<T>);
        impl<T: GoNamed> serde::de::Visitor<'_> for V<T> {
            type Value = GoName<T>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a name")
            }
            fn visit_str<E: serde::de::Error>(self, name: &str) -> Result<Self::Value, E> {
                match T::by_go_name(name) {
                    Some(value) => Ok(GoName {
                        name: name.to_string(),
                        value,
                    }),
                    None => Err(E::custom(T::unknown(name))),
                }
            }
        }
        d.deserialize_str(V(PhantomData))
    }
}

/// A TLS version by the toolkit's name (`min_version`, `max_version`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum TlsVersion {
    Tls10,
    Tls11,
    Tls12,
    Tls13,
}

impl TlsVersion {
    fn by_name(name: &str) -> Option<Self> {
        Some(match name {
            "TLS10" => Self::Tls10,
            "TLS11" => Self::Tls11,
            "TLS12" => Self::Tls12,
            "TLS13" => Self::Tls13,
            _ => return None,
        })
    }
}

impl fmt::Display for TlsVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Tls10 => "TLS10",
            Self::Tls11 => "TLS11",
            Self::Tls12 => "TLS12",
            Self::Tls13 => "TLS13",
        })
    }
}

/// Go's `tls.ClientAuthType`, by the names the toolkit accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientAuth {
    NoClientCert,
    RequestClientCert,
    RequireAnyClientCert,
    VerifyClientCertIfGiven,
    RequireAndVerifyClientCert,
}

impl ClientAuth {
    fn by_name(name: &str) -> Option<Self> {
        Some(match name {
            "NoClientCert" => Self::NoClientCert,
            "RequestClientCert" => Self::RequestClientCert,
            // "RequireClientCert" is the toolkit's backwards-compatible alias.
            "RequireAnyClientCert" | "RequireClientCert" => Self::RequireAnyClientCert,
            "VerifyClientCertIfGiven" => Self::VerifyClientCertIfGiven,
            "RequireAndVerifyClientCert" => Self::RequireAndVerifyClientCert,
            _ => return None,
        })
    }

    /// The toolkit's name for it, as written in the file.
    pub fn name(self) -> &'static str {
        match self {
            Self::NoClientCert => "NoClientCert",
            Self::RequestClientCert => "RequestClientCert",
            Self::RequireAnyClientCert => "RequireAnyClientCert",
            Self::VerifyClientCertIfGiven => "VerifyClientCertIfGiven",
            Self::RequireAndVerifyClientCert => "RequireAndVerifyClientCert",
        }
    }

    pub(crate) fn verifies(self) -> bool {
        matches!(
            self,
            Self::VerifyClientCertIfGiven | Self::RequireAndVerifyClientCert
        )
    }

    pub(crate) fn requires_cert(self) -> bool {
        matches!(
            self,
            Self::RequireAnyClientCert | Self::RequireAndVerifyClientCert
        )
    }
}

/// `min_version`: a version by its name; an empty value is no value (the
/// default applies).
pub(crate) fn min_version<'de, D: Deserializer<'de>>(d: D) -> Result<Option<TlsVersion>, D::Error> {
    named(d, TlsVersion::by_name, |name| {
        unknown_version("min_version", name)
    })
}

/// `max_version`, as `min_version`.
pub(crate) fn max_version<'de, D: Deserializer<'de>>(d: D) -> Result<Option<TlsVersion>, D::Error> {
    named(d, TlsVersion::by_name, |name| {
        unknown_version("max_version", name)
    })
}

/// The decode error names its field: the parser's place is the mapping's.
fn unknown_version(field: &str, name: &str) -> String {
    format!("{field}: unknown TLS version {name:?} (expected TLS10, TLS11, TLS12 or TLS13)")
}

/// `client_auth_type`: an auth type by its name; an empty value is no
/// value (`NoClientCert`, and TLS is not thereby switched on).
pub(crate) fn client_auth_type<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<ClientAuth>, D::Error> {
    named(d, ClientAuth::by_name, |name| {
        format!(
            "invalid client_auth_type {name:?} (expected NoClientCert, RequestClientCert, \
             RequireAnyClientCert, VerifyClientCertIfGiven or RequireAndVerifyClientCert)"
        )
    })
}

/// A name looked up while decoding: `None` for an empty one, the decode's
/// error (`unknown`'s words, naming the value) for one `by_name` lacks.
fn named<'de, D: Deserializer<'de>, T>(
    d: D,
    by_name: fn(&str) -> Option<T>,
    unknown: fn(&str) -> String,
) -> Result<Option<T>, D::Error> {
    let Some(name) = Option::<String>::deserialize(d)? else {
        return Ok(None);
    };
    if name.is_empty() {
        return Ok(None);
    }
    by_name(&name)
        .map(Some)
        .ok_or_else(|| serde::de::Error::custom(unknown(&name)))
}

/// A cipher suite (`tls_server_config.cipher_suites`).
pub(crate) type CipherSuite = GoName<SupportedCipherSuite>;
/// A curve (`tls_server_config.curve_preferences`).
pub(crate) type Curve = GoName<&'static dyn SupportedKxGroup>;

/// The names in Go's `tls.CipherSuites()`, which is what the toolkit accepts.
/// `None`: valid for the toolkit, not offered by rustls (CBC modes, RSA key
/// exchange). TLS 1.3 suites are listed but, as in Go, not configurable.
impl GoNamed for SupportedCipherSuite {
    fn by_go_name(name: &str) -> Option<Option<Self>> {
        cipher_by_go_name(name)
    }
    fn unknown(name: &str) -> String {
        format!(
            "unknown cipher suite {name:?} (supported: {})",
            supported_cipher_names().join(", ")
        )
    }
}

/// The toolkit's curve names. `None`: valid there, not offered by rustls.
impl GoNamed for &'static dyn SupportedKxGroup {
    fn by_go_name(name: &str) -> Option<Option<Self>> {
        curve_by_go_name(name)
    }
    fn unknown(name: &str) -> String {
        format!("unknown curve {name:?} (expected CurveP256, CurveP384, CurveP521 or X25519)")
    }
}

fn cipher_by_go_name(name: &str) -> Option<Option<SupportedCipherSuite>> {
    use provider::cipher_suite as cs;
    Some(match name {
        "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256" => {
            Some(cs::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256)
        }
        "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384" => {
            Some(cs::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384)
        }
        "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256" => {
            Some(cs::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256)
        }
        "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256" => Some(cs::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256),
        "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384" => Some(cs::TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384),
        "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256" => {
            Some(cs::TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256)
        }
        "TLS_AES_128_GCM_SHA256" => Some(cs::TLS13_AES_128_GCM_SHA256),
        "TLS_AES_256_GCM_SHA384" => Some(cs::TLS13_AES_256_GCM_SHA384),
        "TLS_CHACHA20_POLY1305_SHA256" => Some(cs::TLS13_CHACHA20_POLY1305_SHA256),
        "TLS_RSA_WITH_AES_128_CBC_SHA"
        | "TLS_RSA_WITH_AES_256_CBC_SHA"
        | "TLS_RSA_WITH_AES_128_GCM_SHA256"
        | "TLS_RSA_WITH_AES_256_GCM_SHA384"
        | "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA"
        | "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA"
        | "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA"
        | "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA" => None,
        _ => return None,
    })
}

fn curve_by_go_name(name: &str) -> Option<Option<&'static dyn SupportedKxGroup>> {
    use provider::kx_group as kx;
    Some(match name {
        "X25519" => Some(kx::X25519),
        "CurveP256" => Some(kx::SECP256R1),
        "CurveP384" => Some(kx::SECP384R1),
        "CurveP521" => None,
        _ => return None,
    })
}

/// The cipher suites this exporter offers, by their Go names.
pub(crate) fn supported_cipher_names() -> Vec<&'static str> {
    vec![
        "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",
        "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384",
        "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256",
        "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
        "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384",
        "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256",
        "TLS_AES_128_GCM_SHA256",
        "TLS_AES_256_GCM_SHA384",
        "TLS_CHACHA20_POLY1305_SHA256",
    ]
}
