//! Link flags that make the cdylib behave like the real driver library.
//!
//! - soname `libnvidia-ml.so.1`: the name every NVML client asks the dynamic
//!   loader for, so a symlink of that name resolves to this file.
//! - `-z nodelete`: nvml-wrapper unloads the library in `Nvml::shutdown`;
//!   our background threads (control socket, ticker) would then run unmapped
//!   code. Keeping the image mapped makes unload a no-op, as with the driver.
fn main() {
    let target_os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    if target_os == "linux" {
        println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libnvidia-ml.so.1");
        println!("cargo:rustc-cdylib-link-arg=-Wl,-z,nodelete");
    }
    println!("cargo:rerun-if-changed=build.rs");
}
