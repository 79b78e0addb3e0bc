//! A `[[gpu]]` table's pinned readings and counters (`[gpu.readings]`,
//! `[gpu.counters]`, its fabric, remapped rows and SRAM counts), each
//! checked against its board.

use super::gpu::{Counters, FabricSpec, Readings, RemapSpec, RetiredSpec, SramCounts};
use crate::model::Model;
use crate::schema::{
    CountersFile, FabricFile, FabricState, FabricStatus, MemoryLocation, OneOrMany, ReadingsFile,
    RemapFile, SramFile,
};
use crate::value::Invalid;
use crate::value::{Mib, Val};

fn percent(v: Option<Val<u32>>, what: &str) -> Result<(), Invalid> {
    match v {
        Some(Val::Is(p)) if p > 100 => Err(Invalid::from(format!(
            "{what} = {p} is outside 0..=100 percent"
        ))),
        _ => Ok(()),
    }
}

fn watts(v: Option<Val<f64>>, what: &str) -> Result<Option<Val<u32>>, Invalid> {
    match v {
        None => Ok(None),
        Some(Val::NotSupported) => Ok(Some(Val::NotSupported)),
        Some(Val::Is(w)) if (0.0..=100_000.0).contains(&w) => {
            Ok(Some(Val::Is((w * 1000.0).round() as u32)))
        }
        Some(Val::Is(w)) => Err(Invalid::from(format!(
            "{what} = {w} W is outside 0..=100000"
        ))),
    }
}

impl ReadingsFile {
    pub(super) fn resolve(self, model: &Model) -> Result<Readings, Invalid> {
        let u = self.utilization.unwrap_or_default();
        let utilization = [u.gpu, u.memory, u.encoder, u.decoder, u.jpeg, u.ofa];
        for (v, what) in utilization
            .iter()
            .zip(["gpu", "memory", "encoder", "decoder", "jpeg", "ofa"])
        {
            percent(*v, &format!("utilization.{what}"))?;
        }
        let fans_percent = self.fan_percent.map(|f| match f {
            Val::NotSupported => Val::NotSupported,
            Val::Is(OneOrMany::One(p)) => Val::Is(vec![p]),
            Val::Is(OneOrMany::Many(v)) => Val::Is(v),
        });
        if let Some(Val::Is(v)) = &fans_percent {
            if let Some(p) = v.iter().find(|p| **p > 100) {
                return Err(Invalid::from(format!("fan_percent {p} is outside 0..=100")));
            }
            if v.is_empty() || (v.len() > 1 && v.len() != model.thermal.fans as usize) {
                return Err(Invalid::from(format!(
                    "fan_percent gives {} values; {} has {} fans (give one value for all)",
                    v.len(),
                    model.name,
                    model.thermal.fans
                )));
            }
        }
        if let Some(Val::Is(p)) = self.pstate {
            if p > 15 {
                return Err(Invalid::from(format!(
                    "pstate {p} is outside 0..=15 (P0..P15)"
                )));
            }
        }
        if let Some(Val::Is(g)) = self.pcie_generation {
            if g == 0 || g > model.pcie.generation {
                return Err(Invalid::from(format!(
                    "pcie_generation {g} is outside 1..={} for {}",
                    model.pcie.generation, model.name
                )));
            }
        }
        if let Some(w) = self.pcie_width {
            if w == 0 || w > model.pcie.width {
                return Err(Invalid::from(format!(
                    "pcie_width {w} is outside 1..={} for {}",
                    model.pcie.width, model.name
                )));
            }
        }
        let total = Mib::whole(model.memory.total_mib);
        let outside = Mib {
            bytes: total.bytes.saturating_sub(model.memory.reserved_bytes),
        };
        if let Some(m) = self.memory_used_mib {
            if m > outside {
                return Err(Invalid::from(format!(
                    "memory_used_mib {m} is more than the {outside} MiB {} has outside its reserve",
                    model.name
                )));
            }
        }
        if let Some(f) = self.memory_free_mib {
            if f > total {
                return Err(Invalid::from(format!(
                    "memory_free_mib {f} is more than the {} MiB {} has",
                    model.memory.total_mib, model.name
                )));
            }
        }
        if let Some(Val::Is(p)) = self.power_smoothing_lifetime_percent {
            if !model.power_smoothing {
                return Err(Invalid::from(format!(
                    "{} has no power smoothing (power_smoothing_lifetime_percent)",
                    model.name
                )));
            }
            if !(0.0..=100.0).contains(&p) {
                return Err(Invalid::from(format!(
                    "power_smoothing_lifetime_percent {p} is outside 0..=100"
                )));
            }
        }
        if let Some(m) = self.bar1_used_mib {
            if m > Mib::whole(model.memory.bar1_mib) {
                return Err(Invalid::from(format!(
                    "bar1_used_mib {m} is more than the board's {} MiB",
                    model.memory.bar1_mib
                )));
            }
        }
        Ok(Readings {
            temperature_c: self.temperature_c,
            memory_temperature_c: self.memory_temperature_c,
            tlimit_c: self.tlimit_c,
            power_mw: watts(self.power_w, "power_w")?,
            module_power_mw: watts(self.module_power_w, "module_power_w")?,
            memory_power_mw: watts(self.memory_power_w, "memory_power_w")?,
            clocks_mhz: [
                self.graphics_clock_mhz,
                self.sm_clock_mhz,
                self.memory_clock_mhz,
                self.video_clock_mhz,
            ],
            pstate: self.pstate,
            fans_percent,
            utilization,
            pcie_tx_kbps: self.pcie_tx_kbps,
            pcie_rx_kbps: self.pcie_rx_kbps,
            pcie_generation: self.pcie_generation,
            pcie_width: self.pcie_width,
            memory_used: self.memory_used_mib.map(|m| m.bytes),
            memory_free: self.memory_free_mib.map(|m| m.bytes),
            bar1_used: self.bar1_used_mib.map(|m| m.bytes),
            power_smoothing_lifetime_percent: self.power_smoothing_lifetime_percent,
        })
    }
}

impl CountersFile {
    pub(super) fn resolve(self, model: &Model) -> Result<Counters, Invalid> {
        let mask = |l: &[MemoryLocation]| l.iter().fold(0u8, |m, loc| m | 1 << (*loc as u8));
        let ecc_locations = self
            .ecc
            .as_ref()
            .and_then(|e| e.locations.as_ref())
            .map(|l| [mask(&l.corrected), mask(&l.uncorrected)]);
        let ecc = self.ecc.map(|e| {
            let mut out = [[[0u64; 8]; 2]; 2];
            for (scope, raw) in [e.volatile, e.aggregate].into_iter().enumerate() {
                let raw = raw.unwrap_or_default();
                for (et, locs) in [raw.corrected, raw.uncorrected].into_iter().enumerate() {
                    out[et][scope] = locs.unwrap_or_default().array();
                }
            }
            out
        });
        if let Some(e) = &ecc {
            for by_scope in e {
                if let Some(l) = (0..8).find(|&l| by_scope[1][l] < by_scope[0][l]) {
                    return Err(Invalid::from(format!(
                        "ECC counters: an aggregate count is never below the volatile one (location {l})"
                    )));
                }
            }
        }
        if let Some(Val::Is(pages)) = &self.retired_pages {
            if !model.ecc.page_retirement {
                return Err(Invalid::from(format!(
                    "{} remaps rows, it does not retire pages (retired_pages = \"N/A\")",
                    model.name
                )));
            }
            if pages.len() > 4096 {
                return Err(Invalid::from(format!(
                    "{} retired pages: at most 4096",
                    pages.len()
                )));
            }
        }
        let remapped_rows = self.remapped_rows.map(|r| match r {
            Val::NotSupported => Val::NotSupported,
            Val::Is(r) => Val::Is(r.resolve()),
        });
        if let Some(Val::Is(r)) = &remapped_rows {
            if !model.ecc.row_remapping {
                return Err(Invalid::from(format!(
                    "{} does not remap rows (remapped_rows = \"N/A\")",
                    model.name
                )));
            }
            if let Some(h) = r.histogram {
                if h.iter().map(|&v| u64::from(v)).sum::<u64>() > 1 << 20 {
                    return Err("remapped_rows.histogram: more than 2^20 banks".into());
                }
            }
        }
        let d = self.clock_event_durations_us.unwrap_or_default();
        let durations = [
            d.sw_power_cap,
            d.sync_boost,
            d.sw_thermal_slowdown,
            d.hw_thermal_slowdown,
            d.hw_power_brake_slowdown,
        ]
        .map(Option::unwrap_or_default);
        // Nanoseconds must fit NVML's u64 counters.
        if durations.iter().any(|us| *us > u64::MAX / 1000 / 4) {
            return Err("clock_event_durations_us: too large".into());
        }
        Ok(Counters {
            ecc,
            ecc_locations,
            supported_clock_event_reasons: self.supported_clock_event_reasons,
            sram: self.sram.map(SramFile::resolve),
            retired_pages: self.retired_pages.map(|p| match p {
                Val::NotSupported => Val::NotSupported,
                Val::Is(pages) => Val::Is(
                    pages
                        .into_iter()
                        .map(|p| RetiredSpec {
                            address: p.address,
                            cause: p.cause,
                            timestamp_us: p.timestamp_us,
                        })
                        .collect(),
                ),
            }),
            retired_pending: self.retired_pending.unwrap_or(false),
            remapped_rows,
            clock_event_reasons: self.clock_event_reasons,
            clock_event_durations_us: durations,
            pcie_replays: self.pcie_replays,
            recovery_action: self.recovery_action.map(|a| match a {
                Val::NotSupported => Val::NotSupported,
                Val::Is(a) => Val::Is(a as u32),
            }),
        })
    }
}

impl FabricFile {
    pub(super) fn resolve(&self, model: &Model) -> Result<FabricSpec, Invalid> {
        if !model.nvswitch_fabric() {
            return Err(Invalid::from(format!(
                "{} is not on an NVSwitch fabric (fabric)",
                model.name
            )));
        }
        let mut health = model.nvlink.fabric_health;
        if let Some(h) = &self.health {
            h.apply(&mut health);
        }
        let cluster_uuid = match &self.cluster_uuid {
            None => [0; 16],
            Some(text) => {
                let hex: String = text.chars().filter(|c| *c != '-').collect();
                let bad = || {
                    format!("fabric.cluster_uuid `{text}` is not a UUID (8-4-4-4-12 hex digits)")
                };
                if hex.len() != 32 || text.len() != 36 {
                    return Err(Invalid::from(bad()));
                }
                let mut out = [0u8; 16];
                for (i, b) in out.iter_mut().enumerate() {
                    *b = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).map_err(|_| bad())?;
                }
                out
            }
        };
        Ok(FabricSpec {
            state: self.state.map(|s| match s {
                FabricState::NotStarted => 1,
                FabricState::InProgress => 2,
                FabricState::Completed => 3,
            }),
            status: match self.status {
                None | Some(FabricStatus::Success) => 0,
                Some(FabricStatus::Failure) => 999,
            },
            clique_id: self.clique_id.unwrap_or(0),
            cluster_uuid,
            health,
        })
    }
}

impl RemapFile {
    /// Absent keys: none remapped, nothing pending, every bank at max.
    pub(super) fn resolve(self) -> RemapSpec {
        RemapSpec {
            correctable: self.correctable.unwrap_or(0),
            uncorrectable: self.uncorrectable.unwrap_or(0),
            pending: self.pending.unwrap_or(false),
            failure: self.failure.unwrap_or(false),
            histogram: self
                .histogram
                .map(|h| [h.max, h.high, h.partial, h.low, h.none]),
        }
    }
}

impl SramFile {
    /// Absent counts are 0; the threshold not exceeded.
    pub(super) fn resolve(self) -> SramCounts {
        let n = |v: Option<u64>| v.unwrap_or(0);
        SramCounts {
            volatile_corrected: n(self.volatile_corrected),
            volatile_uncorrected_parity: n(self.volatile_uncorrected_parity),
            volatile_uncorrected_secded: n(self.volatile_uncorrected_secded),
            aggregate_corrected: n(self.aggregate_corrected),
            aggregate_uncorrected_parity: n(self.aggregate_uncorrected_parity),
            aggregate_uncorrected_secded: n(self.aggregate_uncorrected_secded),
            l2: n(self.l2),
            sm: n(self.sm),
            microcontroller: n(self.microcontroller),
            pcie: n(self.pcie),
            other: n(self.other),
            threshold_exceeded: self.threshold_exceeded.unwrap_or(false),
        }
    }
}
