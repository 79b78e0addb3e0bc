//! Per-process utilization as a client sees it: both calls
//! (`nvmlDeviceGetProcessUtilization` through nvml-wrapper,
//! `nvmlDeviceGetProcessesUtilizationInfo` raw, as nvml-wrapper does not
//! wrap it), their buffer protocols and errors, the device's sample ring
//! (`nvmlDeviceGetSamples`), agreement with the GPU's own utilization,
//! MPS, MIG, and a process's use changed at run time through the CLI. One
//! test: the fleet is process-wide.
//!
//! The driver names one pid per 200 ms sample (src/fleet/usage.rs), so a
//! time-sliced process's mean over n samples is a multiple of the GPU's
//! busy percent over n: the checks allow one sample either way.

// Calls the simulator's C ABI directly and sets its variables before this
// process's first NVML init.
#![allow(unsafe_code, clippy::disallowed_methods)]

use crate::common;

use nvml_wrapper::enum_wrappers::device::Sampling;
use nvml_wrapper::enums::device::SampleValue;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::Nvml;
use nvml_wrapper_sys::bindings::*;
use std::process::Command;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

const SCENARIO: &str = r#"
name = "shared"
[[gpu]]  # two jobs time-slice one GPU
model = "h100-sxm5-80gb"
processes = [
  { pid = 7001, name = "job-a", memory_mib = 1000, sm_percent = 60, memory_percent = 25 },
  { pid = 7002, name = "job-b", memory_mib = 1000, sm_percent = 20, decoder_percent = 40 },
  { pid = 7003, name = "idle", memory_mib = 500 },
]
[[gpu]]  # MPS: two clients in the server's context
model = "h100-sxm5-80gb"
mps = true
processes = [
  { pid = 7011, name = "client-a", memory_mib = 1000, sm_percent = 30 },
  { pid = 7012, name = "client-b", memory_mib = 1000, sm_percent = 15 },
]
[[gpu]]  # MIG: no per-process utilization
model = "h100-sxm5-80gb"
mig = ["3g.40gb"]
processes = [{ pid = 7021, name = "in-mig", memory_mib = 1000, mig_instance = 0, sm_percent = 50 }]
"#;

fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_micros() as u64
}

fn handle(d: &nvml_wrapper::Device) -> nvmlDevice_t {
    // SAFETY: the raw handle is only passed back to the library it came
    // from, while `d`'s NVML is alive.
    unsafe { d.handle() }
}

/// `nvmlDeviceGetProcessesUtilizationInfo` with room for `cap` entries:
/// the return code, the count written back and the entries.
fn info(
    nvml: &Nvml,
    d: nvmlDevice_t,
    last_seen: u64,
    cap: u32,
    version: u32,
) -> (nvmlReturn_t, u32, Vec<nvmlProcessUtilizationInfo_v1_t>) {
    let f = nvml
        .lib()
        .nvmlDeviceGetProcessesUtilizationInfo
        .as_ref()
        .expect("exported on the default (R560) personality");
    let mut buf: Vec<nvmlProcessUtilizationInfo_v1_t> =
        // SAFETY: a plain C struct; zero is a valid value.
        vec![unsafe { std::mem::zeroed() }; cap as usize];
    let mut arg = nvmlProcessesUtilizationInfo_v1_t {
        version,
        processSamplesCount: cap,
        lastSeenTimeStamp: last_seen,
        procUtilArray: if cap == 0 {
            std::ptr::null_mut()
        } else {
            buf.as_mut_ptr()
        },
    };
    // SAFETY: the library's own symbol of nvml.h's type; `arg` and the
    // `cap` entries of `buf` it points to are ours, live for the call.
    let ret = unsafe { f(d, &raw mut arg) };
    let n = arg.processSamplesCount.min(cap) as usize;
    buf.truncate(if ret == nvmlReturn_enum_NVML_SUCCESS {
        n
    } else {
        0
    });
    (ret, arg.processSamplesCount, buf)
}

/// Within one 200 ms sample of `busy` percent, over `n` samples, of `want`.
fn near(got: u32, want: f64, busy: f64, n: f64) -> bool {
    (f64::from(got) - want).abs() <= busy / n + 1.0
}

const V1: u32 = std::mem::size_of::<nvmlProcessesUtilizationInfo_v1_t>() as u32 | (1 << 24);

#[test]
fn per_process_utilization_like_a_driver() {
    in_own_process!(per_process_utilization_like_a_driver);
    let dir = std::env::temp_dir().join(format!("nvml-sim-procutil-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let scenario = dir.join("shared.toml");
    std::fs::write(&scenario, SCENARIO).unwrap();
    let socket = dir.join("control.sock");
    std::env::set_var("NVML_SIM_SCENARIO", &scenario);
    std::env::set_var("NVML_SIM_CONTROL", &socket);
    std::env::remove_var("NVML_SIM_TIME_SCALE");
    std::env::remove_var("NVML_SIM_DRIVER");
    let nvml = common::init();
    std::thread::sleep(Duration::from_millis(2100));
    let d0 = nvml.device_by_index(0).unwrap();
    let h0 = handle(&d0);

    // The GPU's utilization is what its processes declare.
    let rates = d0.utilization_rates().unwrap();
    assert_eq!((rates.gpu, rates.memory), (80, 25));
    assert_eq!(d0.decoder_utilization().unwrap().utilization, 40);

    // The ring of the device's samples, 200 ms apart, each 80 % busy.
    let ring = d0
        .samples(Sampling::GpuUtilization, None)
        .unwrap_or_else(|e| panic!("{e:?}"));
    assert!((10..=11).contains(&ring.len()), "{} samples", ring.len());
    assert!(ring
        .windows(2)
        .all(|w| w[1].timestamp - w[0].timestamp == 200_000));
    assert!(ring.iter().all(|s| matches!(s.value, SampleValue::U32(80))));
    let n = ring.len() as f64;

    // The old call, as nvml-wrapper makes it (sizing call, then the read):
    // 7001 named in three samples of four, 7002 in one; each engine names
    // the process busy on it.
    let mut old = d0.process_utilization_stats(None).unwrap();
    old.sort_by_key(|s| s.pid);
    assert_eq!(old.len(), 2, "7003 is idle: never named");
    let (a, b) = (&old[0], &old[1]);
    assert_eq!((a.pid, a.mem_util, a.dec_util), (7001, 25, 0));
    assert_eq!((b.pid, b.mem_util, b.dec_util), (7002, 0, 40));
    assert!(near(a.sm_util, 60.0, 80.0, n), "{}", a.sm_util);
    assert!(near(b.sm_util, 20.0, 80.0, n), "{}", b.sm_util);

    // The versioned call: size protocol, version check, the values.
    let (ret, needed, _) = info(&nvml, h0, 0, 0, V1);
    assert_eq!(
        (ret, needed),
        (nvmlReturn_enum_NVML_ERROR_INSUFFICIENT_SIZE, 2)
    );
    let (ret, _, _) = info(&nvml, h0, 0, 8, V1 + 1);
    assert_eq!(ret, nvmlReturn_enum_NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
    let (ret, n_info, entries) = info(&nvml, h0, 0, 8, V1);
    assert_eq!((ret, n_info), (nvmlReturn_enum_NVML_SUCCESS, 2));
    let mut by_pid: Vec<_> = entries
        .iter()
        .map(|e| (e.pid, e.memUtil, e.decUtil, e.jpgUtil))
        .collect();
    by_pid.sort_unstable();
    assert_eq!(by_pid, [(7001, 25, 0, 0), (7002, 0, 40, 0)]);
    // Truncated means add up to at most the GPU's 80 %.
    let sm: u32 = entries.iter().map(|e| e.smUtil).sum();
    assert!((78..=80).contains(&sm), "{sm}");
    let newest = entries.iter().map(|e| e.timeStamp).max().unwrap();
    let now = now_us();
    assert!(
        newest <= now && now - newest < 400_000,
        "CPU time in µs: {newest} vs {now}"
    );

    // Nothing newer than the newest sample yet: NOT_FOUND, from both.
    let (ret, _, _) = info(&nvml, h0, now + 10_000_000, 8, V1);
    assert_eq!(ret, nvmlReturn_enum_NVML_ERROR_NOT_FOUND);
    assert!(matches!(
        d0.process_utilization_stats(now + 10_000_000),
        Err(NvmlError::NotFound)
    ));

    // Changed at run time through the CLI: samples after the change say so.
    let out = Command::new(common::cli_path())
        .args(["--socket", socket.to_str().unwrap()])
        .args(["process", "use", "--pid", "7002", "--sm-percent", "35"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let changed = now_us();
    std::thread::sleep(Duration::from_millis(4100));
    let (_, _, entries) = info(&nvml, h0, changed, 8, V1);
    let b = entries
        .iter()
        .find(|e| e.pid == 7002)
        .expect("7002 still active");
    assert_eq!(b.decUtil, 40, "the engines not given keep their use");
    // 35 of the GPU's 95 %, over 20 samples.
    assert!(near(b.smUtil, 35.0, 95.0, 20.0), "{}", b.smUtil);
    assert_eq!(d0.utilization_rates().unwrap().gpu, 95);
    let after = d0
        .samples(Sampling::GpuUtilization, changed + 400_000)
        .unwrap();
    assert!(after
        .iter()
        .all(|s| matches!(s.value, SampleValue::U32(95))));

    // A process that ended keeps its samples until they age out.
    Command::new(common::cli_path())
        .args([
            "--socket",
            socket.to_str().unwrap(),
            "process",
            "stop",
            "--pid",
            "7001",
        ])
        .status()
        .unwrap();
    let stopped = now_us();
    let (_, _, entries) = info(&nvml, h0, changed, 8, V1);
    assert!(
        entries.iter().any(|e| e.pid == 7001),
        "ended, still sampled"
    );
    std::thread::sleep(Duration::from_millis(400));
    let (_, _, entries) = info(&nvml, h0, stopped + 200_000, 8, V1);
    assert!(
        entries.iter().all(|e| e.pid != 7001),
        "no samples after it ended"
    );

    // MPS: the clients are listed, the server's pid carries their use.
    let d1 = nvml.device_by_index(1).unwrap();
    let clients: Vec<u32> = d1
        .mps_running_compute_processes()
        .unwrap()
        .iter()
        .map(|p| p.pid)
        .collect();
    assert_eq!(clients, [7011, 7012]);
    let compute: Vec<u32> = d1
        .running_compute_processes()
        .unwrap()
        .iter()
        .map(|p| p.pid)
        .collect();
    let server = *compute
        .iter()
        .find(|p| !clients.contains(p))
        .expect("the MPS server is a compute process");
    let (_, _, entries) = info(&nvml, handle(&d1), 0, 8, V1);
    let got: Vec<_> = entries.iter().map(|e| (e.pid, e.smUtil)).collect();
    assert_eq!(got, [(server, 45)]);
    assert_eq!(d1.utilization_rates().unwrap().gpu, 45);

    // MIG-enabled: not supported, by any of the three calls.
    let d2 = nvml.device_by_index(2).unwrap();
    let (ret, _, _) = info(&nvml, handle(&d2), 0, 8, V1);
    assert_eq!(ret, nvmlReturn_enum_NVML_ERROR_NOT_SUPPORTED);
    assert!(matches!(
        d2.process_utilization_stats(None),
        Err(NvmlError::NotSupported)
    ));
    assert!(matches!(
        d2.samples(Sampling::GpuUtilization, None),
        Err(NvmlError::NotSupported)
    ));
    // Power and clock samples are not modelled.
    assert!(matches!(
        d0.samples(Sampling::Power, None),
        Err(NvmlError::NotSupported)
    ));
    let _ = std::fs::remove_dir_all(&dir);
}
