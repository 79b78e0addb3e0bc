//! Identity (`ffi/info.rs`): the board's name, brand, architecture, PCI
//! ids, part number, VBIOS and inforom; the GPU's UUID, serial, PCI bus id
//! and minor number.

use super::out::{Facts, Out};
use super::read::{hex, Gpu, Printed};
use super::ParseError;
use crate::model::{BoardFile, Brand, InforomSection};
use crate::schema::at;
use crate::value::Val;

/// `NVML_BRAND_*`, by nvidia-smi's wording.
fn brand(text: &str) -> Brand {
    match text.trim() {
        t if t.eq_ignore_ascii_case("GRID") => Brand::Grid,
        "GeForce" => Brand::Geforce,
        "Quadro" => Brand::Quadro,
        "Tesla" => Brand::Tesla,
        "NVS" => Brand::Nvs,
        "Titan" | "TITAN" => Brand::Titan,
        "NVIDIA Virtual Applications" => Brand::NvidiaVapps,
        "NVIDIA Virtual PC" => Brand::NvidiaVpc,
        "NVIDIA Virtual Compute Server" => Brand::NvidiaVcs,
        "NVIDIA RTX Virtual Workstation" => Brand::NvidiaVws,
        "NVIDIA Cloud Gaming" => Brand::NvidiaCloudGaming,
        "Quadro RTX" => Brand::QuadroRtx,
        "NVIDIA RTX" => Brand::NvidiaRtx,
        "NVIDIA" => Brand::Nvidia,
        "GeForce RTX" => Brand::GeforceRtx,
        "Titan RTX" | "TITAN RTX" => Brand::TitanRtx,
        _ => Brand::Unknown,
    }
}

/// The board's identity: what the capture prints over its base (a board
/// without one is described whole).
pub fn board(g: &Gpu, facts: &Facts, device_id: Option<u32>, board: &mut BoardFile) {
    let name = g.text(&["product_name"]).unwrap_or_default().trim();
    board.name = Some(name.into());
    if facts.base.is_none() || g.text(&["product_architecture"]).is_some() {
        board.architecture = Some(facts.arch);
    }
    if let Some(b) = g.text(&["product_brand"]) {
        board.brand = Some(brand(b));
    } else if facts.base.is_none() {
        board.brand = Some(Brand::Unknown);
    }
    board.pci_device_id = device_id;
    board.pci_subsystem_id = g.text(&["pci/pci_sub_system_id"]).and_then(hex);
    board.board_part_number = g.text_or_na(&["board_part_number"]);
    board.vbios_version = g.text_or_na(&["vbios_version"]);
    let inforom = InforomSection {
        image: g.text_or_na(&["inforom_version/img_version"]),
        oem: g.text_or_na(&["inforom_version/oem_object"]),
        ecc: g.text_or_na(&["inforom_version/ecc_object"]),
        power: g.text_or_na(&["inforom_version/pwr_object"]),
        den: None,
    };
    if [&inforom.image, &inforom.oem, &inforom.ecc, &inforom.power]
        .iter()
        .any(|v| v.is_some())
    {
        board.inforom = Some(inforom);
    }
}

/// The GPU's identifiers; one that is not an identifier NVML could give
/// is noted and left to be derived.
pub fn gpu(g: &mut Gpu, out: &mut Out) -> Result<(), ParseError> {
    if let Some(u) = g.text(&["uuid"]) {
        if u.starts_with("GPU-") && u.len() <= 80 {
            out.gpu.uuid = Some(at(u.into()));
        } else {
            let line = g.line(&["uuid"]);
            g.note(
                line,
                format!("uuid `{u}` is not a GPU- UUID: a derived one is used"),
            );
        }
    }
    out.gpu.serial = g.text_or_na(&["serial"]).map(at);
    let bus = g
        .text(&["pci/pci_bus_id"])
        .map(str::to_string)
        .or_else(|| g.node.attr("id").map(str::to_string));
    if let Some(b) = bus {
        if crate::identity::PciAddr::parse(&b).is_some() {
            out.gpu.pci_bus_id = Some(at(b));
        } else {
            let line = g.node.line;
            g.note(
                line,
                format!(
                    "PCI bus id `{b}` is not DOMAIN:BUS:DEVICE.FUNCTION: a derived one is used"
                ),
            );
        }
    }
    out.gpu.minor_number = match g.count(&["minor_number"])? {
        None => None,
        Some(p) => Some(match p.num() {
            Some(v) => Val::Is(g.fits(&["minor_number"], v)?),
            None => Val::NotSupported,
        }),
    };
    Ok(())
}

/// `<platformInfo>` (`nvmlDeviceGetPlatformInfo`, R570+) and the module id
/// (`nvmlDeviceGetModuleId`, in `<platformInfo>` from DTD v13, before that
/// `<gpu_module_id>`). nvidia-smi prints every row N/A where the call
/// answers NOT_SUPPORTED (Hopper and older: qx-h100.xml), so a capture
/// with no row but the module id gives no `platform`. A row printed N/A
/// beside others that are given (the HGX B200's slot and tray) is left
/// out, answering the N/A byte (`ffi/info.rs`). The peer type is printed by name ("Switch
/// Connected") and nvml.h does not say which byte each name is, so it is
/// not replayed (0).
pub fn platform(g: &Gpu, out: &mut Out) -> Result<(), ParseError> {
    const MODULE: [&str; 2] = ["platformInfo/module_id", "gpu_module_id"];
    if let Some(Printed::Num(m)) = g.count(&MODULE)? {
        out.gpu.module_id = Some(g.fits(&MODULE, m)?);
    }
    // v2 names first; text captures of the v1 era print the v1 struct's
    // ("RACK Serial Number", "Chassis Physical Slot Number"...).
    let byte = |paths: &[&str]| -> Result<Option<u8>, ParseError> {
        match g.count(paths)? {
            Some(Printed::Num(v)) => g.fits(paths, v).map(Some),
            _ => Ok(None),
        }
    };
    const SERIAL: [&str; 2] = [
        "platformInfo/chassis_serial_number",
        "platformInfo/rack_serial_number",
    ];
    let p = crate::schema::PlatformFile {
        chassis_serial: g.text(&SERIAL).map(|s| s.trim().to_string()),
        slot: byte(&[
            "platformInfo/slot_number",
            "platformInfo/chassis_physical_slot_number",
        ])?,
        tray: byte(&["platformInfo/tray_index", "platformInfo/compute_slot_index"])?,
        host_id: byte(&["platformInfo/host_id", "platformInfo/node_index"])?,
        peer_type: None,
    };
    let peer_printed = g.text(&["platformInfo/peer_type"]).is_some();
    if p != crate::schema::PlatformFile::default() || peer_printed {
        if let Some(s) = &p.chassis_serial {
            if s.len() > 16 {
                let n = g.first(&SERIAL).expect("read above");
                return Err(super::read::fail(
                    n,
                    format!("chassis serial `{s}` is longer than NVML's 16 bytes"),
                ));
            }
        }
        out.gpu.platform = Some(p);
    }
    Ok(())
}
