//! An nvml.h enumeration as a board-file type: each variant with its
//! board-file name and its NVML value, decoded from the name (an unknown
//! one refused with the names known) and written back as it.

/// Declares the enum, `ALL` (in declaration order, the order errors list
/// the names in), `name`, `nvml`, `from_name`, `from_nvml`, and the serde
/// conversions through the name. `$what` names the key in errors.
macro_rules! named_nvml_enum {
    (
        $(#[$meta:meta])*
        pub enum $ty:ident ($what:literal) {
            $($variant:ident = $name:literal => $nvml:expr,)+
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
        #[serde(try_from = "String", into = "String")]
        pub enum $ty {
            $($variant,)+
        }

        impl $ty {
            /// Every value, in the order board-file errors list them.
            pub const ALL: [$ty; [$(stringify!($variant)),+].len()] = [$(Self::$variant),+];

            /// Its board-file name.
            pub fn name(self) -> &'static str {
                match self {
                    $(Self::$variant => $name,)+
                }
            }

            /// Its value in nvml.h.
            pub fn nvml(self) -> u32 {
                match self {
                    $(Self::$variant => $nvml,)+
                }
            }

            pub fn from_name(name: &str) -> Option<Self> {
                Self::ALL.into_iter().find(|v| v.name() == name)
            }

            pub fn from_nvml(code: u32) -> Option<Self> {
                Self::ALL.into_iter().find(|v| v.nvml() == code)
            }
        }

        impl TryFrom<String> for $ty {
            type Error = crate::value::Invalid;
            fn try_from(name: String) -> Result<Self, Self::Error> {
                Self::from_name(&name).ok_or_else(|| {
                    format!(
                        concat!("unknown ", $what, " `{}` (known: {})"),
                        name,
                        Self::ALL.map(Self::name).join(", ")
                    )
                    .into()
                })
            }
        }

        impl From<$ty> for String {
            fn from(v: $ty) -> String {
                v.name().into()
            }
        }
    };
}

pub(crate) use named_nvml_enum;
