//! The join step: where each snapshot is completed and rendered, once per
//! poll, on the sampler's thread.
//!
//! The sampler (`crate::nvml`) hands its `Snapshot` over by value, with
//! the evidence each verdict is judged from. [`Join::complete`] fills in,
//! in place and without copying the snapshot, what the sampler does not
//! know: pod attribution (`crate::kubernetes`), workload attribution
//! (`crate::workloads`), the process's, HTTP server's and selection file's
//! statistics, and the verdicts (`crate::verdict`). [`Join::publish`] then
//! renders it once and swaps the exposition in for the scrapes.
//!
//! Attribution and the statistics are kept up to date off this path (each
//! by its own background task, or counted by the HTTP server), so neither
//! the sampler nor a scrape ever waits on the kubelet or on `/proc`.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use arc_swap::{ArcSwap, ArcSwapOption};

use crate::http::{HttpStats, Published};
use crate::kubernetes::Attribution;
use crate::nvsentinel::Nvsentinel;
use crate::render::{self, RenderContext};
use crate::selection::Runtime;
use crate::selfstat::SelfStats;
use crate::snapshot::{Snapshot, XidSeen};
use crate::verdict;
use crate::workloads::Workloads;

/// Ready polls before [`crate::footprint::give_back_start_up_code`].
const GIVE_BACK_AFTER_POLLS: u32 = 3;

/// What the join step adds to each snapshot.
pub struct Join {
    pub attribution: Option<Arc<Attribution>>,
    pub workloads: Option<Arc<Workloads>>,
    pub own: Arc<SelfStats>,
    pub http: Arc<HttpStats>,
    /// The selection in force: the render context, the file's status.
    pub runtime: Runtime,
    /// `--collector.verdict.restart-app-window`.
    pub restart_app_window: Duration,
    /// How writing the state file goes, where one is kept.
    pub state: Option<Arc<crate::state::WriteStats>>,
    /// Where `--nvsentinel.socket` sends each change of a verdict.
    pub nvsentinel: Option<Arc<Nvsentinel>>,
}

impl Join {
    /// Completes the sampler's snapshot in place.
    pub fn complete(&self, snapshot: &mut Snapshot) {
        if let Some(a) = &self.attribution {
            a.apply(snapshot);
        }
        if let Some(w) = &self.workloads {
            w.apply(snapshot);
        }
        snapshot.process = self.own.latest();
        snapshot.http = Some(self.http.counts());
        snapshot.config = self.runtime.status();
        snapshot.state_write_errors = self.state.as_ref().map(|s| s.errors());
        let now = Instant::now();
        judge(snapshot, now, self.restart_app_window);
        if let Some(n) = &self.nvsentinel {
            n.observe(snapshot, |g, v| {
                verdict::xids_behind(g, v, now, self.restart_app_window)
            });
            snapshot.nvsentinel = Some(n.counts());
        }
    }

    /// The callback the sampler calls after every poll round: complete the
    /// snapshot, render it once, swap the exposition in. Readiness changes
    /// are logged once each, not every poll.
    pub fn publish(
        self,
        latest: Arc<ArcSwapOption<Published>>,
    ) -> Arc<dyn Fn(Snapshot) + Send + Sync> {
        let ctx: Arc<ArcSwap<RenderContext>> = self.runtime.render_context();
        let was_ready = AtomicBool::new(false);
        let ready_polls = AtomicU32::new(0);
        Arc::new(move |mut snapshot: Snapshot| {
            self.complete(&mut snapshot);
            let exposition = render::render(&snapshot, &ctx.load());
            latest.store(Some(Arc::new(Published {
                exposition: Arc::new(exposition),
                ready: snapshot.ready,
            })));
            // A few polls into serving, every path a poll and a scrape take
            // has run: what start-up alone touched can go (crate::footprint).
            if snapshot.ready
                && ready_polls.fetch_add(1, Ordering::Relaxed) == GIVE_BACK_AFTER_POLLS
            {
                let mappings = self
                    .own
                    .smaps()
                    .map_or(0, |smaps| crate::footprint::give_back_start_up_code(&smaps));
                tracing::debug!(mappings, "gave back the pages of start-up code");
            }
            if was_ready.swap(snapshot.ready, Ordering::Relaxed) != snapshot.ready {
                if snapshot.ready {
                    tracing::info!(gpus = snapshot.gpus.len(), "ready");
                } else {
                    tracing::warn!(nvml_up = snapshot.nvml_up, "not ready");
                }
            }
        })
    }
}

/// Judges every verdict of the snapshot at `now` from the evidence the
/// sampler published: each GPU's, and each address only the kernel log
/// names. `--config.check` calls it alone, on the snapshot it counts.
pub fn judge(snapshot: &mut Snapshot, now: Instant, restart_app_window: Duration) {
    // Every GPU's XIDs, and those of addresses only the kernel log names:
    // what a GPU's lone XID 45 is weighed against.
    let node_xids: Vec<XidSeen> = snapshot
        .gpus
        .iter()
        .filter_map(|g| g.evidence.as_ref())
        .flat_map(|e| e.xids.iter().copied())
        .chain(
            snapshot
                .kernel_log
                .iter()
                .filter_map(|l| l.unnamed_evidence.as_ref())
                .flat_map(|e| e.gpus.iter().flat_map(|g| g.xids.iter().copied())),
        )
        .collect();
    for g in &mut snapshot.gpus {
        g.verdicts = verdict::judge_gpu(g, &node_xids, now, restart_app_window);
    }
    if let Some(log) = &mut snapshot.kernel_log {
        log.unnamed_gpus = log.unnamed_evidence.as_ref().map_or_else(Vec::new, |e| {
            verdict::judge_unnamed(e, now, restart_app_window)
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::{
        Action, GpuReadings, GpuState, Health, KernelLogStatus, RemappedRows, UnnamedEvidence,
        UnnamedGpuXids, VerdictEvidence, XidClass, XidSeen,
    };

    const WINDOW: Duration = Duration::from_secs(600);

    fn xid(code: u64, at: Instant) -> XidSeen {
        XidSeen {
            code,
            class: XidClass::Code,
            gpu_instance: None,
            compute_instance: None,
            at,
        }
    }

    /// Three GPUs as the sampler publishes them: one with a pending remap,
    /// one hung after an XID 48 (its last readings kept by the sampler,
    /// withdrawn here), one sampled while NVML was down (no evidence); and
    /// an address only the kernel log names.
    fn sampled(now: Instant) -> Snapshot {
        let mut pending = GpuState::with_readings(
            0,
            GpuReadings {
                remapped_rows: Some(RemappedRows {
                    correctable: 0,
                    uncorrectable: 1,
                    pending: true,
                    failed: false,
                }),
                ..GpuReadings::default()
            },
        );
        pending.evidence = Some(VerdictEvidence::default());
        let mut hung = GpuState::with_readings(1, GpuReadings::default());
        hung.health = Health::Hung;
        hung.readings = None;
        hung.evidence = Some(VerdictEvidence {
            xids: vec![xid(48, now)],
            ..VerdictEvidence::default()
        });
        let unjudged = GpuState::with_readings(2, GpuReadings::default());
        Snapshot {
            nvml_up: true,
            gpus: vec![pending, hung, unjudged],
            kernel_log: Some(KernelLogStatus {
                unnamed_evidence: Some(UnnamedEvidence {
                    gpus: vec![UnnamedGpuXids {
                        pci_bus_id: "00000000:3A:00.0".into(),
                        xids: vec![xid(79, now)],
                    }],
                    last_reset: None,
                }),
                ..KernelLogStatus::default()
            }),
            ..Snapshot::default()
        }
    }

    #[test]
    fn the_verdicts_are_judged_from_the_evidence_the_sampler_published() {
        let now = Instant::now();
        let mut s = sampled(now);
        judge(&mut s, now, WINDOW);
        let own = |g: &GpuState| g.verdicts.first().map(|v| (v.action, v.reason));
        assert_eq!(own(&s.gpus[0]), Some((Action::ResetGpu, "remap_pending")));
        assert_eq!(
            own(&s.gpus[1]),
            Some((Action::ResetGpu, "hung")),
            "hung is listed before an XID of the same action"
        );
        assert_eq!(own(&s.gpus[2]), None, "no evidence: not judged");
        let unnamed = &s.kernel_log.as_ref().unwrap().unnamed_gpus;
        assert_eq!(unnamed.len(), 1);
        assert_eq!(
            (unnamed[0].pci_bus_id.as_str(), unnamed[0].action),
            ("00000000:3A:00.0", Action::Reboot)
        );
        // Judged again (the next poll), nothing piles up; without the
        // evidence (every GPU named again) the address's verdict goes.
        s.kernel_log.as_mut().unwrap().unnamed_evidence = None;
        judge(&mut s, now, WINDOW);
        assert_eq!(s.gpus[0].verdicts.len(), 1);
        assert!(s.kernel_log.as_ref().unwrap().unnamed_gpus.is_empty());
    }

    #[test]
    fn the_join_completes_the_snapshot_in_place_without_copying_readings() {
        let config = crate::cli::parse_from(["nvml-exporter"]).unwrap();
        let runtime =
            Runtime::new_unwatched(crate::selection_check::runtime_settings(&config)).unwrap();
        let join = Join {
            attribution: None,
            workloads: None,
            own: Arc::new(SelfStats::default()),
            http: Arc::new(HttpStats::default()),
            runtime,
            restart_app_window: WINDOW,
            state: None,
            nvsentinel: None,
        };
        let now = Instant::now();
        let mut s = sampled(now);
        let readings = s.gpus[0].readings.clone().unwrap();
        join.complete(&mut s);
        assert!(
            Arc::ptr_eq(s.gpus[0].readings.as_ref().unwrap(), &readings),
            "the readings the sampler shared are the ones rendered"
        );
        assert!(s.http.is_some(), "the HTTP server's counts");
        assert_eq!(s.gpus[0].verdicts[0].reason, "remap_pending");
        assert_eq!(s.kernel_log.unwrap().unnamed_gpus.len(), 1);
    }
}
