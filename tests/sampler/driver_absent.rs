//! A driver that loads but cannot be initialized is not a start error: the
//! poller keeps publishing `nvml_up: false` snapshots and retries. A
//! library path that does not exist, or names a file that is no library,
//! is a configuration error.

// Sets the simulator's scenario variable before this process's first NVML
// init.
#![allow(clippy::disallowed_methods)]

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::support::sim_library;
use nvml_exporter::family::FamilySet;
use nvml_exporter::nvml::{self, LibrarySource, PollerConfig, StartError};
use nvml_exporter::snapshot::Snapshot;

fn config(library: LibrarySource) -> PollerConfig {
    PollerConfig {
        library,
        interval: Duration::from_millis(50),
        stuck_deadline: Duration::from_secs(1),
        schedule: nvml_exporter::schedule::Schedule::shared(
            FamilySet::defaults(),
            Duration::from_millis(50),
        ),
        families: FamilySet::defaults(),
        xid_max_codes: nvml_exporter::cli::DEFAULT_XID_MAX_CODES,
        kernel_log: None,
        state: None,
    }
}

#[test]
fn missing_library_path_is_a_start_error() {
    let err = nvml::start(
        config(LibrarySource::Path("/nonexistent/libnvidia-ml.so.1".into())),
        Arc::new(|_| {}),
    )
    .err()
    .expect("a missing --nvml.library must fail start");
    assert!(matches!(err, StartError::LibraryNotFound(_)), "{err}");
}

#[test]
fn a_file_that_is_no_library_is_a_start_error() {
    let dir = tempfile::tempdir().unwrap();
    let bogus = dir.path().join("libnvidia-ml.so.1");
    std::fs::write(&bogus, b"not an ELF file").unwrap();
    let Err(err) = nvml::start(config(LibrarySource::Path(bogus)), Arc::new(|_| {})) else {
        panic!("a file that is no library must fail start");
    };
    assert!(matches!(err, StartError::LibraryUnloadable { .. }), "{err}");
    assert!(err.to_string().contains("libnvidia-ml.so.1"), "{err}");
}

/// A library that loads but whose nvmlInit fails (the driver's kernel
/// module not loaded) is not a start error: NVML is retried.
#[test]
fn a_driver_that_fails_to_initialize_publishes_nvml_down_and_keeps_going() {
    in_own_process!(a_driver_that_fails_to_initialize_publishes_nvml_down_and_keeps_going);
    let dir = tempfile::tempdir().unwrap();
    // nvml-sim's nvmlInit fails on a scenario file that does not exist.
    std::env::set_var("NVML_SIM_SCENARIO", dir.path().join("absent.toml"));

    let seen: Arc<Mutex<Vec<Arc<Snapshot>>>> = Arc::default();
    let sink = seen.clone();
    let poller = nvml::start(
        config(LibrarySource::Path(sim_library())),
        Arc::new(move |s| sink.lock().unwrap().push(Arc::new(s))),
    )
    .expect("a driver that fails to initialize is not a start error");

    let deadline = Instant::now() + Duration::from_secs(10);
    while seen.lock().unwrap().len() < 5 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    poller.shutdown(Duration::from_secs(2));
    let seen = seen.lock().unwrap();
    assert!(
        seen.len() >= 5,
        "snapshots keep coming while NVML is down (got {})",
        seen.len()
    );
    for s in seen.iter() {
        assert!(!s.nvml_up);
        assert!(!s.ready);
        assert!(s.driver.is_none());
        assert!(s.gpus.is_empty());
    }
}
