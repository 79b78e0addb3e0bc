//! A board over its `base`: what the board says replaces what the base
//! says, key by key; a section (`[memory]`, `[power.module]`, ...) merges
//! key by key too; a list (`mig.profile`, `mig.exclusions`) is replaced
//! whole. Typed, field by field: every struct is taken apart without `..`,
//! so a key added to a section does not compile until it is merged here.

use super::file::{
    BoardFile, ClocksSection, EccSection, EnginesSection, FabricHealthSection, InforomSection,
    MemorySection, MigSection, NvlinkSection, PcieSection, PowerSection, ScopeSection,
    ThermalSection,
};

/// A file section laid over the same section of a base board.
pub trait Overlay: Sized {
    /// `self` where it says something, `base` elsewhere.
    #[must_use]
    fn over(self, base: Self) -> Self;
}

/// A section both may give: merged where both do, else whichever does.
fn section<T: Overlay>(over: Option<T>, base: Option<T>) -> Option<T> {
    match (over, base) {
        (Some(o), Some(b)) => Some(o.over(b)),
        (o, b) => o.or(b),
    }
}

/// `Overlay` for a section: `leaf` fields (a value or a list) are the
/// section's own if it gives them, `nested` ones are sections merged in
/// turn.
macro_rules! overlay {
    ($ty:ident { $($leaf:ident),* $(; $($nested:ident),*)? }) => {
        impl Overlay for $ty {
            fn over(self, base: Self) -> Self {
                let $ty { $($leaf,)* $($($nested,)*)? } = self;
                $ty {
                    $($leaf: $leaf.or(base.$leaf),)*
                    $($($nested: section($nested, base.$nested),)*)?
                }
            }
        }
    };
}

overlay!(InforomSection {
    image,
    oem,
    ecc,
    power,
    den
});
overlay!(MemorySection {
    total_mib,
    reserved_mib,
    bar1_mib
});
overlay!(EccSection {
    supported,
    default,
    page_retirement,
    row_remapping,
    remapper_banks
});
overlay!(ScopeSection {
    default_limit_w,
    min_limit_w,
    max_limit_w,
    idle_w,
    busy_w
});
overlay!(PowerSection { default_limit_w, min_limit_w, max_limit_w, idle_w; module, memory });
overlay!(ClocksSection {
    max_graphics_mhz,
    max_sm_mhz,
    max_memory_mhz,
    max_video_mhz,
    busy_graphics_mhz,
    idle_graphics_mhz,
    idle_memory_mhz,
    idle_video_mhz
});
overlay!(ThermalSection {
    shutdown_c,
    slowdown_c,
    gpu_max_c,
    memory_max_c,
    tlimit,
    tlimit_temperature_c,
    shutdown_tlimit_c,
    slowdown_tlimit_c,
    memory_max_tlimit_c,
    gpu_max_tlimit_c,
    fans
});
overlay!(PcieSection { generation, width });
overlay!(NvlinkSection { links, speed_mbps, version, fabric; fabric_health });
overlay!(FabricHealthSection {
    summary,
    degraded_bandwidth,
    route_recovery,
    route_unhealthy,
    access_timeout_recovery,
    incorrect_configuration
});
overlay!(EnginesSection {
    encoders,
    decoders,
    jpegs,
    ofas
});
overlay!(MigSection {
    supported,
    compute_slices,
    memory_slices,
    exclusions,
    profile
});

impl Overlay for BoardFile {
    /// The board over its base, the base applied: the result names no
    /// `base` of its own.
    fn over(self, base: Self) -> Self {
        let BoardFile {
            base: _,
            name,
            brand,
            architecture,
            cuda_compute_capability,
            pci_device_id,
            pci_subsystem_id,
            board_part_number,
            vbios_version,
            inforom,
            serial_number,
            display,
            sm_count,
            c2c_links,
            gpm,
            power_smoothing,
            memory,
            ecc,
            power,
            clocks,
            thermal,
            pcie,
            nvlink,
            engines,
            mig,
        } = self;
        BoardFile {
            base: None,
            name: name.or(base.name),
            brand: brand.or(base.brand),
            architecture: architecture.or(base.architecture),
            cuda_compute_capability: cuda_compute_capability.or(base.cuda_compute_capability),
            pci_device_id: pci_device_id.or(base.pci_device_id),
            pci_subsystem_id: pci_subsystem_id.or(base.pci_subsystem_id),
            board_part_number: board_part_number.or(base.board_part_number),
            vbios_version: vbios_version.or(base.vbios_version),
            inforom: section(inforom, base.inforom),
            serial_number: serial_number.or(base.serial_number),
            display: display.or(base.display),
            sm_count: sm_count.or(base.sm_count),
            c2c_links: c2c_links.or(base.c2c_links),
            gpm: gpm.or(base.gpm),
            power_smoothing: power_smoothing.or(base.power_smoothing),
            memory: section(memory, base.memory),
            ecc: section(ecc, base.ecc),
            power: section(power, base.power),
            clocks: section(clocks, base.clocks),
            thermal: section(thermal, base.thermal),
            pcie: section(pcie, base.pcie),
            nvlink: section(nvlink, base.nvlink),
            engines: section(engines, base.engines),
            mig: section(mig, base.mig),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{builtin_file, builtin_table, merge_tables, BUILTIN_BOARDS};

    /// The typed overlay is the deep table merge it replaced, for every
    /// built-in board over its base and for each board laid over every
    /// other: the same board comes out.
    #[test]
    fn the_typed_overlay_is_the_table_merge() {
        let table = |f: &BoardFile| -> toml::Table {
            let Ok(toml::Value::Table(mut t)) = toml::Value::try_from(f) else {
                panic!("a board serializes to a table")
            };
            t.remove("base");
            t
        };
        for (key, _) in BUILTIN_BOARDS {
            let typed = builtin_file(key).unwrap();
            let merged: BoardFile = toml::Value::Table(builtin_table(key).unwrap())
                .try_into()
                .unwrap();
            assert_eq!(
                typed,
                BoardFile {
                    base: None,
                    ..merged
                },
                "{key}"
            );
            for (other, _) in BUILTIN_BOARDS {
                let over = builtin_file(other).unwrap();
                let mut t = table(&typed);
                merge_tables(&mut t, table(&over));
                let merged: BoardFile = toml::Value::Table(t).try_into().unwrap();
                assert_eq!(
                    over.clone().over(typed.clone()),
                    merged,
                    "{other} over {key}"
                );
            }
        }
        // Sections merge key by key, lists are replaced whole, "N/A" is a
        // value like any other.
        let over: BoardFile = toml::from_str(
            "[power.module]\nbusy_w = 900\n[nvlink.fabric_health]\nsummary = \"N/A\"\n[mig]\nexclusions = []\n[thermal]\nmemory_max_c = \"N/A\"\n",
        )
        .unwrap();
        let base = builtin_file("gb200").unwrap();
        let mut t = table(&base);
        merge_tables(&mut t, table(&over));
        let merged: BoardFile = toml::Value::Table(t).try_into().unwrap();
        let typed = over.over(base.clone());
        assert_eq!(typed, merged);
        let module = typed
            .power
            .as_ref()
            .and_then(|p| p.module.as_ref())
            .unwrap();
        assert_eq!(module.busy_w, Some(900.0));
        assert_eq!(
            module.default_limit_w,
            base.power.and_then(|p| p.module).unwrap().default_limit_w,
            "the rest of [power.module] from the base"
        );
        assert_eq!(typed.mig.unwrap().exclusions, Some(Vec::new()));
    }
}
