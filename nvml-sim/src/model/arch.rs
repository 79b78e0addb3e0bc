//! `NVML_DEVICE_ARCH_*` as a type: what a board file's `architecture`
//! says, what the model answers `nvmlDeviceGetArchitecture` with, and
//! what the importer reads from a capture's product architecture or PCI
//! device id.

use super::named::named_nvml_enum;
use nvml_wrapper_sys::bindings as sys;

named_nvml_enum! {
    /// A GPU architecture, oldest first; `Unknown` is none of them.
    pub enum Architecture ("architecture") {
        Kepler = "kepler" => sys::NVML_DEVICE_ARCH_KEPLER,
        Maxwell = "maxwell" => sys::NVML_DEVICE_ARCH_MAXWELL,
        Pascal = "pascal" => sys::NVML_DEVICE_ARCH_PASCAL,
        Volta = "volta" => sys::NVML_DEVICE_ARCH_VOLTA,
        Turing = "turing" => sys::NVML_DEVICE_ARCH_TURING,
        Ampere = "ampere" => sys::NVML_DEVICE_ARCH_AMPERE,
        Ada = "ada" => sys::NVML_DEVICE_ARCH_ADA,
        Hopper = "hopper" => sys::NVML_DEVICE_ARCH_HOPPER,
        Blackwell = "blackwell" => sys::NVML_DEVICE_ARCH_BLACKWELL,
        Unknown = "unknown" => sys::NVML_DEVICE_ARCH_UNKNOWN,
    }
}

impl Architecture {
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

    /// Whether this is `than` or newer (an unknown architecture is
    /// neither).
    pub fn at_least(self, than: Self) -> bool {
        self != Self::Unknown && than != Self::Unknown && self as u8 >= than as u8
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
