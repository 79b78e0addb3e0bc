//! What `--version` and `nvml_exporter_build_info` say about this build,
//! passed to the compiler as environment variables:
//!
//! - `NVML_EXPORTER_REVISION`: the git commit (12 hex digits), from the
//!   environment when the builder sets it
//!   (the Dockerfile: its build context has no `.git`), else from `git`,
//!   else `unknown` (a source tarball, or no git installed);
//! - `NVML_EXPORTER_BUILD_DATE`: UTC date and time of the build, or of
//!   `SOURCE_DATE_EPOCH` for a reproducible build;
//! - `NVML_EXPORTER_RUSTC`: the compiler's `rustc --version`;
//! - `NVML_EXPORTER_TARGET`: the target triple;
//! - `NVML_EXPORTER_SCENARIOS`: the simulator's built-in scenarios, the
//!   files of `nvml-sim/scenarios/` (what `nvml-sim scenarios` lists), for
//!   `--help`: a scenario added there is named there without an edit here.
//!
//! Nothing here can fail the build: whatever cannot be found is `unknown`.

use std::process::Command;
use std::time::{SystemTime, UNIX_EPOCH};

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=NVML_EXPORTER_REVISION");
    println!("cargo:rerun-if-env-changed=SOURCE_DATE_EPOCH");

    let revision = match std::env::var("NVML_EXPORTER_REVISION") {
        Ok(r) if !r.trim().is_empty() => r.trim().to_string(),
        _ => git_revision().unwrap_or_else(|| "unknown".into()),
    };
    println!("cargo:rustc-env=NVML_EXPORTER_REVISION={revision}");

    let epoch = std::env::var("SOURCE_DATE_EPOCH")
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok())
        .unwrap_or_else(|| {
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_secs())
        });
    println!("cargo:rustc-env=NVML_EXPORTER_BUILD_DATE={}", utc(epoch));

    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let rustc_version =
        output(Command::new(rustc).arg("--version")).unwrap_or_else(|| "rustc unknown".into());
    println!("cargo:rustc-env=NVML_EXPORTER_RUSTC={rustc_version}");
    let target = std::env::var("TARGET").unwrap_or_else(|_| "unknown".into());
    println!("cargo:rustc-env=NVML_EXPORTER_TARGET={target}");

    println!("cargo:rerun-if-changed=nvml-sim/scenarios");
    println!(
        "cargo:rustc-env=NVML_EXPORTER_SCENARIOS={}",
        scenarios().unwrap_or_else(|| "unknown".into())
    );
}

/// The built-in scenarios' names, the default first, then in file-name
/// order: `dgx-h100, dgx-a100, ...`.
fn scenarios() -> Option<String> {
    let mut names: Vec<String> = std::fs::read_dir("nvml-sim/scenarios")
        .ok()?
        .filter_map(|e| {
            let name = e.ok()?.file_name().into_string().ok()?;
            Some(name.strip_suffix(".toml")?.to_string())
        })
        .collect();
    names.sort_by_key(|n| (n != "dgx-h100", n.clone()));
    (!names.is_empty()).then(|| names.join(", "))
}

/// `git rev-parse --short=12 HEAD`; `None` outside a git checkout or
/// without git. Asks cargo to run this again when HEAD moves.
fn git_revision() -> Option<String> {
    let rev = output(Command::new("git").args(["rev-parse", "--short=12", "HEAD"]))?;
    if let Some(p) = output(Command::new("git").args(["rev-parse", "--git-path", "HEAD"])) {
        println!("cargo:rerun-if-changed={p}");
    }
    // The branch's ref, which a commit moves (HEAD itself does not change).
    if let Some(r) = output(Command::new("git").args(["symbolic-ref", "-q", "HEAD"])) {
        if let Some(p) = output(Command::new("git").args(["rev-parse", "--git-path", &r])) {
            println!("cargo:rerun-if-changed={p}");
        }
    }
    Some(rev)
}

fn output(cmd: &mut Command) -> Option<String> {
    let out = cmd.output().ok().filter(|o| o.status.success())?;
    let text = String::from_utf8(out.stdout).ok()?.trim().to_string();
    (!text.is_empty()).then_some(text)
}

/// `YYYY-MM-DDTHH:MM:SSZ` for seconds since the epoch (civil-from-days,
/// proleptic Gregorian calendar).
fn utc(epoch: u64) -> String {
    let days = (epoch / 86_400) as i64;
    let secs = epoch % 86_400;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        secs / 3600,
        secs % 3600 / 60,
        secs % 60
    )
}
