//! Modes and settings (`ffi/mode.rs`): persistence, display, compute
//! mode, virtualization mode and the Windows driver model.

use super::out::Out;
use super::read::{fail, Got, Gpu, Printed};
use super::ParseError;
use crate::schema::{ComputeMode, DriverModel, VirtualizationMode};
use crate::value::Val;

pub fn settings(g: &Gpu, out: &mut Out) -> Result<(), ParseError> {
    out.gpu.persistence = g.flag_val(&["persistence_mode"])?;
    let display_active = g.flag(&["display_active"])?;
    let display_mode = g.flag(&["display_mode"])?;
    if display_active == Some(Printed::Bool(true)) || display_mode == Some(Printed::Bool(true)) {
        out.board.display = Some(true);
    }
    out.gpu.display = g.flag_val(&["display_active"])?;
    out.gpu.display_mode = g.flag_val(&["display_mode"])?;
    out.gpu.compute_mode = match g.at(&["compute_mode"]) {
        Got::Absent => None,
        Got::Na => Some(Val::NotSupported),
        Got::Is(n) => Some(Val::Is(match n.text.trim() {
            "Default" => ComputeMode::Default,
            "Exclusive_Thread" | "Exclusive Thread" => ComputeMode::ExclusiveThread,
            "Prohibited" => ComputeMode::Prohibited,
            "Exclusive_Process" | "Exclusive Process" => ComputeMode::ExclusiveProcess,
            t => return Err(fail(n, format!("unknown compute mode `{t}`"))),
        })),
    };
    let virt = "gpu_virtualization_mode/virtualization_mode";
    match g.at(&[virt]) {
        Got::Is(n) => {
            out.gpu.virtualization_mode = match n.text.trim() {
                "None" => None,
                "Pass-Through" => Some(VirtualizationMode::PassThrough),
                "VGPU" => Some(VirtualizationMode::Vgpu),
                "Host VGPU" | "Host_VGPU" => Some(VirtualizationMode::HostVgpu),
                "Host VSGA" | "Host_VSGA" => Some(VirtualizationMode::HostVsga),
                t => return Err(fail(n, format!("unknown virtualization mode `{t}`"))),
            }
            .map(Val::Is);
        }
        Got::Na => {
            // "None" reads as N/A above; a real N/A is rare.
            if g.first(&[virt]).is_some_and(|n| n.text.trim() != "None") {
                out.gpu.virtualization_mode = Some(Val::NotSupported);
            }
        }
        Got::Absent => {}
    }
    for (pending, path) in [
        (false, "driver_model/current_dm"),
        (true, "driver_model/pending_dm"),
    ] {
        if let Some(t) = g.text(&[path]) {
            let m = match t.trim() {
                "WDDM" => DriverModel::Wddm,
                "TCC" | "WDM" => DriverModel::Tcc,
                "MCDM" => DriverModel::Mcdm,
                _ => {
                    let n = g.first(&[path]).expect("read above");
                    return Err(fail(n, format!("unknown driver model `{t}`")));
                }
            };
            if pending {
                out.gpu.driver_model_pending = Some(m);
            } else {
                out.gpu.driver_model = Some(m);
            }
        }
    }
    Ok(())
}
