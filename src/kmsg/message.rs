//! What a kernel log message says about GPUs: an XID from NVRM, an SXID
//! from an NVSwitch, the NVIDIA module loading (every GPU starts afresh), or
//! a GPU reset that a reset procedure recorded. Only the code and the
//! device are read; the rest of the line (process, channel, details) never
//! becomes a label.
//!
//! Shapes, from NVIDIA's open kernel modules and field reports:
//! - `NVRM: Xid (PCI:0000:3b:00): 79, pid=..., name=..., GPU has fallen off the bus.`
//! - `NVRM: Xid (PCI:0000:01:00 GPU-I:05 GPU-CI:00): 94, pid=7194, Contained: ...`
//!   (MIG: GPU and compute instance, decimal)
//! - `NVRM: Xid (0000:03:00): 14, Channel 00000001` (older drivers)
//! - `nvidia-nvswitch3: SXid (PCI:0000:c3:00.0): 20009, Non-fatal, Link 28 ...`
//! - `NVRM: loading NVIDIA UNIX x86_64 Kernel Module  560.35.03  ...`
//! - `nvml-exporter: GPU reset (PCI:0000:3b:00)`: written to `/dev/kmsg`
//!   by the reset procedure of docs/operations.md, so that a reset done
//!   while the exporter was stopped (as a reset requires) is known to it.

use super::pci::PciAddress;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Message {
    Xid(Xid),
    Sxid {
        switch: PciAddress,
        code: u64,
    },
    DriverLoaded,
    GpuReset(PciAddress),
    /// A message about something else.
    Other,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Xid {
    pub gpu: PciAddress,
    pub gpu_instance: Option<u32>,
    pub compute_instance: Option<u32>,
    pub code: u64,
}

/// A message that starts like an XID, SXID or reset line but does not
/// parse as one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Malformed;

pub const RESET_MARKER: &str = "nvml-exporter: GPU reset ";

pub fn classify(message: &str) -> Result<Message, Malformed> {
    let m = message.trim_start();
    if let Some(rest) = m.strip_prefix("NVRM: Xid") {
        let (inside, code) = device_and_code(rest).ok_or(Malformed)?;
        let mut tokens = inside.split_whitespace();
        let gpu = tokens.next().and_then(PciAddress::parse).ok_or(Malformed)?;
        let (mut gpu_instance, mut compute_instance) = (None, None);
        for t in tokens {
            if let Some(n) = t.strip_prefix("GPU-I:") {
                gpu_instance = Some(n.parse().map_err(|_| Malformed)?);
            } else if let Some(n) = t.strip_prefix("GPU-CI:").or(t.strip_prefix("GPU-C:")) {
                compute_instance = Some(n.parse().map_err(|_| Malformed)?);
            }
        }
        return Ok(Message::Xid(Xid {
            gpu,
            gpu_instance,
            compute_instance,
            code,
        }));
    }
    if m.starts_with("nvidia-nvswitch") {
        if let Some((_, rest)) = m.split_once(": SXid") {
            let (inside, code) = device_and_code(rest).ok_or(Malformed)?;
            let switch = PciAddress::parse(inside.trim()).ok_or(Malformed)?;
            return Ok(Message::Sxid { switch, code });
        }
        return Ok(Message::Other);
    }
    if m.starts_with("NVRM: loading NVIDIA UNIX") {
        return Ok(Message::DriverLoaded);
    }
    if let Some(rest) = m.strip_prefix(RESET_MARKER) {
        let inside = rest
            .trim()
            .strip_prefix('(')
            .and_then(|r| r.strip_suffix(')'))
            .ok_or(Malformed)?;
        return PciAddress::parse(inside.trim())
            .map(Message::GpuReset)
            .ok_or(Malformed);
    }
    Ok(Message::Other)
}

/// From ` (DEVICE...): CODE[, ...]`: what is inside the parentheses, and
/// the code.
fn device_and_code(rest: &str) -> Option<(&str, u64)> {
    let rest = rest.trim_start().strip_prefix('(')?;
    let (inside, after) = rest.split_once(')')?;
    let after = after.strip_prefix(':')?.trim_start();
    let digits = after.split(',').next()?.trim_end();
    if digits.is_empty() || digits.len() > 10 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some((inside, digits.parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn xid(m: &str) -> Xid {
        match classify(m) {
            Ok(Message::Xid(x)) => x,
            other => panic!("{m:?}: {other:?}"),
        }
    }

    #[test]
    fn reads_every_xid_shape_the_driver_prints() {
        let x = xid("NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.");
        assert_eq!((x.gpu.to_string(), x.code), ("0000:3b:00".into(), 79));
        assert_eq!((x.gpu_instance, x.compute_instance), (None, None));
        let x = xid("NVRM: Xid (PCI:0000:01:00 GPU-I:05): 94, pid=7194, Contained: CE User Channel (0x9). RST: No, D-RST: No");
        assert_eq!(
            (x.code, x.gpu_instance, x.compute_instance),
            (94, Some(5), None)
        );
        let x = xid(
            "NVRM: Xid (PCI:0000:3b:00 GPU-I:13 GPU-CI:02): 13, pid=9, name=a, Graphics Exception",
        );
        assert_eq!((x.gpu_instance, x.compute_instance), (Some(13), Some(2)));
        assert_eq!(xid("NVRM: Xid (0000:03:00): 14, Channel 00000001").code, 14);
        assert_eq!(xid("NVRM: Xid (PCI:0000:cb:00): 119").code, 119);
        assert_eq!(
            xid("NVRM: Xid (PCI:0000:10:1c): 63, pid=1850, Row Remapper")
                .gpu
                .device,
            0x1c
        );
    }

    #[test]
    fn reads_sxids_driver_loads_and_reset_markers() {
        assert_eq!(
            classify("nvidia-nvswitch0: SXid (PCI:0000:c3:00.0): 01004, Non-fatal, Link 28"),
            Ok(Message::Sxid {
                switch: PciAddress::parse("0000:c3:00.0").unwrap(),
                code: 1004
            })
        );
        assert_eq!(
            classify(
                "NVRM: loading NVIDIA UNIX Open Kernel Module for x86_64  580.95.05  Release Build"
            ),
            Ok(Message::DriverLoaded)
        );
        assert_eq!(
            classify("nvml-exporter: GPU reset (PCI:0000:3b:00)"),
            Ok(Message::GpuReset(PciAddress::parse("0000:3b:00").unwrap()))
        );
        assert_eq!(classify("nvidia-nvswitch0: probe ok"), Ok(Message::Other));
        assert_eq!(classify("usb 1-1: new device"), Ok(Message::Other));
        assert_eq!(
            classify("NVRM: GPU at PCI:0000:3b:00: GPU-1234"),
            Ok(Message::Other)
        );
    }

    #[test]
    fn a_line_that_starts_like_one_but_does_not_parse_is_malformed() {
        for bad in [
            "NVRM: Xid (PCI:0000:3b:00): x79, GPU has fallen off the bus.",
            "NVRM: Xid (PCI:0000:3b:00) 79",
            "NVRM: Xid PCI:0000:3b:00: 79",
            "NVRM: Xid (PCI:zz:00): 79",
            "NVRM: Xid (PCI:0000:3b:00 GPU-I:x): 79",
            "NVRM: Xid (PCI:0000:3b:00): 99999999999",
            "nvidia-nvswitch3: SXid (PCI:0000:c3:00.0): garbled, Fatal",
            "nvml-exporter: GPU reset PCI:0000:3b:00",
        ] {
            assert_eq!(classify(bad), Err(Malformed), "{bad:?}");
        }
    }
}
