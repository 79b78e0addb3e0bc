//! The sampler's integration tests: the real poller on the simulated
//! driver, in one test binary. Each former `tests/sampler_*.rs` file is a
//! module (`cargo test --test sampler faults::`), and the crate is linked
//! once instead of once per file.
//!
//! The simulated driver's state, and the environment variables a test sets
//! before its first `nvmlInit`, are per process: each test that loads the
//! driver runs in a child process of this binary (`child.rs`,
//! `in_own_process!`). Tests that never load it run in the harness's
//! process.

#[macro_use]
mod child;
mod support;

mod call_counts;
mod detail_calls;
mod dgx_a100;
mod dgx_h100;
mod driver_absent;
mod driver_restart;
mod driver_time;
mod faults;
mod freshness;
mod schedule;
mod shutdown_hung;
mod workstation;
mod xid;
