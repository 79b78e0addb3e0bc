//! Entry point: parse the flags, run, turn the outcome into an exit code.

use std::process::ExitCode;

use nvml_exporter::{app, cli};

fn main() -> ExitCode {
    // Before any thread exists (the flags' parsing starts none).
    nvml_exporter::footprint::one_malloc_arena();
    let config = match cli::parse_from(std::env::args_os()) {
        Ok(config) => config,
        // Prints the error (or --help, --version) and exits 2 (or 0).
        Err(e) => e.exit(),
    };
    match app::run(config) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!(error = %e, "exiting");
            ExitCode::FAILURE
        }
    }
}
