//! nvml-wrapper 0.13, the exporter's NVML layer, driving the built
//! simulator on the default `dgx-h100` scenario.

// Calls the simulator's C ABI directly, as NVML clients do, and sets its
// variables before this process's first NVML init.
#![allow(unsafe_code, clippy::disallowed_methods)]

use crate::common;

use nvml_wrapper::enum_wrappers::device::{
    Clock, EccCounter, MemoryError, MemoryLocation, PerformanceState, TemperatureSensor,
};
use nvml_wrapper::enums::device::DeviceArchitecture;
use nvml_wrapper::enums::gpm::GpmMetricId;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::gpm::gpm_metrics_get;
use nvml_wrapper::structs::device::FieldId;
use nvml_wrapper::Nvml;
use nvml_wrapper_sys::bindings::*;
use std::sync::Once;

fn nvml() -> Nvml {
    static ENV: Once = Once::new();
    ENV.call_once(|| {
        std::env::set_var("NVML_SIM_SCENARIO", "dgx-h100");
        std::env::remove_var("NVML_SIM_TIME_SCALE");
        std::env::remove_var("NVML_SIM_CONTROL");
    });
    common::init()
}

#[test]
fn system_and_identity() {
    in_own_process!(system_and_identity);
    let nvml = nvml();
    assert_eq!(nvml.sys_driver_version().unwrap(), "560.35.03");
    assert_eq!(nvml.sys_nvml_version().unwrap(), "12.560.35.03");
    assert_eq!(nvml.sys_cuda_driver_version().unwrap(), 12060);
    assert_eq!(nvml.device_count().unwrap(), 8);
    let mut uuids = Vec::new();
    for i in 0..8 {
        let d = nvml.device_by_index(i).unwrap();
        assert_eq!(d.name().unwrap(), "NVIDIA H100 80GB HBM3");
        assert_eq!(d.index().unwrap(), i);
        assert_eq!(d.minor_number().unwrap(), i);
        assert_eq!(d.architecture().unwrap(), DeviceArchitecture::Hopper);
        let cc = d.cuda_compute_capability().unwrap();
        assert_eq!((cc.major, cc.minor), (9, 0));
        let uuid = d.uuid().unwrap();
        assert!(uuid.starts_with("GPU-") && uuid.len() == 40, "{uuid}");
        assert_eq!(d.serial().unwrap().len(), 13);
        assert!(!d.board_part_number().unwrap().is_empty());
        assert!(!d.vbios_version().unwrap().is_empty());
        let pci = d.pci_info().unwrap();
        assert!(pci.bus_id.starts_with("00000000:"), "{}", pci.bus_id);
        assert_eq!(pci.pci_device_id, 0x2330_10DE);
        let by_uuid = nvml.device_by_uuid(uuid.as_str()).unwrap();
        assert_eq!(by_uuid.index().unwrap(), i);
        let by_bus = nvml.device_by_pci_bus_id(pci.bus_id.as_str()).unwrap();
        assert_eq!(by_bus.index().unwrap(), i);
        uuids.push(uuid);
    }
    uuids.sort();
    uuids.dedup();
    assert_eq!(uuids.len(), 8);
    assert!(matches!(
        nvml.device_by_index(8),
        Err(NvmlError::InvalidArg)
    ));
    assert!(matches!(
        nvml.device_by_uuid("GPU-nope"),
        Err(NvmlError::NotFound)
    ));
}

#[test]
fn memory_adds_up() {
    in_own_process!(memory_adds_up);
    let nvml = nvml();
    for i in 0..8 {
        let d = nvml.device_by_index(i).unwrap();
        let m = d.memory_info().unwrap();
        assert_eq!(m.total, m.reserved + m.used + m.free, "GPU {i}");
        assert_eq!(m.total, 81559 * 1024 * 1024);
        // v1 counts reserved memory as used.
        // SAFETY: a plain C struct; zero is a valid value.
        let mut v1: nvmlMemory_t = unsafe { std::mem::zeroed() };
        // SAFETY: the library's own export of nvml.h's type, called with handles it gave and
        // pointers to our own values, live for the call.
        let rc = unsafe { nvml.lib().nvmlDeviceGetMemoryInfo(d.handle(), &raw mut v1) };
        assert_eq!(rc, 0);
        assert_eq!(v1.used, m.used + m.reserved);
        assert_eq!(v1.total, v1.used + v1.free);
        let bar1 = d.bar1_memory_info().unwrap();
        assert_eq!(bar1.total, bar1.used + bar1.free);
    }
    // A busy GPU holds its process's memory.
    let d = nvml.device_by_index(2).unwrap();
    assert!(d.memory_info().unwrap().used >= 71000 * 1024 * 1024);
}

#[test]
fn power_clocks_and_pstate_move_together() {
    in_own_process!(power_clocks_and_pstate_move_together);
    let nvml = nvml();
    let busy = nvml.device_by_index(6).unwrap();
    let idle = nvml.device_by_index(7).unwrap();
    assert_eq!(idle.performance_state().unwrap(), PerformanceState::Eight);
    assert_eq!(busy.performance_state().unwrap(), PerformanceState::Zero);
    assert!(busy.power_usage().unwrap() > idle.power_usage().unwrap());
    assert!(busy.clock_info(Clock::Graphics).unwrap() > idle.clock_info(Clock::Graphics).unwrap());
    assert!(
        busy.temperature(TemperatureSensor::Gpu).unwrap()
            > idle.temperature(TemperatureSensor::Gpu).unwrap()
    );
    assert!(busy.utilization_rates().unwrap().gpu > idle.utilization_rates().unwrap().gpu);
    assert!(
        idle.current_throttle_reasons().unwrap().bits() & 1 == 1,
        "idle reason set on an idle GPU"
    );
    let limit = busy.power_management_limit().unwrap();
    let c = busy.power_management_limit_constraints().unwrap();
    assert!(c.min_limit <= limit && limit <= c.max_limit);
    assert_eq!(busy.power_management_limit_default().unwrap(), 700_000);
    assert_eq!(busy.enforced_power_limit().unwrap(), limit);
    assert!(busy.power_usage().unwrap() <= limit);
    assert_eq!(busy.max_clock_info(Clock::Graphics).unwrap(), 1980);
    // Energy only grows, by about power x time.
    let e1 = busy.total_energy_consumption().unwrap();
    let p = busy.power_usage().unwrap() as f64;
    std::thread::sleep(std::time::Duration::from_millis(500));
    let e2 = busy.total_energy_consumption().unwrap();
    let de = (e2 - e1) as f64;
    assert!(
        de > p * 0.3 && de < p * 0.9,
        "energy {de} mJ over 0.5 s at {p} mW"
    );
}

#[test]
fn ecc_and_rows() {
    in_own_process!(ecc_and_rows);
    let nvml = nvml();
    let d = nvml.device_by_index(3).unwrap();
    assert!(d.is_ecc_enabled().unwrap().currently_enabled);
    for err in [MemoryError::Corrected, MemoryError::Uncorrected] {
        let vol = d.total_ecc_errors(err, EccCounter::Volatile).unwrap();
        let agg = d.total_ecc_errors(err, EccCounter::Aggregate).unwrap();
        assert!(agg >= vol);
        let dram = d
            .memory_error_counter(err, EccCounter::Aggregate, MemoryLocation::Device)
            .unwrap();
        assert!(dram <= agg);
    }
    assert!(matches!(
        d.memory_error_counter(
            MemoryError::Corrected,
            EccCounter::Volatile,
            MemoryLocation::Texture
        ),
        Err(NvmlError::NotSupported)
    ));
    // H100 remaps rows instead of retiring pages.
    assert!(matches!(
        d.retired_pages(nvml_wrapper::enum_wrappers::device::RetirementCause::DoubleBitEccError),
        Err(NvmlError::NotSupported)
    ));
    let (mut c, mut u, mut p, mut f) = (9, 9, 9, 9);
    // SAFETY: the library's own export of nvml.h's type, called with handles it gave and
    // pointers to our own values, live for the call.
    let rc = unsafe {
        nvml.lib().nvmlDeviceGetRemappedRows(
            d.handle(),
            &raw mut c,
            &raw mut u,
            &raw mut p,
            &raw mut f,
        )
    };
    assert_eq!((rc, c, u, p, f), (0, 0, 0, 0, 0));
}

#[test]
fn field_values() {
    in_own_process!(field_values);
    use nvml_wrapper_sys::bindings::field_id::*;
    let nvml = nvml();
    let d = nvml.device_by_index(2).unwrap();
    let got = d
        .field_values_for(&[
            FieldId(NVML_FI_DEV_MEMORY_TEMP),
            FieldId(NVML_FI_DEV_PCIE_COUNT_TX_BYTES),
            FieldId(NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION),
            FieldId(9999),
        ])
        .unwrap();
    assert!(
        got[..3]
            .iter()
            .all(|g| g.as_ref().map(|s| s.value.is_ok()).unwrap_or(false)),
        "{got:?}"
    );
    assert!(
        matches!(got[3].as_ref().unwrap().value, Err(NvmlError::NotSupported)),
        "{:?}",
        got[3]
    );
    // Per-link NVLink counters need scopeId = link.
    let f = common::raw_fields(
        &nvml,
        &d,
        &[
            (NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, 0),
            (NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, 17),
            (NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, 18),
            (NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, u32::MAX),
            (NVML_FI_DEV_NVLINK_ERROR_DL_CRC, 3),
        ],
    );
    assert_eq!(f[0].nvmlReturn, 0);
    assert_eq!(f[1].nvmlReturn, 0);
    assert_eq!(f[2].nvmlReturn, 2, "link 18 does not exist on H100");
    // SAFETY: a union of integers and a double, 8 bytes at most: any read
    // of it is defined; these fields are counters, written as `ullVal`.
    let total = unsafe { f[3].value.ullVal };
    // SAFETY: a union of integers and a double, 8 bytes at most: any read
    // of it is defined; these fields are counters, written as `ullVal`.
    assert!(total >= unsafe { f[0].value.ullVal + f[1].value.ullVal });
    assert_eq!(f[4].nvmlReturn, 0);
    assert!(d.link_wrapper_for(0).is_active().unwrap());
    assert!(matches!(
        d.link_wrapper_for(18).is_active(),
        Err(NvmlError::InvalidArg)
    ));
}

#[test]
fn processes() {
    in_own_process!(processes);
    let nvml = nvml();
    let d = nvml.device_by_index(4).unwrap();
    let procs = d.running_compute_processes().unwrap();
    let pids: Vec<u32> = procs.iter().map(|p| p.pid).collect();
    assert_eq!(pids, vec![42003, 42004]);
    assert!(d.running_graphics_processes().unwrap().is_empty());
    assert_eq!(nvml.sys_process_name(42003, 64).unwrap(), "vllm");
    assert!(matches!(
        nvml.sys_process_name(1, 64),
        Err(NvmlError::NotFound)
    ));
    // On a MIG-enabled GPU, processes carry their instance ids.
    let d0 = nvml.device_by_index(0).unwrap();
    let p0 = d0.running_compute_processes().unwrap();
    assert_eq!(p0.len(), 3);
    // SAFETY: a plain C struct; zero is a valid value.
    let mut raw: Vec<nvmlProcessInfo_t> = vec![unsafe { std::mem::zeroed() }; 8];
    let mut n = 8;
    // SAFETY: the library's own export of nvml.h's type, called with handles it gave and
    // pointers to our own values, live for the call.
    let rc = unsafe {
        nvml.lib().nvmlDeviceGetComputeRunningProcesses_v3(
            d0.handle(),
            &raw mut n,
            raw.as_mut_ptr(),
        )
    };
    assert_eq!((rc, n), (0, 3));
    assert_eq!((raw[0].gpuInstanceId, raw[0].computeInstanceId), (7, 0));
    // Two-call protocol: too small a count gets the needed count back.
    let mut small = 1;
    // SAFETY: the library's own export of nvml.h's type, called with handles it gave and
    // pointers to our own values, live for the call.
    let rc = unsafe {
        nvml.lib().nvmlDeviceGetComputeRunningProcesses_v3(
            d0.handle(),
            &raw mut small,
            raw.as_mut_ptr(),
        )
    };
    assert_eq!((rc, small), (7, 3));
}

#[test]
fn mig_devices() {
    in_own_process!(mig_devices);
    let nvml = nvml();
    let d0 = nvml.device_by_index(0).unwrap();
    let mode = d0.mig_mode().unwrap();
    assert_eq!((mode.current, mode.pending), (1, 1));
    assert_eq!(d0.mig_device_count().unwrap(), 7);
    assert!(matches!(
        d0.utilization_rates(),
        Err(NvmlError::NotSupported)
    ));
    let total = d0.memory_info().unwrap().total;
    for i in 0..7 {
        let m = d0.mig_device_by_index(i).unwrap();
        assert!(m.mig_is_mig_device_handle().unwrap());
        assert_eq!(m.name().unwrap(), "NVIDIA H100 80GB HBM3 MIG 1g.10gb");
        assert!(m.uuid().unwrap().starts_with("MIG-"));
        assert!(matches!(
            m.utilization_rates(),
            Err(NvmlError::NotSupported)
        ));
        let mem = m.memory_info().unwrap();
        assert!(mem.total <= total / 8 && mem.total == mem.used + mem.free + mem.reserved);
        assert_eq!(m.mig_parent_device().unwrap().index().unwrap(), 0);
        assert_eq!(common::instance_ids(&nvml, &m), (7 + i, 0));
        let by_uuid = nvml.device_by_uuid(m.uuid().unwrap().as_str()).unwrap();
        assert!(by_uuid.mig_is_mig_device_handle().unwrap());
    }
    assert!(matches!(
        d0.mig_device_by_index(7),
        Err(NvmlError::NotFound)
    ));
    let d1 = nvml.device_by_index(1).unwrap();
    let names: Vec<String> = (0..3)
        .map(|i| d1.mig_device_by_index(i).unwrap().name().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "NVIDIA H100 80GB HBM3 MIG 3g.40gb",
            "NVIDIA H100 80GB HBM3 MIG 2g.20gb",
            "NVIDIA H100 80GB HBM3 MIG 1g.10gb"
        ]
    );
    // A whole GPU without MIG.
    let d2 = nvml.device_by_index(2).unwrap();
    assert_eq!(d2.mig_device_count().unwrap(), 0);
    assert!(!d2.mig_is_mig_device_handle().unwrap());
}

#[test]
fn mig_profiles_and_instances() {
    in_own_process!(mig_profiles_and_instances);
    let nvml = nvml();
    let d1 = nvml.device_by_index(1).unwrap();
    let lib = nvml.lib();
    // SAFETY: the library's own exports of nvml.h's types, called with handles it gave and
    // pointers to our own values and NUL-terminated strings it returned, live for each call.
    unsafe {
        let mut info: nvmlGpuInstanceProfileInfo_v2_t = std::mem::zeroed();
        info.version = (std::mem::size_of::<nvmlGpuInstanceProfileInfo_v2_t>() as u32) | (2 << 24);
        assert_eq!(
            lib.nvmlDeviceGetGpuInstanceProfileInfoV(
                d1.handle(),
                NVML_GPU_INSTANCE_PROFILE_3_SLICE,
                &raw mut info
            ),
            0
        );
        let name = std::ffi::CStr::from_ptr(info.name.as_ptr())
            .to_str()
            .unwrap();
        assert_eq!(
            (info.id, info.sliceCount, info.instanceCount, name),
            (9, 3, 2, "MIG 3g.40gb")
        );
        let mut gis: Vec<nvmlGpuInstance_t> = vec![std::ptr::null_mut(); 2];
        let mut n = 0;
        assert_eq!(
            lib.nvmlDeviceGetGpuInstances(d1.handle(), 9, gis.as_mut_ptr(), &raw mut n),
            0
        );
        assert_eq!(n, 1);
        let mut gi: nvmlGpuInstanceInfo_t = std::mem::zeroed();
        assert_eq!(lib.nvmlGpuInstanceGetInfo(gis[0], &raw mut gi), 0);
        assert_eq!(
            (gi.id, gi.profileId, gi.placement.start, gi.placement.size),
            (1, 9, 0, 4)
        );
        assert_eq!(gi.device, d1.handle());
        let mut cis: Vec<nvmlComputeInstance_t> = vec![std::ptr::null_mut(); 3];
        let mut n = 0;
        assert_eq!(
            lib.nvmlGpuInstanceGetComputeInstances(
                gis[0],
                NVML_COMPUTE_INSTANCE_PROFILE_3_SLICE,
                cis.as_mut_ptr(),
                &raw mut n
            ),
            0
        );
        assert_eq!(n, 1);
        let mut ci: nvmlComputeInstanceInfo_t = std::mem::zeroed();
        assert_eq!(lib.nvmlComputeInstanceGetInfo_v2(cis[0], &raw mut ci), 0);
        assert_eq!((ci.id, ci.placement.size), (0, 3));
        let mut remaining = 9;
        assert_eq!(
            lib.nvmlDeviceGetGpuInstanceRemainingCapacity(d1.handle(), 19, &raw mut remaining),
            0
        );
        assert_eq!(remaining, 0, "slices 0..8 are all taken (3g + 2g + 1g: memory slices 4 + 2 + 1, one left but compute 6/7)");
    }
}

#[test]
fn gpm_on_hopper() {
    in_own_process!(gpm_on_hopper);
    let nvml = nvml();
    let d2 = nvml.device_by_index(2).unwrap();
    assert!(d2.gpm_support().unwrap());
    let s1 = d2.gpm_sample().unwrap();
    std::thread::sleep(std::time::Duration::from_millis(200));
    let s2 = d2.gpm_sample().unwrap();
    let got = gpm_metrics_get(
        &nvml,
        &s1,
        &s2,
        &[
            GpmMetricId::SmUtil,
            GpmMetricId::GraphicsUtil,
            GpmMetricId::DramBwUtil,
        ],
    )
    .unwrap();
    let sm = got[0].as_ref().unwrap();
    assert!(sm.value > 50.0 && sm.value <= 100.0, "{}", sm.value);
    assert_eq!(sm.metric_info.short_name, "sm_util");
    // Per MIG GPU instance.
    let d0 = nvml.device_by_index(0).unwrap();
    let m1 = d0.gpm_mig_sample(7).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(100));
    let m2 = d0.gpm_mig_sample(7).unwrap();
    let got = gpm_metrics_get(&nvml, &m1, &m2, &[GpmMetricId::SmUtil]).unwrap();
    assert!(
        got[0].as_ref().unwrap().value > 30.0,
        "GI 7 runs at about 70%"
    );
    let idle1 = d0.gpm_mig_sample(9).unwrap();
    let idle2 = d0.gpm_mig_sample(9).unwrap();
    let got = gpm_metrics_get(&nvml, &idle1, &idle2, &[GpmMetricId::SmUtil]).unwrap();
    assert_eq!(got[0].as_ref().unwrap().value, 0.0, "GI 9 is idle");
    assert!(matches!(d0.gpm_mig_sample(42), Err(NvmlError::InvalidArg)));
}

#[test]
fn events_time_out_when_nothing_happens() {
    in_own_process!(events_time_out_when_nothing_happens);
    let nvml = nvml();
    let d = nvml.device_by_index(7).unwrap();
    let types = d.supported_event_types().unwrap();
    let set = nvml.create_event_set().unwrap();
    let set = d.register_events(types, set).unwrap();
    let start = std::time::Instant::now();
    assert!(matches!(set.wait(300), Err(NvmlError::Timeout)));
    assert!(start.elapsed() >= std::time::Duration::from_millis(290));
}

#[test]
fn many_threads_at_once() {
    in_own_process!(many_threads_at_once);
    let nvml = nvml();
    std::thread::scope(|s| {
        for t in 0..8u32 {
            let nvml = &nvml;
            s.spawn(move || {
                for i in 0..50u32 {
                    let d = nvml.device_by_index((t + i) % 8).unwrap();
                    d.memory_info().unwrap();
                    d.power_usage().unwrap();
                    d.temperature(TemperatureSensor::Gpu).unwrap();
                    d.running_compute_processes().unwrap();
                    if let Ok(m) = d.mig_device_by_index(0) {
                        m.memory_info().unwrap();
                    }
                }
            });
        }
    });
}
