//! NVLink-C2C (Grace boards): a link down or up again, and its error
//! counters.

use super::super::Sim;
use crate::fault::C2cCounter;
use crate::value::Invalid;

impl Sim {
    /// The GPU's C2C state, or why the fault does not apply to it.
    fn c2c_link(&mut self, gpu: u32, link: u32) -> Result<&mut super::super::Gpu, Invalid> {
        let g = &mut self.gpus[gpu as usize];
        let links = g.c2c.links();
        if link >= links {
            return Err(Invalid::from(format!(
                "GPU {gpu} ({}) has {links} NVLink-C2C links, no link {link}",
                g.model.name
            )));
        }
        Ok(g)
    }

    pub(super) fn c2c_state(&mut self, gpu: u32, link: u32, up: bool) -> Result<String, Invalid> {
        let g = self.c2c_link(gpu, link)?;
        if up {
            g.c2c.down &= !(1 << link);
        } else {
            g.c2c.down |= 1 << link;
        }
        let state = if up { "up" } else { "down" };
        Ok(format!("GPU {gpu} C2C link {link} {state}"))
    }

    pub(super) fn c2c_errors(
        &mut self,
        gpu: u32,
        link: u32,
        counter: C2cCounter,
        count: u64,
    ) -> Result<String, Invalid> {
        let g = self.c2c_link(gpu, link)?;
        let c = &mut g.c2c.errors[link as usize][counter.index()];
        *c = c.saturating_add(count);
        Ok(format!(
            "GPU {gpu} C2C link {link}: {count} more {counter:?} errors"
        ))
    }
}
