//! Reading one value of a capture's `<gpu>`: where it is (DTDs name
//! things differently: the first path the capture has), whether it is
//! printed, N/A or absent, and its number, flag or text; errors name the
//! capture's line and element. Every group file (`info.rs`,
//! `memory.rs`...) reads through these.

use super::{Node, ParseError};
use crate::value::Val;

/// What nvidia-smi prints for a value NVML does not give.
pub fn is_na(text: &str) -> bool {
    let t = text.trim();
    t.is_empty()
        || t.starts_with('[')
        || matches!(
            t,
            "N/A"
                | "Not Supported"
                | "Not Available"
                | "Unknown"
                | "Unknown Error"
                | "Insufficient Permissions"
                | "Requested functionality has been deprecated"
                | "Not Found"
                | "None"
        )
        || t.starts_with("Not available")
        || t.starts_with("Not Available")
}

pub fn fail(node: &Node, message: impl Into<String>) -> ParseError {
    ParseError {
        line: node.line,
        element: Some(node.name.clone()),
        message: message.into(),
    }
}

/// The GPU being read, and what the import has to say about it.
pub struct Gpu<'a> {
    pub node: &'a Node,
    pub index: usize,
    pub notes: &'a mut Vec<super::Note>,
}

/// A value: absent from the capture, N/A, or its element.
pub enum Got<'a> {
    Absent,
    Na,
    Is(&'a Node),
}

/// A value as the capture prints it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Printed {
    Na,
    Num(f64),
    Bool(bool),
}

impl Printed {
    pub fn num(self) -> Option<f64> {
        match self {
            Printed::Num(v) => Some(v),
            _ => None,
        }
    }
}

impl<'a> Gpu<'a> {
    /// The first of `paths` the capture has (DTDs name things differently).
    /// A section the capture collapses to one string (`<power_smoothing>
    /// Insufficient Permissions</power_smoothing>`, `<fabric>N/A</fabric>`)
    /// says N/A for every value in it.
    pub fn at(&self, paths: &[&str]) -> Got<'a> {
        let mut collapsed = false;
        for p in paths {
            let mut n = self.node;
            let mut found = true;
            for part in p.split('/') {
                match n.child(part) {
                    Some(c) => n = c,
                    None => {
                        collapsed |=
                            !std::ptr::eq(n, self.node) && n.children.is_empty() && is_na(&n.text);
                        found = false;
                        break;
                    }
                }
            }
            if found {
                if n.children.is_empty() && is_na(&n.text) {
                    return Got::Na;
                }
                return Got::Is(n);
            }
        }
        if collapsed {
            Got::Na
        } else {
            Got::Absent
        }
    }

    pub fn text(&self, paths: &[&str]) -> Option<&'a str> {
        match self.at(paths) {
            Got::Is(n) => Some(n.text.as_str()),
            _ => None,
        }
    }

    /// Text as the scenario keeps it: `"N/A"` where the capture prints N/A.
    pub fn text_or_na(&self, paths: &[&str]) -> Option<Val<String>> {
        match self.at(paths) {
            Got::Absent => None,
            Got::Na => Some(Val::NotSupported),
            Got::Is(n) => Some(Val::Is(n.text.trim().into())),
        }
    }

    pub fn first(&self, paths: &[&str]) -> Option<&'a Node> {
        paths.iter().find_map(|p| self.node.path(p))
    }

    /// The line of the first of `paths` the capture has, else the GPU's.
    pub fn line(&self, paths: &[&str]) -> usize {
        self.first(paths).map_or(self.node.line, |n| n.line)
    }

    pub fn note(&mut self, line: usize, message: String) {
        self.notes.push(super::Note {
            line,
            message: format!("GPU {}: {message}", self.index),
        });
    }

    /// A number with its unit (`81920 MiB`, `41 %`, `250.00 W`, `16x`,
    /// `502 KB/s`, `2560 bank(s)`): `None` if absent.
    pub fn number(&self, paths: &[&str]) -> Result<Option<Printed>, ParseError> {
        match self.at(paths) {
            Got::Absent => Ok(None),
            Got::Na => Ok(Some(Printed::Na)),
            Got::Is(n) => number(&n.text)
                .map(|v| Some(Printed::Num(v)))
                .ok_or_else(|| fail(n, format!("`{}` is not a number", n.text))),
        }
    }

    /// A whole number that must fit NVML's unsigned counters.
    pub fn count(&self, paths: &[&str]) -> Result<Option<Printed>, ParseError> {
        let v = self.number(paths)?;
        if let Some(Printed::Num(x)) = v {
            if x < 0.0 || x.fract() != 0.0 {
                let n = self.first(paths).expect("read above");
                return Err(fail(n, format!("`{}` is not a whole count", n.text)));
            }
        }
        Ok(v)
    }

    /// `Enabled`/`Yes`/`Active`/`True` or their opposites.
    pub fn flag(&self, paths: &[&str]) -> Result<Option<Printed>, ParseError> {
        match self.at(paths) {
            Got::Absent => Ok(None),
            Got::Na => Ok(Some(Printed::Na)),
            Got::Is(n) => match n.text.trim() {
                "Enabled" | "Yes" | "Active" | "True" | "Enable" => Ok(Some(Printed::Bool(true))),
                "Disabled" | "No" | "Not Active" | "False" | "Disable" => {
                    Ok(Some(Printed::Bool(false)))
                }
                t => Err(fail(
                    n,
                    format!("`{t}` is neither Enabled/Yes/Active nor Disabled/No"),
                )),
            },
        }
    }

    /// A flag as the scenario keeps it.
    pub fn flag_val(&self, paths: &[&str]) -> Result<Option<Val<bool>>, ParseError> {
        Ok(self.flag(paths)?.map(|p| match p {
            Printed::Bool(b) => Val::Is(b),
            _ => Val::NotSupported,
        }))
    }

    /// A number rounded to NVML's whole unit (degrees, MHz, percent, KB/s),
    /// N/A kept: `None` if absent.
    pub fn rounded<T: TryFrom<i64>>(&self, paths: &[&str]) -> Result<Option<Val<T>>, ParseError> {
        match self.number(paths)? {
            None => Ok(None),
            Some(Printed::Num(v)) => self.fits(paths, v.round()).map(|v| Some(Val::Is(v))),
            Some(_) => Ok(Some(Val::NotSupported)),
        }
    }

    /// `v`, a value read at `paths`, as the integer type the scenario key
    /// has (NVML's own width): out of range is the capture's error.
    pub fn fits<T: TryFrom<i64>>(&self, paths: &[&str], v: f64) -> Result<T, ParseError> {
        let whole = v as i64;
        T::try_from(whole).map_err(|_| {
            let line = self.line(paths);
            ParseError {
                line,
                element: self.first(paths).map(|n| n.name.clone()),
                message: format!(
                    "{v} is outside the range NVML reports this value in (a corrupted capture?)"
                ),
            }
        })
    }
}

/// The leading number of `81920 MiB`, `41 %`, `16x`, `0x1E`, `P2`...
pub fn number(text: &str) -> Option<f64> {
    let t = text.trim();
    let first = t.split_whitespace().next()?;
    let first = first.trim_end_matches(['x', '%']);
    if let Some(hex) = first.strip_prefix("0x") {
        return u64::from_str_radix(hex, 16).ok().map(|v| v as f64);
    }
    first.parse::<f64>().ok().filter(|v| v.is_finite())
}

pub fn hex(text: &str) -> Option<u32> {
    let t = text.trim();
    u32::from_str_radix(t.strip_prefix("0x").unwrap_or(t), 16).ok()
}

/// A number found below `dev` (a MIG device, a process).
pub fn dev_num(dev: &Node, path: &str) -> Option<f64> {
    dev.path(path).and_then(|n| number(&n.text))
}

/// A board or key name from printed text: lower case, runs of other
/// characters one `-`, without a leading `nvidia-`.
pub fn slug(name: &str) -> String {
    let mut out = String::new();
    for c in name.chars() {
        if c.is_ascii_alphanumeric() {
            out.push(c.to_ascii_lowercase());
        } else if !out.ends_with('-') {
            out.push('-');
        }
    }
    let s = out
        .trim_matches('-')
        .trim_start_matches("nvidia-")
        .to_string();
    if s.is_empty() {
        "gpu".into()
    } else {
        s
    }
}
