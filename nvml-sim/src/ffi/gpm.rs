//! GPU Performance Monitoring (NVML reference, "GPM"): Hopper and newer only.
//! A sample records when it was taken; a metric is the average activity of
//! the GPU (or MIG GPU instance) between two samples.

use super::*;
use crate::fleet::GpmSample;
use std::ffi::CStr;

nvml_fn! {
    fn nvmlGpmQueryDeviceSupport(device: nvmlDevice_t, gpmSupport: *mut nvmlGpmSupport_t) {
        nonnull(gpmSupport)?;
        if (*gpmSupport).version != NVML_GPM_SUPPORT_VERSION {
            return Err(VERSION_MISMATCH);
        }
        let v = with_dev(device, |sim, d, _| Ok(sim.gpus[d.gpu as usize].model.gpm as u32))?;
        (*gpmSupport).isSupportedDevice = v;
        Ok(())
    }
}

nvml_fn! {
    fn nvmlGpmSampleAlloc(gpmSample: *mut nvmlGpmSample_t) {
        nonnull(gpmSample)?;
        let mut st = initialized()?;
        let sim = st.sim.as_mut().ok_or(UNINITIALIZED)?;
        let id = sim.next_gpm_sample;
        sim.next_gpm_sample += 1;
        sim.gpm_samples.insert(id, GpmSample { taken: None });
        out(gpmSample, gpm_sample_handle(id))
    }
}

nvml_fn! {
    /// Works after shutdown too: nvml-wrapper frees samples in `Drop`.
    fn nvmlGpmSampleFree(gpmSample: nvmlGpmSample_t) {
        let id = decode_gpm_sample(gpmSample).ok_or(INVALID_ARGUMENT)?;
        let mut st = lock();
        let sim = st.sim.as_mut().ok_or(UNINITIALIZED)?;
        sim.gpm_samples.remove(&id).map(|_| ()).ok_or(INVALID_ARGUMENT)
    }
}

fn take(device: nvmlDevice_t, gi: Option<u32>, sample: nvmlGpmSample_t) -> R {
    let id = decode_gpm_sample(sample).ok_or(INVALID_ARGUMENT)?;
    with_dev(device, |sim, d, t| {
        if d.mig.is_some() {
            return Err(INVALID_ARGUMENT);
        }
        let g = &sim.gpus[d.gpu as usize];
        if !g.model.gpm {
            return Err(NOT_SUPPORTED);
        }
        if let Some(gi) = gi {
            if g.instance(gi).is_none() {
                return Err(INVALID_ARGUMENT);
            }
        }
        let s = sim.gpm_samples.get_mut(&id).ok_or(INVALID_ARGUMENT)?;
        s.taken = Some((d.gpu, gi, t));
        Ok(())
    })
}

nvml_fn! {
    fn nvmlGpmSampleGet(device: nvmlDevice_t, gpmSample: nvmlGpmSample_t) { take(device, None, gpmSample) }
}

nvml_fn! {
    fn nvmlGpmMigSampleGet(device: nvmlDevice_t, gpuInstanceId: c_uint, gpmSample: nvmlGpmSample_t) {
        take(device, Some(gpuInstanceId), gpmSample)
    }
}

/// (short name, long name, unit) of a metric id; static, as NVML's are.
fn metric_info(id: u32) -> Option<(&'static CStr, &'static CStr, &'static CStr)> {
    Some(match id {
        1 => (c"gr_util", c"graphics activity", c"%"),
        2 => (c"sm_util", c"SM activity", c"%"),
        3 => (c"sm_occupancy", c"SM occupancy", c"%"),
        4 => (c"integer_util", c"integer activity", c"%"),
        5 => (c"any_tensor_util", c"tensor core activity", c"%"),
        6 => (c"dfma_tensor_util", c"DFMA tensor activity", c"%"),
        7 => (c"hmma_tensor_util", c"HMMA tensor activity", c"%"),
        9 => (c"imma_tensor_util", c"IMMA tensor activity", c"%"),
        10 => (c"dram_bw_util", c"DRAM bandwidth utilization", c"%"),
        11 => (c"fp64_util", c"FP64 activity", c"%"),
        12 => (c"fp32_util", c"FP32 activity", c"%"),
        13 => (c"fp16_util", c"FP16 activity", c"%"),
        20 => (c"pcie_tx_per_sec", c"PCIe transmit bandwidth", c"MiB/sec"),
        21 => (c"pcie_rx_per_sec", c"PCIe receive bandwidth", c"MiB/sec"),
        30..=37 => (c"nvdec_util", c"NVDEC activity", c"%"),
        40..=47 => (c"nvjpg_util", c"NVJPG activity", c"%"),
        50 | 51 => (c"nvofa_util", c"NVOFA activity", c"%"),
        60 => (
            c"nvlink_total_rx_per_sec",
            c"NVLink receive bandwidth",
            c"MiB/sec",
        ),
        61 => (
            c"nvlink_total_tx_per_sec",
            c"NVLink transmit bandwidth",
            c"MiB/sec",
        ),
        166..=169 => (c"nvenc_util", c"NVENC activity", c"%"),
        62..=97 => {
            if id.is_multiple_of(2) {
                (
                    c"nvlink_rx_per_sec",
                    c"NVLink per-link receive bandwidth",
                    c"MiB/sec",
                )
            } else {
                (
                    c"nvlink_tx_per_sec",
                    c"NVLink per-link transmit bandwidth",
                    c"MiB/sec",
                )
            }
        }
        _ => return None,
    })
}

/// Metric value for an average activity `u` (percent) over the interval.
/// `engines`: the decoder, JPEG, OFA and encoder engines present (NVENC
/// ids 166-169 exist from the 12.9 header, R575: `nvenc`); `absent`: the
/// answer for ids past them.
fn metric_value(
    id: u32,
    u: f64,
    mig: bool,
    links: u32,
    engines: [u32; 4],
    nvenc: bool,
    absent: R<f64>,
) -> R<f64> {
    let share = |f: f64| Ok((u * f).clamp(0.0, 100.0));
    match id {
        1 => share(1.0),
        2 => share(0.93),
        3 => share(0.55),
        4 => share(0.12),
        5 => share(0.48),
        6 => share(0.05),
        7 => share(0.42),
        9 => share(0.03),
        10 => share(0.65),
        11 => share(0.04),
        12 => share(0.30),
        13 => share(0.22),
        30..=37 if id - 30 < engines[0] => share(0.1),
        40..=47 if id - 40 < engines[1] => share(0.05),
        50 | 51 if id - 50 < engines[2] => share(0.02),
        166..=169 if nvenc && id - 166 < engines[3] => share(0.08),
        30..=37 | 40..=47 | 50 | 51 => absent,
        166..=169 if nvenc => absent,
        // Interconnect metrics exist for whole GPUs only.
        20 | 21 | 60..=97 if mig => Err(NOT_SUPPORTED),
        20 => Ok(2.0 + u * 8.8),
        21 => Ok(3.0 + u * 23.4),
        60 | 61 => Ok(u * 17.5 * links as f64),
        62..=97 => {
            if (id - 62) / 2 < links {
                Ok(u * 17.5)
            } else {
                Err(NOT_SUPPORTED)
            }
        }
        _ => Err(NOT_SUPPORTED),
    }
}

nvml_fn! {
    /// Fills only the first `numMetrics` entries: nvml-wrapper-sys declares
    /// `metrics[210]`, older `nvml.h` headers `metrics[98]`, and a client
    /// built against those passes the shorter array.
    fn nvmlGpmMetricsGet(metricsGet: *mut nvmlGpmMetricsGet_t) {
        nonnull(metricsGet)?;
        let mg = &mut *metricsGet;
        if mg.version != NVML_GPM_METRICS_GET_VERSION {
            return Err(VERSION_MISMATCH);
        }
        let n = mg.numMetrics as usize;
        if n > mg.metrics.len() {
            return Err(INVALID_ARGUMENT);
        }
        let id1 = decode_gpm_sample(mg.sample1).ok_or(INVALID_ARGUMENT)?;
        let id2 = decode_gpm_sample(mg.sample2).ok_or(INVALID_ARGUMENT)?;
        let st = initialized()?;
        let sim = st.sim.as_ref().ok_or(UNINITIALIZED)?;
        let s1 = sim.gpm_samples.get(&id1).and_then(|s| s.taken).ok_or(INVALID_ARGUMENT)?;
        let s2 = sim.gpm_samples.get(&id2).and_then(|s| s.taken).ok_or(INVALID_ARGUMENT)?;
        if s1.0 != s2.0 || s1.1 != s2.1 {
            return Err(INVALID_ARGUMENT);
        }
        let g = &sim.gpus[s1.0 as usize];
        let (t1, t2) = if s1.2 <= s2.2 { (s1.2, s2.2) } else { (s2.2, s1.2) };
        let u = g.avg_util(s1.1, t1, t2);
        // A GPU instance has its profile's engines; a whole GPU its board's
        // (H100: 7 decoders, 7 JPEG, 1 OFA).
        let e = g.model.engines;
        let engines = match s1.1 {
            Some(gi) => g.instance(gi).map_or([7, 7, 1, 0], |i| {
                [i.profile.decoders, i.profile.jpegs, i.profile.ofas, i.profile.encoders]
            }),
            None => [e.decoders, e.jpegs, e.ofas, e.encoders],
        };
        let nvenc = crate::driver::current().branch.major() >= 575;
        let absent = if sim.gpm_absent_engines_unsupported {
            Err(NOT_SUPPORTED)
        } else {
            Ok(0.0)
        };
        for m in mg.metrics.iter_mut().take(n) {
            match metric_value(m.metricId, u, s1.1.is_some(), g.model.nvlink.links, engines, nvenc, absent) {
                Ok(v) => {
                    m.value = v;
                    m.nvmlReturn = SUCCESS;
                }
                Err(code) => {
                    m.value = 0.0;
                    m.nvmlReturn = code;
                }
            }
            match metric_info(m.metricId) {
                Some((s, l, unit)) => {
                    m.metricInfo.shortName = s.as_ptr().cast_mut();
                    m.metricInfo.longName = l.as_ptr().cast_mut();
                    m.metricInfo.unit = unit.as_ptr().cast_mut();
                }
                None => {
                    m.metricInfo.shortName = std::ptr::null_mut();
                    m.metricInfo.longName = std::ptr::null_mut();
                    m.metricInfo.unit = std::ptr::null_mut();
                }
            }
        }
        Ok(())
    }
}
