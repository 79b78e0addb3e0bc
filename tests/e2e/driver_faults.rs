//! A driver that misbehaves without failing, against the real binary on
//! the simulated driver (issue 13): one that sends ever new XID codes, and
//! one whose calls on a GPU each take a long time.

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::{samples, Exporter, Sample};
use nvml_exporter::cli::DEFAULT_XID_MAX_CODES;

const WAIT: Duration = Duration::from_secs(90);

/// Sends every request on one control connection, each answered `ok`.
fn control_all(socket: &Path, requests: &[String]) {
    let mut s = UnixStream::connect(socket).expect("simulator control socket");
    let mut reader = BufReader::new(s.try_clone().unwrap());
    for r in requests {
        writeln!(s, "{r}").unwrap();
        let mut reply = String::new();
        reader.read_line(&mut reply).unwrap();
        assert!(reply.starts_with("ok"), "{r} -> {reply}");
    }
}

fn of<'s>(all: &'s [Sample], name: &str, gpu: &str) -> Vec<&'s Sample> {
    all.iter()
        .filter(|s| s.name == name && s.label("gpu") == Some(gpu))
        .collect()
}

fn value(s: &Sample) -> f64 {
    s.value.parse().unwrap_or_else(|_| panic!("{s:?}"))
}

/// Scrapes until `f` accepts a scrape; fails with the last one after WAIT.
fn scrape_until<T>(e: &Exporter, what: &str, mut f: impl FnMut(&[Sample]) -> Option<T>) -> T {
    let deadline = Instant::now() + WAIT;
    loop {
        let text = e.scrape();
        if let Some(v) = f(&samples(&text)) {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}; last scrape:\n{text}\nlog:\n{}",
            e.log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn a_flood_of_distinct_xid_codes_is_bounded_and_every_event_still_counted() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("control.sock");
    let e = Exporter::simulate_env(
        "dgx-h100",
        &[],
        &[("NVML_SIM_CONTROL", socket.to_str().unwrap())],
    );
    e.wait_ready();

    // GPU 5 (whole GPU): codes NVIDIA never sends (0, past the catalogue,
    // 2^32-1, the largest a TOML integer holds), then 200 distinct valid
    // codes, then three more of a code that already has its series.
    let out_of_range: [u64; 4] = [0, 1000, u64::from(u32::MAX), i64::MAX as u64];
    let distinct: u64 = 200;
    let mut requests: Vec<String> = out_of_range
        .iter()
        .map(|c| format!("{{ action = \"xid\", gpu = 5, code = {c} }}"))
        .collect();
    requests.extend((1..=distinct).map(|c| format!("{{ action = \"xid\", gpu = 5, code = {c} }}")));
    requests.extend((0..3).map(|_| r#"{ action = "xid", gpu = 5, code = 13 }"#.to_string()));
    // Another GPU is not affected by GPU 5's flood.
    requests.push(r#"{ action = "xid", gpu = 4, code = 43 }"#.to_string());
    control_all(&socket, &requests);
    let events = requests.len() as u64 - 1;

    let all = scrape_until(&e, "every XID event counted", |all| {
        let total: f64 = of(all, "nvidia_gpu_xid_errors_total", "5")
            .iter()
            .map(|s| value(s))
            .sum();
        let gpu4 = !of(all, "nvidia_gpu_xid_errors_total", "4").is_empty();
        (total as u64 == events && gpu4).then(|| all.to_vec())
    });

    // Bounded: the first max-codes valid codes, and one overflow series.
    let cap = DEFAULT_XID_MAX_CODES as u64;
    let labels = |name: &str| -> BTreeSet<String> {
        of(&all, name, "5")
            .iter()
            .map(|s| s.label("xid").expect("xid label").to_string())
            .collect()
    };
    let mut want: BTreeSet<String> = (1..=cap).map(|c| c.to_string()).collect();
    want.insert("other".into());
    assert_eq!(labels("nvidia_gpu_xid_errors_total"), want);
    assert_eq!(labels("nvidia_gpu_xid_last_timestamp_seconds"), want);
    for bad in out_of_range {
        assert!(
            !labels("nvidia_gpu_xid_errors_total").contains(&bad.to_string()),
            "code {bad} used as a label"
        );
    }

    // Totals preserved: the overflow holds exactly the excess.
    let by_xid: BTreeMap<String, u64> = of(&all, "nvidia_gpu_xid_errors_total", "5")
        .iter()
        .map(|s| (s.label("xid").unwrap().to_string(), value(s) as u64))
        .collect();
    let over_limit = distinct - cap;
    assert_eq!(by_xid["other"], over_limit + out_of_range.len() as u64);
    assert_eq!(
        by_xid["13"], 4,
        "a known code keeps counting past the limit"
    );
    assert_eq!(by_xid.values().sum::<u64>(), events);

    // The self-metric says why events were folded.
    let folded: BTreeMap<String, u64> = of(&all, "nvml_exporter_xid_events_folded_total", "5")
        .iter()
        .map(|s| (s.label("reason").unwrap().to_string(), value(s) as u64))
        .collect();
    assert_eq!(
        folded,
        BTreeMap::from([
            ("out_of_range".to_string(), out_of_range.len() as u64),
            ("over_limit".to_string(), over_limit),
        ])
    );
    assert_eq!(
        of(&all, "nvidia_gpu_xid_errors_total", "4")
            .iter()
            .map(|s| (s.label("xid").unwrap(), value(s)))
            .collect::<Vec<_>>(),
        vec![("43", 1.0)]
    );
    assert!(of(&all, "nvml_exporter_xid_events_folded_total", "4").is_empty());
    let text = e.scrape();
    common::promtool_check(&text).unwrap();
    assert!(
        e.log().contains("xid=\\\"other\\\"") || e.log().contains("xid=\"other\""),
        "the first fold of each kind is logged:\n{}",
        e.log()
    );
}

/// How old each GPU's readings are at the scrape, as the docs tell
/// operators to compute it: since the last complete sample finished, plus
/// how long that sample took (its first reading is that much older).
fn reading_ages(all: &[Sample], scraped_at: f64) -> BTreeMap<String, f64> {
    let durations: BTreeMap<&str, f64> = all
        .iter()
        .filter(|s| s.name == "nvml_exporter_sample_duration_seconds")
        .map(|s| (s.label("gpu").unwrap(), value(s)))
        .collect();
    all.iter()
        .filter(|s| s.name == "nvml_exporter_last_sample_timestamp_seconds")
        .map(|s| {
            let gpu = s.label("gpu").unwrap();
            (gpu.to_string(), scraped_at - value(s) + durations[gpu])
        })
        .collect()
}

fn now_unix() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

#[test]
fn a_slow_gpu_shows_readings_older_than_the_interval_while_others_stay_fresh() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("control.sock");
    let e = Exporter::simulate_env(
        "dgx-h100",
        &["--collect.interval=1s"],
        &[("NVML_SIM_CONTROL", socket.to_str().unwrap())],
    );
    e.wait_ready();
    let interval = scrape_until(&e, "the collect interval", |all| {
        all.iter()
            .find(|s| s.name == "nvml_exporter_collect_interval_seconds")
            .map(value)
    });
    assert!((interval - 1.0).abs() < 1e-9, "{interval}");
    // The threshold NvmlExporterSamplesLate alerts on.
    let late = 3.0 * interval;

    // Each call on GPU 3 now takes 150 ms: far below the stuck-call
    // deadline (3 s), so the GPU stays up, but a sample of its ~40 calls
    // takes about six intervals.
    common::sim_control(&socket, &["slow", "--gpu", "3", "--ms", "150"]);
    let mut consecutive = 0;
    scrape_until(&e, "GPU 3's readings late, the others fresh", |all| {
        let ages = reading_ages(all, now_unix());
        let up3 = of(all, "nvidia_gpu_up", "3").first().map(|s| value(s));
        let fresh = ages
            .iter()
            .filter(|(g, _)| g.as_str() != "3")
            .all(|(_, a)| *a <= late);
        if ages.get("3").is_some_and(|a| *a > late) && up3 == Some(1.0) && fresh {
            consecutive += 1;
        } else {
            consecutive = 0;
        }
        // Late on every scrape for several intervals, not once in a
        // sawtooth: an alert with a `for` clause must see it throughout.
        std::thread::sleep(Duration::from_millis(400));
        (consecutive >= 8).then_some(())
    });
    assert!(
        !e.scrape().contains("nvml_exporter_stuck_call_seconds{"),
        "slow is not hung"
    );

    common::sim_control(&socket, &["slow", "--gpu", "3", "--ms", "0"]);
    scrape_until(&e, "GPU 3 fresh again", |all| {
        let ages = reading_ages(all, now_unix());
        ages.values().all(|a| *a <= late).then_some(())
    });
}
