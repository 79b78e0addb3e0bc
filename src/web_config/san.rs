//! Reads the subjectAltName values out of a DER X.509 certificate, for
//! `client_allowed_sans`. webpki can only answer "is this cert valid for DNS
//! name / IP X", not list e-mail and URI names, so we walk the DER ourselves:
//! a few dozen lines over untrusted bytes, hence bounds-checked everywhere and
//! fuzzed by the property tests.

use std::net::{Ipv4Addr, Ipv6Addr};

/// One DER element: tag byte and contents.
pub(super) struct Tlv<'a> {
    pub(super) tag: u8,
    pub(super) value: &'a [u8],
}

/// Splits the first DER element off `input` (also the certificate
/// validity reader's, `validity.rs`).
pub(super) fn next_tlv(input: &[u8]) -> Option<(Tlv<'_>, &[u8])> {
    let (&tag, rest) = input.split_first()?;
    if tag & 0x1f == 0x1f {
        return None; // high tag numbers never occur in the structures we walk
    }
    let (&first, rest) = rest.split_first()?;
    let (len, rest) = if first < 0x80 {
        (usize::from(first), rest)
    } else {
        let n = usize::from(first & 0x7f);
        if n == 0 || n > 4 || rest.len() < n {
            return None;
        }
        let len = rest[..n]
            .iter()
            .fold(0usize, |acc, &b| (acc << 8) | usize::from(b));
        (len, &rest[n..])
    };
    if rest.len() < len {
        return None;
    }
    let (value, rest) = rest.split_at(len);
    Some((Tlv { tag, value }, rest))
}

/// Iterates over the elements of a constructed value.
fn children(mut input: &[u8]) -> impl Iterator<Item = Option<Tlv<'_>>> {
    std::iter::from_fn(move || {
        if input.is_empty() {
            return None;
        }
        match next_tlv(input) {
            Some((tlv, rest)) => {
                input = rest;
                Some(Some(tlv))
            }
            None => {
                input = &[];
                Some(None)
            }
        }
    })
}

const SEQUENCE: u8 = 0x30;
const EXTENSIONS: u8 = 0xa3; // [3] EXPLICIT in TBSCertificate
const OID: u8 = 0x06;
const OCTET_STRING: u8 = 0x04;
const SUBJECT_ALT_NAME: &[u8] = &[0x55, 0x1d, 0x11]; // 2.5.29.17

/// All DNS, e-mail, IP and URI subject alternative names, formatted the way Go's
/// crypto/x509 exposes them (so `client_allowed_sans` entries match as they do
/// in the toolkit). `None` when the certificate is not well-formed DER.
pub fn subject_alt_names(cert_der: &[u8]) -> Option<Vec<String>> {
    let (cert, _) = next_tlv(cert_der)?;
    if cert.tag != SEQUENCE {
        return None;
    }
    let (tbs, _) = next_tlv(cert.value)?;
    if tbs.tag != SEQUENCE {
        return None;
    }
    let mut names = Vec::new();
    for field in children(tbs.value) {
        let field = field?;
        if field.tag != EXTENSIONS {
            continue;
        }
        let (exts, _) = next_tlv(field.value)?;
        for ext in children(exts.value) {
            let ext = ext?;
            let mut parts = children(ext.value);
            let oid = parts.next()??;
            if oid.tag != OID || oid.value != SUBJECT_ALT_NAME {
                continue;
            }
            let mut value = parts.next()??;
            if value.tag == 0x01 {
                value = parts.next()??; // the optional `critical` BOOLEAN
            }
            if value.tag != OCTET_STRING {
                return None;
            }
            let (general_names, _) = next_tlv(value.value)?;
            for name in children(general_names.value) {
                let name = name?;
                match name.tag {
                    // [1] rfc822Name, [2] dNSName, [6] URI: IA5String contents.
                    0x81 | 0x82 | 0x86 => {
                        names.push(String::from_utf8_lossy(name.value).into_owned())
                    }
                    // [7] iPAddress
                    0x87 => {
                        if let Some(ip) = format_ip(name.value) {
                            names.push(ip);
                        }
                    }
                    _ => {}
                }
            }
        }
    }
    Some(names)
}

/// Go prints an IPv4-mapped IPv6 address as plain IPv4.
fn format_ip(bytes: &[u8]) -> Option<String> {
    match bytes.len() {
        4 => Some(Ipv4Addr::new(bytes[0], bytes[1], bytes[2], bytes[3]).to_string()),
        16 => {
            let mut octets = [0u8; 16];
            octets.copy_from_slice(bytes);
            let v6 = Ipv6Addr::from(octets);
            Some(match v6.to_ipv4_mapped() {
                Some(v4) => v4.to_string(),
                None => v6.to_string(),
            })
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn garbage_is_rejected_not_panicking() {
        assert_eq!(subject_alt_names(&[]), None);
        assert_eq!(subject_alt_names(&[0x30]), None);
        assert_eq!(
            subject_alt_names(&[0x30, 0x84, 0xff, 0xff, 0xff, 0xff]),
            None
        );
        assert_eq!(subject_alt_names(&[0x1f, 0x00]), None);
        // A SEQUENCE holding an empty TBS SEQUENCE: well-formed, no names.
        assert_eq!(subject_alt_names(&[0x30, 0x02, 0x30, 0x00]), Some(vec![]));
    }

    #[test]
    fn ip_formatting_matches_go() {
        assert_eq!(format_ip(&[10, 0, 0, 1]).as_deref(), Some("10.0.0.1"));
        let mut mapped = [0u8; 16];
        mapped[10] = 0xff;
        mapped[11] = 0xff;
        mapped[12..].copy_from_slice(&[192, 168, 1, 2]);
        assert_eq!(format_ip(&mapped).as_deref(), Some("192.168.1.2"));
        let mut v6 = [0u8; 16];
        v6[0] = 0x20;
        v6[1] = 0x01;
        v6[2] = 0x0d;
        v6[3] = 0xb8;
        v6[15] = 1;
        assert_eq!(format_ip(&v6).as_deref(), Some("2001:db8::1"));
        assert_eq!(format_ip(&[1, 2, 3]), None);
    }
}
