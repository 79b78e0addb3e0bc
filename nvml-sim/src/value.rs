//! A value a scenario may give as not supported: `"N/A"` in any key that
//! takes one (what `nvidia-smi` prints for a value NVML does not report)
//! makes the simulated driver answer `NVML_ERROR_NOT_SUPPORTED` there.
//! nvml-sim's errors, [`Invalid`] and [`At`] among them, are in
//! `crate::error`.

use serde::de::{DeserializeOwned, Error as _};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// The spelling of "not supported" in scenario and board files.
pub const NOT_SUPPORTED: &str = "N/A";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Val<T> {
    /// `"N/A"`: NVML answers NOT_SUPPORTED.
    NotSupported,
    Is(T),
}

impl<T: Copy> Val<T> {
    /// The value, or `None` for not supported.
    pub fn get(&self) -> Option<T> {
        match self {
            Val::NotSupported => None,
            Val::Is(v) => Some(*v),
        }
    }
}

impl<T> Val<T> {
    pub fn as_ref(&self) -> Option<&T> {
        match self {
            Val::NotSupported => None,
            Val::Is(v) => Some(v),
        }
    }
}

impl<'de, T: DeserializeOwned> Deserialize<'de> for Val<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = toml::Value::deserialize(d)?;
        if v.as_str() == Some(NOT_SUPPORTED) {
            return Ok(Val::NotSupported);
        }
        T::deserialize(v).map(Val::Is).map_err(|e| {
            D::Error::custom(format!("{} (or \"{NOT_SUPPORTED}\")", e.message().trim()))
        })
    }
}

impl<T: Serialize> Serialize for Val<T> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Val::NotSupported => s.serialize_str(NOT_SUPPORTED),
            Val::Is(v) => v.serialize(s),
        }
    }
}

/// A size as scenario and board files write it, in MiB: whole MiB as an
/// integer (what nvidia-smi prints), and where NVML's bytes are not whole
/// MiB (what `nvml-sim capture` reads) as the exact fraction, `615.0625`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct Mib {
    pub bytes: u64,
}

impl Mib {
    pub const BYTES: u64 = 1 << 20;

    pub fn whole(mib: u64) -> Mib {
        Mib {
            bytes: mib.saturating_mul(Mib::BYTES),
        }
    }
}

impl std::fmt::Display for Mib {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.bytes.is_multiple_of(Mib::BYTES) {
            write!(f, "{}", self.bytes / Mib::BYTES)
        } else {
            write!(f, "{}", self.bytes as f64 / Mib::BYTES as f64)
        }
    }
}

impl Serialize for Mib {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if self.bytes.is_multiple_of(Mib::BYTES) {
            s.serialize_u64(self.bytes / Mib::BYTES)
        } else {
            // Exact: a byte count below 2^53 is a dyadic fraction of a MiB.
            s.serialize_f64(self.bytes as f64 / Mib::BYTES as f64)
        }
    }
}

impl<'de> Deserialize<'de> for Mib {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        // At most 2^40 MiB (an EiB): far beyond any board, and exact.
        const MAX: f64 = (1u64 << 40) as f64;
        let bad =
            || D::Error::custom("a size in MiB: a whole number, or a fraction of one (0 to 2^40)");
        match toml::Value::deserialize(d)? {
            toml::Value::Integer(i) if (0..=(1i64 << 40)).contains(&i) => Ok(Mib::whole(i as u64)),
            toml::Value::Float(f) if f.is_finite() && (0.0..=MAX).contains(&f) => Ok(Mib {
                bytes: (f * Mib::BYTES as f64).round() as u64,
            }),
            _ => Err(bad()),
        }
    }
}

/// A value the scenario pins to a number (`None`: not pinned, or "N/A").
pub fn pinned<T: Copy>(v: Option<Val<T>>) -> Option<T> {
    v.and_then(|v| v.get())
}

/// Whether the scenario says a value is not supported (`"N/A"`).
pub fn unsupported<T>(v: &Option<Val<T>>) -> bool {
    matches!(v, Some(Val::NotSupported))
}

/// `nvmlReturn_t` codes by the names scenarios use for them (nvml.h's
/// `NVML_ERROR_<name>`): per-call answers a capture recorded
/// (`[gpu.errors]`).
pub const NVML_ERRORS: &[(&str, u32)] = &[
    ("UNINITIALIZED", 1),
    ("INVALID_ARGUMENT", 2),
    ("NOT_SUPPORTED", 3),
    ("NO_PERMISSION", 4),
    ("ALREADY_INITIALIZED", 5),
    ("NOT_FOUND", 6),
    ("INSUFFICIENT_SIZE", 7),
    ("INSUFFICIENT_POWER", 8),
    ("DRIVER_NOT_LOADED", 9),
    ("TIMEOUT", 10),
    ("IRQ_ISSUE", 11),
    ("LIBRARY_NOT_FOUND", 12),
    ("FUNCTION_NOT_FOUND", 13),
    ("CORRUPTED_INFOROM", 14),
    ("GPU_IS_LOST", 15),
    ("RESET_REQUIRED", 16),
    ("OPERATING_SYSTEM", 17),
    ("LIB_RM_VERSION_MISMATCH", 18),
    ("IN_USE", 19),
    ("MEMORY", 20),
    ("NO_DATA", 21),
    ("VGPU_ECC_NOT_SUPPORTED", 22),
    ("INSUFFICIENT_RESOURCES", 23),
    ("FREQ_NOT_SUPPORTED", 24),
    ("ARGUMENT_VERSION_MISMATCH", 25),
    ("DEPRECATED", 26),
    ("NOT_READY", 27),
    ("GPU_NOT_FOUND", 28),
    ("INVALID_STATE", 29),
    ("UNKNOWN", 999),
];

/// An `nvmlReturn_t` other than SUCCESS, as scenario files write it: by
/// its name in [`NVML_ERRORS`] (`"GPU_IS_LOST"`), or by its number for
/// codes nvml.h does not name (a newer driver's).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NvmlErrorCode(u32);

impl NvmlErrorCode {
    pub const NOT_SUPPORTED: Self = Self(3);
    pub const NOT_FOUND: Self = Self(6);

    /// `None` for 0, SUCCESS: no error.
    pub fn new(code: u32) -> Option<Self> {
        (code != 0).then_some(Self(code))
    }

    /// What a failed call returned (never SUCCESS; were it, UNKNOWN).
    pub fn returned(code: u32) -> Self {
        Self::new(code).unwrap_or(Self(999))
    }

    pub fn code(self) -> u32 {
        self.0
    }

    /// The error a value names: a name of [`NVML_ERRORS`] or a non-zero
    /// number.
    pub fn from_value(v: &toml::Value) -> Option<Self> {
        match v {
            toml::Value::String(s) => NVML_ERRORS
                .iter()
                .find(|(n, _)| n == s)
                .map(|(_, c)| Self(*c)),
            toml::Value::Integer(i) => u32::try_from(*i).ok().and_then(Self::new),
            _ => None,
        }
    }

    /// Its nvml.h name, without `NVML_ERROR_` (`None`: unnamed).
    pub fn name(self) -> Option<&'static str> {
        NVML_ERRORS
            .iter()
            .find(|(_, c)| *c == self.0)
            .map(|(n, _)| *n)
    }
}

impl Serialize for NvmlErrorCode {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.name() {
            Some(n) => s.serialize_str(n),
            None => s.serialize_u32(self.0),
        }
    }
}

impl<'de> Deserialize<'de> for NvmlErrorCode {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = toml::Value::deserialize(d)?;
        Self::from_value(&v).ok_or_else(|| {
            D::Error::custom(format!(
                "{v}: an NVML error name (NOT_SUPPORTED, NO_PERMISSION, GPU_IS_LOST, UNKNOWN, ...) or a non-zero code"
            ))
        })
    }
}

pub use crate::error::{At, Invalid};
