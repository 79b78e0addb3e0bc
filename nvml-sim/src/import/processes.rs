//! Processes (`ffi/processes.rs`): each with its pid, name, memory and
//! kind, and on MIG GPUs its GPU and compute instance.

use super::out::Out;
use super::read::{fail, is_na, number, Gpu, Printed};
use super::ParseError;
use crate::fault::ProcKind;
use crate::schema::ProcEntry;
use crate::value::Val;

/// Every process call, which a list printed as N/A answers for.
const CALLS: [&str; 8] = [
    "nvmlDeviceGetComputeRunningProcesses",
    "nvmlDeviceGetComputeRunningProcesses_v2",
    "nvmlDeviceGetComputeRunningProcesses_v3",
    "nvmlDeviceGetGraphicsRunningProcesses",
    "nvmlDeviceGetGraphicsRunningProcesses_v2",
    "nvmlDeviceGetGraphicsRunningProcesses_v3",
    "nvmlDeviceGetMPSComputeRunningProcesses_v3",
    "nvmlDeviceGetRunningProcessDetailList",
];

pub fn list(g: &mut Gpu, out: &mut Out) -> Result<(), ParseError> {
    let Some(list) = g.node.child("processes") else {
        return Ok(());
    };
    if list.children.is_empty() && list.text.trim() == "N/A" {
        // No process list from this driver (GT 730 on R440).
        out.not_supported(&CALLS);
    }
    let mig_on = g.flag(&["mig_mode/current_mig"])? == Some(Printed::Bool(true));
    let mut procs = Vec::new();
    for p in list.children_named("process_info") {
        let Some(pid) = p.child("pid").and_then(|n| number(&n.text)) else {
            continue;
        };
        let pid_node = p.child("pid").expect("read above");
        let pid: u32 = u32::try_from(pid as i64).map_err(|_| {
            fail(
                pid_node,
                format!("pid `{}` is not a process id", pid_node.text),
            )
        })?;
        let name = p.child("process_name").map_or("", |n| n.text.trim());
        let memory = match p.child("used_memory") {
            Some(m) if !is_na(&m.text) => {
                let v = number(&m.text)
                    .ok_or_else(|| fail(m, format!("`{}` is not a memory size", m.text)))?;
                Val::Is(
                    u64::try_from(v as i64)
                        .map_err(|_| fail(m, format!("`{}` is not a memory size", m.text)))?,
                )
            }
            _ => Val::NotSupported,
        };
        let kind = match p.child("type").map(|t| t.text.trim()) {
            Some("G") => ProcKind::Graphics,
            Some("C+G") => ProcKind::ComputeGraphics,
            _ => ProcKind::Compute,
        };
        let name = if name.is_empty() { "?" } else { name };
        let mut e = ProcEntry::listed(pid, name.into(), memory, kind);
        if mig_on {
            let gi = p.child("gpu_instance_id").and_then(|n| number(&n.text));
            let ci = p.child("compute_instance_id").and_then(|n| number(&n.text));
            let Some(gi) = gi else {
                g.note(
                    p.line,
                    format!("process {pid} on a MIG GPU names no GPU instance: left out"),
                );
                continue;
            };
            e.gpu_instance = Some(gi as u32);
            e.compute_instance = Some(ci.unwrap_or(0.0) as u32);
        }
        procs.push(e);
    }
    if !procs.is_empty() {
        out.gpu.processes = Some(procs);
    }
    Ok(())
}
