//! Where the exporter finds the driver's libnvidia-ml when the dynamic
//! loader does not (no `--nvml.library`, no `--simulate`): nvml-sim is
//! installed as `libnvidia-ml.so.1` at each place a driver puts it on a host
//! mounted at `--path.rootfs` (this architecture's multiarch directory,
//! `/usr/lib/aarch64-linux-gnu` on Grace; `/usr/lib64`; `/usr/lib`; the GPU
//! Operator's driver root under it), and the exporter must load it from
//! there and serve the simulated GPUs.

use crate::common;

use std::path::Path;

use common::Exporter;

fn multiarch() -> String {
    format!("usr/lib/{}-linux-gnu", std::env::consts::ARCH)
}

/// Starts the exporter on a host root holding the simulator at `rel`
/// (made by `install`), and checks it serves dgx-h100's 8 GPUs from there.
fn serves_from(rel: &str, install: impl Fn(&Path, &Path)) {
    let root = tempfile::tempdir().unwrap();
    let lib = root.path().join(rel).join("libnvidia-ml.so.1");
    std::fs::create_dir_all(lib.parent().unwrap()).unwrap();
    install(&common::sim_library(), &lib);
    let rootfs = format!("--path.rootfs={}", root.path().display());
    let e = Exporter::start(
        &[
            rootfs.as_str(),
            &format!("--collect.interval={}", common::TEST_INTERVAL),
        ],
        &[("NVML_SIM_SCENARIO", "dgx-h100")],
    );
    e.wait_ready();
    let text = e.scrape_until("8 GPUs", |t| t.matches("\nnvidia_gpu_info{").count() == 8);
    assert_eq!(
        common::value(&text, "nvml_exporter_nvml_up", &[]),
        Some(1.0)
    );
    let want = format!("library={}", root.path().join(rel).display());
    assert!(
        e.log()
            .lines()
            .any(|l| l.contains("NVML initialized") && l.contains(&want)),
        "{rel}: the log does not name the library under the root:\n{}",
        e.log()
    );
}

fn copy(from: &Path, to: &Path) {
    std::fs::copy(from, to).unwrap();
}

#[test]
fn the_library_is_found_in_each_driver_directory_of_the_host_root() {
    for rel in [
        multiarch(),
        "usr/lib64".to_string(),
        "usr/lib".to_string(),
        format!("run/nvidia/driver/{}", multiarch()),
        "run/nvidia/driver/usr/lib64".to_string(),
    ] {
        serves_from(&rel, copy);
    }
}

/// A driver installs `libnvidia-ml.so.1` as a link to the versioned file,
/// absolute on some distributions: followed inside the host root, not in
/// the container's.
#[test]
fn an_absolute_link_is_followed_inside_the_host_root() {
    serves_from("usr/lib64", |sim, lib| {
        let real = lib.parent().unwrap().join("libnvidia-ml.so.580.95.05");
        std::fs::copy(sim, &real).unwrap();
        std::os::unix::fs::symlink("/usr/lib64/libnvidia-ml.so.580.95.05", lib).unwrap();
    });
}

#[test]
fn without_a_library_anywhere_the_error_names_where_it_looked() {
    let root = tempfile::tempdir().unwrap();
    let rootfs = format!("--path.rootfs={}", root.path().display());
    let e = Exporter::start(&[rootfs.as_str()], &[]);
    e.wait_serving();
    let want = root.path().join(multiarch()).join("libnvidia-ml.so.1");
    assert!(
        e.wait_log(
            &want.display().to_string(),
            std::time::Duration::from_secs(30)
        ),
        "the error does not name {}:\n{}",
        want.display(),
        e.log()
    );
    let text = e.scrape();
    assert_eq!(
        common::value(&text, "nvml_exporter_nvml_up", &[]),
        Some(0.0)
    );
}
