//! `NVML_DEVICE_ARCH_*` as a type: what a board file's `architecture`
//! says, what the model answers `nvmlDeviceGetArchitecture` with, and
//! what the importer reads from a capture's product architecture or PCI
//! device id.

use nvml_wrapper_sys::bindings as sys;
use serde::{Deserialize, Serialize};

/// A GPU architecture, oldest first; `Unknown` is none of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum Architecture {
    Kepler,
    Maxwell,
    Pascal,
    Volta,
    Turing,
    Ampere,
    Ada,
    Hopper,
    Blackwell,
    Unknown,
}

impl Architecture {
    /// Every architecture, oldest first, `Unknown` last.
    pub const ALL: [Architecture; 10] = [
        Self::Kepler,
        Self::Maxwell,
        Self::Pascal,
        Self::Volta,
        Self::Turing,
        Self::Ampere,
        Self::Ada,
        Self::Hopper,
        Self::Blackwell,
        Self::Unknown,
    ];

    /// Its board-file name.
    pub fn name(self) -> &'static str {
        match self {
            Self::Kepler => "kepler",
            Self::Maxwell => "maxwell",
            Self::Pascal => "pascal",
            Self::Volta => "volta",
            Self::Turing => "turing",
            Self::Ampere => "ampere",
            Self::Ada => "ada",
            Self::Hopper => "hopper",
            Self::Blackwell => "blackwell",
            Self::Unknown => "unknown",
        }
    }

    /// Its `NVML_DEVICE_ARCH_*` value.
    pub fn nvml(self) -> u32 {
        match self {
            Self::Kepler => sys::NVML_DEVICE_ARCH_KEPLER,
            Self::Maxwell => sys::NVML_DEVICE_ARCH_MAXWELL,
            Self::Pascal => sys::NVML_DEVICE_ARCH_PASCAL,
            Self::Volta => sys::NVML_DEVICE_ARCH_VOLTA,
            Self::Turing => sys::NVML_DEVICE_ARCH_TURING,
            Self::Ampere => sys::NVML_DEVICE_ARCH_AMPERE,
            Self::Ada => sys::NVML_DEVICE_ARCH_ADA,
            Self::Hopper => sys::NVML_DEVICE_ARCH_HOPPER,
            Self::Blackwell => sys::NVML_DEVICE_ARCH_BLACKWELL,
            Self::Unknown => sys::NVML_DEVICE_ARCH_UNKNOWN,
        }
    }

    /// The compute capability a board of this architecture has unless
    /// its file says otherwise.
    pub fn default_compute_capability(self) -> (i32, i32) {
        match self {
            Self::Kepler => (3, 5),
            Self::Maxwell => (5, 2),
            Self::Pascal => (6, 0),
            Self::Volta => (7, 0),
            Self::Turing => (7, 5),
            Self::Ampere => (8, 0),
            Self::Ada => (8, 9),
            Self::Hopper => (9, 0),
            Self::Blackwell => (10, 0),
            Self::Unknown => (0, 0),
        }
    }

    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|a| a.name() == name)
    }

    pub fn from_nvml(code: u32) -> Option<Self> {
        Self::ALL.into_iter().find(|a| a.nvml() == code)
    }

    /// Whether this is `than` or newer (an unknown architecture is
    /// neither).
    pub fn at_least(self, than: Self) -> bool {
        self != Self::Unknown && than != Self::Unknown && self as u8 >= than as u8
    }
}

impl TryFrom<String> for Architecture {
    type Error = crate::value::Invalid;
    fn try_from(name: String) -> Result<Self, Self::Error> {
        Self::from_name(&name).ok_or_else(|| {
            format!(
                "unknown architecture `{name}` (known: {})",
                Self::ALL.map(Self::name).join(", ")
            )
            .into()
        })
    }
}

impl From<Architecture> for String {
    fn from(a: Architecture) -> String {
        a.name().into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_values_round_trip_and_order_leaves_unknown_out() {
        for a in Architecture::ALL {
            assert_eq!(Architecture::from_name(a.name()), Some(a));
            assert_eq!(Architecture::from_nvml(a.nvml()), Some(a));
        }
        assert!(Architecture::Hopper.at_least(Architecture::Ampere));
        assert!(!Architecture::Volta.at_least(Architecture::Ampere));
        assert!(!Architecture::Unknown.at_least(Architecture::Kepler));
        let e = Architecture::try_from("hoper".to_string()).unwrap_err();
        assert!(
            e.contains("unknown architecture `hoper` (known: kepler, maxwell"),
            "{e}"
        );
    }
}
