//! PCI addresses as the kernel log and NVML write them: NVRM's
//! `PCI:0000:3b:00` (four-digit domain, no function), NVSwitch's
//! `PCI:0000:c3:00.0`, NVML's `00000000:3B:00.0`. A GPU is matched on
//! domain, bus and device; the function is kept only to print it.

use std::fmt;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PciAddress {
    pub domain: u32,
    pub bus: u8,
    pub device: u8,
    pub function: Option<u8>,
}

impl PciAddress {
    /// Parses `[PCI:][DOMAIN:]BUS:DEVICE[.FUNCTION]` in hexadecimal, any
    /// case. `None` for anything else.
    pub fn parse(s: &str) -> Option<PciAddress> {
        let s = s.strip_prefix("PCI:").unwrap_or(s);
        let (addr, function) = match s.split_once('.') {
            Some((a, f)) => (a, Some(hex(f, 1).filter(|f| *f < 8)? as u8)),
            None => (s, None),
        };
        let parts: Vec<&str> = addr.split(':').collect();
        let (domain, bus, device) = match parts.as_slice() {
            [d, b, v] => (hex(d, 8)?, hex(b, 2)?, hex(v, 2)?),
            [b, v] => (0, hex(b, 2)?, hex(v, 2)?),
            _ => return None,
        };
        // PCI has 32 devices per bus.
        if device > 0x1f {
            return None;
        }
        Some(PciAddress {
            domain,
            bus: bus as u8,
            device: device as u8,
            function,
        })
    }

    /// Whether both name the same device (the function aside: a GPU is
    /// function 0, and NVRM leaves the function out).
    pub fn same_device(&self, other: &PciAddress) -> bool {
        (self.domain, self.bus, self.device) == (other.domain, other.bus, other.device)
    }
}

/// Lower-case, four-digit domain, as the kernel prints it: `0000:c3:00.0`.
impl fmt::Display for PciAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:04x}:{:02x}:{:02x}",
            self.domain, self.bus, self.device
        )?;
        if let Some(func) = self.function {
            write!(f, ".{func}")?;
        }
        Ok(())
    }
}

/// A hexadecimal number of 1 to `max_digits` digits.
fn hex(s: &str, max_digits: usize) -> Option<u32> {
    if s.is_empty() || s.len() > max_digits || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    u32::from_str_radix(s, 16).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_and_nvml_spellings_name_the_same_gpu() {
        let nvrm = PciAddress::parse("PCI:0000:3b:00").unwrap();
        let nvml = PciAddress::parse("00000000:3B:00.0").unwrap();
        assert!(nvrm.same_device(&nvml));
        assert_eq!(nvrm.to_string(), "0000:3b:00");
        assert_eq!(nvml.to_string(), "0000:3b:00.0");
        let short = PciAddress::parse("3b:00").unwrap();
        assert!(short.same_device(&nvml));
        assert!(!PciAddress::parse("0000:3c:00").unwrap().same_device(&nvml));
        assert!(!PciAddress::parse("0001:3b:00").unwrap().same_device(&nvml));
    }

    #[test]
    fn rejects_what_is_not_an_address() {
        for bad in [
            "",
            "PCI:",
            "3b",
            "0000:3b",
            "zz:00",
            "0000:3b:00.9",
            "0000:3b:20",
            "000000000:3b:00",
            "0000:3b:00:00",
            "0000:3b:00.",
            "0000:100:00",
            "PCI:0000:3b:00 GPU-I:05",
        ] {
            assert_eq!(PciAddress::parse(bad), None, "{bad:?}");
        }
    }
}
