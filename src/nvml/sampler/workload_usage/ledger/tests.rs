//! The accounting's tests: windows, checks, and the H200's own answers
//! replayed through it.

use super::*;

fn sample(pid: u32, timestamp_us: u64, sm: u32) -> ProcessUtilization {
    ProcessUtilization {
        pid,
        timestamp_us,
        sm,
        memory: sm / 2,
        encoder: 0,
        decoder: 0,
    }
}

fn sm(s: &Ledger, pid: u32) -> f64 {
    s.totals.get(&pid).map_or(0.0, |t| t.usage.sm_seconds)
}

fn dropped(s: &Ledger, why: UsageDrop) -> u64 {
    s.dropped.get(&why).copied().unwrap_or(0)
}

const T0: u64 = 1_700_000_000_000_000;
const P: u64 = 200_000;

/// A state that has seen pids 1 and 2 listed, without device samples.
fn state() -> Ledger {
    let mut s = Ledger::default();
    s.listed.insert(1, T0);
    s.listed.insert(2, T0);
    s.device.supported = Some(false);
    s
}

#[test]
fn windows_tile_from_one_read_to_the_next() {
    let mut s = state();
    // The first answer averages the driver's whole ring: start only.
    s.add(Some(vec![sample(1, T0, 50)]), T0);
    assert_eq!(sm(&s, 1), 0.0);
    // 2 s at 60 % and 20 %: each pid's mean over the common window.
    s.add(
        Some(vec![
            sample(1, T0 + 2_000_000, 60),
            sample(2, T0 + 1_500_000, 20),
        ]),
        T0 + 2_100_000,
    );
    assert!((sm(&s, 1) - 1.2).abs() < 1e-9);
    assert!((sm(&s, 2) - 0.4).abs() < 1e-9);
    assert_eq!(s.totals[&1].usage.memory_seconds, 0.6);
}

#[test]
fn the_device_samples_give_the_window_its_sm_time() {
    let mut s = state();
    s.device.supported = Some(true);
    s.add(Some(vec![sample(1, T0, 0), sample(2, T0 - P, 0)]), T0);
    s.device.push(vec![(T0, 0)], &mut s.dropped);
    // The H200's burst: samples 25, 95, 95, 95, 92; the old call
    // answered 81 (the mean 80.4, rounded up), the Info call 80.
    let ring: Vec<(u64, u32)> = [25, 95, 95, 95, 92]
        .iter()
        .enumerate()
        .map(|(i, p)| (T0 + (i as u64 + 1) * P, *p))
        .collect();
    s.device.push(ring, &mut s.dropped);
    s.add(Some(vec![sample(1, T0 + 5 * P, 80)]), T0 + 5 * P + 10);
    // (25 + 3 * 95 + 92) % of 0.2 s: 0.804 s, not 0.80 or 0.81.
    assert!((sm(&s, 1) - 0.804).abs() < 1e-9, "{}", sm(&s, 1));
    // Two pids named 1 and 4 times in five samples at 99 %: ceil(19.8)
    // and ceil(79.2), as the H200 answered; the samples' 0.99 s goes
    // 20:80.
    s.device
        .push((6..=10).map(|k| (T0 + k * P, 99)).collect(), &mut s.dropped);
    s.add(
        Some(vec![sample(1, T0 + 7 * P, 20), sample(2, T0 + 10 * P, 80)]),
        T0 + 10 * P + 10,
    );
    assert!((sm(&s, 1) - 0.804 - 0.198).abs() < 1e-9);
    assert!((sm(&s, 2) - 0.792).abs() < 1e-9);
}

#[test]
fn a_pid_first_named_inside_the_window_gets_what_the_others_leave() {
    let mut s = state();
    s.device.supported = Some(true);
    // Pid 1 ran alone, idle; pid 2 starts, and over samples 6..=10 the
    // two time-slice a full GPU: 2, 1, 2, 1, 2.
    s.add(Some(vec![sample(1, T0, 0)]), T0);
    s.device.push(vec![(T0, 0)], &mut s.dropped);
    let ring = (1..=10).map(|k| (T0 + k * P, if k > 5 { 100 } else { 0 }));
    s.device.push(ring.collect(), &mut s.dropped);
    // Pid 1: 200 over the window's 10 samples; pid 2: 300 over the 5
    // since its first, so its mean says 60 where its part is 30.
    s.add(
        Some(vec![sample(1, T0 + 9 * P, 20), sample(2, T0 + 10 * P, 60)]),
        T0 + 10 * P + 10,
    );
    assert!((sm(&s, 1) - 0.4).abs() < 1e-9, "{}", sm(&s, 1));
    assert!((sm(&s, 2) - 0.6).abs() < 1e-9, "{}", sm(&s, 2));
    // From then on both are known: the means share one divisor.
    s.device.push(
        (11..=15).map(|k| (T0 + k * P, 100)).collect(),
        &mut s.dropped,
    );
    s.add(
        Some(vec![sample(1, T0 + 14 * P, 40), sample(2, T0 + 15 * P, 60)]),
        T0 + 15 * P + 10,
    );
    assert!((sm(&s, 1) - 0.8).abs() < 1e-9);
    assert!((sm(&s, 2) - 1.2).abs() < 1e-9);
    assert!(
        (s.sampled_seconds - 3.0).abs() < 1e-9,
        "ten and five samples"
    );
}

#[test]
fn without_the_device_samples_up_to_the_answer_the_means_count() {
    let mut s = state();
    s.device.supported = Some(true);
    s.add(Some(vec![sample(1, T0, 0)]), T0);
    // The device read failed this poll: its samples stop short.
    s.device.push(vec![(T0 + P, 50)], &mut s.dropped);
    s.add(Some(vec![sample(1, T0 + 5 * P, 40)]), T0 + 5 * P + 10);
    assert!((sm(&s, 1) - 0.4).abs() < 1e-9, "40 % of 1 s");
    assert!(s.device.pending.is_empty(), "its samples are used up");
}

#[test]
fn garbage_entries_are_left_out_and_counted() {
    let mut s = state();
    s.add(Some(vec![sample(1, T0, 50)]), T0);
    // nvtop #110: a stale entry at 37100 %, a pid never listed, one
    // stamped a year ahead, and the one valid entry.
    let year = 365 * 24 * 3600 * 1_000_000;
    s.add(
        Some(vec![
            sample(1, T0 + 2_000_000, 60),
            sample(2, T0 - 5_000_000, 37_100),
            sample(99, T0 + 1_000_000, 50),
            sample(2, T0 + year, 10),
            sample(0, T0 + 1_000_000, 5),
        ]),
        T0 + 2_100_000,
    );
    assert!((sm(&s, 1) - 1.2).abs() < 1e-9);
    assert_eq!(sm(&s, 2), 0.0);
    assert_eq!(sm(&s, 99), 0.0);
    assert_eq!(s.last_seen, T0 + 2_000_000, "the clock is not parked");
    for (why, n) in [
        (UsageDrop::Stale, 1),
        (UsageDrop::Unlisted, 2),
        (UsageDrop::Future, 1),
    ] {
        assert_eq!(dropped(&s, why), n, "{why:?}");
    }
    s.add(Some(vec![sample(1, T0 + 3_000_000, 101)]), T0 + 3_100_000);
    assert_eq!(dropped(&s, UsageDrop::Over100), 1);
    assert!((sm(&s, 1) - 1.2).abs() < 1e-9);
    // Where NVML lists no processes at all, a pid cannot be checked.
    s.note_listed(&GpuReadings::default(), &[], T0 + 3_200_000);
    s.add(Some(vec![sample(99, T0 + 4_000_000, 50)]), T0 + 4_100_000);
    // Half of the 2 s since the last entry counted.
    assert!((sm(&s, 99) - 1.0).abs() < 1e-9, "{}", sm(&s, 99));
}

#[test]
fn an_unlisted_pid_keeps_its_part_from_the_others() {
    let mut s = state();
    s.device.supported = Some(true);
    s.add(Some(vec![sample(1, T0, 0)]), T0);
    s.device.push(vec![(T0, 0)], &mut s.dropped);
    s.device
        .push((1..=5).map(|k| (T0 + k * P, 100)).collect(), &mut s.dropped);
    s.add(
        Some(vec![sample(1, T0 + 5 * P, 60), sample(77, T0 + 4 * P, 40)]),
        T0 + 5 * P + 10,
    );
    assert!((sm(&s, 1) - 0.6).abs() < 1e-9, "{}", sm(&s, 1));
}

#[test]
fn not_found_moves_the_start_so_idle_time_is_not_spread_over() {
    let mut s = state();
    s.add(Some(vec![sample(1, T0, 50)]), T0);
    // Idle for a minute: NOT_FOUND every read.
    for i in 1..=60 {
        s.add(None, T0 + i * 1_000_000);
    }
    assert_eq!(s.last_seen, T0 + 59_000_000);
    // Then 1.5 s at 40 %: a window of 1.5 s, not of a minute.
    s.add(Some(vec![sample(1, T0 + 60_500_000, 40)]), T0 + 60_600_000);
    assert!((sm(&s, 1) - 0.6).abs() < 1e-9, "{}", sm(&s, 1));
}

#[test]
fn a_gap_longer_than_the_ring_sets_the_start_again() {
    let mut s = state();
    s.add(Some(vec![sample(1, T0, 50)]), T0);
    s.add(
        Some(vec![sample(1, T0 + MAX_WINDOW_US + 1, 90)]),
        T0 + MAX_WINDOW_US + 2,
    );
    assert_eq!(sm(&s, 1), 0.0);
    s.add(
        Some(vec![sample(1, T0 + MAX_WINDOW_US + 1_000_001, 90)]),
        T0 + MAX_WINDOW_US + 1_000_002,
    );
    assert!((sm(&s, 1) - 0.9).abs() < 1e-9);
}

#[test]
fn ended_pids_are_kept_until_their_samples_cannot_return() {
    let mut s = state();
    s.add(Some(vec![sample(1, T0, 50), sample(2, T0, 50)]), T0);
    let r = GpuReadings {
        compute_processes: Some(vec![]),
        ..Default::default()
    };
    s.note_listed(&r, &[], T0 + FORGET_AFTER_US - 1);
    s.forget(T0 + FORGET_AFTER_US - 1);
    assert_eq!(s.totals.len(), 2);
    s.forget(T0 + FORGET_AFTER_US);
    assert!(s.totals.is_empty());
}

#[test]
fn every_sampler_has_its_own_epoch() {
    assert_ne!(Ledger::default().epoch, Ledger::default().epoch);
}

/// The H200's own answers (driver 580.159.04, run 2 of
/// `scripts/device-check`, tests/device/h200-580.159.04), replayed
/// through this accounting: every second the device's new samples and
/// `nvmlDeviceGetProcessUtilization` since the last answer (rounded
/// up), and, for the lone loads, the answers a 5 s poll would have had,
/// rebuilt from the samples (the lone process is named in each) with
/// the Info call's truncation and the old call's rounding up, at every
/// phase of the 5 s grid. The reference is the integral of the
/// device's samples over each load (what the device check reports).
/// `cargo test --lib h200 -- --nocapture` prints the table
/// BENCHMARKS.md quotes.
mod h200 {
    use super::*;
    use serde_json::Value;

    const RAW: &str =
        include_str!("../../../../../tests/device/h200-580.159.04/sampling-raw.jsonl");
    /// Each load of the run: its pids and its busy span (summary.json).
    const LOADS: [(&str, &[u32], f64, f64); 4] = [
        (
            "burst-1s-6s",
            &[526],
            1_795_762_495.378_961,
            1_795_762_545.382_314,
        ),
        (
            "burst-0.5s-3s",
            &[579],
            1_795_762_563.391_207,
            1_795_762_588.395_544,
        ),
        (
            "two-processes",
            &[618, 619],
            1_795_762_606.405_951_5,
            1_795_762_626.407_393,
        ),
        (
            "mps",
            &[711],
            1_795_762_645.439_072_8,
            1_795_762_655.439_090_5,
        ),
    ];

    struct Second {
        t: u64,
        device: Vec<(u64, u32)>,
        answer: Option<Vec<ProcessUtilization>>,
    }

    fn seconds() -> Vec<Second> {
        RAW.lines()
            .map(|line| {
                let v: Value = serde_json::from_str(line).unwrap();
                let device = v["device"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|s| (s[0].as_u64().unwrap(), s[1].as_u64().unwrap() as u32))
                    .collect();
                let entries: Vec<ProcessUtilization> = v["proc_since_last"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|e| ProcessUtilization {
                        pid: e["pid"].as_u64().unwrap() as u32,
                        timestamp_us: e["ts"].as_u64().unwrap(),
                        sm: e["sm"].as_u64().unwrap() as u32,
                        memory: e["mem"].as_u64().unwrap() as u32,
                        encoder: 0,
                        decoder: 0,
                    })
                    .collect();
                Second {
                    t: (v["t"].as_f64().unwrap() * 1e6) as u64,
                    device,
                    answer: (!entries.is_empty()).then_some(entries),
                }
            })
            .collect()
    }

    /// The device's samples, in order.
    fn samples(run: &[Second]) -> Vec<(u64, u32)> {
        run.iter().flat_map(|s| s.device.iter().copied()).collect()
    }

    /// The samples' integral over a load (as `busy_seconds` of the
    /// device check): each percent times the time since the one before.
    fn integral(samples: &[(u64, u32)], from: f64, to: f64) -> f64 {
        let (from, to) = (((from - 1.0) * 1e6) as u64, ((to + 1.0) * 1e6) as u64);
        samples
            .windows(2)
            .filter(|w| (from..=to).contains(&w[1].0))
            .map(|w| f64::from(w[1].1) / 100.0 * (w[1].0 - w[0].0) as f64 / 1e6)
            .sum()
    }

    fn billed(s: &Ledger, pids: &[u32]) -> f64 {
        pids.iter().map(|p| sm(s, *p)).sum()
    }

    /// SM seconds of each load, answers once a second as recorded.
    fn every_second(run: &[Second], with_samples: bool) -> Ledger {
        let mut s = Ledger::default();
        s.device.supported = Some(with_samples);
        for sec in run {
            for e in sec.answer.iter().flatten() {
                s.listed.insert(e.pid, sec.t);
            }
            if with_samples {
                s.device.push(sec.device.clone(), &mut s.dropped);
            }
            s.add(sec.answer.clone(), sec.t);
        }
        s
    }

    /// A 5 s poll of a lone process, its answers rebuilt from the
    /// samples from `phase` on: the mean over each window's samples,
    /// `round`ed to a whole percent.
    fn every_five(
        samples: &[(u64, u32)],
        pid: u32,
        span: (u64, u64),
        phase: usize,
        round: fn(u32, u32) -> u32,
        with_samples: bool,
    ) -> f64 {
        let mut s = Ledger::default();
        s.device.supported = Some(with_samples);
        let named: Vec<(u64, u32)> = samples
            .iter()
            .copied()
            .filter(|(t, _)| (span.0..=span.1).contains(t))
            .collect();
        let mut i = phase;
        let mut before = 0;
        while i < named.len() {
            let window = &named[before..=i];
            let sum: u32 = window.iter().map(|w| w.1).sum();
            let at = named[i].0;
            s.listed.insert(pid, at);
            if with_samples {
                s.device.push(window.to_vec(), &mut s.dropped);
            }
            let mean = round(sum, window.len() as u32);
            s.add(Some(vec![sample(pid, at, mean)]), at);
            before = i + 1;
            i += 25;
        }
        sm(&s, pid)
    }

    #[test]
    fn the_device_samples_bill_the_h200s_loads_exactly() {
        let run = seconds();
        let all = samples(&run);
        let ours = every_second(&run, true);
        let means = every_second(&run, false);
        eprintln!("load | samples s | 1 s: samples by means | 1 s: means x window | 5 s: samples by means | 5 s: Info means x window | 5 s: old means x window");
        for (name, pids, from, to) in LOADS {
            let truth = integral(&all, from, to);
            let (a, b) = (billed(&ours, pids), billed(&means, pids));
            let mut five = format!("{name} | {truth:.3} | {a:.3} | {b:.3}");
            if let [pid] = pids {
                // The span the pid was named in, from its answers.
                let at: Vec<u64> = run
                    .iter()
                    .flat_map(|s| s.answer.iter().flatten())
                    .filter(|e| e.pid == *pid)
                    .map(|e| e.timestamp_us)
                    .collect();
                let span = (at[0], *at.last().unwrap());
                let phases = |round: fn(u32, u32) -> u32, with: bool| -> (f64, f64) {
                    (0..25)
                        .map(|p| every_five(&all, *pid, span, p, round, with))
                        .fold((f64::MAX, f64::MIN), |(lo, hi), v| (lo.min(v), hi.max(v)))
                };
                let exact = phases(|s, n| s / n, true);
                let floor = phases(|s, n| s / n, false);
                let ceil = phases(|s, n| s.div_ceil(n), false);
                five += &format!(
                    " | {:.3}-{:.3} | {:.3}-{:.3} | {:.3}-{:.3}",
                    exact.0, exact.1, floor.0, floor.1, ceil.0, ceil.1
                );
                // Each 5 s window's samples, whatever the rounding.
                assert!(
                    (exact.0 - truth).abs() < 0.01 * truth,
                    "{name}: {exact:?} {truth}"
                );
                assert!(
                    (exact.1 - truth).abs() < 0.01 * truth,
                    "{name}: {exact:?} {truth}"
                );
                // Truncated means lose about half a percent point per
                // window: the 1 s / 6 s bursts 2-4 %.
                if name == "burst-1s-6s" {
                    assert!(
                        floor.1 < 0.98 * truth && ceil.0 > 1.02 * truth,
                        "{floor:?} {ceil:?}"
                    );
                }
            } else {
                let split: Vec<String> = pids
                    .iter()
                    .map(|p| format!("{p}: {:.3}", sm(&ours, *p)))
                    .collect();
                five += &format!(" | ({}) | |", split.join(", "));
            }
            eprintln!("{five}");
            // Once a second, with the old call's rounding up: within a
            // percent of the samples, where the means overbill.
            assert!((a - truth).abs() < 0.01 * truth, "{name}: {a} vs {truth}");
            assert!(b > a, "{name}: means x window {b}, samples {a}");
        }
    }
}
