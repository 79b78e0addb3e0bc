//! The samples a collector produces for one metric family, before they are
//! written out.
//!
//! Label values borrow from the snapshot (`'a`) or are static strings and
//! integers, so a sample costs no allocation: labels go into one arena that
//! is reused for every family of a render.

use std::cmp::Ordering;

use crate::snapshot::GpuState;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LabelValue<'a> {
    Str(&'a str),
    Uint(u64),
}

impl LabelValue<'_> {
    /// Integers compare numerically so that `gpu="10"` sorts after
    /// `gpu="9"`; strings compare bytewise; integers come first.
    fn natural_cmp(&self, other: &Self) -> Ordering {
        match (self, other) {
            (LabelValue::Uint(a), LabelValue::Uint(b)) => a.cmp(b),
            // Most strings compared are the same one (a GPU's uuid on
            // each of its series): skip the byte comparison then.
            (LabelValue::Str(a), LabelValue::Str(b)) if std::ptr::eq(*a, *b) => Ordering::Equal,
            (LabelValue::Str(a), LabelValue::Str(b)) => a.cmp(b),
            (LabelValue::Uint(_), LabelValue::Str(_)) => Ordering::Less,
            (LabelValue::Str(_), LabelValue::Uint(_)) => Ordering::Greater,
        }
    }

    /// An empty label value is the same as no label in Prometheus, so it
    /// is not written at all.
    pub fn is_empty(&self) -> bool {
        matches!(self, LabelValue::Str(""))
    }
}

impl<'a> From<&'a str> for LabelValue<'a> {
    fn from(s: &'a str) -> Self {
        LabelValue::Str(s)
    }
}

impl<'a> From<&'a String> for LabelValue<'a> {
    fn from(s: &'a String) -> Self {
        LabelValue::Str(s.as_str())
    }
}

impl From<u32> for LabelValue<'_> {
    fn from(n: u32) -> Self {
        LabelValue::Uint(n.into())
    }
}

impl From<u64> for LabelValue<'_> {
    fn from(n: u64) -> Self {
        LabelValue::Uint(n)
    }
}

/// A sample value. Integers stay integers so that large counters (bytes
/// moved over NVLink pass 2^53 within hours) are written exactly.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Value {
    Uint(u64),
    Float(f64),
}

impl From<u64> for Value {
    fn from(n: u64) -> Self {
        Value::Uint(n)
    }
}

impl From<u32> for Value {
    fn from(n: u32) -> Self {
        Value::Uint(n.into())
    }
}

impl From<usize> for Value {
    fn from(n: usize) -> Self {
        Value::Uint(n as u64)
    }
}

impl From<f64> for Value {
    fn from(v: f64) -> Self {
        Value::Float(v)
    }
}

impl From<bool> for Value {
    fn from(b: bool) -> Self {
        Value::Uint(b.into())
    }
}

#[derive(Debug, Clone, Copy)]
struct Sample {
    labels_start: u32,
    labels_end: u32,
    value: Value,
}

/// Collects the samples of one metric family.
#[derive(Debug, Default)]
pub struct SampleSink<'a> {
    labels: Vec<(&'static str, LabelValue<'a>)>,
    samples: Vec<Sample>,
}

impl<'a> SampleSink<'a> {
    pub fn new() -> Self {
        Self::default()
    }

    /// Starts a sample with no labels yet.
    pub fn sample(&mut self) -> SampleBuilder<'_, 'a> {
        let start = self.labels.len();
        SampleBuilder { sink: self, start }
    }

    /// Starts a per-GPU sample: `gpu` (NVML index) and `uuid` come first.
    pub fn gpu(&mut self, gpu: &'a GpuState) -> SampleBuilder<'_, 'a> {
        self.sample()
            .label("gpu", gpu.index)
            .label("uuid", &gpu.uuid)
    }

    pub fn len(&self) -> usize {
        self.samples.len()
    }

    pub fn is_empty(&self) -> bool {
        self.samples.is_empty()
    }

    /// Drops the samples whose value fails `keep`.
    pub fn retain_values(&mut self, mut keep: impl FnMut(Value) -> bool) {
        self.samples.retain(|s| keep(s.value));
    }

    /// Forgets the samples but keeps the memory for the next family.
    pub fn clear(&mut self) {
        self.labels.clear();
        self.samples.clear();
    }

    /// Visits the samples ordered by their labels, so that the output does
    /// not depend on the order the sampler listed things in.
    pub fn for_each_sorted(&mut self, mut f: impl FnMut(&[(&'static str, LabelValue<'a>)], Value)) {
        let labels = &self.labels;
        let key = |s: &Sample| &labels[s.labels_start as usize..s.labels_end as usize];
        let sorted = self
            .samples
            .windows(2)
            .all(|w| cmp_labels(key(&w[0]), key(&w[1])) != Ordering::Greater);
        if !sorted {
            // Equal keys would be duplicate series, a collector bug: stability
            // buys nothing. The samples themselves are sorted (24 bytes
            // each), which saves an indirection per comparison.
            self.samples
                .sort_unstable_by(|a, b| cmp_labels(key(a), key(b)));
        }
        for s in &self.samples {
            f(key(s), s.value);
        }
    }
}

fn cmp_labels(
    a: &[(&'static str, LabelValue<'_>)],
    b: &[(&'static str, LabelValue<'_>)],
) -> Ordering {
    for ((an, av), (bn, bv)) in a.iter().zip(b) {
        let names = if std::ptr::eq(*an, *bn) {
            Ordering::Equal
        } else {
            an.cmp(bn)
        };
        let o = names.then_with(|| av.natural_cmp(bv));
        if o != Ordering::Equal {
            return o;
        }
    }
    a.len().cmp(&b.len())
}

/// Adds labels to a sample under construction; `set` finishes it.
#[must_use = "a sample is only recorded by `set`"]
pub struct SampleBuilder<'s, 'a> {
    sink: &'s mut SampleSink<'a>,
    start: usize,
}

impl<'a> SampleBuilder<'_, 'a> {
    pub fn label(self, name: &'static str, value: impl Into<LabelValue<'a>>) -> Self {
        self.sink.labels.push((name, value.into()));
        self
    }

    /// Adds the label only when the value is known: an absent value is an
    /// absent label, never an empty or zero one.
    pub fn label_opt<V: Into<LabelValue<'a>>>(self, name: &'static str, value: Option<V>) -> Self {
        match value {
            Some(v) => self.label(name, v),
            None => self,
        }
    }

    pub fn set(self, value: impl Into<Value>) {
        let end = self.sink.labels.len();
        self.sink.samples.push(Sample {
            labels_start: self.start as u32,
            labels_end: end as u32,
            value: value.into(),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn collect(sink: &mut SampleSink<'_>) -> Vec<String> {
        let mut out = Vec::new();
        sink.for_each_sorted(|labels, value| {
            let l: Vec<String> = labels
                .iter()
                .map(|(n, v)| match v {
                    LabelValue::Str(s) => format!("{n}={s}"),
                    LabelValue::Uint(u) => format!("{n}={u}"),
                })
                .collect();
            out.push(format!("{} {:?}", l.join(","), value));
        });
        out
    }

    #[test]
    fn sorts_numeric_labels_numerically() {
        let mut sink = SampleSink::new();
        for gpu in [10u32, 2, 1, 0] {
            sink.sample()
                .label("gpu", gpu)
                .label("engine", "sm")
                .set(1u64);
            sink.sample()
                .label("gpu", gpu)
                .label("engine", "dram")
                .set(2u64);
        }
        let got = collect(&mut sink);
        assert_eq!(
            got,
            [
                "gpu=0,engine=dram Uint(2)",
                "gpu=0,engine=sm Uint(1)",
                "gpu=1,engine=dram Uint(2)",
                "gpu=1,engine=sm Uint(1)",
                "gpu=2,engine=dram Uint(2)",
                "gpu=2,engine=sm Uint(1)",
                "gpu=10,engine=dram Uint(2)",
                "gpu=10,engine=sm Uint(1)",
            ]
        );
    }

    #[test]
    fn shorter_label_set_sorts_first_and_absent_labels_are_skipped() {
        let mut sink = SampleSink::new();
        sink.sample()
            .label("xid", 79u32)
            .label_opt("gpu_instance", Some(3u32))
            .set(1u64);
        sink.sample()
            .label("xid", 79u32)
            .label_opt::<u32>("gpu_instance", None)
            .set(2u64);
        assert_eq!(
            collect(&mut sink),
            ["xid=79 Uint(2)", "xid=79,gpu_instance=3 Uint(1)"]
        );
    }

    #[test]
    fn retain_values_drops_samples_and_keeps_labels_of_the_rest() {
        let mut sink = SampleSink::new();
        sink.sample().label("a", "x").set(f64::NAN);
        sink.sample().label("a", "y").set(2u64);
        sink.sample().label("a", "z").set(-1.0);
        sink.retain_values(|v| !matches!(v, Value::Float(f) if f.is_nan() || f < 0.0));
        assert_eq!(collect(&mut sink), ["a=y Uint(2)"]);
    }

    #[test]
    fn clear_keeps_nothing() {
        let mut sink = SampleSink::new();
        sink.sample().label("a", "b").set(1.5);
        sink.clear();
        assert!(sink.is_empty());
        assert!(collect(&mut sink).is_empty());
    }
}
