//! NVLink fabric registration of each GPU on NVSwitch systems (Hopper and
//! newer): until the fabric manager has registered a GPU, CUDA cannot use
//! it. Absent on GPUs without a fabric. One series per GPU: the outcome of
//! a completed registration is a label, not a second series, because it
//! means nothing before the state is completed.

use crate::family::Family;
use crate::metric::{Collector, Kind, Metric, SampleSink, Scope};

pub static COLLECTOR: Collector = Collector {
    family: Some(Family::Fabric),
    metrics: &[Metric {
        name: "nvidia_gpu_fabric_state",
        help: "NVLink fabric registration state: 1 not started, 2 in progress, 3 completed.",
        kind: Kind::Gauge,
        collect: state,
    }],
};

fn state<'a>(scope: &Scope<'a>, out: &mut SampleSink<'a>) {
    for (g, r) in scope.readings() {
        if let Some(f) = r.fabric {
            let status = match (f.state, f.registered) {
                (3, true) => "success",
                (3, false) => "failure",
                _ => "pending",
            };
            out.gpu(g).label("status", status).set(f.state);
        }
    }
}
