//! Shared helpers for the sampler's integration tests: start the real
//! poller on the simulated driver and wait for snapshots.
//!
//! Each test runs one scenario in a process of its own (`child.rs`): the
//! simulator is one library loaded once per process, and its scenario
//! comes from the (process-wide) environment.

// tests/exposition_oracle.rs uses a part of it too; the library path is set
// before the process's first NVML init.
#![allow(dead_code, clippy::disallowed_methods)]

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nvml_exporter::family::FamilySet;
use nvml_exporter::nvml::{self, LibrarySource, Poller, PollerConfig};
use nvml_exporter::schedule::{Schedule, SharedSchedule};
use nvml_exporter::snapshot::{GpuReadings, GpuState, Health, Snapshot};

pub fn sim_library() -> PathBuf {
    let lib = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/debug/libnvml_sim.so");
    assert!(
        lib.is_file(),
        "{} is missing: build it with `cargo build --workspace`",
        lib.display()
    );
    lib
}

#[derive(Clone, Default)]
pub struct Snapshots(Arc<Mutex<Vec<Arc<Snapshot>>>>);

impl Snapshots {
    pub fn all(&self) -> Vec<Arc<Snapshot>> {
        self.0.lock().unwrap().clone()
    }

    pub fn latest(&self) -> Option<Arc<Snapshot>> {
        self.0.lock().unwrap().last().cloned()
    }

    pub fn push(&self, s: Arc<Snapshot>) {
        self.0.lock().unwrap().push(s);
    }

    pub fn len(&self) -> usize {
        self.0.lock().unwrap().len()
    }

    /// Waits for the first snapshot published from now on that satisfies
    /// `pred`; panics with a summary of the last one on timeout.
    pub fn wait_for(
        &self,
        what: &str,
        timeout: Duration,
        pred: impl Fn(&Snapshot) -> bool,
    ) -> Arc<Snapshot> {
        let deadline = Instant::now() + timeout;
        let mut checked = self.len();
        loop {
            let snaps = self.all();
            for s in &snaps[checked..] {
                if pred(s) {
                    return s.clone();
                }
            }
            checked = snaps.len();
            assert!(
                Instant::now() <= deadline,
                "timed out waiting for {what}; last snapshot: {}",
                summary(snaps.last().map(|s| &**s))
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

pub fn summary(s: Option<&Snapshot>) -> String {
    let Some(s) = s else { return "none".into() };
    let gpus: Vec<String> = s
        .gpus
        .iter()
        .map(|g| {
            format!(
                "{}:{:?}{}",
                g.index,
                g.health,
                if g.readings.is_some() { "+r" } else { "" }
            )
        })
        .collect();
    format!(
        "nvml_up={} ready={} gpus=[{}]",
        s.nvml_up,
        s.ready,
        gpus.join(" ")
    )
}

pub fn start_sim(
    scenario: &str,
    interval: Duration,
    stuck_deadline: Duration,
    families: FamilySet,
) -> (Poller, Snapshots) {
    let schedule = Schedule::shared(families.clone(), interval);
    start_scheduled(scenario, interval, stuck_deadline, families, schedule)
}

/// [`start_sim`] on `dgx-h100` with a 5 s stuck deadline, returned once all
/// 8 GPUs are up with readings (within 30 s).
pub fn start_dgx_h100_ready(interval: Duration, families: FamilySet) -> (Poller, Snapshots) {
    let (poller, snaps) = start_sim("dgx-h100", interval, Duration::from_secs(5), families);
    snaps.wait_for("ready", Duration::from_secs(30), |s| {
        all_up_with_readings(s, 8)
    });
    (poller, snaps)
}

/// [`start_sim`] with the schedule given: the test keeps it, and may swap
/// another in while the poller runs (a reload of the selection file).
pub fn start_scheduled(
    scenario: &str,
    interval: Duration,
    stuck_deadline: Duration,
    families: FamilySet,
    schedule: SharedSchedule,
) -> (Poller, Snapshots) {
    std::env::set_var("NVML_SIM_LIBRARY", sim_library());
    let snaps = Snapshots::default();
    let sink = snaps.clone();
    let poller = nvml::start(
        PollerConfig {
            library: LibrarySource::Simulated {
                scenario: scenario.into(),
            },
            interval,
            stuck_deadline,
            schedule,
            families,
            xid_max_codes: nvml_exporter::cli::DEFAULT_XID_MAX_CODES,
            kernel_log: None,
            state: None,
        },
        Arc::new(move |s| sink.0.lock().unwrap().push(Arc::new(s))),
    )
    .expect("poller starts on the simulator");
    (poller, snaps)
}

/// GPU `i` of a snapshot, if it is listed yet.
pub fn gpu(s: &Snapshot, i: usize) -> Option<&GpuState> {
    s.gpus.get(i)
}

pub fn readings(g: &GpuState) -> &GpuReadings {
    g.readings
        .as_ref()
        .unwrap_or_else(|| panic!("GPU {} has no readings (health {:?})", g.index, g.health))
}

pub fn all_up_with_readings(s: &Snapshot, n: usize) -> bool {
    s.ready
        && s.gpus.len() == n
        && s.gpus
            .iter()
            .all(|g| g.health == Health::Up && g.readings.is_some())
}

pub fn thread_count() -> usize {
    std::fs::read_dir("/proc/self/task")
        .map(|d| d.count())
        .unwrap_or(0)
}

/// Captures everything the exporter logs (from any thread) for assertions.
#[derive(Clone, Default)]
pub struct Logs(Arc<Mutex<Vec<u8>>>);

impl Logs {
    /// Installs the capture as the process-wide subscriber.
    pub fn install() -> Logs {
        let logs = Logs::default();
        let sink = logs.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_ansi(false)
            .with_max_level(tracing::Level::DEBUG)
            .with_writer(move || sink.clone())
            .finish();
        tracing::subscriber::set_global_default(subscriber)
            .expect("one log capture per test binary");
        logs
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }

    pub fn lines_containing(&self, needle: &str) -> Vec<String> {
        self.text()
            .lines()
            .filter(|l| l.contains(needle))
            .map(str::to_string)
            .collect()
    }
}

impl std::io::Write for Logs {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// One request to the simulator's control socket; the reply after `ok`.
pub fn control(socket: &Path, request: &str) -> String {
    let mut s = UnixStream::connect(socket).expect("simulator control socket");
    writeln!(s, "{request}").unwrap();
    let mut reply = String::new();
    BufReader::new(s).read_line(&mut reply).unwrap();
    assert!(reply.starts_with("ok"), "{request} -> {reply}");
    reply[2..].trim().to_string()
}

/// The simulator's `calls` reply (an inline TOML table) as counts by
/// function.
pub fn parse_calls(inline: &str) -> BTreeMap<String, u64> {
    parse_inline(inline)
}

/// A flat inline TOML table of the simulator's replies (`calls`,
/// `driver-time`) as values by function.
pub fn parse_inline<T: std::str::FromStr>(inline: &str) -> BTreeMap<String, T> {
    inline
        .trim_start_matches('{')
        .trim_end_matches('}')
        .split(',')
        .filter_map(|kv| {
            let (k, v) = kv.split_once('=')?;
            Some((k.trim().to_string(), v.trim().parse().ok()?))
        })
        .collect()
}
