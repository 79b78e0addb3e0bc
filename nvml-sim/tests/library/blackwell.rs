//! A GB200 NVL72 tray (`gb200-nvl72`, driver 580.173.02) through the raw C
//! ABI, as an NVML client reads it, and its faults through the `nvml-sim`
//! CLI: NVLink5 counters instead of the DL ones, fabric info v3 with the
//! tray's partition and health, module and memory power scopes, the power
//! smoothing lifetime at the branch's field id. One test: the fleet is
//! process-wide.

// Calls the simulator's C ABI directly, as NVML clients do, and sets its
// variables before this process's first NVML init.
#![allow(unsafe_code, clippy::disallowed_methods)]

use crate::common;

use nvml_wrapper_sys::bindings::{nvmlFieldValue_t, nvmlGpuFabricInfo_v3_t};

const NOT_SUPPORTED: u32 = 3;

/// The CLI's reply: (success, stdout or, on failure, stderr).
fn cli(socket: &std::path::Path, args: &[&str]) -> (bool, String) {
    let (ok, out, err) = common::cli(socket, args);
    (ok, if ok { out } else { err })
}

fn u64_of(f: &nvmlFieldValue_t) -> u64 {
    assert_eq!(f.nvmlReturn, 0, "field {}", f.fieldId);
    // SAFETY: the simulator writes every value through the 64-bit member's
    // storage (zeroed first), whatever its type.
    unsafe { f.value.ullVal }
}

fn fabric(nvml: &nvml_wrapper::Nvml, d: &nvml_wrapper::Device) -> nvmlGpuFabricInfo_v3_t {
    // SAFETY: plain C struct; all-zero is valid.
    let mut info: nvmlGpuFabricInfo_v3_t = unsafe { std::mem::zeroed() };
    info.version = std::mem::size_of::<nvmlGpuFabricInfo_v3_t>() as u32 | (3 << 24);
    // SAFETY: a valid handle and a v3 struct of the version it says.
    let rc = unsafe {
        nvml.lib()
            .nvmlDeviceGetGpuFabricInfoV(d.handle(), (&raw mut info).cast())
    };
    assert_eq!(rc, 0);
    info
}

#[test]
fn a_gb200_tray_and_its_faults() {
    in_own_process!(a_gb200_tray_and_its_faults);
    let dir = std::env::temp_dir().join(format!("nvml-sim-blackwell-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let socket = dir.join("control.sock");
    std::env::set_var("NVML_SIM_SCENARIO", "gb200-nvl72");
    std::env::set_var("NVML_SIM_CONTROL", &socket);
    std::env::remove_var("NVML_SIM_DRIVER");
    std::env::remove_var("NVML_SIM_TIME_SCALE");
    let nvml = common::init();
    assert_eq!(nvml.sys_driver_version().unwrap(), "580.173.02");
    let d1 = nvml.device_by_index(1).unwrap();
    assert_eq!(d1.name().unwrap(), "NVIDIA GB200");

    // NVLink5: the DL counters are not supported, the NVLink5 ones are,
    // per link; a clean link's bit error rates are at the floor.
    let link = 4;
    let read = |ids: &[u32]| -> Vec<nvmlFieldValue_t> {
        let req: Vec<(u32, u32)> = ids.iter().map(|&id| (id, link)).collect();
        common::raw_fields(&nvml, &d1, &req)
    };
    let dl = read(&[161, 162, 163]);
    assert!(dl.iter().all(|f| f.nvmlReturn == NOT_SUPPORTED));
    let before: Vec<u64> = read(&[213, 214, 215, 219, 220, 221])
        .iter()
        .map(u64_of)
        .collect();
    assert_eq!(before[0..4], [0, 0, 0, 0]);
    assert_eq!(before[4], 0xFFF, "effective BER floor");

    for args in [
        ["--counter", "recovery", "--count", "3"],
        ["--counter", "recovery-failed", "--count", "1"],
        ["--counter", "effective", "--count", "150"],
    ] {
        let mut all = vec!["nvlink-errors", "--gpu", "1", "--link", "4"];
        all.extend(args);
        let (ok, text) = cli(&socket, &all);
        assert!(ok, "{text}");
    }
    let after: Vec<u64> = read(&[213, 214, 215, 219, 220, 221])
        .iter()
        .map(u64_of)
        .collect();
    assert_eq!(after[0], 3, "recovered and up again");
    assert_eq!(after[1], 1, "recovery failed");
    assert_eq!(after[2], 4, "either");
    assert_eq!(after[3], 150, "effective errors");
    assert_ne!(after[4], 0xFFF, "the effective BER rose");
    assert_eq!(after[5], before[5], "symbol errors untouched");
    // scopeId UINT_MAX: the counts summed over the GPU's links, as DCGM
    // asks them for a GPU's total (DcgmCMUtils.cpp).
    let all = common::raw_fields(&nvml, &d1, &[(215, u32::MAX), (219, u32::MAX)]);
    assert_eq!(all.iter().map(u64_of).collect::<Vec<_>>(), [4, 150]);
    // NVLink5 has no replay counter: refused, named.
    let (ok, text) = cli(
        &socket,
        &[
            "nvlink-errors",
            "--gpu",
            "1",
            "--link",
            "4",
            "--counter",
            "replay",
        ],
    );
    assert!(!ok && text.contains("NVLink5"), "{text}");

    // Fabric v3: the tray's partition, every health row false, healthy.
    let f = fabric(&nvml, &d1);
    assert_eq!((f.state, f.status, f.cliqueId), (3, 0, 2));
    assert_eq!(f.clusterUuid[0..2], [0x5a, 0x1c]);
    assert_eq!(
        f.healthMask, 0xaa,
        "four fields false (2), configuration n/a"
    );
    assert_eq!(f.healthSummary, 1);
    let (ok, text) = cli(
        &socket,
        &[
            "fabric-health",
            "--gpu",
            "1",
            "--summary",
            "limited-capacity",
            "--route-unhealthy",
            "true",
            "--incorrect-configuration",
            "insufficient-nvlinks",
        ],
    );
    assert!(ok, "{text}");
    let f = fabric(&nvml, &d1);
    assert_eq!(f.healthSummary, 3);
    assert_eq!((f.healthMask >> 4) & 0x3, 1, "route unhealthy");
    assert_eq!((f.healthMask >> 8) & 0xf, 5, "insufficient NVLinks");
    assert_eq!(f.healthMask & 0xf, 0xa, "the other rows unchanged");
    let (ok, text) = cli(
        &socket,
        &["fabric-health", "--gpu", "1", "--summary", "sick"],
    );
    assert!(!ok && text.contains("unknown variant"), "{text}");

    // Power: GPU, module and memory scopes; limits where reported.
    let p = common::raw_fields(
        &nvml,
        &d1,
        &[(185, 0), (185, 1), (185, 2), (189, 1), (187, 1), (189, 2)],
    );
    let (gpu, module, memory) = (u64_of(&p[0]), u64_of(&p[1]), u64_of(&p[2]));
    assert!(
        module > gpu && gpu > memory && memory > 0,
        "{gpu} {module} {memory}"
    );
    assert_eq!(u64_of(&p[3]), 2_500_000, "module default limit");
    assert_eq!(u64_of(&p[4]), 500_000, "module min limit");
    assert_eq!(p[5].nvmlReturn, NOT_SUPPORTED, "no memory limits");

    // Power smoothing lifetime: id 258 on 580.173.02 (263 means something
    // else there), GPU 1 starts at 99 %.
    let ps = common::raw_fields(&nvml, &d1, &[(258, 0), (263, 0)]);
    assert_eq!(u64_of(&ps[0]), 99);
    assert_eq!(ps[1].nvmlReturn, NOT_SUPPORTED);
    let (ok, text) = cli(
        &socket,
        &["power-smoothing", "--gpu", "1", "--lifetime-percent", "4"],
    );
    assert!(ok, "{text}");
    assert_eq!(u64_of(&common::raw_fields(&nvml, &d1, &[(258, 0)])[0]), 4);
    let (ok, text) = cli(
        &socket,
        &["power-smoothing", "--gpu", "1", "--lifetime-percent", "140"],
    );
    assert!(!ok && text.contains("outside 0..=100"), "{text}");

    // Display mode is deprecated on this branch (the capture prints it so).
    let mut mode = 0u32;
    // SAFETY: a valid handle and out-pointer.
    let rc = unsafe {
        nvml.lib()
            .nvmlDeviceGetDisplayMode(d1.handle(), &raw mut mode)
    };
    assert_eq!(rc, 26, "NVML_ERROR_DEPRECATED");
}
