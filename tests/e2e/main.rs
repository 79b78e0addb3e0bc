//! The integration tests that drive the real binary, render snapshots or
//! read the repository, in one test binary: each former test file is a
//! module (`cargo test --test e2e MODULE::`), and the crate is linked once
//! instead of once per file. The tests that load the simulated driver into
//! their own process (`tests/sampler/`, `tests/exposition_oracle.rs`) are
//! binaries of their own, which run each such test in a child process of
//! themselves: the driver's state is per process.

#[path = "../common/mod.rs"]
mod common;
#[path = "../common/metrics_doc.rs"]
mod metrics_doc;
#[path = "../common/pki.rs"]
mod pki;
#[path = "../common/snapshots.rs"]
mod snapshots;
#[path = "../common/tls.rs"]
mod tls;

mod budget;
mod c2c;
mod cli;
mod compat;
mod config_file;
mod docs;
mod driver_faults;
mod drivers;
mod exposition_content;
mod exposition_docs;
mod exposition_tools;
mod function_length;
mod golden;
mod gpm_engines;
mod hostile;
mod http;
mod kmsg;
mod library_search;
mod module_layers;
mod nvlink_err;
mod parser_bounds;
mod platform;
mod privilege;
mod replay;
mod repo_docs;
mod scenarios;
mod state_file;
mod topology;
mod triage;
mod verdict;
mod web_config_fuzz;
mod web_config_tls;
mod xid_catalog;
