//! Memory (`ffi/memory.rs`): the frame buffer's total and reserved size
//! and BAR1 (the board's), and what is in use (pinned readings).

use super::out::Out;
use super::read::{fail, Gpu, Printed};
use super::ParseError;
use crate::model::MemorySection;
use crate::value::Mib;

/// The sizes the readings and the MIG layout are checked against, MiB.
pub struct Room {
    pub total: f64,
    pub reserved: f64,
    pub bar1: Option<Printed>,
}

/// The most memory a board may have (the board format's limit).
const MAX_MIB: f64 = (1u64 << 30) as f64;

pub fn board(g: &Gpu, out: &mut Out) -> Result<Room, ParseError> {
    let total = g
        .number(&["fb_memory_usage/total"])?
        .and_then(Printed::num)
        .ok_or_else(|| fail(g.node, "no <fb_memory_usage><total>: a truncated capture?"))?;
    if !(1.0..=MAX_MIB).contains(&total) {
        let n = g.first(&["fb_memory_usage/total"]).expect("read above");
        return Err(fail(
            n,
            format!("a frame buffer of `{}` is not 1 MiB to 1 PiB", n.text),
        ));
    }
    let reserved = g
        .number(&["fb_memory_usage/reserved"])?
        .and_then(Printed::num)
        .unwrap_or(0.0);
    let bar1 = g.number(&["bar1_memory_usage/total"])?;
    out.board.memory = Some(MemorySection {
        total_mib: Some(total as u64),
        reserved_mib: Some(Mib::whole(g.fits(&["fb_memory_usage/reserved"], reserved)?)),
        bar1_mib: match bar1 {
            Some(Printed::Num(b)) => Some(g.fits(&["bar1_memory_usage/total"], b)?),
            _ => None,
        },
    });
    if bar1 == Some(Printed::Na) {
        out.not_supported(&["nvmlDeviceGetBAR1MemoryInfo"]);
    }
    Ok(Room {
        total,
        reserved,
        bar1,
    })
}

pub fn readings(g: &Gpu, room: &Room, out: &mut Out) -> Result<(), ParseError> {
    let r = &mut out.readings;
    if let Some(u) = g.number(&["fb_memory_usage/used"])?.and_then(Printed::num) {
        let left = (room.total - room.reserved).max(0.0);
        r.memory_used_mib = Some(Mib::whole(g.fits(&["fb_memory_usage/used"], u.min(left))?));
        // NVML's free is not always total - reserved - used to the MiB.
        if let Some(Printed::Num(f)) = g.number(&["fb_memory_usage/free"])? {
            if f <= room.total {
                r.memory_free_mib = Some(Mib::whole(g.fits(&["fb_memory_usage/free"], f)?));
            }
        }
    }
    if let Some(Printed::Num(b)) = g.number(&["bar1_memory_usage/used"])? {
        let cap = room.bar1.and_then(Printed::num).unwrap_or(b);
        r.bar1_used_mib = Some(Mib::whole(g.fits(&["bar1_memory_usage/used"], b.min(cap))?));
    }
    Ok(())
}
