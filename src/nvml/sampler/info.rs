//! Identity: name, brand, architecture, PCI bus id, serial, VBIOS, compute
//! capability and board part number (`nvidia_gpu_info`), and the minor
//! number of the GPU's device node (how CDI specs of Kubernetes DRA claims
//! name it, src/kubernetes/), and the GPU's place in its rack
//! (`nvidia_gpu_platform_info`). Read once per GPU and per NVML
//! initialization, not every poll: none of it changes while the driver is
//! loaded.

use nvml_wrapper::enum_wrappers::device::Brand;
use nvml_wrapper::enums::device::DeviceArchitecture;

use super::super::raw::{self, RawPlatform};
use super::Gpu;
use crate::snapshot::{GpuIdentity, Platform};

/// The UUID (when it could be read), the identity strings, and the
/// architecture (which names ECC locations).
pub fn sample(g: &mut Gpu<'_, '_>) -> (Option<String>, GpuIdentity, Option<DeviceArchitecture>) {
    let fam = "info";
    let (d, c, nvml, h) = (g.device, &mut *g.calls, g.nvml, g.handle);
    let uuid = c.run(fam, || d.uuid()).value();
    let name = c.run(fam, || d.name()).value();
    let brand = c.run(fam, || d.brand()).value().map(brand_name);
    let arch = c.run(fam, || d.architecture()).value();
    let pci_bus_id = c.run(fam, || d.pci_info()).value().map(|p| p.bus_id);
    let serial = c.run(fam, || d.serial()).value();
    let vbios_version = c.run(fam, || d.vbios_version()).value();
    let compute_capability = c
        .run(fam, || d.cuda_compute_capability())
        .value()
        .map(|cc| format!("{}.{}", cc.major, cc.minor));
    let board_part_number = c.run(fam, || d.board_part_number()).value();
    // Unprivileged callers get it too: the real H200 on R580 answered it as
    // uid 65534, in 9 us (tests/device/h200-580.159.04/capture-unprivileged.toml,
    // nvml-latency.tsv).
    let minor_number = c.run(fam, || d.minor_number()).value();
    // R570+ (absent before), answered on NVL72 trays and HGX B200;
    // NOT_SUPPORTED on Hopper and older (tests/corpus/k8s-test-infra).
    let platform = c
        .run(fam, || raw::platform_info(nvml, h))
        .value()
        .map(|p| platform(&p));
    let identity = GpuIdentity {
        name,
        brand,
        architecture: arch.as_ref().map(ToString::to_string),
        pci_bus_id,
        serial,
        vbios_version,
        compute_capability,
        board_part_number,
        minor_number,
        platform,
    };
    (uuid, identity, arch)
}

/// The slot or tray byte nvidia-smi prints as N/A: it does so on the HGX
/// B200 (tests/corpus/k8s-test-infra/qx-b200.xml) but prints 0 on an
/// RTX 5090 and an RTX PRO 6000 (tests/corpus/gls, telegraf), so N/A is
/// not 0. nvml.h does not name it; **not verified**: 0xFF, the all-ones
/// "invalid" of NVML's other unsigned char fields.
const NO_SLOT: u8 = 0xFF;

/// The struct as labels. The serial is NUL-terminated within its 16
/// bytes (13 used on Blackwell, nvml.h); empty on a GPU in no chassis
/// (HGX B200, RTX 5090), and then left out.
pub fn platform(p: &RawPlatform) -> Platform {
    let end = p.chassis_serial.iter().position(|&b| b == 0).unwrap_or(16);
    let serial = String::from_utf8_lossy(&p.chassis_serial[..end])
        .trim()
        .to_string();
    Platform {
        chassis_serial: (!serial.is_empty()).then_some(serial),
        slot: (p.slot != NO_SLOT).then_some(p.slot),
        tray: (p.tray != NO_SLOT).then_some(p.tray),
        host_id: p.host_id,
        module_id: p.module_id,
    }
}

fn brand_name(b: Brand) -> String {
    let s = match b {
        Brand::Unknown => "Unknown",
        Brand::Quadro => "Quadro",
        Brand::Tesla => "Tesla",
        Brand::NVS => "NVS",
        Brand::GRID => "GRID",
        Brand::GeForce => "GeForce",
        Brand::Titan => "Titan",
        Brand::VApps => "NVIDIA Virtual Applications",
        Brand::VPC => "NVIDIA Virtual PC",
        Brand::VCS => "NVIDIA Virtual Compute Server",
        Brand::VWS => "NVIDIA RTX Virtual Workstation",
        Brand::CloudGaming => "NVIDIA Cloud Gaming",
        // As nvidia-smi prints them (docs/nvidia-smi.md, product_brand).
        Brand::QuadroRTX => "Quadro RTX",
        Brand::NvidiaRTX => "NVIDIA RTX",
        Brand::Nvidia => "NVIDIA",
        Brand::GeForceRTX => "GeForce RTX",
        Brand::TitanRTX => "Titan RTX",
        Brand::VGaming => "NVIDIA Cloud Gaming",
    };
    s.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(serial: &[u8], slot: u8) -> RawPlatform {
        let mut chassis_serial = [0u8; 16];
        chassis_serial[..serial.len()].copy_from_slice(serial);
        RawPlatform {
            chassis_serial,
            slot,
            tray: slot,
            host_id: 1,
            module_id: 2,
        }
    }

    #[test]
    fn a_tray_in_a_chassis_names_serial_slot_and_tray() {
        let p = platform(&raw(b"1820000000001", 14));
        assert_eq!(p.chassis_serial.as_deref(), Some("1820000000001"));
        assert_eq!(
            (p.slot, p.tray, p.host_id, p.module_id),
            (Some(14), Some(14), 1, 2)
        );
        // All 16 bytes used, no NUL: read to the end, not past it.
        let full = platform(&raw(b"ABCDEFGHIJKLMNOP", 14));
        assert_eq!(full.chassis_serial.as_deref(), Some("ABCDEFGHIJKLMNOP"));
    }

    #[test]
    fn a_gpu_in_no_chassis_has_no_serial_and_slot_0_is_a_slot() {
        // HGX B200: empty serial, slot and tray printed N/A.
        let p = platform(&raw(b"", NO_SLOT));
        assert_eq!((p.chassis_serial, p.slot, p.tray), (None, None, None));
        assert_eq!((p.host_id, p.module_id), (1, 2));
        // RTX 5090: empty serial, slot and tray printed 0.
        let p = platform(&raw(b"", 0));
        assert_eq!((p.chassis_serial, p.slot, p.tray), (None, Some(0), Some(0)));
    }
}
