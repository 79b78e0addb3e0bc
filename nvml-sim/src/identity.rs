//! Identifiers the simulated fleet derives from the scenario: stable across
//! runs and platforms, so UUIDs, serials and bus ids are the same in every
//! process that builds the same scenario.

/// FNV-1a: stable across runs and platforms, so UUIDs and serials are too.
pub fn fnv(data: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in data.bytes() {
        h ^= b as u64;
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// splitmix64 finalizer: spreads FNV's output so similar seeds (GPU 0, GPU 1)
/// do not give look-alike UUIDs.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

pub fn uuid_from(seed: &str) -> String {
    let a = mix(fnv(seed));
    let b = mix(fnv(&format!("{seed}/2")));
    format!(
        "{:08x}-{:04x}-{:04x}-{:04x}-{:012x}",
        a >> 32,
        (a >> 16) & 0xffff,
        a & 0xffff,
        b >> 48,
        b & 0xffff_ffff_ffff
    )
}

/// PCI bus numbers of the eight GPUs in a DGX H100/A100 chassis.
pub const DGX_BUSES: [u32; 8] = [0x18, 0x2a, 0x3a, 0x5d, 0x9a, 0xab, 0xba, 0xdb];

/// The UUID a scenario's GPU gets unless the scenario gives one.
pub fn gpu_uuid(scenario: &str, index: u32) -> String {
    format!("GPU-{}", uuid_from(&format!("{scenario}/gpu/{index}")))
}

/// The serial number a scenario's GPU gets unless the scenario gives one.
pub fn gpu_serial(scenario: &str, index: u32) -> String {
    format!(
        "{:013}",
        fnv(&format!("{scenario}/serial/{index}")) % 10_000_000_000_000
    )
}

/// The PCI bus number a scenario's GPU sits on unless the scenario says.
pub fn gpu_bus(index: u32) -> u32 {
    if (index as usize) < DGX_BUSES.len() {
        DGX_BUSES[index as usize]
    } else {
        0x01 + index * 0x08
    }
}

/// The UUID of a MIG device: GPU instance `gi` (layout `generation`) and,
/// past the first, its compute instance `ci`.
pub fn mig_uuid(gpu_uuid: &str, gi: u32, ci: u32, generation: u8) -> String {
    let seed = if ci == 0 {
        format!("{gpu_uuid}/gi/{gi}/{generation}")
    } else {
        format!("{gpu_uuid}/gi/{gi}/ci/{ci}/{generation}")
    };
    format!("MIG-{}", uuid_from(&seed))
}

/// A PCI address, `domain:bus:device.function`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PciAddr {
    pub domain: u32,
    pub bus: u32,
    pub device: u32,
    pub function: u32,
}

impl PciAddr {
    pub fn on_bus(bus: u32) -> PciAddr {
        PciAddr {
            domain: 0,
            bus,
            device: 0,
            function: 0,
        }
    }

    /// `00000000:18:00.0` (NVML's bus id) or `0000:18:00.0`, hex, any case.
    pub fn parse(text: &str) -> Option<PciAddr> {
        let (domain, rest) = text.split_once(':')?;
        let (bus, rest) = rest.split_once(':')?;
        let (device, function) = rest.split_once('.')?;
        let hex = |s: &str, max: u32| {
            u32::from_str_radix(s, 16)
                .ok()
                .filter(|v| *v <= max && !s.is_empty() && s.len() <= 8)
        };
        Some(PciAddr {
            domain: hex(domain, u32::MAX)?,
            bus: hex(bus, 0xff)?,
            device: hex(device, 0x1f)?,
            function: hex(function, 0x7)?,
        })
    }

    /// `nvmlPciInfo_t.busId`: 8-digit domain.
    pub fn bus_id(&self) -> String {
        format!(
            "{:08X}:{:02X}:{:02X}.{:X}",
            self.domain, self.bus, self.device, self.function
        )
    }

    /// `nvmlPciInfo_t.busIdLegacy`: 4-digit domain.
    pub fn bus_id_legacy(&self) -> String {
        format!(
            "{:04X}:{:02X}:{:02X}.{:X}",
            self.domain, self.bus, self.device, self.function
        )
    }
}
