//! Compile-time check that every export has exactly the signature
//! nvml-wrapper-sys declares for it: each line assigns our function to a
//! slot whose type is taken from the `NvmlLib` field of the same name, so a
//! mismatch in any argument or the return type fails to compile.
//! `every_export_is_checked` keeps this list complete.

use nvml_wrapper_sys::bindings::NvmlLib;

/// `None` typed as the function-pointer type of an `NvmlLib` field.
fn slot<T>(_field: impl Fn(&NvmlLib) -> &Result<T, libloading::Error>) -> Option<T> {
    None
}

macro_rules! same {
    ($($name:ident),* $(,)?) => {
        #[allow(unused_assignments)]
        fn check_signatures() {
            $(
                let mut s = slot(|l: &NvmlLib| &l.$name);
                s = Some(nvml_sim::$name);
                let _ = s;
            )*
        }
        const CHECKED: &[&str] = &[$(stringify!($name)),*];
    };
}

same!(
    nvmlComputeInstanceGetInfo,
    nvmlComputeInstanceGetInfo_v2,
    nvmlDeviceGetApplicationsClock,
    nvmlDeviceGetArchitecture,
    nvmlDeviceGetAttributes_v2,
    nvmlDeviceGetBAR1MemoryInfo,
    nvmlDeviceGetBoardPartNumber,
    nvmlDeviceGetBrand,
    nvmlDeviceGetClock,
    nvmlDeviceGetClockInfo,
    nvmlDeviceGetComputeInstanceId,
    nvmlDeviceGetComputeMode,
    nvmlDeviceGetCpuAffinity,
    nvmlDeviceGetCpuAffinityWithinScope,
    nvmlDeviceGetGridLicensableFeatures_v4,
    nvmlDeviceGetMemoryAffinity,
    nvmlDeviceGetNumaNodeId,
    nvmlDeviceGetNvLinkRemoteDeviceType,
    nvmlDeviceGetNvLinkRemotePciInfo_v2,
    nvmlDeviceGetTopologyCommonAncestor,
    nvmlDeviceGetVirtualizationMode,
    nvmlDeviceGetComputeRunningProcesses,
    nvmlDeviceGetComputeRunningProcesses_v2,
    nvmlDeviceGetComputeRunningProcesses_v3,
    nvmlDeviceGetConfComputeMemSizeInfo,
    nvmlDeviceGetCount,
    nvmlDeviceGetCount_v2,
    nvmlDeviceGetCudaComputeCapability,
    nvmlDeviceGetCurrPcieLinkGeneration,
    nvmlDeviceGetCurrPcieLinkWidth,
    nvmlDeviceGetCurrentClocksEventReasons,
    nvmlDeviceGetCurrentClocksThrottleReasons,
    nvmlDeviceGetDecoderUtilization,
    nvmlDeviceGetDefaultApplicationsClock,
    nvmlDeviceGetDefaultEccMode,
    nvmlDeviceGetDeviceHandleFromMigDeviceHandle,
    nvmlDeviceGetDisplayActive,
    nvmlDeviceGetDisplayMode,
    nvmlDeviceGetDriverModel,
    nvmlDeviceGetDriverModel_v2,
    nvmlDeviceGetEccMode,
    nvmlDeviceGetEncoderUtilization,
    nvmlDeviceGetEnforcedPowerLimit,
    nvmlDeviceGetFanSpeed,
    nvmlDeviceGetFanSpeed_v2,
    nvmlDeviceGetFieldValues,
    nvmlDeviceGetGpuFabricInfo,
    nvmlDeviceGetGpuFabricInfoV,
    nvmlDeviceGetGpuInstanceById,
    nvmlDeviceGetGpuInstanceId,
    nvmlDeviceGetGpuInstancePossiblePlacements_v2,
    nvmlDeviceGetGpuInstanceProfileInfo,
    nvmlDeviceGetGpuInstanceProfileInfoV,
    nvmlDeviceGetGpuInstanceRemainingCapacity,
    nvmlDeviceGetGpuInstances,
    nvmlDeviceGetGpuMaxPcieLinkGeneration,
    nvmlDeviceGetGraphicsRunningProcesses,
    nvmlDeviceGetGraphicsRunningProcesses_v2,
    nvmlDeviceGetGraphicsRunningProcesses_v3,
    nvmlDeviceGetHandleByIndex,
    nvmlDeviceGetHandleByIndex_v2,
    nvmlDeviceGetHandleByPciBusId,
    nvmlDeviceGetHandleByPciBusId_v2,
    nvmlDeviceGetHandleBySerial,
    nvmlDeviceGetHandleByUUID,
    nvmlDeviceGetIndex,
    nvmlDeviceGetInforomVersion,
    nvmlDeviceGetJpgUtilization,
    nvmlDeviceGetMPSComputeRunningProcesses_v3,
    nvmlDeviceGetMarginTemperature,
    nvmlDeviceGetMaxClockInfo,
    nvmlDeviceGetMaxCustomerBoostClock,
    nvmlDeviceGetMaxMigDeviceCount,
    nvmlDeviceGetMaxPcieLinkGeneration,
    nvmlDeviceGetMaxPcieLinkWidth,
    nvmlDeviceGetMemoryErrorCounter,
    nvmlDeviceGetMemoryInfo,
    nvmlDeviceGetMemoryInfo_v2,
    nvmlDeviceGetMigDeviceHandleByIndex,
    nvmlDeviceGetMigMode,
    nvmlDeviceGetMinorNumber,
    nvmlDeviceGetName,
    nvmlDeviceGetNumFans,
    nvmlDeviceGetNvLinkErrorCounter,
    nvmlDeviceGetNvLinkState,
    nvmlDeviceGetOfaUtilization,
    nvmlDeviceGetPciInfo_v3,
    nvmlDeviceGetPcieReplayCounter,
    nvmlDeviceGetPcieSpeed,
    nvmlDeviceGetPcieThroughput,
    nvmlDeviceGetPerformanceState,
    nvmlDeviceGetPersistenceMode,
    nvmlDeviceGetPowerManagementDefaultLimit,
    nvmlDeviceGetPowerManagementLimit,
    nvmlDeviceGetPowerManagementLimitConstraints,
    nvmlDeviceGetPowerManagementMode,
    nvmlDeviceGetPowerState,
    nvmlDeviceGetPowerUsage,
    nvmlDeviceGetProcessUtilization,
    nvmlDeviceGetSamples,
    nvmlDeviceGetProcessesUtilizationInfo,
    nvmlDeviceGetRemappedRows,
    nvmlDeviceGetRetiredPages,
    nvmlDeviceGetRetiredPagesPendingStatus,
    nvmlDeviceGetRetiredPages_v2,
    nvmlDeviceGetRowRemapperHistogram,
    nvmlDeviceGetRunningProcessDetailList,
    nvmlDeviceGetSerial,
    nvmlDeviceGetSramEccErrorStatus,
    nvmlDeviceGetSupportedClocksEventReasons,
    nvmlDeviceGetSupportedClocksThrottleReasons,
    nvmlDeviceGetSupportedEventTypes,
    nvmlDeviceGetTemperature,
    nvmlDeviceGetTemperatureThreshold,
    nvmlDeviceGetTemperatureV,
    nvmlDeviceGetTotalEccErrors,
    nvmlDeviceGetTotalEnergyConsumption,
    nvmlDeviceGetUUID,
    nvmlDeviceGetUtilizationRates,
    nvmlDeviceGetVbiosVersion,
    nvmlDeviceGetViolationStatus,
    nvmlDeviceIsMigDeviceHandle,
    nvmlDeviceRegisterEvents,
    nvmlErrorString,
    nvmlEventSetCreate,
    nvmlEventSetFree,
    nvmlEventSetWait,
    nvmlEventSetWait_v2,
    nvmlGpmMetricsGet,
    nvmlGpmMigSampleGet,
    nvmlGpmQueryDeviceSupport,
    nvmlGpmSampleAlloc,
    nvmlGpmSampleFree,
    nvmlGpmSampleGet,
    nvmlGpuInstanceGetComputeInstanceById,
    nvmlGpuInstanceGetComputeInstanceProfileInfo,
    nvmlGpuInstanceGetComputeInstanceProfileInfoV,
    nvmlGpuInstanceGetComputeInstances,
    nvmlGpuInstanceGetInfo,
    nvmlInit,
    nvmlInitWithFlags,
    nvmlInit_v2,
    nvmlShutdown,
    nvmlSystemGetCudaDriverVersion,
    nvmlSystemGetCudaDriverVersion_v2,
    nvmlSystemGetDriverVersion,
    nvmlSystemGetNVMLVersion,
    nvmlSystemGetProcessName,
    nvmlDeviceGetModuleId,
    nvmlDeviceGetPlatformInfo,
);

#[test]
fn signatures_match_nvml_wrapper_sys() {
    check_signatures();
}

/// Every `nvml*` function defined in `src/ffi` must be in the list above.
#[test]
fn every_export_is_checked() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/ffi");
    let mut exported = Vec::new();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let text = std::fs::read_to_string(entry.unwrap().path()).unwrap();
        for piece in text.split("fn ").skip(1) {
            let name: String = piece
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            if name.starts_with("nvml") && piece[name.len()..].starts_with('(') {
                exported.push(name);
            }
        }
    }
    exported.sort();
    exported.dedup();
    let missing: Vec<&String> = exported
        .iter()
        .filter(|n| !CHECKED.contains(&n.as_str()))
        .collect();
    assert!(
        missing.is_empty(),
        "exports without a signature check: {missing:?}"
    );
    assert_eq!(
        exported.len(),
        CHECKED.len(),
        "the list names functions that are not exported"
    );
}
