//! How many NVML calls one poll costs, counted by the simulator. Field
//! values must stay batched: at most two `nvmlDeviceGetFieldValues` per GPU
//! per poll (scalar fields, per-link NVLink fields).

// Sets the simulator's variables before this process's first NVML init.
#![allow(clippy::disallowed_methods)]

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use crate::support::*;
use nvml_exporter::family::FamilySet;

/// The calls of one scenario's polls: (GPU polls, calls by function).
/// The poller is started and shut down around it, so scenarios run one
/// after the other in this process (each `nvmlInit` after the last
/// shutdown builds the scenario the host selects).
fn calls_of(
    scenario: &str,
    gpus: usize,
    socket: &std::path::Path,
    families: FamilySet,
) -> (usize, BTreeMap<String, u64>) {
    let interval = Duration::from_millis(500);
    let which = if families.contains(nvml_exporter::family::Family::C2c) {
        "default families and c2c"
    } else {
        "default families"
    };
    let (poller, snaps) = start_sim(scenario, interval, Duration::from_secs(5), families);
    // Past the first polls, which also read identity and static values.
    let warm = snaps.wait_for("ready", Duration::from_secs(20), |s| {
        s.ready && s.gpus.len() == gpus
    });
    let warm_len = snaps.len();
    snaps.wait_for("warm", Duration::from_secs(20), |s| {
        s.ready && snaps.len() > warm_len + 4
    });
    drop(warm);

    control(socket, r#"{ action = "reset-calls" }"#);
    let from = SystemTime::now();
    std::thread::sleep(interval * 6 + interval / 2);
    let calls = parse_calls(&control(socket, r#"{ action = "calls" }"#));
    let to = SystemTime::now();
    // Let the samples taken before `to` be published too.
    std::thread::sleep(interval * 2);
    poller.shutdown(Duration::from_secs(5));

    // Every poll of every GPU reads power usage exactly once, so that
    // call counts the polls; the snapshots confirm the order of magnitude.
    let gpu_polls = calls.get("nvmlDeviceGetPowerUsage").copied().unwrap_or(0) as usize;
    let mut seen: BTreeMap<u32, std::collections::BTreeSet<SystemTime>> = BTreeMap::new();
    for s in snaps.all() {
        for g in &s.gpus {
            if let Some(t) = g.last_sample.filter(|t| *t > from && *t <= to) {
                seen.entry(g.index).or_default().insert(t);
            }
        }
    }
    let observed: usize = seen.values().map(|p| p.len()).sum();
    assert!(
        observed >= gpus * 4,
        "{scenario}: polls observed in snapshots: {observed}"
    );
    // A poll is stamped when it ends, so each GPU may have one poll that
    // read power before the reset yet is stamped after `from` (observed,
    // not counted), and polls that read power before the count but end
    // after `to` (counted, not observed).
    assert!(
        gpu_polls + gpus >= observed && gpu_polls <= observed + 3 * gpus,
        "{scenario}: {gpu_polls} polls counted, {observed} observed"
    );
    let total: u64 = calls.values().sum();
    println!(
        "{scenario}, {which}: {gpu_polls} GPU polls, {total} calls, {:.1} calls per GPU per poll",
        total as f64 / gpu_polls as f64
    );
    for (name, count) in &calls {
        println!(
            "  {name:<48} {:>6.2} per GPU-poll",
            *count as f64 / gpu_polls as f64
        );
    }
    (gpu_polls, calls)
}

/// dgx-h100, and the Blackwell fleets of BENCHMARKS.md beside it.
#[test]
fn calls_per_gpu_per_poll() {
    in_own_process!(calls_per_gpu_per_poll);
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("control.sock");
    std::env::set_var("NVML_SIM_CONTROL", &socket);
    for (scenario, gpus) in [("dgx-h100", 8), ("hgx-b200", 8), ("gb200-nvl72", 4)] {
        let (gpu_polls, calls) = calls_of(scenario, gpus, &socket, FamilySet::defaults());
        check_batched(scenario, gpu_polls, &calls);
        if scenario == "hgx-b200" {
            continue;
        }
        // The C2C links ride in the scalar field batch: with the family on,
        // a Grace board (GB200) and a board without C2C (H100, asked the
        // link count once, in its first poll) call nothing more.
        let mut with_c2c = FamilySet::defaults();
        with_c2c.set(nvml_exporter::family::Family::C2c, true);
        let (c2c_polls, c2c_calls) = calls_of(scenario, gpus, &socket, with_c2c);
        check_batched(scenario, c2c_polls, &c2c_calls);
        assert_eq!(
            c2c_calls.keys().collect::<Vec<_>>(),
            calls.keys().collect::<Vec<_>>(),
            "{scenario}: the functions called with c2c on"
        );
        let per_poll = |c: &BTreeMap<String, u64>, polls: usize| {
            c["nvmlDeviceGetFieldValues"] as f64 / polls as f64
        };
        let (with, without) = (per_poll(&c2c_calls, c2c_polls), per_poll(&calls, gpu_polls));
        assert!(
            (with - without).abs() < 0.1,
            "{scenario}: field value calls per GPU poll {with:.2} with c2c, {without:.2} without"
        );
    }
}

fn check_batched(scenario: &str, gpu_polls: usize, calls: &BTreeMap<String, u64>) {
    let field_calls = calls.get("nvmlDeviceGetFieldValues").copied().unwrap_or(0);
    assert!(field_calls > 0, "{scenario}: field values are used");
    assert!(
        field_calls as usize <= 2 * gpu_polls,
        "{scenario}: field values batched: {field_calls} calls for {gpu_polls} GPU polls"
    );
}
