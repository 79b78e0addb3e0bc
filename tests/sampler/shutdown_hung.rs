//! Shutting down while a GPU is stuck in a driver call returns within the
//! timeout (the stuck thread is left behind, not waited for), and nothing
//! is published afterwards.

// Sets the simulator's variables before this process's first NVML init.
#![allow(clippy::disallowed_methods)]

use std::time::{Duration, Instant};

use crate::support::*;
use nvml_exporter::family::FamilySet;
use nvml_exporter::snapshot::Health;

#[test]
fn shutdown_does_not_wait_for_a_hung_call() {
    in_own_process!(shutdown_does_not_wait_for_a_hung_call);
    // GPU 3 hangs at 15/5 = 3 s for 60/5 = 12 s.
    std::env::set_var("NVML_SIM_TIME_SCALE", "5");
    let (poller, snaps) = start_sim(
        "faults",
        Duration::from_millis(100),
        Duration::from_millis(500),
        FamilySet::defaults(),
    );
    snaps.wait_for("GPU 3 hung", Duration::from_secs(20), |s| {
        gpu(s, 3).is_some_and(|g| g.health == Health::Hung)
    });

    let started = Instant::now();
    poller.shutdown(Duration::from_millis(300));
    let took = started.elapsed();
    // The hang has about 10 s left: returning long before that shows the
    // stuck worker was not joined.
    assert!(
        took < Duration::from_secs(5),
        "shutdown blocked for {took:?}"
    );

    // The supervisor, the one thread that publishes, has ended: nothing
    // can be published any more. The hung worker is left behind.
    let threads = thread_names();
    assert!(
        !threads.iter().any(|t| t == "nvml-poller"),
        "the publisher still runs after shutdown: {threads:?}"
    );
    assert!(threads.iter().any(|t| t == "nvml-gpu3"), "{threads:?}");
}

/// The names of this process's threads.
fn thread_names() -> Vec<String> {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .map(|n| n.trim().to_string())
        .collect()
}
