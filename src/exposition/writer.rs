//! Writes metric families in the Prometheus text format 0.0.4 and in
//! OpenMetrics 1.0 side by side.
//!
//! The two formats differ only in metadata: 0.0.4 names a counter family
//! with its `_total` suffix and has no UNIT; OpenMetrics names the family
//! without `_total`, may carry `# UNIT`, and ends with `# EOF`. Sample
//! lines are byte-identical, so each is formatted once and copied to both.

use super::format::{
    write_escaped_help_openmetrics, write_escaped_help_text, write_escaped_label_value, write_f64,
    write_u64,
};
use std::sync::Arc;

use crate::metric::{LabelValue, Metric, SampleSink, Value};

/// The two outputs of one render, plus scratch space.
#[derive(Debug, Default)]
pub struct Writer {
    pub text: Vec<u8>,
    pub openmetrics: Vec<u8>,
    lines: Vec<u8>,
    /// Label names left out of every sample (the selection file's
    /// `labels.drop`); `None` when nothing is dropped.
    pub drop_labels: Option<Arc<[String]>>,
}

impl Writer {
    pub fn with_capacity(bytes: usize) -> Self {
        Writer {
            text: Vec::with_capacity(bytes),
            openmetrics: Vec::with_capacity(bytes),
            lines: Vec::with_capacity(bytes.min(1 << 16)),
            drop_labels: None,
        }
    }

    /// Writes one family with all its samples, contiguous. A family with
    /// no samples is left out entirely, metadata included, so that a
    /// feature a GPU lacks leaves no trace.
    pub fn family(&mut self, metric: &Metric, samples: &mut SampleSink<'_>) {
        if metric.kind.is_counter() {
            // A NaN or negative counter is a bad reading, and strict
            // OpenMetrics parsers reject the whole exposition for one.
            samples.retain_values(|v| !matches!(v, Value::Float(f) if f.is_nan() || f < 0.0));
        }
        if samples.is_empty() {
            return;
        }
        let base = metric.family_name();

        let t = &mut self.text;
        t.extend_from_slice(b"# HELP ");
        t.extend_from_slice(metric.name.as_bytes());
        t.push(b' ');
        write_escaped_help_text(t, metric.help);
        t.extend_from_slice(b"\n# TYPE ");
        t.extend_from_slice(metric.name.as_bytes());
        t.push(b' ');
        t.extend_from_slice(metric.kind.as_str().as_bytes());
        t.push(b'\n');

        let om = &mut self.openmetrics;
        om.extend_from_slice(b"# TYPE ");
        om.extend_from_slice(base.as_bytes());
        om.push(b' ');
        om.extend_from_slice(metric.kind.as_openmetrics_str().as_bytes());
        om.push(b'\n');
        if let Some(unit) = metric.unit() {
            om.extend_from_slice(b"# UNIT ");
            om.extend_from_slice(base.as_bytes());
            om.push(b' ');
            om.extend_from_slice(unit.as_bytes());
            om.push(b'\n');
        }
        om.extend_from_slice(b"# HELP ");
        om.extend_from_slice(base.as_bytes());
        om.push(b' ');
        write_escaped_help_openmetrics(om, metric.help);
        om.push(b'\n');

        let lines = &mut self.lines;
        lines.clear();
        let drop: &[String] = self.drop_labels.as_deref().unwrap_or(&[]);
        samples.for_each_sorted(|labels, value| {
            write_sample(lines, metric.name, labels, value, drop);
        });
        self.text.extend_from_slice(lines);
        self.openmetrics.extend_from_slice(lines);
    }

    /// Ends the OpenMetrics output; call once, after the last family.
    pub fn finish(&mut self) {
        self.openmetrics.extend_from_slice(b"# EOF\n");
    }
}

fn write_sample(
    out: &mut Vec<u8>,
    name: &str,
    labels: &[(&'static str, LabelValue<'_>)],
    value: Value,
    drop: &[String],
) {
    out.extend_from_slice(name.as_bytes());
    let mut first = true;
    for (label, v) in labels {
        if v.is_empty() || (!drop.is_empty() && drop.iter().any(|d| d == label)) {
            continue;
        }
        out.push(if first { b'{' } else { b',' });
        first = false;
        out.extend_from_slice(label.as_bytes());
        out.extend_from_slice(b"=\"");
        match *v {
            LabelValue::Str(s) => write_escaped_label_value(out, s),
            LabelValue::Uint(n) => write_u64(out, n),
        }
        out.push(b'"');
    }
    if !first {
        out.push(b'}');
    }
    out.push(b' ');
    match value {
        Value::Uint(n) => write_u64(out, n),
        Value::Float(f) => write_f64(out, f),
    }
    out.push(b'\n');
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metric::{Kind, Scope};

    fn nothing(_: &Scope<'_>, _: &mut SampleSink<'_>) {}

    const COUNTER: Metric = Metric {
        name: "test_energy_joules_total",
        help: "Energy \"used\"\nsince C:\\boot.",
        kind: Kind::Counter,
        collect: nothing,
    };

    const GAUGE: Metric = Metric {
        name: "test_info",
        help: "Identity.",
        kind: Kind::Gauge,
        collect: nothing,
    };

    #[test]
    fn counter_metadata_per_format() {
        let mut w = Writer::default();
        let mut s = SampleSink::new();
        s.sample().label("gpu", 1u32).set(12.5);
        s.sample().label("gpu", 0u32).set(3u64);
        w.family(&COUNTER, &mut s);
        w.finish();
        assert_eq!(
            String::from_utf8(w.text).unwrap(),
            "# HELP test_energy_joules_total Energy \"used\"\\nsince C:\\\\boot.\n\
             # TYPE test_energy_joules_total counter\n\
             test_energy_joules_total{gpu=\"0\"} 3\n\
             test_energy_joules_total{gpu=\"1\"} 12.5\n"
        );
        assert_eq!(
            String::from_utf8(w.openmetrics).unwrap(),
            "# TYPE test_energy_joules counter\n\
             # UNIT test_energy_joules joules\n\
             # HELP test_energy_joules Energy \\\"used\\\"\\nsince C:\\\\boot.\n\
             test_energy_joules_total{gpu=\"0\"} 3\n\
             test_energy_joules_total{gpu=\"1\"} 12.5\n\
             # EOF\n"
        );
    }

    #[test]
    fn empty_families_leave_no_metadata_and_empty_labels_are_omitted() {
        let mut w = Writer::default();
        let mut s = SampleSink::new();
        w.family(&COUNTER, &mut s);
        s.sample()
            .label("name", "A\"100")
            .label("serial", "")
            .set(1u64);
        w.family(&GAUGE, &mut s);
        s.clear();
        s.sample().label("serial", "").set(1u64);
        w.family(&GAUGE, &mut s);
        assert_eq!(
            String::from_utf8(w.text).unwrap(),
            "# HELP test_info Identity.\n# TYPE test_info gauge\ntest_info{name=\"A\\\"100\"} 1\n\
             # HELP test_info Identity.\n# TYPE test_info gauge\ntest_info 1\n"
        );
    }
}
