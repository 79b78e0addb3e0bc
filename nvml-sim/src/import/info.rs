//! Identity (`ffi/info.rs`): the board's name, brand, architecture, PCI
//! ids, part number, VBIOS and inforom; the GPU's UUID, serial, PCI bus id
//! and minor number.

use super::out::{Facts, Out};
use super::read::{hex, Gpu};
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
