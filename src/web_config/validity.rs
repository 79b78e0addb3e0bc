//! The validity period of the served certificates, read at load time so an
//! expired (or not yet valid) certificate is named in the log instead of
//! being found by the first scraper that refuses it. Loading still
//! succeeds, as in the toolkit: refusing to start would take the metrics
//! down along with TLS, and a client may be set not to verify.
//!
//! Only the two dates are read, by walking the DER of the certificate's
//! `TBSCertificate` (RFC 5280 section 4.1) as far as `validity`.

use std::time::SystemTime;

/// A certificate time, as written (UTC).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct CertTime {
    year: i64,
    month: u32,
    day: u32,
    hour: u32,
    minute: u32,
    second: u32,
}

impl CertTime {
    fn unix_seconds(self) -> i64 {
        days_from_civil(self.year, self.month, self.day) * 86_400
            + i64::from(self.hour) * 3_600
            + i64::from(self.minute) * 60
            + i64::from(self.second)
    }
}

impl std::fmt::Display for CertTime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{:04}-{:02}-{:02} {:02}:{:02}:{:02} UTC",
            self.year, self.month, self.day, self.hour, self.minute, self.second
        )
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's
/// `days_from_civil`).
fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let m = i64::from(m);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// One DER element: (tag, contents, what follows it), read by the one DER
/// walker of this module tree.
fn element(input: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (tlv, rest) = super::san::next_tlv(input)?;
    Some((tlv.tag, tlv.value, rest))
}

fn digits(s: &[u8]) -> Option<u32> {
    if s.is_empty() || !s.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(s).ok()?.parse().ok()
}

/// UTCTime (`YYMMDDHHMMSSZ`) or GeneralizedTime (`YYYYMMDDHHMMSSZ`), the two
/// forms RFC 5280 allows.
fn time(tag: u8, v: &[u8]) -> Option<CertTime> {
    let (year, rest) = match tag {
        0x17 if v.len() == 13 => {
            let yy = i64::from(digits(&v[..2])?);
            (if yy >= 50 { 1900 + yy } else { 2000 + yy }, &v[2..])
        }
        0x18 if v.len() == 15 => (i64::from(digits(&v[..4])?), &v[4..]),
        _ => return None,
    };
    if rest.last() != Some(&b'Z') {
        return None;
    }
    let t = CertTime {
        year,
        month: digits(&rest[0..2])?,
        day: digits(&rest[2..4])?,
        hour: digits(&rest[4..6])?,
        minute: digits(&rest[6..8])?,
        second: digits(&rest[8..10])?,
    };
    let valid = (1..=12).contains(&t.month)
        && (1..=31).contains(&t.day)
        && t.hour < 24
        && t.minute < 60
        && t.second < 61;
    valid.then_some(t)
}

/// `(notBefore, notAfter)` of a DER certificate, or `None` if it cannot be
/// read that far.
pub(crate) fn validity(der: &[u8]) -> Option<(CertTime, CertTime)> {
    let (0x30, cert, _) = element(der)? else {
        return None;
    };
    let (0x30, tbs, _) = element(cert)? else {
        return None;
    };
    let mut rest = tbs;
    let (tag, _, after) = element(rest)?;
    if tag == 0xa0 {
        rest = after; // explicit version
    }
    // serialNumber, signature, issuer.
    for want in [0x02, 0x30, 0x30] {
        let (tag, _, after) = element(rest)?;
        if tag != want {
            return None;
        }
        rest = after;
    }
    let (0x30, validity, _) = element(rest)? else {
        return None;
    };
    let (t1, v1, after) = element(validity)?;
    let (t2, v2, _) = element(after)?;
    Some((time(t1, v1)?, time(t2, v2)?))
}

/// Warnings for certificates of `chain` (from `what`: the key and file
/// they came from) that are not valid at `now`.
pub(crate) fn check_chain(
    chain: &[impl AsRef<[u8]>],
    what: &str,
    now: SystemTime,
    warnings: &mut Vec<String>,
) {
    let now = match now.duration_since(SystemTime::UNIX_EPOCH) {
        Ok(d) => i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
        Err(e) => -i64::try_from(e.duration().as_secs()).unwrap_or(i64::MAX),
    };
    for (i, der) in chain.iter().enumerate() {
        let Some((not_before, not_after)) = validity(der.as_ref()) else {
            continue;
        };
        let which = if i == 0 {
            "certificate".to_string()
        } else {
            format!("certificate {} of the chain", i + 1)
        };
        if now > not_after.unix_seconds() {
            warnings.push(format!(
                "{what}: {which} expired on {not_after}; clients that verify it refuse to connect"
            ));
        } else if now < not_before.unix_seconds() {
            warnings.push(format!(
                "{what}: {which} is not valid before {not_before} (is this host's clock right?); \
                 clients that verify it refuse to connect until then"
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn cert(not_before: (i32, u8, u8), not_after: (i32, u8, u8)) -> Vec<u8> {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut p = rcgen::CertificateParams::new(vec!["localhost".to_string()]).unwrap();
        p.not_before = rcgen::date_time_ymd(not_before.0, not_before.1, not_before.2);
        p.not_after = rcgen::date_time_ymd(not_after.0, not_after.1, not_after.2);
        p.self_signed(&key).unwrap().der().to_vec()
    }

    fn at(unix: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(unix)
    }

    #[test]
    fn dates_of_real_certificates() {
        // rcgen writes UTCTime before 2050 and GeneralizedTime from 2050 on.
        let der = cert((2020, 1, 2), (2051, 3, 4));
        let (nb, na) = validity(&der).unwrap();
        assert_eq!(nb.to_string(), "2020-01-02 00:00:00 UTC");
        assert_eq!(na.to_string(), "2051-03-04 00:00:00 UTC");
        assert_eq!(nb.unix_seconds(), 1_577_923_200);
        assert_eq!(days_from_civil(1970, 1, 1), 0);
        assert_eq!(days_from_civil(2000, 3, 1), 11_017);
    }

    #[test]
    fn warns_for_expired_and_not_yet_valid_only() {
        let der = cert((2020, 1, 1), (2021, 1, 1));
        let mut w = Vec::new();
        // 2020-06-01: inside.
        check_chain(&[&der], "cert_file a.crt", at(1_590_969_600), &mut w);
        assert!(w.is_empty(), "{w:?}");
        // 2022-01-01: expired.
        check_chain(&[&der], "cert_file a.crt", at(1_640_995_200), &mut w);
        assert_eq!(
            w,
            [
                "cert_file a.crt: certificate expired on 2021-01-01 00:00:00 UTC; \
              clients that verify it refuse to connect"
            ]
        );
        w.clear();
        // 2019-01-01: not yet valid; an intermediate is named by position.
        check_chain(&[&der, &der], "cert_file a.crt", at(1_546_300_800), &mut w);
        assert_eq!(w.len(), 2);
        assert!(
            w[0].contains("not valid before 2020-01-01 00:00:00 UTC"),
            "{w:?}"
        );
        assert!(w[1].contains("certificate 2 of the chain"), "{w:?}");
    }

    #[test]
    fn garbage_is_not_read_and_never_panics() {
        let der = cert((2020, 1, 1), (2021, 1, 1));
        for cut in 0..der.len() {
            let _ = validity(&der[..cut]);
        }
        assert_eq!(validity(b""), None);
        assert_eq!(validity(&[0x30, 0x84, 0xff, 0xff, 0xff, 0xff]), None);
        assert_eq!(time(0x17, b"991301000000Z"), None, "month 13");
        let mut w = Vec::new();
        check_chain(&[b"not a certificate"], "x", SystemTime::now(), &mut w);
        assert!(w.is_empty());
    }
}
