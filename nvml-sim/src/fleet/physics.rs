//! The physics that moves a GPU's readings over time. Readings are
//! functions of time so that they stay consistent with each other:
//! utilization follows a slow sine around the configured load; power,
//! temperature, clocks and fan follow utilization; energy is the integral
//! of the reported power (NVML reference,
//! `nvmlDeviceGetTotalEnergyConsumption`: "total energy consumption ... in
//! mJ since the driver was last reloaded").

use super::gpu::{Gpu, GpuInstance};
use crate::fault::Reason;
use crate::value::{pinned, Val};
use std::f64::consts::PI;

/// Utilization waveform around `load`: a sine that never leaves 0..=100, so
/// its integral has a closed form and energy is exact.
#[derive(Clone, Copy)]
struct Wave {
    load: f64,
    amp: f64,
    omega: f64,
    phase: f64,
}

impl Wave {
    fn new(load: f64, period: f64, phase: f64) -> Wave {
        let amp = if load <= 0.0 {
            0.0
        } else {
            load.min(100.0 - load).min(12.0)
        };
        Wave {
            load,
            amp,
            omega: 2.0 * PI / period,
            phase,
        }
    }
    fn flat(self) -> Wave {
        Wave { amp: 0.0, ..self }
    }
    fn at(&self, t: f64) -> f64 {
        self.load + self.amp * (self.omega * t + self.phase).sin()
    }
    /// Integral of `at` from 0 to t (percent-seconds).
    fn integral(&self, t: f64) -> f64 {
        self.load * t
            - self.amp / self.omega * ((self.omega * t + self.phase).cos() - self.phase.cos())
    }
}

impl Gpu {
    fn wave(&self) -> Wave {
        match pinned(self.readings.utilization[0]) {
            // A flat wave: the pinned level, for power, clocks and energy too.
            Some(u) => Wave {
                load: f64::from(u),
                amp: 0.0,
                omega: 1.0,
                phase: 0.0,
            },
            // Processes that declare their use set the level, flat.
            None => match super::usage::declared_sm(self, None) {
                Some(sm) => Wave::new(sm, self.period, self.phase).flat(),
                None => Wave::new(self.load, self.period, self.phase),
            },
        }
    }

    fn instance_wave(&self, gi: &GpuInstance) -> Wave {
        match super::usage::declared_sm(self, Some(gi.id)) {
            Some(sm) => Wave::new(sm, self.period, gi.phase).flat(),
            None => Wave::new(gi.load, self.period, gi.phase),
        }
    }

    /// GPU utilization in percent at real time t.
    pub fn util(&self, t: f64) -> f64 {
        match &self.mig {
            Some(m) => {
                m.instances
                    .iter()
                    .map(|i| self.instance_wave(i).at(t) * i.profile.slices as f64)
                    .sum::<f64>()
                    / f64::from(self.model.mig.compute_slices)
            }
            None => self.wave().at(t),
        }
    }

    fn util_integral(&self, t: f64) -> f64 {
        match &self.mig {
            Some(m) => {
                m.instances
                    .iter()
                    .map(|i| self.instance_wave(i).integral(t) * i.profile.slices as f64)
                    .sum::<f64>()
                    / f64::from(self.model.mig.compute_slices)
            }
            None => self.wave().integral(t),
        }
    }

    /// Average utilization of a MIG instance (or the whole GPU) over [t1, t2].
    pub fn avg_util(&self, gi: Option<u32>, t1: f64, t2: f64) -> f64 {
        let wave = gi
            .and_then(|g| self.instance(g))
            .map(|i| self.instance_wave(i));
        let at = |t| wave.map(|w| w.at(t)).unwrap_or_else(|| self.util(t));
        let integral = |t| {
            wave.map(|w| w.integral(t))
                .unwrap_or_else(|| self.util_integral(t))
        };
        if t2 - t1 < 1e-6 {
            at(t2)
        } else {
            (integral(t2) - integral(t1)) / (t2 - t1)
        }
    }

    pub fn thermal_throttled(&self) -> bool {
        self.throttle.active & (Reason::HwThermalSlowdown.bit() | Reason::SwThermalSlowdown.bit())
            != 0
    }

    /// Factor throttling applies to clocks and power.
    fn throttle_factor(&self) -> f64 {
        if self.throttle.active
            & (Reason::HwThermalSlowdown.bit()
                | Reason::HwSlowdown.bit()
                | Reason::HwPowerBrakeSlowdown.bit())
            != 0
        {
            0.55
        } else if self.throttle.active
            & (Reason::SwThermalSlowdown.bit() | Reason::SwPowerCap.bit())
            != 0
        {
            0.8
        } else {
            1.0
        }
    }

    /// The power limit in force (the scenario's, else the board default).
    pub fn power_limit_mw(&self) -> u32 {
        self.settings
            .power_limit_mw
            .unwrap_or(self.model.power.default_mw)
    }

    /// The limit the driver enforces: the one set, unless the scenario
    /// says the driver enforced another (a capture's Current Power Limit
    /// below its Requested one).
    pub fn enforced_power_limit_mw(&self) -> u32 {
        self.settings
            .enforced_power_limit_mw
            .unwrap_or_else(|| self.power_limit_mw())
    }

    fn power_span(&self) -> (f64, f64) {
        let idle = self.model.power.idle_mw as f64;
        let busy = self.power_limit_mw() as f64 * 0.9;
        (idle, busy - idle)
    }

    /// Power draw in mW at t.
    pub fn power_mw(&self, t: f64) -> f64 {
        if let Some(p) = pinned(self.readings.power_mw) {
            return f64::from(p);
        }
        let (idle, span) = self.power_span();
        let f = self.throttle_factor();
        (idle + span * self.util(t) / 100.0) * if f < 1.0 { f.max(0.7) } else { 1.0 }
    }

    /// Draw of power scope 1 (the module) or 2 (the GPU's memory) in mW:
    /// the scenario's pinned reading, else between the board's idle and
    /// busy draw with the GPU's load; `None` where the board has no such
    /// scope or the scenario says "N/A".
    pub fn scope_power_mw(&self, scope: u32, t: f64) -> Option<u32> {
        let (pin, board) = match scope {
            1 => (self.readings.module_power_mw, self.model.power.module),
            2 => (self.readings.memory_power_mw, self.model.power.memory),
            _ => return None,
        };
        match pin {
            Some(v) => v.get(),
            None => board.map(|b| {
                let span = f64::from(b.busy_mw - b.idle_mw);
                (f64::from(b.idle_mw) + span * self.util(t) / 100.0) as u32
            }),
        }
    }

    /// Brings the energy counter up to t. Called before anything that reads
    /// it and before throttling changes, so the integral is exact.
    pub fn advance_energy(&mut self, t: f64) {
        if t <= self.power.energy_t {
            return;
        }
        self.util_seconds += self.util_integral(t) - self.util_integral(self.power.energy_t);
        if let Some(p) = pinned(self.readings.power_mw) {
            self.power.energy_mj += f64::from(p) * (t - self.power.energy_t);
            self.power.energy_t = t;
            return;
        }
        let (idle, span) = self.power_span();
        let f = self.throttle_factor();
        let m = if f < 1.0 { f.max(0.7) } else { 1.0 };
        let du = self.util_integral(t) - self.util_integral(self.power.energy_t);
        self.power.energy_mj += m * (idle * (t - self.power.energy_t) + span * du / 100.0);
        self.power.energy_t = t;
    }

    pub fn busy(&self, t: f64) -> bool {
        self.util(t) >= 1.0 || self.mig.is_some()
    }

    pub fn pstate(&self, t: f64) -> u32 {
        if let Some(p) = pinned(self.readings.pstate) {
            return p;
        }
        if self.busy(t) {
            0
        } else {
            8
        }
    }

    pub fn temperature(&self, t: f64) -> u32 {
        if let Some(c) = pinned(self.readings.temperature_c) {
            return c;
        }
        let base = 29.0 + (self.index % 3) as f64 + 0.48 * self.util(t);
        let temp = if self.thermal_throttled() {
            base.max(self.model.slowdown_c() as f64 + 1.0)
        } else {
            base
        };
        temp.round() as u32
    }

    /// How far below T.Limit (the max operating temperature) the GPU runs;
    /// `None` where the board serves no T.Limit readings.
    pub fn tlimit_margin(&self, t: f64) -> Option<i32> {
        let margins = &self.model.thermal.tlimit_margins;
        match &self.readings.tlimit_c {
            Some(v) => v.get(),
            None if margins.iter().all(Option::is_none) => None,
            None => Some(self.model.tlimit_c()? as i32 - self.temperature(t) as i32),
        }
    }

    /// `None`: no HBM sensor, or the scenario says "N/A".
    pub fn memory_temperature(&self, t: f64) -> Option<u32> {
        match &self.readings.memory_temperature_c {
            Some(v) => v.get(),
            // HBM boards: an absolute memory threshold or a memory T.Limit
            // margin (Blackwell captures print only the latter).
            None => (self.model.thermal.memory_max_c.is_some()
                || self.model.thermal.tlimit_margins[2].is_some())
            .then(|| self.temperature(t) + 6),
        }
    }

    /// Current clock of an nvmlClockType_t, in MHz.
    pub fn clock(&self, clock_type: u32, t: f64) -> Option<u32> {
        match self.readings.clocks_mhz.get(clock_type as usize) {
            Some(Some(Val::NotSupported)) => return None,
            Some(Some(Val::Is(c))) => return Some(*c),
            _ => {}
        }
        let m = &self.model;
        let busy = self.busy(t);
        let f = self.throttle_factor();
        let graphics = if busy {
            m.clocks.busy_graphics_mhz as f64 * f
        } else {
            m.clocks.idle_graphics_mhz as f64
        };
        match clock_type {
            0 | 1 => Some((graphics / 15.0).round() as u32 * 15),
            2 => Some(if busy {
                m.clocks.max_mem_mhz
            } else {
                m.clocks.idle_mem_mhz
            }),
            3 => Some(if busy {
                ((m.clocks.max_video_mhz as f64 * f) / 15.0).round() as u32 * 15
            } else {
                m.clocks.idle_video_mhz
            }),
            _ => None,
        }
    }

    pub fn max_clock(&self, clock_type: u32) -> Option<u32> {
        match clock_type {
            0 => Some(self.model.clocks.max_graphics_mhz),
            1 => Some(self.model.clocks.max_sm_mhz),
            2 => Some(self.model.clocks.max_mem_mhz),
            3 => Some(self.model.clocks.max_video_mhz),
            _ => None,
        }
    }

    /// Speed of fan `fan` in percent; `None` where the scenario says "N/A".
    pub fn fan_percent(&self, fan: u32, t: f64) -> Option<u32> {
        match &self.readings.fans_percent {
            Some(Val::NotSupported) => None,
            Some(Val::Is(v)) => v.get(fan as usize).or(v.first()).copied(),
            None => Some((30.0 + 0.55 * self.util(t)).round() as u32 + fan),
        }
    }

    pub fn clock_event_reasons(&self, t: f64) -> u64 {
        let idle = u64::from(self.throttle.idle_reason.unwrap_or_else(|| !self.busy(t)));
        (idle | self.throttle.active | self.throttle.fixed_reasons)
            & self.throttle.supported_reasons
    }

    /// PCIe throughput in KB/s: (tx, rx).
    pub fn pcie_kbps(&self, t: f64) -> (u32, u32) {
        let u = self.util(t);
        (
            pinned(self.readings.pcie_tx_kbps).unwrap_or((2_000.0 + u * 9_000.0) as u32),
            pinned(self.readings.pcie_rx_kbps).unwrap_or((3_000.0 + u * 24_000.0) as u32),
        )
    }

    /// Utilization integrated since init (percent seconds) up to t: what
    /// each wave ran while it was the GPU's (`util_seconds`), and the
    /// current one since. Recomputing the current wave from 0 would move
    /// the past with every load change, and counters built on it back.
    fn util_done(&self, t: f64) -> f64 {
        let t = t.max(self.power.energy_t);
        self.util_seconds + self.util_integral(t) - self.util_integral(self.power.energy_t)
    }

    /// PCIe byte counters since init: (tx, rx), the integral of the
    /// throughput.
    pub fn pcie_bytes(&self, t: f64) -> (u64, u64) {
        let i = self.util_done(t);
        let flat =
            |v: Option<Val<u32>>| pinned(v).map(|kbps| (f64::from(kbps) * t * 1000.0) as u64);
        (
            flat(self.readings.pcie_tx_kbps)
                .unwrap_or(((2_000.0 * t + 9_000.0 * i) * 1000.0) as u64),
            flat(self.readings.pcie_rx_kbps)
                .unwrap_or(((3_000.0 * t + 24_000.0 * i) * 1000.0) as u64),
        )
    }

    /// The PCIe generation the link runs at: idle links train down to gen 1.
    pub fn pcie_generation(&self, t: f64) -> u32 {
        pinned(self.readings.pcie_generation).unwrap_or(if self.busy(t) {
            self.model.pcie.generation
        } else {
            1
        })
    }

    /// NVLink data counter of one link in KiB: (tx, rx).
    pub fn nvlink_kib(&self, link: u32, t: f64) -> (u64, u64) {
        let i = self.util_done(t);
        let w = 1.0 + (link % 4) as f64 * 0.05;
        ((i * 18_000.0 * w) as u64, (i * 17_500.0 * w) as u64)
    }
}

#[cfg(test)]
mod tests {
    use crate::fleet::Sim;

    #[test]
    fn energy_is_the_integral_of_power() {
        let s = crate::scenario::load("dgx-h100").unwrap();
        let mut sim = Sim::new(&s, 1.0);
        let g = &mut sim.gpus[2];
        let mut numeric = 0.0;
        let dt = 0.001;
        let mut t = 0.0;
        while t < 30.0 {
            numeric += g.power_mw(t + dt / 2.0) * dt;
            t += dt;
        }
        g.advance_energy(30.0);
        assert!(
            (g.power.energy_mj - numeric).abs() / numeric < 1e-4,
            "{} vs {}",
            g.power.energy_mj,
            numeric
        );
    }

    #[test]
    fn byte_counters_never_go_back_when_the_load_changes() {
        let s = crate::scenario::load("dgx-h100").unwrap();
        let mut sim = Sim::new(&s, 1.0);
        let mut last = (0, 0, 0);
        for (i, load) in [90.0, 5.0, 60.0, 0.0, 100.0, 10.0].into_iter().enumerate() {
            let t = 2.0 + i as f64 * 1.5;
            let g = &mut sim.gpus[2];
            // What a `load` fault does: settle, then change the level.
            g.advance_energy(t);
            g.load = load;
            for dt in [0.0, 0.5, 1.0, 1.49] {
                let (tx, rx) = g.pcie_bytes(t + dt);
                let (link, _) = g.nvlink_kib(0, t + dt);
                assert!(
                    tx >= last.0 && rx >= last.1 && link >= last.2,
                    "went back at t={} after load {load}: {:?} -> {:?}",
                    t + dt,
                    last,
                    (tx, rx, link)
                );
                last = (tx, rx, link);
            }
        }
        assert!(last.2 > 0, "NVLink traffic was counted");
    }

    #[test]
    fn readings_rise_and_fall_together() {
        let s = crate::scenario::load("dgx-h100").unwrap();
        let sim = Sim::new(&s, 1.0);
        let g = &sim.gpus[4];
        let samples: Vec<(f64, f64, u32, u32)> = (0..120)
            .map(|i| {
                let t = i as f64 * 0.5;
                (
                    g.util(t),
                    g.power_mw(t),
                    g.temperature(t),
                    g.clock(0, t).unwrap(),
                )
            })
            .collect();
        let (lo, hi) = samples.iter().fold((f64::MAX, f64::MIN), |(lo, hi), s| {
            (lo.min(s.0), hi.max(s.0))
        });
        assert!(
            hi - lo > 10.0,
            "utilization moves over a minute: {lo}..{hi}"
        );
        for a in &samples {
            for b in &samples {
                if a.0 > b.0 + 0.5 {
                    assert!(a.1 > b.1, "power follows utilization");
                    assert!(a.2 >= b.2, "temperature follows utilization");
                }
            }
        }
        assert!(
            samples
                .iter()
                .all(|s| s.3 > g.model.clocks.idle_graphics_mhz),
            "a busy GPU runs above idle clocks"
        );
    }
}
