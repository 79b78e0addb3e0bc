//! The simulated driver's kernel log: with `NVML_SIM_KMSG=PATH`, every XID
//! the fleet raises (timeline or control socket) is appended to PATH as a
//! record of the kernel's `/dev/kmsg` format, worded as NVRM prints it,
//! and so is the module's load line when the driver comes back
//! (`driver-load`):
//!
//! ```text
//! 4,17,5123456789,-;NVRM: Xid (PCI:0000:3a:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.
//! 4,18,5123999999,-;NVRM: Xid (PCI:0000:18:00 GPU-I:07 GPU-CI:00): 31, pid=39001, name=python3, Ch 0000000a, intr 00000000. MMU Fault: ...
//! 6,19,5124000000,-;NVRM: loading NVIDIA UNIX x86_64 Kernel Module  560.35.03  ...
//! ```
//!
//! Timestamps are microseconds since boot (`/proc/uptime`), as the
//! kernel's are; sequence numbers continue from the file's last record, so
//! a test may write records of its own before the fleet starts. The file is
//! opened, appended and closed per record: XIDs are rare, and a reader
//! following the file sees each line whole.

use std::io::Write;
use std::sync::Mutex;

use crate::identity::PciAddr;

/// The next sequence number, once the file has been looked at.
static NEXT_SEQ: Mutex<Option<u64>> = Mutex::new(None);

/// Appends the NVRM line of an XID on the GPU at `pci` (in MIG
/// instance `gpu_instance`, compute instance `compute_instance`, when
/// given), raised by `process` (pid and name) where one is known, worded
/// `detail` after the process where given. Nothing without
/// `NVML_SIM_KMSG`; a file that cannot be written is reported once on
/// stderr, never to the NVML caller.
pub fn xid(
    pci: &PciAddr,
    code: u64,
    gpu_instance: Option<u32>,
    compute_instance: Option<u32>,
    process: Option<(u32, &str)>,
    detail: Option<&str>,
) {
    let detail = detail.unwrap_or_else(|| self::detail(code));
    // Warning level, as NVRM logs XIDs.
    append(
        4,
        &worded(pci, code, gpu_instance, compute_instance, process, detail),
    );
}

/// The message NVRM prints for an XID.
pub fn xid_message(
    pci: &PciAddr,
    code: u64,
    gpu_instance: Option<u32>,
    compute_instance: Option<u32>,
    process: Option<(u32, &str)>,
) -> String {
    worded(
        pci,
        code,
        gpu_instance,
        compute_instance,
        process,
        detail(code),
    )
}

fn worded(
    pci: &PciAddr,
    code: u64,
    gpu_instance: Option<u32>,
    compute_instance: Option<u32>,
    process: Option<(u32, &str)>,
    detail: &str,
) -> String {
    // Four-digit domain, lower case, no function: as NVRM prints it.
    let mut place = format!("PCI:{:04x}:{:02x}:{:02x}", pci.domain, pci.bus, pci.device);
    if let Some(gi) = gpu_instance {
        place += &format!(" GPU-I:{gi:02} GPU-CI:{:02}", compute_instance.unwrap_or(0));
    }
    let process = process.map_or_else(
        || "pid='<unknown>', name=<unknown>".to_string(),
        |(pid, name)| {
            format!(
                "pid={pid}, name={}",
                name.split_whitespace().next().unwrap_or("")
            )
        },
    );
    format!("NVRM: Xid ({place}): {code}, {process}, {detail}")
}

/// Appends the line the NVIDIA module prints when it loads, naming the
/// machine's architecture as the real module does: `x86_64`, or `aarch64`
/// as in a published boot log of the Linux-aarch64 460.73.01 driver
/// ("NVRM: loading NVIDIA UNIX aarch64 Kernel Module  460.73.01  Thu Apr  1
/// 21:51:06 UTC 2021"). The exporter's parser reads both.
pub fn driver_loaded(version: &str) {
    let arch = std::env::consts::ARCH;
    append(
        6,
        &format!("NVRM: loading NVIDIA UNIX {arch} Kernel Module  {version}  (nvml-sim)"),
    );
}

/// What NVRM says after the code, for the codes tests raise most; the
/// exporter reads only the code.
fn detail(code: u64) -> &'static str {
    match code {
        13 => "Graphics SM Warp Exception on (GPC 0, TPC 0, SM 0): Illegal Instruction Parameter",
        31 => "Ch 0000000a, intr 00000000. MMU Fault: ENGINE GRAPHICS GPC0 faulted @ 0x7f00_00000000",
        43 => "Ch 00000008",
        48 => "An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer",
        63 => "Row Remapper: New row marked for remapping, reset gpu to activate.",
        64 => "Row Remapper: row remapping failed",
        74 => "NVLink: fatal error detected on link 3",
        79 => "GPU has fallen off the bus.",
        94 => "Contained: SM (0x1). RST: No, D-RST: No",
        95 => "Uncontained: FBHUB. RST: Yes, D-RST: No",
        109 => "Ch 00000008, errorString CTX SWITCH TIMEOUT, Info 0x58005",
        119 => "Timeout after 6s of waiting for RPC response from GPU0 GSP! Expected function 76 (GSP_RM_CONTROL).",
        120 => "GSP task timeout @ pc:0x0, partition:0#0",
        _ => "(nvml-sim)",
    }
}

fn append(level: u8, message: &str) {
    if let Some(path) = crate::settings::kernel_log() {
        append_to(path.as_os_str(), level, message);
    }
}

/// Appends one record to the file at `path`.
pub fn append_to(path: &std::ffi::OsStr, level: u8, message: &str) {
    let mut next = NEXT_SEQ.lock().unwrap_or_else(|e| e.into_inner());
    let seq = *next.get_or_insert_with(|| last_seq(path).map_or(0, |s| s + 1));
    let line = format!("{level},{seq},{},-;{message}\n", uptime_us());
    let written = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .and_then(|mut f| f.write_all(line.as_bytes()));
    match written {
        Ok(()) => *next = Some(seq + 1),
        Err(e) => {
            static REPORTED: std::sync::Once = std::sync::Once::new();
            REPORTED.call_once(|| {
                eprintln!(
                    "nvml-sim: cannot append to {}={}: {e}",
                    crate::settings::KERNEL_LOG_VAR,
                    path.to_string_lossy()
                );
            });
        }
    }
}

/// The sequence number of the file's last record.
fn last_seq(path: &std::ffi::OsStr) -> Option<u64> {
    let text = std::fs::read_to_string(path).ok()?;
    text.lines()
        .rev()
        .find_map(|l| l.split(',').nth(1)?.parse().ok())
}

fn uptime_us() -> u64 {
    std::fs::read_to_string("/proc/uptime")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<f64>().ok())
        .map_or(0, |s| (s * 1e6) as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_continue_the_files_sequence_and_date_from_boot() {
        let dir = std::env::temp_dir().join(format!("nvml-sim-kmsg-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("kmsg");
        std::fs::write(&path, "6,41,1000,-;Linux version x\n").unwrap();
        append_to(path.as_os_str(), 4, "NVRM: Xid (PCI:0000:3a:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.");
        append_to(path.as_os_str(), 4, "second");
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3);
        let fields: Vec<&str> = lines[1].splitn(4, ',').collect();
        assert_eq!((fields[0], fields[1]), ("4", "42"));
        let ts: u64 = fields[2].parse().unwrap();
        assert!(
            ts.abs_diff(uptime_us()) < 5_000_000,
            "{ts} vs {}",
            uptime_us()
        );
        assert!(fields[3].starts_with("-;NVRM: Xid (PCI:0000:3a:00): 79,"));
        assert!(lines[2].starts_with("4,43,"));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn xid_lines_are_worded_as_nvrm_prints_them() {
        assert_eq!(
            xid_message(&PciAddr::parse("00000000:3A:00.0").unwrap(), 79, None, None, None),
            "NVRM: Xid (PCI:0000:3a:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."
        );
        let pci = PciAddr::parse("00000001:18:02.0").unwrap();
        assert!(
            xid_message(&pci, 31, Some(7), None, Some((39001, "python3 train.py"))).starts_with(
                "NVRM: Xid (PCI:0001:18:02 GPU-I:07 GPU-CI:00): 31, pid=39001, name=python3, "
            )
        );
    }
}
