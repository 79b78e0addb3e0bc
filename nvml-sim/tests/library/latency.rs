//! A latency profile through the C ABI: with `NVML_SIM_LATENCY=h200` each
//! call is charged the H200's cost (a field batch by its fields), read back
//! through the control socket's `driver-time`; with
//! `NVML_SIM_LATENCY_SLEEP=1` a caller waits it out. One test: the profile
//! is read once per process.

// Sets the simulator's variables before this process's first NVML init.
#![allow(unsafe_code, clippy::disallowed_methods)]

use crate::common;

use crate::common::ok;
use std::collections::BTreeMap;
use std::time::Instant;

fn driver_time(socket: &std::path::Path) -> BTreeMap<String, f64> {
    let reply = ok(socket, &["driver-time"]);
    let doc: toml::Table = format!("t = {}", reply.trim()).parse().unwrap();
    doc["t"]
        .as_table()
        .unwrap()
        .iter()
        .map(|(k, v)| (k.clone(), v.as_float().unwrap()))
        .collect()
}

#[test]
fn calls_are_charged_the_h200s_latencies_and_slept() {
    in_own_process!(calls_are_charged_the_h200s_latencies_and_slept);
    let dir = std::env::temp_dir().join(format!("nvml-sim-latency-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let socket = dir.join("control.sock");
    std::env::set_var("NVML_SIM_SCENARIO", "dgx-h100");
    std::env::set_var("NVML_SIM_CONTROL", &socket);
    std::env::set_var("NVML_SIM_LATENCY", "h200");
    std::env::set_var("NVML_SIM_LATENCY_SLEEP", "1");
    let nvml = common::init();
    let d = nvml.device_by_index(0).unwrap();
    ok(&socket, &["reset-calls"]);

    // nvmlDeviceGetEnforcedPowerLimit: 2043.4 us on the H200, slept.
    let started = Instant::now();
    d.enforced_power_limit().unwrap();
    d.enforced_power_limit().unwrap();
    assert!(
        started.elapsed().as_micros() >= 4000,
        "{:?}",
        started.elapsed()
    );
    // A field batch: base 24.6 us, each ECC total 0.4 us, the energy
    // counter (83) the default 77.9 us.
    common::raw_fields(&nvml, &d, &[(3, 0), (4, 0), (83, 0)]);
    d.total_energy_consumption().unwrap();

    let t = driver_time(&socket);
    assert_eq!(t["nvmlDeviceGetEnforcedPowerLimit"], 2.0 * 2043.4, "{t:?}");
    assert!(
        (t["nvmlDeviceGetFieldValues"] - (24.6 + 0.4 + 0.4 + 77.9)).abs() < 0.2,
        "{t:?}"
    );
    // A function without a row of its own: the profile's default, 2 us.
    assert_eq!(t["nvmlDeviceGetTotalEnergyConsumption"], 2.0, "{t:?}");
    ok(&socket, &["reset-calls"]);
    assert!(driver_time(&socket).is_empty());
    std::fs::remove_dir_all(&dir).ok();
}
