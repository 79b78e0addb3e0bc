//! The driver not working at start (nvmlInit fails), then working; later
//! unloaded and reloaded underneath a running poller: NVML comes back each
//! time without a restart, and the GPUs are enumerated again.

// Sets the simulator's variables before this process's first NVML init.
#![allow(clippy::disallowed_methods)]

use std::sync::Arc;
use std::time::Duration;

use crate::support::*;
use nvml_exporter::family::FamilySet;
use nvml_exporter::nvml::{self, LibrarySource, PollerConfig};
use nvml_exporter::snapshot::{Health, Snapshot};

#[test]
fn driver_absent_then_present_then_restarted() {
    in_own_process!(driver_absent_then_present_then_restarted);
    let logs = Logs::install();
    let dir = tempfile::tempdir().unwrap();
    let lib = dir.path().join("libnvidia-ml.so.1");
    let socket = dir.path().join("control.sock");
    // The library loads, but its nvmlInit fails until the fleet exists, as
    // a driver's does until its kernel module is loaded.
    std::os::unix::fs::symlink(sim_library(), &lib).unwrap();
    let fleet = dir.path().join("fleet.toml");
    std::env::set_var("NVML_SIM_SCENARIO", &fleet);
    std::env::set_var("NVML_SIM_CONTROL", &socket);

    let snaps = Snapshots::default();
    let sink = snaps.clone();
    let poller = nvml::start(
        PollerConfig {
            library: LibrarySource::Path(lib.clone()),
            interval: Duration::from_millis(100),
            stuck_deadline: Duration::from_secs(5),
            schedule: nvml_exporter::schedule::Schedule::shared(
                FamilySet::defaults(),
                Duration::from_millis(100),
            ),
            families: FamilySet::defaults(),
            xid_max_codes: nvml_exporter::cli::DEFAULT_XID_MAX_CODES,
            kernel_log: None,
            state: None,
        },
        Arc::new(move |s: Snapshot| sink.push(Arc::new(s))),
    )
    .expect("an unusable driver is not a start error");

    snaps.wait_for(
        "NVML down while the library is unusable",
        Duration::from_secs(5),
        |s| !s.nvml_up && !s.ready,
    );
    // Two more attempts fail the same way (backoff 1 s, then 2 s)...
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while logs.lines_containing("NVML still unavailable").len() < 2 {
        assert!(std::time::Instant::now() < deadline, "{}", logs.text());
        std::thread::sleep(Duration::from_millis(50));
    }
    // ...yet one log line says why NVML is down.
    let why = logs.lines_containing("NVML is unavailable");
    assert_eq!(why.len(), 1, "{why:#?}");
    assert!(
        why[0].contains("libnvidia-ml.so.1"),
        "names the library: {}",
        why[0]
    );
    std::fs::write(&fleet, "base = \"workstation\"\n").unwrap();
    let s = snaps.wait_for(
        "NVML up once the driver appears",
        Duration::from_secs(40),
        |s| all_up_with_readings(s, 1),
    );
    let uuid = s.gpus[0].uuid.clone();

    control(&socket, r#"{ action = "driver-unload" }"#);
    let s = snaps.wait_for(
        "NVML down after the driver unloads",
        Duration::from_secs(10),
        |s| !s.nvml_up,
    );
    assert!(!s.ready);
    assert_eq!(s.gpus.len(), 1, "the known GPU stays listed");
    assert_eq!(s.gpus[0].uuid, uuid, "with its identity");
    assert!(s.gpus[0].readings.is_none());
    assert_ne!(s.gpus[0].health, Health::Up);

    std::thread::sleep(Duration::from_millis(500));
    control(&socket, r#"{ action = "driver-load" }"#);
    let s = snaps.wait_for(
        "NVML back after the driver reloads",
        Duration::from_secs(40),
        |s| all_up_with_readings(s, 1),
    );
    assert_eq!(s.gpus[0].uuid, uuid);

    poller.shutdown(Duration::from_secs(5));
    assert_eq!(
        logs.lines_containing("NVML recovered").len(),
        2,
        "{}",
        logs.text()
    );
}
