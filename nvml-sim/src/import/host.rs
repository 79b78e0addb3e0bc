//! The host: a capture's `<nvidia_smi_log>` written as the scenario that
//! replays it, its driver and CUDA version, its GPUs (`gpu.rs`) and one
//! board per distinct description; and the notes the import makes.

use super::gpu::read_gpu;
use super::read::{fail, is_na, number, slug};
use super::{Capture, Format, Node, Note, ParseError};
use crate::schema::{at, CallErrors, GpuFile, ScenarioFile, MAX_GPUS};
use crate::value::NvmlErrorCode;

/// The scenario that replays `root` (an `nvidia_smi_log`), with the notes
/// the import makes.
pub fn to_scenario(root: &Node, name: &str, format: Format) -> Result<Capture, ParseError> {
    let mut notes = Vec::new();
    let gpus: Vec<&Node> = root.children_named("gpu").collect();
    if gpus.is_empty() {
        return Err(fail(root, "the capture has no <gpu>"));
    }
    // Refused before each GPU is read (and its board looked up), as the
    // scenario reader would refuse the result.
    if let Some(g) = gpus.get(MAX_GPUS) {
        return Err(fail(
            g,
            format!("the capture holds more than {MAX_GPUS} <gpu>, more than any node"),
        ));
    }
    let attached = root
        .child("attached_gpus")
        .and_then(|n| number(&n.text))
        .map(|v| v as usize);
    if let Some(a) = attached {
        if a != gpus.len() {
            notes.push(Note {
                line: root.child("attached_gpus").map_or(root.line, |n| n.line),
                message: format!(
                    "attached_gpus says {a}, the capture holds {} <gpu>: the fleet has the {} it holds (an excerpt?)",
                    gpus.len(),
                    gpus.len()
                ),
            });
        }
    }
    let mut doc = ScenarioFile {
        name: Some(name.into()),
        ..ScenarioFile::default()
    };
    let mut description = format!(
        "imported from an `nvidia-smi -q{}` capture",
        if format == Format::Xml { " -x" } else { "" }
    );
    if let Some(ts) = root
        .child("timestamp")
        .map(|n| n.text.trim())
        .filter(|t| !t.is_empty())
    {
        description.push_str(&format!(" taken {ts}"));
    }
    doc.description = Some(description);
    // R610 prints `610.57.04 [Deprecated; ... Use KMD Version instead]`.
    let driver = root
        .child("driver_version")
        .and_then(|n| n.text.split_whitespace().next())
        .map(str::to_string);
    if let Some(d) = driver.filter(|d| !is_na(d)) {
        if crate::personality::Personality::parse(&d).is_ok() {
            doc.driver = Some(at(d));
        } else {
            let n = root.child("driver_version").expect("read above");
            notes.push(Note {
                line: n.line,
                message: format!(
                    "driver version `{d}` is not one the simulator can claim: it claims its default"
                ),
            });
        }
    }
    // nvidia-smi prints "Not Found" where NVML found no CUDA driver.
    if let Some(c) = root.child("cuda_version").filter(|c| is_na(&c.text)) {
        let code = if c.text.trim() == "Not Found" {
            NvmlErrorCode::NOT_FOUND
        } else {
            NvmlErrorCode::NOT_SUPPORTED
        };
        let mut errors = CallErrors::default();
        for call in [
            "nvmlSystemGetCudaDriverVersion",
            "nvmlSystemGetCudaDriverVersion_v2",
        ] {
            errors.insert(call, code);
        }
        doc.errors = Some(at(errors));
    }
    for (i, node) in gpus.iter().enumerate() {
        let mut read = read_gpu(node, i, &mut notes)?;
        read.board.base = read.base.map(str::to_string);
        let stem = format!(
            "{}-captured",
            read.base.map_or_else(
                || slug(read.board.name.as_deref().unwrap_or("gpu")),
                str::to_string
            )
        );
        // One board per distinct description.
        let key = match doc.board.iter().find(|(_, b)| *b.get_ref() == read.board) {
            Some((k, _)) => k.clone(),
            None => {
                let mut key = stem.clone();
                let mut n = 2;
                while doc.board.contains_key(&key) {
                    key = format!("{stem}-{n}");
                    n += 1;
                }
                doc.board.insert(key.clone(), at(read.board));
                key
            }
        };
        doc.gpu.push(at(GpuFile {
            model: Some(at(key)),
            ..read.gpu
        }));
    }
    Ok(Capture {
        format,
        file: doc,
        notes,
        gpu_lines: gpus.iter().map(|g| g.line).collect(),
        root_line: root.line,
    })
}
