//! `NVML_BRAND_*` as a type (nvml.h `nvmlBrandType_t`): what a board
//! file's `brand` says, what the model answers `nvmlDeviceGetBrand` with,
//! and what the importer reads from a capture's product brand.

use nvml_wrapper_sys::bindings as sys;
use serde::{Deserialize, Serialize};

/// A brand, by its board-file name (nvml.h's name in kebab case).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum Brand {
    Unknown,
    Quadro,
    Tesla,
    Nvs,
    Grid,
    Geforce,
    Titan,
    NvidiaVapps,
    NvidiaVpc,
    NvidiaVcs,
    NvidiaVws,
    NvidiaCloudGaming,
    QuadroRtx,
    NvidiaRtx,
    Nvidia,
    GeforceRtx,
    TitanRtx,
}

impl Brand {
    /// Every brand, in the order board-file errors list them.
    pub const ALL: [Brand; 17] = [
        Self::Unknown,
        Self::Quadro,
        Self::Tesla,
        Self::Nvs,
        Self::Grid,
        Self::Geforce,
        Self::Titan,
        Self::NvidiaVapps,
        Self::NvidiaVpc,
        Self::NvidiaVcs,
        Self::NvidiaVws,
        Self::NvidiaCloudGaming,
        Self::QuadroRtx,
        Self::NvidiaRtx,
        Self::Nvidia,
        Self::GeforceRtx,
        Self::TitanRtx,
    ];

    /// Its board-file name.
    pub fn name(self) -> &'static str {
        match self {
            Self::Unknown => "unknown",
            Self::Quadro => "quadro",
            Self::Tesla => "tesla",
            Self::Nvs => "nvs",
            Self::Grid => "grid",
            Self::Geforce => "geforce",
            Self::Titan => "titan",
            Self::NvidiaVapps => "nvidia-vapps",
            Self::NvidiaVpc => "nvidia-vpc",
            Self::NvidiaVcs => "nvidia-vcs",
            Self::NvidiaVws => "nvidia-vws",
            Self::NvidiaCloudGaming => "nvidia-cloud-gaming",
            Self::QuadroRtx => "quadro-rtx",
            Self::NvidiaRtx => "nvidia-rtx",
            Self::Nvidia => "nvidia",
            Self::GeforceRtx => "geforce-rtx",
            Self::TitanRtx => "titan-rtx",
        }
    }

    /// Its `NVML_BRAND_*` value.
    pub fn nvml(self) -> u32 {
        match self {
            Self::Unknown => sys::nvmlBrandType_enum_NVML_BRAND_UNKNOWN,
            Self::Quadro => sys::nvmlBrandType_enum_NVML_BRAND_QUADRO,
            Self::Tesla => sys::nvmlBrandType_enum_NVML_BRAND_TESLA,
            Self::Nvs => sys::nvmlBrandType_enum_NVML_BRAND_NVS,
            Self::Grid => sys::nvmlBrandType_enum_NVML_BRAND_GRID,
            Self::Geforce => sys::nvmlBrandType_enum_NVML_BRAND_GEFORCE,
            Self::Titan => sys::nvmlBrandType_enum_NVML_BRAND_TITAN,
            Self::NvidiaVapps => sys::nvmlBrandType_enum_NVML_BRAND_NVIDIA_VAPPS,
            Self::NvidiaVpc => sys::nvmlBrandType_enum_NVML_BRAND_NVIDIA_VPC,
            Self::NvidiaVcs => sys::nvmlBrandType_enum_NVML_BRAND_NVIDIA_VCS,
            Self::NvidiaVws => sys::nvmlBrandType_enum_NVML_BRAND_NVIDIA_VWS,
            Self::NvidiaCloudGaming => sys::nvmlBrandType_enum_NVML_BRAND_NVIDIA_CLOUD_GAMING,
            Self::QuadroRtx => sys::nvmlBrandType_enum_NVML_BRAND_QUADRO_RTX,
            Self::NvidiaRtx => sys::nvmlBrandType_enum_NVML_BRAND_NVIDIA_RTX,
            Self::Nvidia => sys::nvmlBrandType_enum_NVML_BRAND_NVIDIA,
            Self::GeforceRtx => sys::nvmlBrandType_enum_NVML_BRAND_GEFORCE_RTX,
            Self::TitanRtx => sys::nvmlBrandType_enum_NVML_BRAND_TITAN_RTX,
        }
    }

    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|b| b.name() == name)
    }

    pub fn from_nvml(code: u32) -> Option<Self> {
        Self::ALL.into_iter().find(|b| b.nvml() == code)
    }
}

impl TryFrom<String> for Brand {
    type Error = crate::value::Invalid;
    fn try_from(name: String) -> Result<Self, Self::Error> {
        Self::from_name(&name).ok_or_else(|| {
            format!(
                "unknown brand `{name}` (known: {})",
                Self::ALL.map(Self::name).join(", ")
            )
            .into()
        })
    }
}

impl From<Brand> for String {
    fn from(b: Brand) -> String {
        b.name().into()
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
