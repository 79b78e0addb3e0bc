//! The XID event thread (`nvidia_gpu_xid_errors_total`): one NVML event
//! set for every GPU, waited on in 200 ms steps with a raw
//! `nvmlEventSetWait_v2` so MIG instance ids are kept, each event counted
//! on its GPU's slot when it happens.
//!
//! No GPU can stop the others' XIDs. Every driver call on a GPU (its
//! handle and its registration) runs on a helper thread, `nvml-xid-reg<N>`,
//! that the XID thread waits for at most `--collect.stuck-deadline`, as the
//! sampler waits for a worker: a GPU that does not answer is left to its
//! helper and registered when it does (never two helpers for one GPU), and
//! the others are registered and waited on meanwhile. When the set answers
//! `GPU_IS_LOST` (a registered GPU fell off the bus: every later wait says
//! so), a new set is made and every GPU registered on it again, the lost
//! one failing until it answers; only then is the old set drained of the
//! events still queued on it and dropped, so no event of a healthy GPU is
//! lost in the swap. An event both sets delivered (raised while both held
//! its GPU) is counted once.
//!
//! `Shared::xid_last_wait` says when the thread last completed a wait; it
//! stops moving only when the thread itself is stuck
//! (`NvmlExporterXidEventsStalled`).

use std::collections::BTreeMap;
use std::sync::mpsc::{self, Receiver, TryRecvError};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use nvml_wrapper::error::NvmlError;
use nvml_wrapper::Nvml;

use super::super::raw::{self, EventSet, RawEvent};
use super::super::watchdog::lock;
use super::{Generation, GpuSlot, Shared};
use crate::xid::{class_without_line, XidEvent, XidSource};

const WAIT_MS: u32 = 200;
/// After a swap of event sets, how long an event the old set delivered
/// may come again from the new one.
const OVERLAP: Duration = Duration::from_secs(2);

pub struct Config {
    pub interval: Duration,
    /// `--collect.stuck-deadline`: how long one registration may take.
    pub deadline: Duration,
    pub max_codes: usize,
}

/// A registration in progress on its helper thread.
struct Helper {
    /// The set it registers on: after a swap, an old set's outcome says
    /// nothing of the new one.
    set: Arc<EventSet>,
    started: Instant,
    done: Receiver<Result<usize, NvmlError>>,
    /// Said once that it takes too long.
    reported: bool,
}

/// The set, and where each GPU stands with it.
struct Events {
    nvml: Arc<Nvml>,
    set: Arc<EventSet>,
    /// Registered: device handle (as events name it) and slot.
    registered: Vec<(usize, Arc<GpuSlot>)>,
    /// Not registered yet, or to be again: by NVML index.
    waiting: BTreeMap<u32, Arc<GpuSlot>>,
    helpers: BTreeMap<u32, Helper>,
    /// Why each waiting GPU failed last, said once per reason.
    failed: BTreeMap<u32, String>,
    next_try: Instant,
    /// Events the old set delivered in the last swap, with when: their
    /// copies from the new set are not counted again.
    overlap: Vec<(usize, u64, u32, u32, Instant)>,
    /// `--collect.stuck-deadline`.
    deadline: Duration,
}

pub fn run(
    nvml: Arc<Nvml>,
    slots: Vec<Arc<GpuSlot>>,
    generation: Arc<Generation>,
    shared: Arc<Shared>,
    cfg: Config,
) {
    let set = match EventSet::create(nvml.clone()) {
        Ok(s) => Arc::new(s),
        Err(e) => {
            tracing::warn!(error = %e, "cannot create an NVML event set: XID errors will not be counted");
            return;
        }
    };
    let mut ev = Events {
        nvml,
        set,
        registered: Vec::new(),
        waiting: slots.into_iter().map(|s| (s.index, s)).collect(),
        helpers: BTreeMap::new(),
        failed: BTreeMap::new(),
        next_try: Instant::now(),
        overlap: Vec::new(),
        deadline: cfg.deadline,
    };
    let mut logged_failure = false;
    while !generation.stop.is_stopped() {
        ev.register_waiting(&cfg);
        if ev.registered.is_empty() {
            // Nothing to wait on yet: the thread lives, and says so.
            *lock(&shared.xid_last_wait) = Some(SystemTime::now());
            if generation
                .stop
                .wait(Duration::from_millis(u64::from(WAIT_MS)))
            {
                break;
            }
            continue;
        }
        let waited = ev.set.wait(WAIT_MS);
        *lock(&shared.xid_last_wait) = Some(SystemTime::now());
        match waited {
            Ok(e) => ev.count(e, cfg.max_codes, true),
            Err(NvmlError::Timeout) => {}
            // nvml.h: a registered GPU fell off the bus, and every later
            // wait on this set says so: without a new set, the other GPUs'
            // XIDs would never arrive again.
            Err(NvmlError::GpuLost) => {
                ev.swap(&cfg, &generation);
                if generation
                    .stop
                    .wait(Duration::from_millis(u64::from(WAIT_MS)))
                {
                    break;
                }
            }
            Err(e) => {
                if !logged_failure {
                    tracing::warn!(error = %e, "waiting for NVML events failed; retrying");
                    logged_failure = true;
                }
                if generation.stop.wait(cfg.interval) {
                    break;
                }
            }
        }
    }
    *lock(&shared.xid_last_wait) = None;
}

impl Events {
    /// Counts an XID event on its GPU; `fresh`: from the current set (one
    /// the old set delivered in a swap is not counted twice).
    fn count(&mut self, e: RawEvent, max_codes: usize, fresh: bool) {
        if e.event_type & raw::XID_EVENT == 0 {
            return;
        }
        let device = e.device as usize;
        if fresh {
            self.overlap.retain(|o| o.4.elapsed() < OVERLAP);
            let key = (device, e.data, e.gpu_instance, e.compute_instance);
            if let Some(i) = self
                .overlap
                .iter()
                .position(|o| (o.0, o.1, o.2, o.3) == key)
            {
                self.overlap.remove(i);
                return;
            }
        }
        let id = |v: u32| if v == u32::MAX { None } else { Some(v) };
        if !self.registered.iter().any(|(h, _)| *h == device) {
            // Registered by a helper whose outcome is not taken yet: the
            // set delivers its events already.
            self.take_outcomes();
        }
        match self.registered.iter().find(|(h, _)| *h == device) {
            Some((_, slot)) => slot.record_xid(
                XidEvent {
                    code: e.data,
                    // NVML's event carries the code alone; an NVLink5 code
                    // waits for its log line (`xid::Ledger::record`).
                    class: class_without_line(e.data),
                    gpu_instance: id(e.gpu_instance),
                    compute_instance: id(e.compute_instance),
                    source: XidSource::Nvml,
                    at: Instant::now(),
                    wall: SystemTime::now(),
                    nvlink_err_link: None,
                },
                max_codes,
            ),
            None => tracing::warn!(xid = e.data, "XID event from an unknown device handle"),
        }
    }

    /// Starts a registration for every waiting GPU without one in flight
    /// (every interval), and takes the outcomes of those that ended. A GPU
    /// that has not answered within the deadline is said once and left to
    /// its helper.
    fn register_waiting(&mut self, cfg: &Config) {
        if !self.waiting.is_empty() && Instant::now() >= self.next_try {
            self.next_try = Instant::now() + cfg.interval;
            for &index in self.waiting.keys() {
                if self.helpers.contains_key(&index) {
                    continue;
                }
                let (tx, rx) = mpsc::channel();
                let set = self.set.clone();
                let spawned = super::spawn(&format!("nvml-xid-reg{index}"), move || {
                    let _ = tx.send(set.register_index(index, raw::XID_EVENT));
                });
                match spawned {
                    Ok(_) => {
                        self.helpers.insert(
                            index,
                            Helper {
                                set: self.set.clone(),
                                started: Instant::now(),
                                done: rx,
                                reported: false,
                            },
                        );
                    }
                    Err(e) => {
                        tracing::error!(gpu = index, error = %e, "cannot start a thread to register for XID events");
                    }
                }
            }
        }
        self.take_outcomes();
    }

    /// Takes the outcomes of the registrations that ended; one past the
    /// deadline is said once and left to its helper.
    fn take_outcomes(&mut self) {
        let indices: Vec<u32> = self.helpers.keys().copied().collect();
        for index in indices {
            let helper = self.helpers.get_mut(&index).expect("listed just now");
            match helper.done.try_recv() {
                Ok(outcome) => {
                    let stale = !Arc::ptr_eq(&helper.set, &self.set);
                    self.helpers.remove(&index);
                    if stale {
                        // Registered on a set since replaced: again, now.
                        self.next_try = Instant::now();
                    } else {
                        self.registered_or_not(index, outcome);
                    }
                }
                Err(TryRecvError::Empty) => {
                    if !helper.reported && helper.started.elapsed() > self.deadline {
                        helper.reported = true;
                        tracing::warn!(gpu = index, deadline = ?self.deadline,
                            "registering this GPU for XID events has not returned: its XIDs are registered when it answers; the other GPUs' XIDs are counted meanwhile");
                    }
                }
                Err(TryRecvError::Disconnected) => {
                    self.helpers.remove(&index);
                }
            }
        }
    }

    fn registered_or_not(&mut self, index: u32, outcome: Result<usize, NvmlError>) {
        let Some(slot) = self.waiting.get(&index).cloned() else {
            return;
        };
        match outcome {
            Ok(handle) => {
                self.waiting.remove(&index);
                if self.failed.remove(&index).is_some() {
                    tracing::info!(gpu = index, "registered for XID events again");
                }
                self.registered.retain(|(_, s)| s.index != index);
                self.registered.push((handle, slot));
            }
            Err(e) => {
                let why = e.to_string();
                if self.failed.get(&index) != Some(&why) {
                    match e {
                        // A GPU this process may not open is reported by
                        // its worker.
                        NvmlError::NoPermission => {}
                        NvmlError::GpuLost => tracing::warn!(gpu = index,
                            "GPU fell off the bus: XID events of the other GPUs continue on an event set without it"),
                        _ => tracing::warn!(gpu = index, error = %e,
                            "cannot register for XID events on this GPU; retrying every interval"),
                    }
                    self.failed.insert(index, why);
                }
            }
        }
    }

    /// A registered GPU is lost: a new set, every GPU registered on it
    /// again (the lost one failing), then the old set drained and dropped.
    fn swap(&mut self, cfg: &Config, generation: &Generation) {
        let new = match EventSet::create(self.nvml.clone()) {
            Ok(s) => Arc::new(s),
            Err(e) => {
                tracing::warn!(error = %e, "cannot create a new NVML event set after a GPU was lost; retrying");
                return;
            }
        };
        let old = std::mem::replace(&mut self.set, new);
        let old_registered = std::mem::take(&mut self.registered);
        for (_, slot) in &old_registered {
            self.waiting.insert(slot.index, slot.clone());
        }
        // Helpers in flight registered on the old set: their GPUs go again.
        self.next_try = Instant::now();
        let started = Instant::now();
        self.register_waiting(cfg);
        while self
            .helpers
            .values()
            .any(|h| h.started.elapsed() <= cfg.deadline)
            && started.elapsed() <= cfg.deadline
            && !generation.stop.is_stopped()
        {
            std::thread::sleep(Duration::from_millis(5));
            self.register_waiting(cfg);
        }
        // What the old set still holds (NVML delivers the events queued
        // before the loss, then says GPU_IS_LOST).
        let handles: Vec<(usize, Arc<GpuSlot>)> = old_registered;
        let mut drained = Vec::new();
        while let Ok(e) = old.wait(0) {
            drained.push(e);
        }
        let current = std::mem::replace(&mut self.registered, handles);
        for e in &drained {
            self.count(*e, cfg.max_codes, false);
        }
        self.registered = current;
        // Events both sets delivered come once more from the new one.
        let now = Instant::now();
        self.overlap = drained
            .iter()
            .filter(|e| e.event_type & raw::XID_EVENT != 0)
            .map(|e| {
                (
                    e.device as usize,
                    e.data,
                    e.gpu_instance,
                    e.compute_instance,
                    now,
                )
            })
            .collect();
        drop(old);
    }
}
