//! Prints what nvml-wrapper reads from an NVML library, as TOML, so tests
//! can compare it with what an independent client (pynvml) reads.
//!
//! usage: dump LIBRARY_PATH

use nvml_wrapper::enum_wrappers::device::{EccCounter, MemoryError};
use nvml_wrapper::Nvml;
use std::fmt::Write;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let path = std::env::args_os()
        .nth(1)
        .ok_or("usage: dump LIBRARY_PATH")?;
    let nvml = Nvml::builder().lib_path(&path).init()?;
    let mut out = String::new();
    writeln!(out, "driver_version = {:?}", nvml.sys_driver_version()?)?;
    writeln!(out, "count = {}", nvml.device_count()?)?;
    for i in 0..nvml.device_count()? {
        let d = nvml.device_by_index(i)?;
        let m = d.memory_info()?;
        writeln!(out, "\n[[gpu]]")?;
        writeln!(out, "index = {i}")?;
        writeln!(out, "name = {:?}", d.name()?)?;
        writeln!(out, "uuid = {:?}", d.uuid()?)?;
        if let Ok(serial) = d.serial() {
            writeln!(out, "serial = {serial:?}")?;
        }
        writeln!(out, "bus_id = {:?}", d.pci_info()?.bus_id)?;
        writeln!(out, "memory_total = {}", m.total)?;
        writeln!(out, "memory_used = {}", m.used)?;
        writeln!(out, "memory_free = {}", m.free)?;
        writeln!(out, "power_limit = {}", d.power_management_limit()?)?;
        writeln!(
            out,
            "power_default_limit = {}",
            d.power_management_limit_default()?
        )?;
        let c = d.power_management_limit_constraints()?;
        writeln!(out, "power_min_limit = {}", c.min_limit)?;
        writeln!(out, "power_max_limit = {}", c.max_limit)?;
        writeln!(out, "enforced_power_limit = {}", d.enforced_power_limit()?)?;
        if let Ok(ecc) = d.is_ecc_enabled() {
            writeln!(out, "ecc_enabled = {}", ecc.currently_enabled)?;
            for (err, ename) in [
                (MemoryError::Corrected, "corrected"),
                (MemoryError::Uncorrected, "uncorrected"),
            ] {
                for (ctr, cname) in [
                    (EccCounter::Volatile, "volatile"),
                    (EccCounter::Aggregate, "aggregate"),
                ] {
                    writeln!(
                        out,
                        "ecc_{ename}_{cname} = {}",
                        d.total_ecc_errors(err, ctr)?
                    )?;
                }
            }
        }
        if let Ok(mode) = d.mig_mode() {
            writeln!(out, "mig_current = {}", mode.current)?;
            let mut migs = Vec::new();
            for j in 0..d.mig_device_count()? {
                if let Ok(mig) = d.mig_device_by_index(j) {
                    migs.push(format!(
                        "{{ name = {:?}, uuid = {:?}, memory_total = {} }}",
                        mig.name()?,
                        mig.uuid()?,
                        mig.memory_info()?.total
                    ));
                }
            }
            writeln!(out, "mig = [{}]", migs.join(", "))?;
        }
    }
    print!("{out}");
    Ok(())
}
