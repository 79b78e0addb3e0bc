//! A value a scenario may give as not supported: `"N/A"` in any key that
//! takes one (what `nvidia-smi` prints for a value NVML does not report)
//! makes the simulated driver answer `NVML_ERROR_NOT_SUPPORTED` there.

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

/// A value the scenario pins to a number (`None`: not pinned, or "N/A").
pub fn pinned<T: Copy>(v: Option<Val<T>>) -> Option<T> {
    v.and_then(|v| v.get())
}

/// Whether the scenario says a value is not supported (`"N/A"`).
pub fn unsupported<T>(v: &Option<Val<T>>) -> bool {
    matches!(v, Some(Val::NotSupported))
}
