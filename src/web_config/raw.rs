//! The file as written, before validation. Field names and defaults follow
//! prometheus/exporter-toolkit's `web/tls_config.go`, so a file written for any
//! toolkit exporter parses here unchanged; unknown keys are refused because the
//! toolkit decodes with `yaml.UnmarshalStrict`.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Deserializer};

use super::names::{self, CipherSuite, ClientAuth, Curve, TlsVersion};

#[derive(Debug, Default, Deserialize)]
#[serde(
    deny_unknown_fields,
    rename = "web config mapping",
    expecting = "a web config mapping (key: value lines)"
)]
pub(crate) struct RawConfig {
    #[serde(default)]
    pub tls_server_config: Option<RawTls>,
    #[serde(default)]
    pub http_server_config: Option<RawHttp>,
    #[serde(default, deserialize_with = "strict_map")]
    pub basic_auth_users: Option<BTreeMap<String, Option<String>>>,
    #[serde(default)]
    pub rate_limit: Option<RawRateLimit>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(
    deny_unknown_fields,
    rename = "tls_server_config mapping",
    expecting = "a tls_server_config mapping (key: value lines)"
)]
pub(crate) struct RawTls {
    #[serde(default)]
    pub cert: Option<String>,
    #[serde(default)]
    pub key: Option<String>,
    #[serde(default)]
    pub client_ca: Option<String>,
    #[serde(default)]
    pub cert_file: Option<String>,
    #[serde(default)]
    pub key_file: Option<String>,
    #[serde(default, deserialize_with = "names::client_auth_type")]
    pub client_auth_type: Option<ClientAuth>,
    #[serde(default)]
    pub client_ca_file: Option<String>,
    #[serde(default)]
    pub cipher_suites: Option<Vec<CipherSuite>>,
    #[serde(default)]
    pub curve_preferences: Option<Vec<Curve>>,
    #[serde(default, deserialize_with = "names::min_version")]
    pub min_version: Option<TlsVersion>,
    #[serde(default, deserialize_with = "names::max_version")]
    pub max_version: Option<TlsVersion>,
    #[serde(default, deserialize_with = "yaml11_bool")]
    pub prefer_server_cipher_suites: Option<bool>,
    #[serde(default)]
    pub client_allowed_sans: Option<Vec<String>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(
    deny_unknown_fields,
    rename = "http_server_config mapping",
    expecting = "a http_server_config mapping (key: value lines)"
)]
pub(crate) struct RawHttp {
    #[serde(default, deserialize_with = "yaml11_bool")]
    pub http2: Option<bool>,
    #[serde(default, deserialize_with = "strict_map")]
    pub headers: Option<BTreeMap<String, Option<String>>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(
    deny_unknown_fields,
    rename = "rate_limit mapping",
    expecting = "a rate_limit mapping (key: value lines)"
)]
pub(crate) struct RawRateLimit {
    #[serde(default)]
    pub burst: Option<u32>,
    #[serde(default, deserialize_with = "go_duration")]
    pub interval: Option<Duration>,
}

/// A string map that refuses a key given twice, as go-yaml's strict mode does
/// (a plain map would silently keep the last one: a second entry for a user
/// would quietly replace the first password).
fn strict_map<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<BTreeMap<String, Option<String>>>, D::Error> {
    struct V;
    impl<'de> serde::de::Visitor<'de> for V {
        type Value = Option<BTreeMap<String, Option<String>>>;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a mapping of strings")
        }
        fn visit_unit<E: serde::de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_none<E: serde::de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_some<D2: Deserializer<'de>>(self, d: D2) -> Result<Self::Value, D2::Error> {
            d.deserialize_any(V)
        }
        fn visit_map<A: serde::de::MapAccess<'de>>(
            self,
            mut map: A,
        ) -> Result<Self::Value, A::Error> {
            let mut out = BTreeMap::new();
            while let Some(k) = map.next_key::<String>()? {
                if out.contains_key(&k) {
                    return Err(serde::de::Error::custom(format!("duplicate key {k:?}")));
                }
                let v = map.next_value::<Option<String>>()?;
                out.insert(k, v);
            }
            Ok(Some(out))
        }
    }
    d.deserialize_option(V)
}

/// The toolkit reads YAML 1.1 (go-yaml v2), where `yes`, `on` and friends are
/// booleans; yaml_serde speaks YAML 1.2, so accept the 1.1 spellings by hand.
fn yaml11_bool<'de, D: Deserializer<'de>>(d: D) -> Result<Option<bool>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum BoolOrString {
        Bool(bool),
        Str(String),
    }
    match Option::<BoolOrString>::deserialize(d)? {
        None => Ok(None),
        Some(BoolOrString::Bool(b)) => Ok(Some(b)),
        Some(BoolOrString::Str(s)) => match s.as_str() {
            "y" | "Y" | "yes" | "Yes" | "YES" | "true" | "True" | "TRUE" | "on" | "On" | "ON" => {
                Ok(Some(true))
            }
            "n" | "N" | "no" | "No" | "NO" | "false" | "False" | "FALSE" | "off" | "Off"
            | "OFF" => Ok(Some(false)),
            other => Err(serde::de::Error::custom(format!(
                "invalid boolean {other:?}, expected true or false"
            ))),
        },
    }
}

/// go-yaml decodes a `time.Duration` from a Go duration string ("1m30s") or
/// from an integer number of nanoseconds.
fn go_duration<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum IntOrString {
        Int(u64),
        Str(String),
    }
    match Option::<IntOrString>::deserialize(d)? {
        None => Ok(None),
        Some(IntOrString::Int(n)) => Ok(Some(Duration::from_nanos(n))),
        Some(IntOrString::Str(s)) => parse_go_duration(&s)
            .map(Some)
            .map_err(serde::de::Error::custom),
    }
}

/// Parses Go's `time.ParseDuration` syntax for non-negative durations:
/// a sequence of decimal numbers with units ns, us, µs, ms, s, m, h.
pub(crate) fn parse_go_duration(s: &str) -> Result<Duration, String> {
    let bad = || format!("invalid duration {s:?} (expected e.g. \"1s\", \"500ms\", \"1m30s\")");
    let mut rest = s.strip_prefix('+').unwrap_or(s);
    if rest == "0" {
        return Ok(Duration::ZERO);
    }
    if rest.is_empty() {
        return Err(bad());
    }
    let mut total_ns: f64 = 0.0;
    while !rest.is_empty() {
        let num_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(bad)?;
        if num_len == 0 {
            return Err(bad());
        }
        let value: f64 = rest[..num_len].parse().map_err(|_| bad())?;
        rest = &rest[num_len..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let scale = match &rest[..unit_len] {
            "ns" => 1.0,
            "us" | "µs" | "μs" => 1e3,
            "ms" => 1e6,
            "s" => 1e9,
            "m" => 60e9,
            "h" => 3600e9,
            _ => return Err(bad()),
        };
        rest = &rest[unit_len..];
        total_ns += value * scale;
    }
    // Go's Duration is an int64 of nanoseconds: about 292 years.
    if !total_ns.is_finite() || total_ns > i64::MAX as f64 {
        return Err(format!("duration {s:?} is too large"));
    }
    Ok(Duration::from_nanos(total_ns as u64))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_durations() {
        assert_eq!(parse_go_duration("0"), Ok(Duration::ZERO));
        assert_eq!(parse_go_duration("1s"), Ok(Duration::from_secs(1)));
        assert_eq!(parse_go_duration("1m30s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_go_duration("1.5h"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse_go_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_go_duration("3us"), Ok(Duration::from_micros(3)));
        for bad in ["", "1", "s", "1x", "-1s", "1..2s", "9999999999999h", "1s2"] {
            assert!(parse_go_duration(bad).is_err(), "{bad:?} accepted");
        }
    }
}
