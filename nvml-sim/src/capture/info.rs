//! Identity (`ffi/info.rs`): the board's name, brand, architecture,
//! compute capability, PCI ids, VBIOS, part number and inforom; the GPU's
//! PCI bus id, UUID, serial and minor number.

use super::{text, GpuOut, Walker, NOT_FOUND_FN};
use crate::model::{Architecture, Brand, InforomSection};
use crate::schema::at;
use crate::value::Val;
use nvml_wrapper_sys::bindings::*;
use std::ffi::c_char;
use std::time::Instant;

impl Walker {
    /// Fills the identity; returns what `nvmlDeviceGetArchitecture` said.
    pub(super) fn identity(&mut self, d: nvmlDevice_t, out: &mut GpuOut) -> Result<u32, u32> {
        let (gpu, board) = (&mut out.gpu, &mut out.board);
        let mut buf = [0 as c_char; 96];
        if call!(self, nvmlDeviceGetName(d, buf.as_mut_ptr(), 96)).is_ok() {
            board.name = Some(text(&buf));
        }
        let mut brand = 0;
        let b = call!(self, nvmlDeviceGetBrand(d, &raw mut brand)).map(|()| brand);
        board.brand = Some(b.ok().and_then(Brand::from_nvml).unwrap_or(Brand::Unknown));
        let mut arch = 0;
        let a = call!(self, nvmlDeviceGetArchitecture(d, &raw mut arch)).map(|()| arch);
        board.architecture = Some(
            a.ok()
                .and_then(Architecture::from_nvml)
                .unwrap_or(Architecture::Unknown),
        );
        let (mut major, mut minor) = (0, 0);
        if call!(
            self,
            nvmlDeviceGetCudaComputeCapability(d, &raw mut major, &raw mut minor)
        )
        .is_ok()
        {
            board.cuda_compute_capability = Some(format!("{major}.{minor}"));
        }
        // SAFETY: a plain C struct; zero is a valid value.
        let mut pci: nvmlPciInfo_t = unsafe { std::mem::zeroed() };
        if call!(self, nvmlDeviceGetPciInfo_v3(d, &raw mut pci)).is_ok() {
            gpu.pci_bus_id = Some(at(text(&pci.busId)));
            board.pci_device_id = Some(pci.pciDeviceId);
            board.pci_subsystem_id = Some(pci.pciSubSystemId);
        }
        buf = [0; 96];
        if call!(self, nvmlDeviceGetUUID(d, buf.as_mut_ptr(), 96)).is_ok() {
            gpu.uuid = Some(at(text(&buf)));
        }
        buf = [0; 96];
        gpu.serial = Some(at(
            match call!(self, nvmlDeviceGetSerial(d, buf.as_mut_ptr(), 96)) {
                Ok(()) => Val::Is(text(&buf)),
                Err(_) => Val::NotSupported,
            },
        ));
        let mut minor_number = 0;
        gpu.minor_number = Some(
            call!(self, nvmlDeviceGetMinorNumber(d, &raw mut minor_number))
                .map_or(Val::NotSupported, |()| Val::Is(minor_number)),
        );
        buf = [0; 96];
        board.vbios_version = Some(
            call!(self, nvmlDeviceGetVbiosVersion(d, buf.as_mut_ptr(), 80))
                .map_or(Val::NotSupported, |()| Val::Is(text(&buf))),
        );
        buf = [0; 96];
        board.board_part_number = Some(
            call!(self, nvmlDeviceGetBoardPartNumber(d, buf.as_mut_ptr(), 80))
                .map_or(Val::NotSupported, |()| Val::Is(text(&buf))),
        );
        let mut inforom = [const { None }; 4];
        for (object, slot) in inforom.iter_mut().enumerate() {
            buf = [0; 96];
            *slot = Some(
                call!(
                    self,
                    nvmlDeviceGetInforomVersion(d, object as u32, buf.as_mut_ptr(), 80)
                )
                .map_or(Val::NotSupported, |()| Val::Is(text(&buf))),
            );
        }
        let [oem, ecc, power, den] = inforom;
        board.inforom = Some(InforomSection {
            image: None,
            oem,
            ecc,
            power,
            den,
        });
        a
    }
}

impl Walker {
    /// The module id and the rack, tray and slot (`ffi/info.rs`): what
    /// the GPU's platform info answered, v2 (every branch that has the
    /// call takes it); none where it answered an error.
    pub(super) fn platform(&mut self, d: nvmlDevice_t, out: &mut GpuOut) {
        let mut module = 0;
        if call!(self, nvmlDeviceGetModuleId(d, &raw mut module)).is_ok() {
            out.gpu.module_id = Some(module);
        }
        // SAFETY: a plain C struct; zero is a valid value.
        let mut p: nvmlPlatformInfo_v2_t = unsafe { std::mem::zeroed() };
        p.version = super::version::<nvmlPlatformInfo_v2_t>(2);
        if call!(self, nvmlDeviceGetPlatformInfo(d, &raw mut p)).is_ok() {
            let end = p
                .chassisSerialNumber
                .iter()
                .position(|&b| b == 0)
                .unwrap_or(16);
            let serial = String::from_utf8_lossy(&p.chassisSerialNumber[..end]).into_owned();
            out.gpu.platform = Some(crate::schema::PlatformFile {
                chassis_serial: (!serial.is_empty()).then_some(serial),
                slot: (p.slotNumber != crate::ffi::info::NO_SLOT).then_some(p.slotNumber),
                tray: (p.trayIndex != crate::ffi::info::NO_SLOT).then_some(p.trayIndex),
                host_id: Some(p.hostId),
                peer_type: Some(p.peerType),
            });
        }
    }
}
