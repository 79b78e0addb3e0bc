//! PCIe link generation and width, replay counter and throughput (NVML
//! reference, "Device Queries").

use super::*;

nvml_fn! {
    fn nvmlDeviceGetMaxPcieLinkGeneration(device: nvmlDevice_t, maxLinkGen: *mut c_uint) {
        nonnull(maxLinkGen)?;
        let v = with_gpu(device, |g, _| Ok(g.model.pcie.generation))?;
        out(maxLinkGen, v)
    }
}

nvml_fn! {
    fn nvmlDeviceGetGpuMaxPcieLinkGeneration(device: nvmlDevice_t, maxLinkGenDevice: *mut c_uint) {
        nonnull(maxLinkGenDevice)?;
        let v = with_gpu(device, |g, _| Ok(g.model.pcie.generation))?;
        out(maxLinkGenDevice, v)
    }
}

nvml_fn! {
    fn nvmlDeviceGetMaxPcieLinkWidth(device: nvmlDevice_t, maxLinkWidth: *mut c_uint) {
        nonnull(maxLinkWidth)?;
        let v = with_gpu(device, |g, _| Ok(g.model.pcie.width))?;
        out(maxLinkWidth, v)
    }
}

nvml_fn! {
    /// Idle links train down to gen 1 to save power, as real boards do.
    fn nvmlDeviceGetCurrPcieLinkGeneration(device: nvmlDevice_t, currLinkGen: *mut c_uint) {
        nonnull(currLinkGen)?;
        let v = with_gpu(device, |g, t| {
            if crate::fleet::unsupported(&g.readings.pcie_generation) {
                return Err(NOT_SUPPORTED);
            }
            Ok(g.pcie_generation(t))
        })?;
        out(currLinkGen, v)
    }
}

nvml_fn! {
    fn nvmlDeviceGetCurrPcieLinkWidth(device: nvmlDevice_t, currLinkWidth: *mut c_uint) {
        nonnull(currLinkWidth)?;
        let v = with_gpu(device, |g, _| Ok(g.pcie.width))?;
        out(currLinkWidth, v)
    }
}

nvml_fn! {
    fn nvmlDeviceGetPcieSpeed(device: nvmlDevice_t, pcieSpeed: *mut c_uint) {
        nonnull(pcieSpeed)?;
        let v = with_gpu(device, |g, t| {
            if crate::fleet::unsupported(&g.readings.pcie_generation) {
                return Err(NOT_SUPPORTED);
            }
            Ok([2500, 2500, 5000, 8000, 16000, 32000, 64000][g.pcie_generation(t).min(6) as usize])
        })?;
        out(pcieSpeed, v)
    }
}

nvml_fn! {
    /// KB/s over the last 20 ms (NVML reference).
    fn nvmlDeviceGetPcieThroughput(device: nvmlDevice_t, counter: nvmlPcieUtilCounter_t, value: *mut c_uint) {
        nonnull(value)?;
        let v = with_gpu(device, |g, t| {
            let (tx, rx) = g.pcie_kbps(t);
            let pin = match counter {
                0 => &g.readings.pcie_tx_kbps,
                1 => &g.readings.pcie_rx_kbps,
                _ => return Err(INVALID_ARGUMENT),
            };
            if crate::fleet::unsupported(pin) {
                return Err(NOT_SUPPORTED);
            }
            Ok(if counter == 0 { tx } else { rx })
        })?;
        out(value, v)
    }
}

nvml_fn! {
    fn nvmlDeviceGetPcieReplayCounter(device: nvmlDevice_t, value: *mut c_uint) {
        nonnull(value)?;
        let v = with_gpu(device, |g, _| g.pcie.replay.ok_or(NOT_SUPPORTED))?;
        out(value, v)
    }
}
