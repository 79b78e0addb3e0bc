//! Identity: which GPUs, which driver. Always on, and kept for lost or hung
//! GPUs so that their other series can still be joined to a name.

use crate::metric::{Collector, Kind, Metric, SampleSink, Scope};
use crate::snapshot::Health;

pub static COLLECTOR: Collector = Collector {
    family: None,
    metrics: &[
        Metric {
            name: "nvidia_gpu_info",
            help: "GPU identity; always 1. Labels NVML cannot report are left out.",
            kind: Kind::Gauge,
            collect: gpu_info,
        },
        Metric {
            name: "nvidia_gpu_platform_info",
            help: "Where the GPU sits in its rack (NVL72): chassis serial number, chassis slot, compute tray, host and module id; always 1. Absent where the driver does not say (before R570, Hopper and older).",
            kind: Kind::Gauge,
            collect: platform_info,
        },
        Metric {
            name: "nvidia_gpu_driver_info",
            help: "Driver, NVML and CUDA driver versions; always 1.",
            kind: Kind::Gauge,
            collect: driver_info,
        },
        Metric {
            name: "nvidia_gpu_up",
            help: "1 if the GPU's last sample completed, 0 while it is lost, hung, failing or not yet sampled.",
            kind: Kind::Gauge,
            collect: up,
        },
    ],
};

fn gpu_info<'a>(scope: &Scope<'a>, out: &mut SampleSink<'a>) {
    // Nothing can be read of a GPU NVML will not open, not even its UUID;
    // nor yet of one not sampled since start.
    for g in scope
        .gpus()
        .filter(|g| g.health != Health::Denied && !never_sampled(g))
    {
        let id = &g.identity;
        out.gpu(g)
            .label_opt("name", id.name.as_ref())
            .label_opt("brand", id.brand.as_ref())
            .label_opt("architecture", id.architecture.as_ref())
            .label_opt("pci_bus_id", id.pci_bus_id.as_ref())
            .label_opt("serial", id.serial.as_ref())
            .label_opt("vbios_version", id.vbios_version.as_ref())
            .label_opt("compute_capability", id.compute_capability.as_ref())
            .label_opt("board_part_number", id.board_part_number.as_ref())
            .set(1u64);
    }
}

/// One series per GPU that answered `nvmlDeviceGetPlatformInfo`, read
/// once at start (src/nvml/sampler/info.rs). The chassis serial names the
/// rack, the failure domain of an NVL72 (issue 49); the peer type byte is
/// left out until nvml.h names its values.
fn platform_info<'a>(scope: &Scope<'a>, out: &mut SampleSink<'a>) {
    for g in scope.gpus().filter(|g| g.health != Health::Denied) {
        if let Some(p) = &g.identity.platform {
            out.gpu(g)
                .label_opt("chassis_serial", p.chassis_serial.as_ref())
                .label_opt("slot", p.slot.map(u32::from))
                .label_opt("tray", p.tray.map(u32::from))
                .label("host_id", u32::from(p.host_id))
                .label("module_id", u32::from(p.module_id))
                .set(1u64);
        }
    }
}

fn driver_info<'a>(scope: &Scope<'a>, out: &mut SampleSink<'a>) {
    if let Some(d) = &scope.snapshot.driver {
        out.sample()
            .label("driver_version", &d.driver_version)
            .label("nvml_version", &d.nvml_version)
            .label_opt("cuda_driver_version", d.cuda_driver_version.as_ref())
            .set(1u64);
    }
}

fn up<'a>(scope: &Scope<'a>, out: &mut SampleSink<'a>) {
    // A GPU this process may not open is not down: it has no `up` series
    // (so "GPU lost" cannot page for a permission setting), and
    // nvml_exporter_gpu_access_denied says what it is. One not sampled
    // since start is not down either: no series until its first sample
    // ends or its call is stuck past the deadline (then hung, 0).
    for g in scope
        .gpus()
        .filter(|g| g.health != Health::Denied && !never_sampled(g))
    {
        out.gpu(g).set(g.health.is_up());
    }
}

/// Pending and no sample of it ever completed: the first snapshots after
/// start (issue 51: `nvidia_gpu_up 0` for every GPU that was only
/// starting; its UUID may be known before its first sample ends). A GPU
/// pending again after NVML came back has completed one and keeps its
/// `up` series (0), so it does not disappear.
fn never_sampled(g: &crate::snapshot::GpuState) -> bool {
    g.health == Health::Pending && g.last_sample.is_none()
}
