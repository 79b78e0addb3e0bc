//! Engine utilization: gpu, memory, encoder, decoder, JPEG, OFA
//! (`nvidia_gpu_utilization_ratio`). Only the rates are asked on a
//! MIG-enabled GPU, where NVML does not support them: whether they answer
//! tells the MIG mode's slow cadence that the mode flipped (`mig.rs`).

use nvml_wrapper::struct_wrappers::device::Utilization;

use super::super::calls::Got;
use super::super::{raw, units::percent_to_ratio};
use super::Gpu;
use crate::family::Family;
use crate::snapshot::{Engine, GpuReadings};

/// The GPU and memory utilization rates (one call, 2 us on the H200),
/// counted under `family`.
pub fn rates(g: &mut Gpu<'_, '_>, family: &'static str) -> Got<Utilization> {
    let d = g.device;
    g.calls.run(family, || d.utilization_rates())
}

/// `rates`: the poll's answer of [`rates`].
pub fn sample(g: &mut Gpu<'_, '_>, rates: Got<Utilization>, r: &mut GpuReadings) {
    let fam = Family::Utilization.name();
    let (nvml, h, d, c) = (g.nvml, g.handle, g.device, &mut *g.calls);
    let mut push = |engine, percent: u32| {
        r.utilization
            .push((engine, percent_to_ratio(f64::from(percent))));
    };
    if let Some(u) = rates.value() {
        push(Engine::Gpu, u.gpu);
        push(Engine::Memory, u.memory);
    }
    if let Some(u) = c.run(fam, || d.encoder_utilization()).value() {
        push(Engine::Encoder, u.utilization);
    }
    if let Some(u) = c.run(fam, || d.decoder_utilization()).value() {
        push(Engine::Decoder, u.utilization);
    }
    if let Some(u) = c.run(fam, || raw::jpg_utilization(nvml, h)).value() {
        push(Engine::Jpeg, u);
    }
    if let Some(u) = c.run(fam, || raw::ofa_utilization(nvml, h)).value() {
        push(Engine::Ofa, u);
    }
}
