//! The GPU and the driver as a whole: a GPU off the bus, hung or slow; the
//! kernel driver unloaded and loaded again.

use super::super::gpu::Hang;
use super::super::Sim;

impl Sim {
    pub(super) fn lose(&mut self, gpu: u32) -> String {
        self.gpus[gpu as usize].lost = true;
        format!("GPU {gpu} fell off the bus")
    }

    /// `until`: the scenario time the hang ends (`None`: at `release`).
    pub(super) fn hang(&mut self, gpu: u32, until: Option<f64>) -> String {
        self.gpus[gpu as usize].hang = Some(match until {
            Some(t) => Hang::Until(t),
            None => Hang::Forever,
        });
        format!("GPU {gpu} hangs")
    }

    pub(super) fn release(&mut self, gpu: u32) -> String {
        self.gpus[gpu as usize].hang = None;
        format!("GPU {gpu} released")
    }

    pub(super) fn slow(&mut self, gpu: u32, ms: u64) -> String {
        self.gpus[gpu as usize].slow_ms = ms;
        format!("calls on GPU {gpu} take {ms} ms longer")
    }

    pub(super) fn driver_unload(&mut self) -> String {
        self.driver_loaded = false;
        "driver unloaded".into()
    }

    pub(super) fn driver_load(&mut self) -> String {
        if !self.driver_loaded {
            crate::kmsg::driver_loaded(&crate::driver::current().version);
            // A driver reload clears volatile ECC counters (NVML reference,
            // nvmlEccCounterType_t: "Volatile counts are reset each time the
            // driver loads").
            for g in &mut self.gpus {
                for et in 0..2 {
                    g.ecc.counts[et][0] = [0; 8];
                }
            }
        }
        self.driver_loaded = true;
        "driver loaded".into()
    }
}
