//! Measures how fast the simulator answers: a poll-like sequence of calls
//! on every GPU and MIG device, from one thread and from one thread per GPU.
//! Reports polls/s and the simulator's own count of NVML calls per poll.
//!
//! usage: NVML_SIM_SCENARIO=large callrate LIBRARY_PATH [SECONDS]

use nvml_wrapper::enum_wrappers::device::{Clock, TemperatureSensor};
use nvml_wrapper::{Device, Nvml};
use std::time::{Duration, Instant};

fn poll(d: &Device) {
    let _ = d.memory_info();
    let _ = d.power_usage();
    let _ = d.total_energy_consumption();
    let _ = d.temperature(TemperatureSensor::Gpu);
    let _ = d.utilization_rates();
    let _ = d.clock_info(Clock::Graphics);
    let _ = d.clock_info(Clock::Memory);
    let _ = d.performance_state();
    let _ = d.current_throttle_reasons();
    let _ = d.running_compute_processes();
    let _ = d.pcie_throughput(nvml_wrapper::enum_wrappers::device::PcieUtilCounter::Send);
    if let Ok(n) = d.mig_device_count() {
        for i in 0..n {
            if let Ok(m) = d.mig_device_by_index(i) {
                let _ = m.memory_info();
                let _ = m.running_compute_processes();
            }
        }
    }
}

/// Sum of the simulator's per-function call counters, read over the control
/// socket (`NVML_SIM_CONTROL`); `None` when no socket is configured.
fn calls_total() -> Option<u64> {
    use std::io::{BufRead, BufReader, Write};
    let path = std::env::var_os("NVML_SIM_CONTROL")?;
    let mut conn = std::os::unix::net::UnixStream::connect(path).ok()?;
    conn.write_all(b"{ action = \"calls\" }\n").ok()?;
    let mut reply = String::new();
    BufReader::new(conn).read_line(&mut reply).ok()?;
    let table: toml::Table = format!("c = {}", reply.trim().strip_prefix("ok ")?)
        .parse()
        .ok()?;
    Some(
        table["c"]
            .as_table()?
            .values()
            .filter_map(|v| v.as_integer())
            .sum::<i64>() as u64,
    )
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let path = std::env::args_os()
        .nth(1)
        .ok_or("usage: callrate LIBRARY_PATH [SECONDS]")?;
    let secs: f64 = std::env::args()
        .nth(2)
        .map(|s| s.parse())
        .transpose()?
        .unwrap_or(2.0);
    let nvml = Nvml::builder().lib_path(&path).init()?;
    let n = nvml.device_count()?;
    let devices: Vec<Device> = (0..n)
        .map(|i| nvml.device_by_index(i))
        .collect::<Result<_, _>>()?;
    if let Some(before) = calls_total() {
        for d in &devices {
            poll(d);
        }
        // The `calls` request itself is not an NVML call, so the difference is exact.
        if let Some(after) = calls_total() {
            println!("{n} GPUs: {} NVML calls per fleet poll", after - before);
        }
    }

    let start = Instant::now();
    let mut polls = 0u64;
    while start.elapsed() < Duration::from_secs_f64(secs) {
        for d in &devices {
            poll(d);
        }
        polls += 1;
    }
    let one = polls as f64 / start.elapsed().as_secs_f64();
    println!(
        "{n} GPUs, 1 thread: {one:.1} fleet polls/s ({:.3} ms per fleet poll)",
        1000.0 / one
    );

    let start = Instant::now();
    let per_gpu: Vec<u64> = std::thread::scope(|s| {
        let handles: Vec<_> = devices
            .iter()
            .map(|d| {
                s.spawn(move || {
                    let mut k = 0u64;
                    while start.elapsed() < Duration::from_secs_f64(secs) {
                        poll(d);
                        k += 1;
                    }
                    k
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap_or(0)).collect()
    });
    let slowest = *per_gpu.iter().min().unwrap_or(&0) as f64 / start.elapsed().as_secs_f64();
    println!("{n} GPUs, 1 thread per GPU: {slowest:.1} polls/s for the slowest GPU");
    Ok(())
}
