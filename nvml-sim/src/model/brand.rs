//! `NVML_BRAND_*` as a type (nvml.h `nvmlBrandType_t`): what a board
//! file's `brand` says, what the model answers `nvmlDeviceGetBrand` with,
//! and what the importer reads from a capture's product brand.

use super::named::named_nvml_enum;
use nvml_wrapper_sys::bindings as sys;

named_nvml_enum! {
    /// A brand, by its board-file name (nvml.h's name in kebab case).
    pub enum Brand ("brand") {
        Unknown = "unknown" => sys::nvmlBrandType_enum_NVML_BRAND_UNKNOWN,
        Quadro = "quadro" => sys::nvmlBrandType_enum_NVML_BRAND_QUADRO,
        Tesla = "tesla" => sys::nvmlBrandType_enum_NVML_BRAND_TESLA,
        Nvs = "nvs" => sys::nvmlBrandType_enum_NVML_BRAND_NVS,
        Grid = "grid" => sys::nvmlBrandType_enum_NVML_BRAND_GRID,
        Geforce = "geforce" => sys::nvmlBrandType_enum_NVML_BRAND_GEFORCE,
        Titan = "titan" => sys::nvmlBrandType_enum_NVML_BRAND_TITAN,
        NvidiaVapps = "nvidia-vapps" => sys::nvmlBrandType_enum_NVML_BRAND_NVIDIA_VAPPS,
        NvidiaVpc = "nvidia-vpc" => sys::nvmlBrandType_enum_NVML_BRAND_NVIDIA_VPC,
        NvidiaVcs = "nvidia-vcs" => sys::nvmlBrandType_enum_NVML_BRAND_NVIDIA_VCS,
        NvidiaVws = "nvidia-vws" => sys::nvmlBrandType_enum_NVML_BRAND_NVIDIA_VWS,
        NvidiaCloudGaming = "nvidia-cloud-gaming" => sys::nvmlBrandType_enum_NVML_BRAND_NVIDIA_CLOUD_GAMING,
        QuadroRtx = "quadro-rtx" => sys::nvmlBrandType_enum_NVML_BRAND_QUADRO_RTX,
        NvidiaRtx = "nvidia-rtx" => sys::nvmlBrandType_enum_NVML_BRAND_NVIDIA_RTX,
        Nvidia = "nvidia" => sys::nvmlBrandType_enum_NVML_BRAND_NVIDIA,
        GeforceRtx = "geforce-rtx" => sys::nvmlBrandType_enum_NVML_BRAND_GEFORCE_RTX,
        TitanRtx = "titan-rtx" => sys::nvmlBrandType_enum_NVML_BRAND_TITAN_RTX,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_values_round_trip_and_unknown_names_are_refused() {
        for b in Brand::ALL {
            assert_eq!(Brand::from_name(b.name()), Some(b));
            assert_eq!(Brand::from_nvml(b.nvml()), Some(b));
        }
        assert_eq!(Brand::Nvidia.nvml(), 14, "nvml.h NVML_BRAND_NVIDIA");
        let e = Brand::try_from("nvidea".to_string()).unwrap_err();
        assert!(
            e.starts_with("unknown brand `nvidea` (known: unknown, quadro, tesla, nvs, grid"),
            "{e}"
        );
    }

    /// A scenario's board with an unknown brand is refused at the
    /// brand's line, in the words it had when the board was resolved.
    #[test]
    fn an_unknown_brand_in_a_scenario_names_its_line() {
        let text = "[board.mine]\nbase = \"h100-sxm5-80gb\"\n\nbrand = \"nvidea\"\n\n[[gpu]]\nmodel = \"mine\"\n";
        let e = crate::scenario::parse(text, "b.toml", "b").unwrap_err();
        assert_eq!(e.line, Some(4), "{e}");
        assert!(
            e.message.starts_with("unknown brand `nvidea` (known: "),
            "{e}"
        );
        let s =
            crate::scenario::parse(&text.replace("nvidea", "geforce-rtx"), "b.toml", "b").unwrap();
        assert_eq!(
            s.gpus[0].model.brand,
            nvml_wrapper_sys::bindings::nvmlBrandType_enum_NVML_BRAND_GEFORCE_RTX
        );
    }
}
