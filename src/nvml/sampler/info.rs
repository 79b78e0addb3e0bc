//! Identity: name, brand, architecture, PCI bus id, serial, VBIOS, compute
//! capability and board part number (`nvidia_gpu_info`), and the minor
//! number of the GPU's device node (how CDI specs of Kubernetes DRA claims
//! name it, src/kubernetes/). Read once per GPU and per NVML
//! initialization, not every poll.

use nvml_wrapper::enum_wrappers::device::Brand;
use nvml_wrapper::enums::device::DeviceArchitecture;

use super::Gpu;
use crate::snapshot::GpuIdentity;

/// The UUID (when it could be read), the identity strings, and the
/// architecture (which names ECC locations).
pub fn sample(g: &mut Gpu<'_, '_>) -> (Option<String>, GpuIdentity, Option<DeviceArchitecture>) {
    let fam = "info";
    let (d, c) = (g.device, &mut *g.calls);
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
    };
    (uuid, identity, arch)
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
