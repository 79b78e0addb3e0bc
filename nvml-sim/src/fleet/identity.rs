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
