//! A scenario that pins what `nvidia-smi -q` printed on a real host (the
//! H100 capture in tests/corpus, driver 590.48.01, plus a MIG GPU with
//! two compute instances in one GPU instance as on the H200 capture, and a
//! V100 with ECC off and retired pages): every pinned value, "N/A" and
//! identifier answers as written, duplicated identifiers are made unique,
//! and timeline faults still move the pinned GPU's counters.

// Calls the simulator's C ABI directly where nvml-wrapper does not wrap a
// call, and sets its variables before this process's first NVML init.
#![allow(unsafe_code, clippy::disallowed_methods)]

use crate::common;

use nvml_wrapper::enum_wrappers::device::{
    Clock, EccCounter, GpuVirtualizationMode, MemoryError, PcieUtilCounter, PerformanceState,
    RetirementCause, TemperatureSensor,
};
use nvml_wrapper::error::NvmlError;
use nvml_wrapper_sys::bindings::nvmlRowRemapperHistogramValues_t;

const SCENARIO: &str = r#"
name = "replay"
driver = "590.48.01"

[board.h100-vm]
base = "h100-sxm5-80gb"
vbios_version = "96.00.A5.00.01"
memory = { reserved_mib = 479 }

[[gpu]]
model = "h100-vm"
uuid = "GPU-00000000-0000-0000-0000-000000000000"
serial = "0000000000000"
pci_bus_id = "00000000:00:09.0"
minor_number = 0
virtualization_mode = "pass-through"
power_limit_w = 650

[gpu.readings]
temperature_c = 41
memory_temperature_c = 48
power_w = 69.62
graphics_clock_mhz = 345
sm_clock_mhz = 345
memory_clock_mhz = 2619
video_clock_mhz = 765
pstate = 0
utilization = { gpu = 0, memory = 0, encoder = 0, decoder = "N/A", jpeg = 0, ofa = 0 }
pcie_tx_kbps = 352
pcie_rx_kbps = 329
memory_used_mib = 0

[gpu.counters]
pcie_replays = 9
ecc = { aggregate = { corrected = { dram = 4 } } }
remapped_rows = { histogram = { max = 2560, high = 0, partial = 0, low = 0, none = 0 } }
clock_event_reasons = ["gpu-idle"]

[[gpu]]
model = "h100-vm"
uuid = "GPU-00000000-0000-0000-0000-000000000000"
serial = "0000000000000"
mig = [
  { profile = "3g.40gb", gpu_instance_id = 2, compute_instances = [{ id = 0, slices = 1 }, { id = 1, slices = 2 }] },
  { profile = "2g.20gb", gpu_instance_id = 3 },
  { profile = "1g.10gb", gpu_instance_id = 9 },
  { profile = "1g.10gb", gpu_instance_id = 10, memory_used_mib = 9 },
]
processes = [
  { pid = 4100, name = "train", memory_mib = 1000, gpu_instance = 2, compute_instance = 1 },
  { pid = 4101, name = "viz", memory_mib = 10, kind = "compute+graphics", gpu_instance = 3 },
]

[gpu.readings]
temperature_c = "N/A"

[[gpu]]
model = "v100-sxm2-32gb"
ecc = false
ecc_pending = true
persistence = "N/A"

[gpu.counters]
retired_pages = [{ address = 0x1000, cause = "dbe" }, { address = 0x2000, cause = "sbe" }]
retired_pending = true

[[timeline]]
at = 0
action = "ecc"
gpu = 0
error_type = "uncorrected"
count = 2

[[timeline]]
at = 0
action = "remap-row"
gpu = 0
"#;

#[allow(
    clippy::too_many_lines,
    reason = "one replayed host checked value by value against its capture, then faulted"
)]
#[test]
fn a_pinned_host_answers_as_captured_and_still_takes_faults() {
    in_own_process!(a_pinned_host_answers_as_captured_and_still_takes_faults);
    let dir = std::env::temp_dir().join(format!("nvml-sim-replay-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("replay.toml");
    std::fs::write(&file, SCENARIO).unwrap();

    // The checker accepts it and says which identifiers it changed.
    let out = std::process::Command::new(common::cli_path())
        .arg("check")
        .arg(&file)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let line = SCENARIO
        .lines()
        .position(|l| l.contains("mig = ["))
        .unwrap();
    // The second [[gpu]] table starts a few lines above its `mig`.
    assert!(
        stderr.contains(&format!(
            "{}:{}: warning: GPU 1: uuid GPU-00000000-0000-0000-0000-000000000000 repeats an earlier GPU's",
            file.display(),
            line - 3
        )),
        "{stderr}"
    );
    assert!(
        stderr.contains("GPU 1: serial 0000000000000 repeats"),
        "{stderr}"
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "replay: ok: 3 GPUs, 4 MIG instances, 2 timeline entries"
    );

    std::env::set_var("NVML_SIM_SCENARIO", &file);
    std::env::remove_var("NVML_SIM_DRIVER");
    let nvml = common::init();
    assert_eq!(nvml.sys_driver_version().unwrap(), "590.48.01");
    assert_eq!(nvml.sys_cuda_driver_version().unwrap(), 13010);
    assert_eq!(nvml.device_count().unwrap(), 3);

    // GPU 0: identity, settings and pinned readings as written.
    let d = nvml.device_by_index(0).unwrap();
    assert_eq!(
        d.uuid().unwrap(),
        "GPU-00000000-0000-0000-0000-000000000000"
    );
    assert_eq!(d.serial().unwrap(), "0000000000000");
    let pci = d.pci_info().unwrap();
    assert_eq!(pci.bus_id, "00000000:00:09.0");
    assert_eq!((pci.domain, pci.bus, pci.device), (0, 0, 9));
    assert_eq!(d.minor_number().unwrap(), 0);
    assert_eq!(d.vbios_version().unwrap(), "96.00.A5.00.01");
    assert_eq!(d.memory_info().unwrap().reserved, 479 * 1024 * 1024);
    assert_eq!(d.memory_info().unwrap().used, 0);
    assert_eq!(
        d.virtualization_mode().unwrap(),
        GpuVirtualizationMode::PassThrough
    );
    assert_eq!(d.power_management_limit().unwrap(), 650_000);
    assert_eq!(d.enforced_power_limit().unwrap(), 650_000);
    assert_eq!(d.power_management_limit_default().unwrap(), 700_000);
    assert_eq!(d.temperature(TemperatureSensor::Gpu).unwrap(), 41);
    assert_eq!(d.power_usage().unwrap(), 69_620);
    assert_eq!(d.clock_info(Clock::Graphics).unwrap(), 345);
    assert_eq!(d.clock_info(Clock::Memory).unwrap(), 2619);
    assert_eq!(d.clock_info(Clock::Video).unwrap(), 765);
    assert_eq!(d.performance_state().unwrap(), PerformanceState::Zero);
    let u = d.utilization_rates().unwrap();
    assert_eq!((u.gpu, u.memory), (0, 0));
    assert!(matches!(
        d.decoder_utilization(),
        Err(NvmlError::NotSupported)
    ));
    assert_eq!(d.encoder_utilization().unwrap().utilization, 0);
    assert_eq!(d.pcie_throughput(PcieUtilCounter::Send).unwrap(), 352);
    assert_eq!(d.pcie_throughput(PcieUtilCounter::Receive).unwrap(), 329);
    assert_eq!(d.pcie_replay_counter().unwrap(), 9);
    // Idle, as pinned, though P0.
    assert_eq!(d.current_throttle_reasons().unwrap().bits(), 0x1);
    // Memory temperature (field 82) and the T.Limit margins of Hopper.
    let f = common::raw_fields(
        &nvml,
        &d,
        &[(82, 0), (193, 0), (194, 0), (196, 0), (186, 1), (190, 0)],
    );
    // SAFETY: the union member matches each entry's value type.
    unsafe {
        assert_eq!(f[0].value.uiVal, 48);
        assert_eq!(
            (f[1].value.siVal, f[2].value.siVal, f[3].value.siVal),
            (-8, -2, 0)
        );
        assert_eq!(f[1].valueType, 5, "signed");
        assert_eq!(f[5].value.uiVal, 650_000);
    }
    assert_eq!(f[4].nvmlReturn, 3, "no module power scope on an H100");
    // "GPU T.Limit Temp: 46 C" at 41 C, as the capture prints.
    let mut margin: nvml_wrapper_sys::bindings::nvmlMarginTemperature_v1_t =
        // SAFETY: a plain C struct; zero is a valid value.
        unsafe { std::mem::zeroed() };
    margin.version = (std::mem::size_of::<nvml_wrapper_sys::bindings::nvmlMarginTemperature_v1_t>()
        | 1 << 24) as u32;
    // SAFETY: valid handle, versioned struct.
    let rc = unsafe {
        nvml.lib()
            .nvmlDeviceGetMarginTemperature(d.handle(), &raw mut margin)
    };
    assert_eq!((rc, margin.marginTemperature), (0, 46));
    // The timeline moved the pinned GPU's counters: 2 uncorrected DRAM
    // errors on top of the scenario's 4 corrected, one row remapped out
    // of a bank at max.
    assert_eq!(
        d.total_ecc_errors(MemoryError::Uncorrected, EccCounter::Volatile)
            .unwrap(),
        2
    );
    assert_eq!(
        d.total_ecc_errors(MemoryError::Corrected, EccCounter::Aggregate)
            .unwrap(),
        4
    );
    // SAFETY: a plain C struct; zero is a valid value.
    let mut h: nvmlRowRemapperHistogramValues_t = unsafe { std::mem::zeroed() };
    // SAFETY: valid handle and out-pointer.
    let rc = unsafe {
        nvml.lib()
            .nvmlDeviceGetRowRemapperHistogram(d.handle(), &raw mut h)
    };
    assert_eq!(rc, 0);
    assert_eq!((h.max, h.high), (2559, 1));

    // GPU 1: its masked identifiers were made unique; MIG placed by GPU
    // instance id, one GPU instance split into two compute instances.
    let d1 = nvml.device_by_index(1).unwrap();
    assert_ne!(d1.uuid().unwrap(), d.uuid().unwrap());
    assert_ne!(d1.serial().unwrap(), "0000000000000");
    assert!(matches!(
        d1.temperature(TemperatureSensor::Gpu),
        Err(NvmlError::NotSupported)
    ));
    assert_eq!(d1.mig_device_count().unwrap(), 7);
    let mut seen = Vec::new();
    for i in 0..5 {
        let m = d1.mig_device_by_index(i).unwrap();
        let (gi, ci) = common::instance_ids(&nvml, &m);
        seen.push((gi, ci, m.name().unwrap(), m.uuid().unwrap()));
    }
    assert!(d1.mig_device_by_index(5).is_err());
    let ids: Vec<(u32, u32)> = seen.iter().map(|(g, c, ..)| (*g, *c)).collect();
    assert_eq!(ids, vec![(2, 0), (2, 1), (3, 0), (9, 0), (10, 0)]);
    assert_eq!(seen[0].2, "NVIDIA H100 80GB HBM3 MIG 1c.3g.40gb");
    assert_eq!(seen[1].2, "NVIDIA H100 80GB HBM3 MIG 2c.3g.40gb");
    assert_eq!(seen[2].2, "NVIDIA H100 80GB HBM3 MIG 2g.20gb");
    let uuids: std::collections::HashSet<&String> = seen.iter().map(|s| &s.3).collect();
    assert_eq!(uuids.len(), 5, "every MIG device has its own UUID");
    let ci1 = d1.mig_device_by_index(1).unwrap();
    let procs = ci1.running_compute_processes().unwrap();
    assert_eq!(procs.iter().map(|p| p.pid).collect::<Vec<_>>(), vec![4100]);
    assert!(d1
        .mig_device_by_index(0)
        .unwrap()
        .running_compute_processes()
        .unwrap()
        .is_empty());
    let gi3 = d1.mig_device_by_index(2).unwrap();
    assert_eq!(gi3.running_compute_processes().unwrap()[0].pid, 4101);
    assert_eq!(gi3.running_graphics_processes().unwrap()[0].pid, 4101);
    assert_eq!(
        d1.mig_device_by_index(4)
            .unwrap()
            .memory_info()
            .unwrap()
            .used,
        9 * 1024 * 1024
    );

    // GPU 2: ECC off (pending on), so its counters are N/A; retired pages
    // with their causes; persistence N/A.
    let d2 = nvml.device_by_index(2).unwrap();
    let ecc = d2.is_ecc_enabled().unwrap();
    assert!(!ecc.currently_enabled && ecc.pending_enabled);
    assert!(matches!(
        d2.total_ecc_errors(MemoryError::Corrected, EccCounter::Aggregate),
        Err(NvmlError::NotSupported)
    ));
    assert!(matches!(
        d2.is_in_persistent_mode(),
        Err(NvmlError::NotSupported)
    ));
    let dbe = d2
        .retired_pages(RetirementCause::DoubleBitEccError)
        .unwrap();
    assert_eq!(
        dbe.iter().map(|p| p.address).collect::<Vec<_>>(),
        vec![0x1000]
    );
    let sbe = d2
        .retired_pages(RetirementCause::MultipleSingleBitEccErrors)
        .unwrap();
    assert_eq!(
        sbe.iter().map(|p| p.address).collect::<Vec<_>>(),
        vec![0x2000]
    );
    assert!(d2.are_pages_pending_retired().unwrap());
    std::fs::remove_dir_all(&dir).ok();
}
