//! NVLink-C2C on the `gb200-nvl72` tray (driver 580.173.02) through
//! `nvmlDeviceGetFieldValues`: the link count, each link's status, speed,
//! error counters and power state with `scopeId` = link, and the
//! `c2c-state` / `c2c-errors` faults moving one link of one GPU. One test:
//! the fleet is process-wide.

#![allow(unsafe_code, clippy::disallowed_methods)]

use crate::common;

use crate::common::{cli, ok, raw_fields};

const INVALID_ARGUMENT: u32 = 2;
const NOT_SUPPORTED: u32 = 3;

/// (return code, value as u64) of each entry.
fn fields(nvml: &nvml_wrapper::Nvml, gpu: u32, req: &[(u32, u32)]) -> Vec<(u32, u64)> {
    let d = nvml.device_by_index(gpu).unwrap();
    raw_fields(nvml, &d, req)
        .iter()
        .map(|f| {
            // SAFETY: the union's 64-bit member covers every value type.
            (f.nvmlReturn, unsafe { f.value.ullVal })
        })
        .collect()
}

fn link(l: u32) -> Vec<(u32, u32)> {
    [171, 172, 231, 232, 233, 234].map(|id| (id, l)).to_vec()
}

#[test]
fn the_gb200_c2c_links_answer_per_link_and_faults_move_one() {
    in_own_process!(the_gb200_c2c_links_answer_per_link_and_faults_move_one);
    let dir = std::env::temp_dir().join(format!("nvml-sim-c2c-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let socket = dir.join("control.sock");
    std::env::set_var("NVML_SIM_SCENARIO", "gb200-nvl72");
    std::env::set_var("NVML_SIM_CONTROL", &socket);
    std::env::remove_var("NVML_SIM_DRIVER");
    let nvml = common::init();

    for gpu in 0..4 {
        assert_eq!(fields(&nvml, gpu, &[(170, 0)]), [(0, 10)], "GPU {gpu}");
        for l in 0..10 {
            let got: Vec<_> = fields(&nvml, gpu, &link(l))
                .iter()
                .map(|&(rc, v)| (rc, v as u32))
                .collect();
            assert_eq!(
                got,
                [(0, 1), (0, 45_000), (0, 0), (0, 0), (0, 0), (0, 0)],
                "GPU {gpu} link {l}"
            );
        }
        let past = fields(&nvml, gpu, &link(10));
        assert!(
            past.iter().all(|&(rc, _)| rc == INVALID_ARGUMENT),
            "{past:?}"
        );
    }

    ok(
        &socket,
        &["c2c-state", "--gpu", "1", "--link", "4", "--up", "false"],
    );
    ok(
        &socket,
        &[
            "c2c-errors",
            "--gpu",
            "1",
            "--link",
            "4",
            "--counter",
            "replay-b2b",
            "--count",
            "3",
        ],
    );
    ok(&socket, &["c2c-errors", "--gpu", "1", "--link", "4"]);
    let got = fields(&nvml, 1, &link(4));
    assert_eq!(got[0], (0, 0), "status inactive");
    assert_eq!(got[1].0, NOT_SUPPORTED, "no speed while inactive");
    assert_eq!(
        [got[2].1, got[3].1, got[4].1],
        [0, 1, 3],
        "crc, replay, replay_b2b"
    );
    let other = fields(&nvml, 0, &link(4));
    assert_eq!(
        [other[0].1 as u32, other[3].1 as u32],
        [1, 0],
        "GPU 0 untouched"
    );

    // A link the board lacks, a counter that does not exist: refused.
    let (success, _, err) = cli(
        &socket,
        &["c2c-state", "--gpu", "0", "--link", "10", "--up", "false"],
    );
    assert!(
        !success && err.contains("has 10 NVLink-C2C links, no link 10"),
        "{err}"
    );
    let (success, _, err) = cli(
        &socket,
        &[
            "c2c-errors",
            "--gpu",
            "0",
            "--link",
            "0",
            "--counter",
            "symbol",
        ],
    );
    assert!(!success && err.contains("symbol"), "{err}");
}
