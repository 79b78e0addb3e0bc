//! The `faults` scenario timeline, 20 times faster than real time
//! (NVML_SIM_TIME_SCALE=20): t=5 s becomes 0.25 s, the 60 s hang 3 s.

// Calls the simulator's C ABI directly, as NVML clients do, and sets its
// variables before this process's first NVML init.
#![allow(unsafe_code, clippy::disallowed_methods)]

use crate::common;

use nvml_wrapper::bitmasks::event::EventTypes;
use nvml_wrapper::enum_wrappers::device::{EccCounter, MemoryError, TemperatureSensor};
use nvml_wrapper::enums::event::XidError;
use nvml_wrapper::error::NvmlError;
use std::time::{Duration, Instant};

const SCALE: f64 = 20.0;

fn scenario_secs(start: Instant) -> f64 {
    start.elapsed().as_secs_f64() * SCALE
}

fn wait_until(start: Instant, scenario_t: f64) {
    let now = scenario_secs(start);
    if now < scenario_t {
        std::thread::sleep(Duration::from_secs_f64((scenario_t - now) / SCALE));
    }
}

#[test]
fn faults_timeline() {
    in_own_process!(faults_timeline);
    std::env::set_var("NVML_SIM_SCENARIO", "faults");
    std::env::set_var("NVML_SIM_TIME_SCALE", SCALE.to_string());
    std::env::remove_var("NVML_SIM_CONTROL");
    // The timeline's clock starts inside the first nvmlInit, somewhere
    // between these two readings of ours; under qemu or on a loaded machine
    // they lie tens of ms (at this scale, scenario seconds) apart. A check
    // that the simulator has not yet reached a time reads `start`, after
    // init, as do the waits; a check that it has not acted too early reads
    // `before`, which the simulator's clock can only trail.
    let before = Instant::now();
    let nvml = common::init();
    let start = Instant::now();
    let dev = |i| nvml.device_by_index(i).unwrap();

    // From the start.
    let (mut c, mut u, mut p, mut f) = (0, 0, 0, 0);
    // SAFETY: the library's own export of nvml.h's type, called with handles it gave and
    // pointers to our own values, live for the call.
    let rc = unsafe {
        nvml.lib().nvmlDeviceGetRemappedRows(
            dev(5).handle(),
            &raw mut c,
            &raw mut u,
            &raw mut p,
            &raw mut f,
        )
    };
    assert_eq!((rc, u, p), (0, 1, 1), "GPU 5 has a remapped row pending");
    assert_eq!(
        dev(6).current_throttle_reasons().unwrap().bits() & 0x40,
        0x40,
        "GPU 6 in HW thermal slowdown"
    );
    assert_eq!(
        dev(1)
            .total_ecc_errors(MemoryError::Uncorrected, EccCounter::Volatile)
            .unwrap(),
        0
    );
    let xids = EventTypes::CRITICAL_XID_ERROR;
    let mut sets = Vec::new();
    for i in [1, 2, 4] {
        sets.push((
            i,
            dev(i)
                .register_events(xids, nvml.create_event_set().unwrap())
                .unwrap(),
        ));
    }
    assert!(scenario_secs(start) < 5.0, "set up before the first fault");

    // t=5, 10, 20: XIDs 48, 79, 43 on GPUs 1, 2, 4.
    for (gpu, set) in &sets {
        let ev = set.wait(5000).unwrap();
        let code = match ev.event_data {
            Some(XidError::Value(v)) => v,
            other => panic!("{other:?}"),
        };
        let expected = match gpu {
            1 => (48, 5.0),
            2 => (79, 10.0),
            _ => (43, 20.0),
        };
        assert_eq!(code, expected.0, "GPU {gpu}");
        assert!(
            scenario_secs(before) >= expected.1 - 0.5,
            "XID {code} arrived early"
        );
    }
    let ecc = dev(1)
        .total_ecc_errors(MemoryError::Uncorrected, EccCounter::Volatile)
        .unwrap();
    assert_eq!(ecc, 1, "one uncorrected error on GPU 1");
    assert!(
        dev(1)
            .total_ecc_errors(MemoryError::Uncorrected, EccCounter::Aggregate)
            .unwrap()
            >= 1
    );
    assert!(matches!(
        dev(2).temperature(TemperatureSensor::Gpu),
        Err(NvmlError::GpuLost)
    ));

    // t=25: GPU 0's MIG layout changed.
    wait_until(start, 25.5);
    let d0 = dev(0);
    let names: Vec<String> = (0..d0.mig_device_count().unwrap())
        .filter_map(|i| d0.mig_device_by_index(i).ok())
        .map(|m| m.name().unwrap().rsplit(' ').next().unwrap().to_string())
        .collect();
    assert_eq!(names, ["3g.40gb", "2g.20gb", "1g.20gb"]);

    // t=15..75: every call on GPU 3 blocks until t=75, then it answers.
    assert!(scenario_secs(start) < 70.0);
    dev(3).temperature(TemperatureSensor::Gpu).unwrap();
    assert!(
        scenario_secs(before) >= 74.9,
        "returned at t={}",
        scenario_secs(before)
    );
    dev(3).temperature(TemperatureSensor::Gpu).unwrap();

    // GPU 7 stayed healthy.
    let d7 = dev(7);
    assert_eq!(d7.current_throttle_reasons().unwrap().bits() & !1, 0);
    assert_eq!(
        d7.total_ecc_errors(MemoryError::Uncorrected, EccCounter::Volatile)
            .unwrap(),
        0
    );
}
