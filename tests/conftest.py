"""Shared fixtures for the Python end-to-end tests.

They drive the real binaries built by `cargo build --workspace`: the
exporter in target/debug and the simulated driver libnvml_sim.so.
"""
