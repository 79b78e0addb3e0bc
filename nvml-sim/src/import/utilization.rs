//! Utilization (`ffi/utilization.rs`): each engine's, pinned. NVML
//! reports whole percents; a capture that prints a fraction (an edited
//! one) is rounded, with a note.

use super::out::Out;
use super::read::{fail, Gpu, Printed};
use super::ParseError;
use crate::schema::UtilizationFile;
use crate::value::Val;

pub fn readings(g: &mut Gpu, out: &mut Out) -> Result<(), ParseError> {
    let mut util = UtilizationFile::default();
    for (key, path) in [
        ("gpu", "utilization/gpu_util"),
        ("memory", "utilization/memory_util"),
        ("encoder", "utilization/encoder_util"),
        ("decoder", "utilization/decoder_util"),
        ("jpeg", "utilization/jpeg_util"),
        ("ofa", "utilization/ofa_util"),
    ] {
        let v = match g.number(&[path])? {
            None => None,
            Some(Printed::Num(x)) => {
                if x.fract() != 0.0 {
                    let line = g.line(&[path]);
                    g.note(line, format!("{key} utilization {x} % is not a whole percent, as NVML reports it: rounded to {}", x.round()));
                }
                if !(0.0..=100.0).contains(&x) {
                    let n = g.first(&[path]).expect("read above");
                    return Err(fail(n, format!("utilization {x} % is outside 0..=100")));
                }
                Some(Val::Is(x.round() as u32))
            }
            Some(_) => Some(Val::NotSupported),
        };
        *match key {
            "gpu" => &mut util.gpu,
            "memory" => &mut util.memory,
            "encoder" => &mut util.encoder,
            "decoder" => &mut util.decoder,
            "jpeg" => &mut util.jpeg,
            _ => &mut util.ofa,
        } = v;
    }
    if [
        util.gpu,
        util.memory,
        util.encoder,
        util.decoder,
        util.jpeg,
        util.ofa,
    ]
    .iter()
    .any(Option::is_some)
    {
        out.readings.utilization = Some(util);
    }
    Ok(())
}
