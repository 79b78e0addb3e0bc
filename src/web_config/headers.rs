//! `http_server_config.headers`. The toolkit lets only these five security
//! headers be set (for consistency across the Prometheus ecosystem) and
//! checks the values of the two that are enumerations.

use std::collections::BTreeMap;

use hyper::header::{HeaderName, HeaderValue};

use super::Problem;

const ALLOWED: &[(&str, &[&str])] = &[
    ("Strict-Transport-Security", &[]),
    ("X-Content-Type-Options", &["nosniff"]),
    ("X-Frame-Options", &["deny", "sameorigin"]),
    ("X-XSS-Protection", &[]),
    ("Content-Security-Policy", &[]),
];

pub(crate) fn validate(
    headers: BTreeMap<String, Option<String>>,
) -> Result<Vec<(HeaderName, HeaderValue)>, Problem> {
    let mut out = Vec::new();
    for (name, value) in headers {
        let field = format!("http_server_config.headers.{name}");
        // The toolkit matches names exactly as written (a Go map lookup).
        let Some((canonical, values)) = ALLOWED.iter().find(|(n, _)| *n == name) else {
            return Err(Problem::new(
                "http_server_config.headers",
                format!(
                    "HTTP header {name:?} can not be configured (allowed: {})",
                    ALLOWED
                        .iter()
                        .map(|(n, _)| *n)
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            ));
        };
        let value = value.unwrap_or_default();
        if !values.is_empty() && !values.contains(&value.as_str()) {
            return Err(Problem::new(
                &field,
                format!("invalid value {value:?}, expected one of: {values:?}"),
            ));
        }
        // "Unset if blank."
        if value.is_empty() {
            continue;
        }
        let value = HeaderValue::from_str(&value).map_err(|_| {
            Problem::new(
                &field,
                "value contains characters not allowed in an HTTP header",
            )
        })?;
        let name = HeaderName::from_bytes(canonical.as_bytes())
            .map_err(|_| Problem::new(&field, "invalid header name"))?;
        out.push((name, value));
    }
    Ok(out)
}
