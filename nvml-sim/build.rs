//! Link flags that make the cdylib behave like the real driver library,
//! and the list of built-in data files.
//!
//! - soname `libnvidia-ml.so.1`: the name every NVML client asks the dynamic
//!   loader for, so a symlink of that name resolves to this file.
//! - `-z nodelete`: nvml-wrapper unloads the library in `Nvml::shutdown`;
//!   our background threads (control socket, ticker) would then run unmapped
//!   code. Keeping the image mapped makes unload a no-op, as with the driver.
//! - `boards/*.toml` and `scenarios/*.toml` are compiled in, each under its
//!   file name: adding a board or a scenario is adding a file, with no list
//!   to update beside it.
use std::fmt::Write;
use std::path::Path;

fn main() {
    let target_os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    if target_os == "linux" {
        println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libnvidia-ml.so.1");
        println!("cargo:rustc-cdylib-link-arg=-Wl,-z,nodelete");
    }
    println!("cargo:rerun-if-changed=build.rs");
    let dir = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    let mut out = String::new();
    for (constant, sub) in [
        ("BUILTIN_BOARDS", "boards"),
        ("BUILTIN_SCENARIOS", "scenarios"),
    ] {
        let folder = Path::new(&dir).join(sub);
        println!("cargo:rerun-if-changed={}", folder.display());
        let mut files: Vec<_> = std::fs::read_dir(&folder)
            .unwrap_or_else(|e| panic!("{}: {e}", folder.display()))
            .map(|e| e.expect("readable directory entry").path())
            .filter(|p| p.extension().is_some_and(|e| e == "toml"))
            .collect();
        files.sort();
        writeln!(out, "pub const {constant}: &[(&str, &str)] = &[").unwrap();
        for path in files {
            let stem = path
                .file_stem()
                .and_then(|s| s.to_str())
                .expect("UTF-8 file name");
            writeln!(
                out,
                "    ({stem:?}, include_str!({:?})),",
                path.display().to_string()
            )
            .unwrap();
        }
        writeln!(out, "];").unwrap();
    }
    let dest =
        Path::new(&std::env::var("OUT_DIR").expect("cargo sets OUT_DIR")).join("builtin_files.rs");
    std::fs::write(dest, out).expect("OUT_DIR is writable");
}
