//! What a kernel log message says about GPUs: an XID from NVRM, a GPU that
//! fell off the bus, an SXID from an NVSwitch, the NVIDIA module loading
//! (every GPU starts afresh), or a GPU reset that a reset procedure
//! recorded. The code, the device and, for NVLink5 XIDs, the words that
//! decide what the event asks for are read; the rest of the line (process,
//! channel, details) never becomes a label.
//!
//! Shapes, from NVIDIA's open kernel modules and field reports:
//! - `NVRM: Xid (PCI:0000:3b:00): 79, pid=..., name=..., GPU has fallen off the bus.`
//! - `NVRM: Xid (PCI:0000:01:00 GPU-I:05 GPU-CI:00): 94, pid=7194, Contained: ...`
//!   (MIG: GPU and compute instance, decimal)
//! - `NVRM: Xid (0000:03:00): 14, Channel 00000001` (older drivers)
//! - `NVRM: Xid (PCI:0018:01:00): 149, NETIR_LINK_EVT Fatal XC0 i0 Link 08 (0x004505c6 0x00000000 ...)`
//!   (NVLink5, 144-150: unit, severity, containment, injection, link, then
//!   IntrInfo and the error status; a `pid=..., name=...,` may precede the
//!   unit. gpud's `RegexNVRMXidExtended`, leptonai/gpud
//!   `components/accelerator/nvidia/xid/kmsg.go`, and NVSentinel's
//!   `reXidNVL5Pattern` read the same words)
//! - `NVRM: GPU 0000:18:00.0: GPU has fallen off the bus.` and
//!   `NVRM: The NVIDIA GPU 0000:b3:00.0 (PCI ID: 10de:26b5) installed in this
//!   system has fallen off the bus and is not responding to commands.`:
//!   newer drivers print these without an `Xid (...): 79` line; NVIDIA's
//!   tools count them as XID 79 (gpud `RegexNVRMFallenOffBus*`, NVSentinel
//!   `gpufallen`). The second is one printk of three lines: one record with
//!   escaped line feeds, or, where the kernel split it, three records
//!   (`BusFallStart` then the line that says "fallen off the bus").
//! - `nvidia-nvswitch3: SXid (PCI:0000:c3:00.0): 20009, Non-fatal, Link 28 ...`
//! - `NVRM: loading NVIDIA UNIX x86_64 Kernel Module  560.35.03  ...` (and
//!   `... Open Kernel Module for x86_64  580.159.04  Release Build  (nixbld@)`
//!   on a real 580 host, tests/device/h200-580.159.04/kernel-log-nvidia.txt)
//! - `nvml-exporter: GPU reset (PCI:0000:3b:00)`: written to `/dev/kmsg`
//!   by the reset procedure of docs/operations.md, so that a reset done
//!   while the exporter was stopped (as a reset requires) is known to it;
//!   `GPU reset executed: GPU-<uuid>`, what NVSentinel's reset job logs.

use super::pci::PciAddress;

/// The highest MIG instance ids the driver hands out: GPU instances are
/// numbered by swizzle id, below `KMIGMGR_MAX_GPU_SWIZZID` (15), compute
/// instances below `GPUMGR_MAX_COMPUTE_INSTANCES` (8)
/// (NVIDIA/open-gpu-kernel-modules
/// `src/nvidia/inc/kernel/gpu/mig_mgr/kernel_mig_manager.h`). A line naming
/// a higher one is not the driver's.
pub const MAX_GPU_INSTANCE_ID: u32 = 14;
pub const MAX_COMPUTE_INSTANCE_ID: u32 = 7;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Message {
    Xid(Xid),
    /// A GPU fell off the bus, said without an XID code (counted as 79).
    BusFall(PciAddress),
    /// `NVRM: The NVIDIA GPU <address>` alone: the first record of a
    /// bus-fall report the kernel split.
    BusFallStart(PciAddress),
    /// `... fallen off the bus and is not responding to commands.` without
    /// an address: the end of a split report.
    BusFallEnd,
    Sxid {
        switch: PciAddress,
        code: u64,
    },
    /// The module loaded; the driver's major version where the line gives it.
    DriverLoaded {
        major: Option<u32>,
    },
    GpuReset(PciAddress),
    /// A reset recorded by GPU UUID (`GPU-...`).
    GpuResetUuid(String),
    /// A message about something else.
    Other,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Xid {
    pub gpu: PciAddress,
    pub gpu_instance: Option<u32>,
    pub compute_instance: Option<u32>,
    pub code: u64,
    /// The words of an NVLink5 XID (144-150) that decide what it asks for;
    /// `None` for other codes and for NVLink5 lines without them.
    pub nvlink5: Option<Nvlink5Words>,
    /// The link and seven registers of an XID 74 line (`NVLink: fatal
    /// error detected on link 14(0x0, 0x0, 0x10000, 0x0, 0x0, 0x0, 0x0)`);
    /// `None` for other codes and for 74 lines without the registers.
    pub nvlink_err: Option<NvlinkErrWords>,
    /// The XID an XID 45 line says caused it: the driver appends
    /// `" caused by previous Xid %d"` to a preemptive cleanup it traces to
    /// an earlier XID (NVIDIA/open-gpu-kernel-modules 595.45.04
    /// `src/nvidia/src/kernel/gpu/rc/kernel_rc.c`, `rootCauseXidStr`);
    /// `None` for other codes and for 45 lines without it.
    pub caused_by: Option<u64>,
}

/// From an XID 74 line: the link it names (NVIDIA counts ECC/parity
/// repeats "on the same link") and its seven registers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NvlinkErrWords {
    /// `None` where the words before the registers do not end in
    /// `link <n>`.
    pub link: Option<u32>,
    pub registers: [u32; 7],
}

/// From an NVLink5 XID line: its unit, severity word, whether the driver
/// says it was injected, and the first two registers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Nvlink5Words {
    /// The unit as NVIDIA's sheet names it (`None`: a unit the sheet does
    /// not name, e.g. `MSE degraded`).
    pub unit: Option<&'static str>,
    pub fatal: bool,
    /// `i1`: an injected fault (a drill), `i0` a real one.
    pub injected: bool,
    pub intr_info: u32,
    pub error_status: u32,
}

/// A message that starts like an XID, SXID or reset line but does not
/// parse as one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Malformed;

pub const RESET_MARKER: &str = "nvml-exporter: GPU reset ";
/// NVSentinel's reset job (`logger -p daemon.err`), by GPU UUID.
pub const NVSENTINEL_RESET_MARKER: &str = "GPU reset executed: ";

pub fn classify(message: &str) -> Result<Message, Malformed> {
    let m = message.trim_start();
    if let Some(rest) = m.strip_prefix("NVRM: Xid") {
        let (inside, code) = device_and_code(rest).ok_or(Malformed)?;
        let mut tokens = inside.split_whitespace();
        let gpu = tokens.next().and_then(PciAddress::parse).ok_or(Malformed)?;
        let (mut gpu_instance, mut compute_instance) = (None, None);
        for t in tokens {
            if let Some(n) = t.strip_prefix("GPU-I:") {
                gpu_instance = Some(instance_id(n, MAX_GPU_INSTANCE_ID)?);
            } else if let Some(n) = t.strip_prefix("GPU-CI:").or(t.strip_prefix("GPU-C:")) {
                compute_instance = Some(instance_id(n, MAX_COMPUTE_INSTANCE_ID)?);
            }
        }
        let after_code = rest.split_once("):").map(|(_, after)| after);
        let nvlink5 = if crate::xid_catalog::nvlink5::is_nvlink5(code) {
            after_code.and_then(nvlink5_words)
        } else {
            None
        };
        let nvlink_err = if code == 74 {
            after_code.and_then(nvlink_err_registers)
        } else {
            None
        };
        let caused_by = if code == 45 {
            after_code.and_then(caused_by)
        } else {
            None
        };
        return Ok(Message::Xid(Xid {
            gpu,
            gpu_instance,
            compute_instance,
            code,
            nvlink5,
            nvlink_err,
            caused_by,
        }));
    }
    if let Some(rest) = m.strip_prefix("NVRM: GPU ") {
        // `NVRM: GPU 0000:18:00.0: GPU has fallen off the bus.`; the
        // identity line `NVRM: GPU at PCI:...: GPU-<uuid>` is something else.
        if let Some((addr, what)) = rest.split_once(": ") {
            if what.trim_start().starts_with("GPU has fallen off the bus") {
                return PciAddress::parse(addr.trim())
                    .map(Message::BusFall)
                    .ok_or(Malformed);
            }
        }
        return Ok(Message::Other);
    }
    if let Some(rest) = m.strip_prefix("NVRM: The NVIDIA GPU ") {
        let addr = rest
            .split(|c: char| c.is_whitespace() || c == '\\')
            .next()
            .and_then(PciAddress::parse)
            .ok_or(Malformed)?;
        return Ok(if rest.contains(BUS_FALL_WORDS) {
            Message::BusFall(addr)
        } else {
            Message::BusFallStart(addr)
        });
    }
    if m.starts_with("NVRM:") && m.contains(BUS_FALL_WORDS) {
        return Ok(Message::BusFallEnd);
    }
    if m.starts_with("nvidia-nvswitch") {
        if let Some((_, rest)) = m.split_once(": SXid") {
            let (inside, code) = device_and_code(rest).ok_or(Malformed)?;
            let switch = PciAddress::parse(inside.trim()).ok_or(Malformed)?;
            return Ok(Message::Sxid { switch, code });
        }
        return Ok(Message::Other);
    }
    if let Some(rest) = m.strip_prefix("NVRM: loading NVIDIA UNIX") {
        // The first word shaped like a version: `580.159.04`.
        let major = rest
            .split_whitespace()
            .find(|w| {
                w.contains('.')
                    && w.split('.')
                        .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
            })
            .and_then(|w| w.split('.').next()?.parse().ok());
        return Ok(Message::DriverLoaded { major });
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
    if let Some((_, rest)) = m.split_once(NVSENTINEL_RESET_MARKER) {
        let uuid = rest.split_whitespace().next().unwrap_or("");
        let hex = uuid.strip_prefix("GPU-").unwrap_or("");
        if !hex.is_empty()
            && hex.len() <= 64
            && hex.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-')
        {
            return Ok(Message::GpuResetUuid(uuid.to_string()));
        }
        return Err(Malformed);
    }
    Ok(Message::Other)
}

/// What the driver says once a GPU is gone (both bus-fall shapes).
const BUS_FALL_WORDS: &str = "fallen off the bus";

/// A MIG instance id, decimal, at most `max`.
fn instance_id(s: &str, max: u32) -> Result<u32, Malformed> {
    s.parse().ok().filter(|n| *n <= max).ok_or(Malformed)
}

/// From what follows an NVLink5 XID's code: `[, pid=P, name=N], UNIT
/// (Fatal|Nonfatal) XC<n> i<n> Link <nn> (0xINTRINFO 0xERRORSTATUS ...)`,
/// read by its grammar from the right, as NVRM prints it
/// (`"%s %s XC%01u i%01u Link %02d (0x%08x ..."`): the registers in the
/// last parentheses, before them `Link <nn>`, `i<n>` (injected or not),
/// `XC<n>`, the severity word, and the unit, which is every word back to
/// the process fields (the last word ending in a comma): a process name
/// may hold commas and spaces, a unit two words (`MSE degraded`).
/// `None` where the line does not have that shape (the event is then
/// judged undecoded).
fn nvlink5_words(after_code: &str) -> Option<Nvlink5Words> {
    let (words, registers) = after_code.rsplit_once('(')?;
    let words: Vec<&str> = words.split_whitespace().collect();
    let [.., severity, xc, injected, link, _link_number] = words.as_slice() else {
        return None;
    };
    let fatal = match *severity {
        "Fatal" => true,
        "Nonfatal" => false,
        _ => return None,
    };
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if *link != "Link" || !xc.strip_prefix("XC").is_some_and(digits) {
        return None;
    }
    let injected = match injected.strip_prefix('i')? {
        "0" => false,
        n if digits(n) => true,
        _ => return None,
    };
    // The unit: the words between the last one ending in a comma (the
    // code or the process's name) and the severity.
    let before = &words[..words.len() - 5];
    let from = before
        .iter()
        .rposition(|w| w.ends_with(','))
        .map_or(0, |i| i + 1);
    let unit = before[from..].join(" ");
    if unit.is_empty() {
        return None;
    }
    let mut registers = registers.split(|c: char| c.is_whitespace() || c == ')');
    let mut hex = || {
        let r = registers.next()?;
        u32::from_str_radix(r.strip_prefix("0x")?, 16).ok()
    };
    Some(Nvlink5Words {
        unit: crate::xid_catalog::nvlink5::unit_name(&unit),
        fatal,
        injected,
        intr_info: hex()?,
        error_status: hex()?,
    })
}

/// The code at the end of `... caused by previous Xid 48`: the suffix the
/// driver prints last on the line (`"%s%s\n"`, the message, then it), so
/// it is read from the right, past whatever a process name holds.
fn caused_by(after_code: &str) -> Option<u64> {
    let (_, n) = after_code
        .trim_end()
        .rsplit_once(" caused by previous Xid ")?;
    n.parse().ok().filter(|&n| n > 0)
}

/// The link and seven registers at the end of an XID 74 line: `... link
/// 14(0x0, 0x0, 0x10000, 0x0, 0x0, 0x0, 0x0)`; `None` unless all seven
/// registers read.
fn nvlink_err_registers(after_code: &str) -> Option<NvlinkErrWords> {
    let (before, inside) = after_code.trim_end().rsplit_once('(')?;
    let inside = inside.strip_suffix(')')?;
    let mut out = [0u32; 7];
    let mut fields = inside.split(',');
    for slot in &mut out {
        let f = fields.next()?.trim();
        *slot = u32::from_str_radix(f.strip_prefix("0x").or(f.strip_prefix("0X"))?, 16).ok()?;
    }
    let link = match before.split_whitespace().rev().collect::<Vec<_>>()[..] {
        [n, "link", ..] if n.len() <= 4 && n.bytes().all(|b| b.is_ascii_digit()) => n.parse().ok(),
        _ => None,
    };
    fields.next().is_none().then_some(NvlinkErrWords {
        link,
        registers: out,
    })
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
            Ok(Message::DriverLoaded { major: Some(580) })
        );
        // The real 580.159.04 host's line (tests/device/h200-580.159.04/
        // kernel-log-nvidia.txt), trailing spaces and all.
        assert_eq!(
            classify("NVRM: loading NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build  (nixbld@)  "),
            Ok(Message::DriverLoaded { major: Some(580) })
        );
        assert_eq!(
            classify("NVRM: loading NVIDIA UNIX x86_64 Kernel Module  535.183.01  Sun May 12 19:39:15 UTC 2024"),
            Ok(Message::DriverLoaded { major: Some(535) })
        );
        // Grace hosts: a published Linux-aarch64 driver's line.
        assert_eq!(
            classify("NVRM: loading NVIDIA UNIX aarch64 Kernel Module  460.73.01  Thu Apr  1 21:51:06 UTC 2021"),
            Ok(Message::DriverLoaded { major: Some(460) })
        );
        assert_eq!(
            classify("NVRM: loading NVIDIA UNIX x86_64 Kernel Module"),
            Ok(Message::DriverLoaded { major: None })
        );
        assert_eq!(
            classify("GPU reset executed: GPU-5a1c3e0f-1b2c-4d3e-8f90-0123456789ab"),
            Ok(Message::GpuResetUuid(
                "GPU-5a1c3e0f-1b2c-4d3e-8f90-0123456789ab".into()
            ))
        );
        assert_eq!(
            classify("nvsentinel: GPU reset executed: GPU-5a1c3e0f-1b2c"),
            Ok(Message::GpuResetUuid("GPU-5a1c3e0f-1b2c".into()))
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
    fn bus_fall_lines_without_an_xid() {
        let gpu = PciAddress::parse("0000:18:00").unwrap();
        let fall = |m: &str| match classify(m) {
            Ok(Message::BusFall(a)) => a,
            other => panic!("{m:?}: {other:?}"),
        };
        assert!(fall("NVRM: GPU 0000:18:00.0: GPU has fallen off the bus.").same_device(&gpu));
        // One record, its line feeds escaped as /dev/kmsg escapes them.
        let b3 = PciAddress::parse("0000:b3:00").unwrap();
        assert!(fall("NVRM: The NVIDIA GPU 0000:b3:00.0\\x0aNVRM: (PCI ID: 10de:26b5) installed in this system has\\x0aNVRM: fallen off the bus and is not responding to commands.").same_device(&b3));
        assert!(fall("NVRM: The NVIDIA GPU 0000:b3:00.0 (PCI ID: 10de:26b5) installed in this system has fallen off the bus and is not responding to commands.").same_device(&b3));
        // Split by the kernel into three records.
        assert!(
            matches!(classify("NVRM: The NVIDIA GPU 0000:b3:00.0"), Ok(Message::BusFallStart(a)) if a.same_device(&b3))
        );
        assert_eq!(
            classify("NVRM: (PCI ID: 10de:26b5) installed in this system has"),
            Ok(Message::Other)
        );
        assert_eq!(
            classify("NVRM: fallen off the bus and is not responding to commands."),
            Ok(Message::BusFallEnd)
        );
        // The identity line before an XID is not a fall.
        assert_eq!(
            classify("NVRM: GPU at PCI:0000:01:00: GPU-f1648d72-c7c8-9814-2832-7a062b009188"),
            Ok(Message::Other)
        );
    }

    #[test]
    fn nvlink5_lines_give_their_severity_and_registers() {
        let words = |m: &str| xid(m).nvlink5;
        // Real GB200 lines (gpud's kmsg tests).
        assert_eq!(
            words("NVRM: Xid (PCI:0018:01:00): 149, NETIR_LINK_EVT Fatal XC0 i0 Link 08 (0x004505c6 0x00000000 0x00000000 0x00000000 0x00000000 0x00000000)"),
            Some(Nvlink5Words { unit: Some("NETIR_LINK_EVT"), fatal: true, injected: false, intr_info: 0x0045_05c6, error_status: 0 })
        );
        assert_eq!(
            words("NVRM: Xid (PCI:0018:01:00): 145, pid=876767, name=ray::WorkerDict, RLW_RXPIPE Nonfatal XC0 i0 Link 13 (0x0409a0c2 0x00000008 0x00000001 0x00000000 0x00100000 0x00000004)"),
            Some(Nvlink5Words { unit: Some("RLW_RXPIPE"), fatal: false, injected: false, intr_info: 0x0409_a0c2, error_status: 8 })
        );
        assert_eq!(
            words("NVRM: Xid (PCI:0009:01:00): 149, NETIR_LINK_EVT  Fatal   XC0 i0 Link 15 (0x0215e5c6 0x00000000 0x00000000 0x00000000 0x00000000 0x00000000)"),
            Some(Nvlink5Words { unit: Some("NETIR_LINK_EVT"), fatal: true, injected: false, intr_info: 0x0215_e5c6, error_status: 0 })
        );
        assert_eq!(
            words("NVRM: Xid (PCI:0000:2a:00): 145, RLW_REMAP Nonfatal XC0 i0 Link 08 (0x00000004 0x00000100 0x00000000 0x00000000 0x00000000 0x00000000)"),
            Some(Nvlink5Words { unit: Some("RLW_REMAP"), fatal: false, injected: false, intr_info: 4, error_status: 0x100 })
        );
        // Issue 36, F5: read by its grammar. A process name with commas
        // and spaces, NVIDIA's two-word unit, an injected event.
        assert_eq!(
            words("NVRM: Xid (PCI:0018:01:00): 145, pid=876767, name=a,b c, RLW_RXPIPE Nonfatal XC0 i0 Link 13 (0x0409a0c2 0x00000008 0x00000001 0x00000000 0x00100000 0x00000004)"),
            Some(Nvlink5Words { unit: Some("RLW_RXPIPE"), fatal: false, injected: false, intr_info: 0x0409_a0c2, error_status: 8 })
        );
        assert_eq!(
            words("NVRM: Xid (PCI:0000:5d:00): 150, MSE degraded Nonfatal XC0 i0 Link -1 (0x00000000 0x00000000 0x00000000 0x00000000 0x00000000 0x00000000)"),
            Some(Nvlink5Words { unit: None, fatal: false, injected: false, intr_info: 0, error_status: 0 })
        );
        assert_eq!(
            words("NVRM: Xid (PCI:0000:5d:00): 149, NETIR_LINK_EVT Fatal XC0 i1 Link 04 (0x004505c6 0x00000000 0x00000000 0x00000000 0x00000000 0x00000000)"),
            Some(Nvlink5Words { unit: Some("NETIR_LINK_EVT"), fatal: true, injected: true, intr_info: 0x0045_05c6, error_status: 0 })
        );
        // The severity is the word before XC<n>, not the second one.
        assert_eq!(
            words("NVRM: Xid (PCI:0000:5d:00): 145, RLW_RXPIPE Fatal Nonfatal XC0 i0 Link 13 (0x0409a0c2 0x00000008)").map(|w| w.fatal),
            Some(false)
        );
        // An NVLink5 code without those words, and another code: none.
        assert_eq!(
            words("NVRM: Xid (PCI:0008:06:00): 149, Placeholder message"),
            None
        );
        assert_eq!(words("NVRM: Xid (PCI:0008:06:00): 149"), None);
        assert_eq!(
            words("NVRM: Xid (PCI:0008:06:00): 74, NVLINK Fatal XC0 i0 Link 08 (0x1 0x2)"),
            None
        );
        // Issue 36, F3: XID 74's seven registers.
        assert_eq!(
            xid("NVRM: Xid (PCI:0003:00:00): 74, pid='<unknown>', name=<unknown>, NVLink: fatal error detected on link 14(0x0, 0x0, 0x10000, 0x0, 0x0, 0x0, 0x0)").nvlink_err,
            Some(NvlinkErrWords { link: Some(14), registers: [0, 0, 0x10000, 0, 0, 0, 0] })
        );
        // Issue 46: the link of a line that names none is not guessed.
        assert_eq!(
            xid(
                "NVRM: Xid (PCI:0003:00:00): 74, NVLink: error (0x0, 0x0, 0x1, 0x0, 0x0, 0x0, 0x0)"
            )
            .nvlink_err,
            Some(NvlinkErrWords {
                link: None,
                registers: [0, 0, 1, 0, 0, 0, 0]
            })
        );
        assert_eq!(
            xid("NVRM: Xid (PCI:0000:5d:00): 74, pid=1, name=x, NVLink: fatal error detected on link 3").nvlink_err,
            None
        );
        assert_eq!(
            xid("NVRM: Xid (PCI:0000:5d:00): 74, NVLink: fatal error detected on link 3(0x1, 0x0)")
                .nvlink_err,
            None
        );
        // Issue 46: the cause the driver names on a 45, as kernel_rc.c
        // prints it (with and without a process), and nothing elsewhere.
        assert_eq!(
            xid("NVRM: Xid (PCI:0000:3b:00): 45, pid=2411, name=python3, Ch 00000010 caused by previous Xid 149").caused_by,
            Some(149)
        );
        assert_eq!(
            xid("NVRM: Xid (PCI:0000:3b:00): 45, Ch 00000008 caused by previous Xid 48").caused_by,
            Some(48)
        );
        assert_eq!(
            xid(
                "NVRM: Xid (PCI:0000:3b:00): 45, pid=7, name=caused by previous Xid 9, Ch 00000010"
            )
            .caused_by,
            None,
            "a process name is not the suffix"
        );
        assert_eq!(
            xid("NVRM: Xid (PCI:0000:3b:00): 45, pid=2411, name=python3, Ch 00000010").caused_by,
            None
        );
        assert_eq!(
            xid("NVRM: Xid (PCI:0000:3b:00): 13, x caused by previous Xid 48").caused_by,
            None
        );
        // MIG instance ids at the driver's maximum are read.
        let x = xid("NVRM: Xid (PCI:0000:3b:00 GPU-I:14 GPU-CI:07): 13, x");
        assert_eq!((x.gpu_instance, x.compute_instance), (Some(14), Some(7)));
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
            "GPU reset executed: 0000:3b:00",
            "NVRM: GPU 0000:zz:00.0: GPU has fallen off the bus.",
            // Instance ids the driver never hands out.
            "NVRM: Xid (PCI:0000:3b:00 GPU-I:15 GPU-CI:00): 13, x",
            "NVRM: Xid (PCI:0000:3b:00 GPU-I:01 GPU-CI:8): 13, x",
            "NVRM: Xid (PCI:0000:18:00 GPU-I:1000 GPU-CI:4294967295): 13, x",
        ] {
            assert_eq!(classify(bad), Err(Malformed), "{bad:?}");
        }
    }
}
