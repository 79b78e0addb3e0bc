//! What an NVML error means for the sampler, and the per-GPU tally of
//! failures that backs `nvml_exporter_nvml_errors_total`.

use std::collections::{BTreeMap, BTreeSet};

use nvml_wrapper::error::NvmlError;

/// How the sampler reacts to a failed call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Class {
    /// The GPU or driver does not offer this reading: the value is absent,
    /// and that is not an error.
    Absent,
    /// The GPU fell off the bus: every further call on it will fail too.
    Lost,
    /// The driver went away underneath us (unloaded, or NVML lost its
    /// initialization): NVML must be re-initialized.
    DriverGone,
    /// A real failure of this one reading, counted under this name.
    Error(String),
}

/// `NVML_ERROR_DEPRECATED`: nvml-wrapper 0.13 has no variant for it and
/// hands it over as `UnexpectedVariant(26)`. nvml.h (R570+): "The
/// requested functionality has been deprecated"; NVIDIA's deprecation
/// notices: "Removed functions will return the NVML error code
/// NVML_ERROR_DEPRECATED". A removed call is a reading the driver no
/// longer offers, like a missing symbol: absent, not an error.
pub const NVML_ERROR_DEPRECATED: u32 = 26;

pub fn classify(err: &NvmlError) -> Class {
    match err {
        NvmlError::NotSupported
        | NvmlError::FunctionNotFound
        | NvmlError::FailedToLoadSymbol(_)
        | NvmlError::UnexpectedVariant(NVML_ERROR_DEPRECATED) => Class::Absent,
        NvmlError::GpuLost => Class::Lost,
        NvmlError::DriverNotLoaded | NvmlError::Uninitialized | NvmlError::LibRmVersionMismatch => {
            Class::DriverGone
        }
        other => Class::Error(error_name(other)),
    }
}

/// NVML's error in lower snake case, the spelling of the `error` label.
pub fn error_name(err: &NvmlError) -> String {
    #[allow(deprecated)]
    let name = match err {
        NvmlError::Utf8Error(_) => "invalid_utf8",
        NvmlError::NulError(_) => "nul_in_string",
        NvmlError::LibloadingError(_) => "library_load",
        NvmlError::FailedToLoadSymbol(_) => "function_not_found",
        NvmlError::StringTooLong { .. } => "string_too_long",
        NvmlError::IncorrectBits(_) => "incorrect_bits",
        NvmlError::UnexpectedVariant(code) => return format!("unexpected_code_{code}"),
        NvmlError::SetReleaseFailed => "set_release_failed",
        NvmlError::GetPciInfoFailed => "get_pci_info_failed",
        NvmlError::PciInfoToCFailed => "pci_info_to_c_failed",
        NvmlError::Uninitialized => "uninitialized",
        NvmlError::InvalidArg => "invalid_argument",
        NvmlError::NotSupported => "not_supported",
        NvmlError::NoPermission => "no_permission",
        NvmlError::AlreadyInitialized => "already_initialized",
        NvmlError::NotFound => "not_found",
        NvmlError::InsufficientSize(_) => "insufficient_size",
        NvmlError::InsufficientPower => "insufficient_power",
        NvmlError::DriverNotLoaded => "driver_not_loaded",
        NvmlError::Timeout => "timeout",
        NvmlError::IrqIssue => "irq_issue",
        NvmlError::LibraryNotFound => "library_not_found",
        NvmlError::FunctionNotFound => "function_not_found",
        NvmlError::CorruptedInfoROM => "corrupted_inforom",
        NvmlError::GpuLost => "gpu_is_lost",
        NvmlError::ResetRequired => "reset_required",
        NvmlError::OperatingSystem => "operating_system",
        NvmlError::LibRmVersionMismatch => "lib_rm_version_mismatch",
        NvmlError::InUse => "in_use",
        NvmlError::InsufficientMemory => "insufficient_memory",
        NvmlError::NoData => "no_data",
        NvmlError::VgpuEccNotSupported => "vgpu_ecc_not_supported",
        NvmlError::Unknown => "unknown",
        #[allow(unreachable_patterns)]
        _ => "other",
    };
    name.to_string()
}

/// Failed calls of one GPU, counted per (family, error). Each distinct
/// (family, error) is logged the first time only, so a persistent failure
/// does not flood the log every poll.
#[derive(Debug, Default, Clone)]
pub struct ErrorBook {
    counts: BTreeMap<(&'static str, String), u64>,
    logged: BTreeSet<(&'static str, String)>,
}

impl ErrorBook {
    /// Counts one failure; returns true when it is the first of its kind
    /// (the caller logs it then).
    pub fn record(&mut self, family: &'static str, error: &str) -> bool {
        *self.counts.entry((family, error.to_string())).or_insert(0) += 1;
        self.logged.insert((family, error.to_string()))
    }

    pub fn counts(&self) -> Vec<crate::snapshot::NvmlErrorCount> {
        self.counts
            .iter()
            .map(|((family, error), count)| crate::snapshot::NvmlErrorCount {
                family,
                error: error.clone(),
                count: *count,
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unsupported_and_missing_functions_are_absent_not_errors() {
        assert_eq!(classify(&NvmlError::NotSupported), Class::Absent);
        assert_eq!(classify(&NvmlError::FunctionNotFound), Class::Absent);
        assert_eq!(
            classify(&NvmlError::FailedToLoadSymbol("x".into())),
            Class::Absent
        );
    }

    #[test]
    fn a_deprecated_call_is_absent_not_an_unexpected_code() {
        // R580 marks nvmlDeviceGetTemperature, the throttle-reason getters,
        // the violation status and fabric info v1 DEPRECATED(13.0); once
        // removed they answer 26, which was counted every poll as
        // `unexpected_code_26`.
        assert_eq!(classify(&NvmlError::UnexpectedVariant(26)), Class::Absent);
        assert_eq!(
            classify(&NvmlError::UnexpectedVariant(25)),
            Class::Error("unexpected_code_25".into())
        );
    }

    #[test]
    fn lost_and_driver_failures_are_distinguished() {
        assert_eq!(classify(&NvmlError::GpuLost), Class::Lost);
        assert_eq!(classify(&NvmlError::DriverNotLoaded), Class::DriverGone);
        assert_eq!(classify(&NvmlError::Uninitialized), Class::DriverGone);
        assert_eq!(
            classify(&NvmlError::Timeout),
            Class::Error("timeout".into())
        );
        assert_eq!(
            classify(&NvmlError::UnexpectedVariant(999)),
            Class::Error("unexpected_code_999".into())
        );
    }

    #[test]
    fn book_counts_every_failure_but_logs_each_kind_once() {
        let mut book = ErrorBook::default();
        assert!(book.record("ecc", "timeout"));
        assert!(!book.record("ecc", "timeout"));
        assert!(book.record("power", "timeout"));
        let counts = book.counts();
        assert_eq!(counts.len(), 2);
        assert_eq!(counts[0].family, "ecc");
        assert_eq!(counts[0].count, 2);
        assert_eq!(counts[1].count, 1);
    }
}
