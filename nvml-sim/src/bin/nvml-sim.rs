//! `nvml-sim`: injects faults into a running simulated driver through its
//! control socket (`NVML_SIM_CONTROL`), and reads its call counters.
//!
//! Every command becomes one protocol line (a TOML inline table); options
//! `--some-name VALUE` become keys `some_name`. See README.md.

use nvml_sim::fault::Fault;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::process::ExitCode;

const USAGE: &str = "\
usage: nvml-sim [--socket PATH] COMMAND [OPTIONS]

The socket defaults to $NVML_SIM_CONTROL.

commands:
  xid --gpu N --code C [--gpu-instance N] [--compute-instance N] [--log-only true] [--detail TEXT]
                                    (--log-only: to the kernel log (NVML_SIM_KMSG) only, not NVML;
                                     --detail: the log line's words after the process)
  recovery-action --gpu N --value V (field 230: 0-7, or any other number)
  clear-ecc --gpu N                 (nvidia-smi -p 0: volatile ECC counters to 0, no reset)
  ecc --gpu N [--error-type corrected|uncorrected] [--location dram|l1|l2|register-file|sram] [--count N]
  retire-page --gpu N [--cause sbe|dbe] [--pending true|false]
  remap-row --gpu N [--kind correctable|uncorrectable] [--pending true|false] [--failure true|false]
  lose --gpu N
  hang --gpu N [--seconds S]        (no --seconds: until `release`)
  release --gpu N
  slow --gpu N --ms MS              (0 restores)
  driver-unload | driver-load
  mig-reconfigure --gpu N --profiles P1,P2,...
  throttle --gpu N --reasons R1,R2,...   (hw-thermal-slowdown, hw-slowdown, sw-power-cap,
                                          sw-thermal-slowdown, sync-boost, hw-power-brake-slowdown;
                                          empty to clear)
  process start --gpu N --name NAME --memory-mib M [--pid P] [--kind compute|graphics]
                [--gpu-instance N] [--compute-instance N]
  process stop --pid P
  process use --pid P [--sm-percent P] [--memory-percent P] [--encoder-percent P] [--decoder-percent P]
  load --gpu N --percent P
  nvlink-state --gpu N --link L --up true|false
  nvlink-errors --gpu N --link L [--counter C] [--count N]
                                    (NVLink 1-4: replay, recovery, crc-flit, crc-data, ecc-data;
                                     NVLink5, Blackwell: recovery, recovery-failed, effective, symbol)
  c2c-state --gpu N --link L --up true|false    (NVLink-C2C to Grace: GB200, GB300)
  c2c-errors --gpu N --link L [--counter crc|replay|replay-b2b] [--count N]
  fabric --gpu N --state not-started|in-progress|completed [--registered true|false]
  fabric-health --gpu N [--summary healthy|unhealthy|limited-capacity]
                [--degraded-bandwidth B] [--route-recovery B] [--route-unhealthy B]
                [--access-timeout-recovery B]   (B: true, false or N/A)
                [--incorrect-configuration none|incorrect-sysguid|incorrect-chassis-sn|
                 no-partition|insufficient-nvlinks|incompatible-gpu-fw|invalid-location|
                 gpu-state-invalid]
  power-smoothing --gpu N --lifetime-percent P
  power-limit --gpu N --watts W
  mig-mode --gpu N --enabled true|false [--activate true|false]
  sram-threshold --gpu N [--exceeded true|false]
  pcie --gpu N [--width LANES] [--replays N]
  calls | driver-time | reset-calls | status
  raw '{ action = \"...\", ... }'

offline (no socket):
  check SCENARIO       validate a scenario file or built-in name; errors name file and line
                       (a capture, `nvidia-smi -q -x` or `-q` output, is checked as imported)
  capture [--library PATH] [--name NAME] [--timings FILE]
                       walk a real NVML (default libnvidia-ml.so.1, as the dynamic loader finds it)
                       with the calls the exporter makes and write the scenario that replays it;
                       --timings: each function's call count and latency (microseconds) to FILE,
                       and each field id's timed alone: a latency profile (README)
  import CAPTURE       write the scenario that replays a capture of a real host
                       (`nvidia-smi -q -x > host.xml` or `nvidia-smi -q > host.txt`) to stdout;
                       notes (identifiers made unique, an excerpt...) on stderr
  scenarios            list the built-in scenarios
  boards               list the built-in boards (what `model = ...` names)
  drivers              list the modelled driver behaviours: the version each
                       branch claims, the versions that behave as it, its CUDA
";

fn value_for(key: &str, raw: &str) -> toml::Value {
    if key == "profiles" || key == "reasons" {
        return toml::Value::Array(
            raw.split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(|s| toml::Value::String(s.into()))
                .collect(),
        );
    }
    if let Ok(i) = raw.parse::<i64>() {
        return toml::Value::Integer(i);
    }
    if let Ok(f) = raw.parse::<f64>() {
        return toml::Value::Float(f);
    }
    match raw {
        "true" => toml::Value::Boolean(true),
        "false" => toml::Value::Boolean(false),
        _ => toml::Value::String(raw.into()),
    }
}

/// Turns the command line (after the socket option) into a request line.
fn request(args: &[String]) -> Result<String, nvml_sim::value::Invalid> {
    let (cmd, rest) = args.split_first().ok_or("no command given")?;
    let (action, rest) = match cmd.as_str() {
        "process" => {
            let (sub, rest) = rest
                .split_first()
                .ok_or("process: expected `start`, `stop` or `use`")?;
            match sub.as_str() {
                "start" | "stop" | "use" => (format!("process-{sub}"), rest),
                other => return Err(format!("process: unknown subcommand `{other}`").into()),
            }
        }
        "raw" => {
            let line = rest.join(" ");
            return Ok(line);
        }
        other => (other.to_string(), rest),
    };
    let mut table = toml::Table::new();
    table.insert("action".into(), toml::Value::String(action.clone()));
    let mut it = rest.iter();
    while let Some(opt) = it.next() {
        let key = opt
            .strip_prefix("--")
            .ok_or_else(|| format!("unexpected argument `{opt}`"))?;
        let value = it
            .next()
            .ok_or_else(|| format!("option `{opt}` needs a value"))?;
        let key = key.replace('-', "_");
        let v = value_for(&key, value);
        table.insert(key, v);
    }
    let line = toml::Value::Table(table.clone()).to_string();
    if !matches!(
        action.as_str(),
        "calls" | "driver-time" | "reset-calls" | "status"
    ) {
        // Validate here so mistakes get a message before anything is sent.
        Fault::from_table(table)?;
    }
    Ok(line)
}

fn check(scenario: Option<&String>) -> ExitCode {
    let Some(scenario) = scenario else {
        eprintln!("nvml-sim: check needs a scenario file or built-in name");
        return ExitCode::from(2);
    };
    match nvml_sim::scenario::load(scenario) {
        Ok(s) => {
            for w in &s.warnings {
                eprintln!("{}", w.as_warning());
            }
            let mig: usize = s
                .gpus
                .iter()
                .map(|g| g.mig.as_ref().map(|m| m.len()).unwrap_or(0))
                .sum();
            println!(
                "{}: ok: {} GPUs, {} MIG instances, {} timeline entries",
                s.name,
                s.gpus.len(),
                mig,
                s.timeline.len()
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("{e}");
            ExitCode::FAILURE
        }
    }
}

/// `nvml-sim import CAPTURE`: the scenario on stdout, checked by loading
/// it as the library would; what the import changed or left out on stderr,
/// as the exporter logs it for `--simulate`.
fn import(path: Option<&String>) -> ExitCode {
    let Some(path) = path else {
        eprintln!("nvml-sim: import needs a capture file (nvidia-smi -q -x or -q output)");
        return ExitCode::from(2);
    };
    // A pipe or process substitution is read too (bounded), as `cat`
    // would: this is a command, not a library inside another process.
    let text = match nvml_sim::import::read(std::path::Path::new(path), false) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("{path}: {e}");
            return ExitCode::FAILURE;
        }
    };
    let stem = std::path::Path::new(path)
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or("host");
    let import_error = |e: nvml_sim::import::ParseError| {
        eprintln!(
            "{path}:{}: {}",
            e.line,
            match &e.element {
                Some(el) => format!("<{el}>: {}", e.message),
                None => e.message.clone(),
            }
        );
        ExitCode::FAILURE
    };
    let capture = match nvml_sim::import::capture(&text, stem) {
        Ok(c) => c,
        Err(e) => return import_error(e),
    };
    // The text a person reads; the check below builds from the types.
    let imported = match capture.write() {
        Ok(i) => i,
        Err(e) => return import_error(e),
    };
    // What we print must load: the same check the library makes.
    match nvml_sim::scenario::from_import(capture, path) {
        Ok(s) => {
            for w in &s.warnings {
                eprintln!("{}", w.as_warning());
            }
        }
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::FAILURE;
        }
    }
    print!("{}", imported.scenario);
    ExitCode::SUCCESS
}

/// `nvml-sim capture [--library PATH] [--name NAME] [--timings FILE]`.
fn capture(args: &[String]) -> ExitCode {
    let (mut library, mut name) = ("libnvidia-ml.so.1".to_string(), "host".to_string());
    let mut timings = String::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let target = match a.as_str() {
            "--library" => &mut library,
            "--name" => &mut name,
            "--timings" => &mut timings,
            other => {
                eprintln!("nvml-sim: capture: unexpected argument `{other}`\n\n{USAGE}");
                return ExitCode::from(2);
            }
        };
        let Some(v) = it.next() else {
            eprintln!("nvml-sim: capture: {a} needs a value");
            return ExitCode::from(2);
        };
        *target = v.clone();
    }
    match nvml_sim::capture::capture(std::path::Path::new(&library), &name) {
        Ok(captured) => {
            if !timings.is_empty() {
                if let Err(e) = std::fs::write(&timings, captured.timings_table()) {
                    eprintln!("nvml-sim: capture: cannot write {timings}: {e}");
                    return ExitCode::FAILURE;
                }
            }
            print!("{}", captured.scenario);
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("nvml-sim: capture: {e}");
            ExitCode::FAILURE
        }
    }
}

fn main() -> ExitCode {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    if args.is_empty() || args[0] == "--help" || args[0] == "-h" {
        print!("{USAGE}");
        return if args.is_empty() {
            ExitCode::from(2)
        } else {
            ExitCode::SUCCESS
        };
    }
    match args[0].as_str() {
        "check" => return check(args.get(1)),
        "import" => return import(args.get(1)),
        "capture" => return capture(&args[1..]),
        "boards" => {
            for m in nvml_sim::model::builtins() {
                println!("{:<16} {}", m.key, m.name);
            }
            return ExitCode::SUCCESS;
        }
        "drivers" => {
            print!("{}", nvml_sim::personality::listing());
            return ExitCode::SUCCESS;
        }
        "scenarios" => {
            for (name, text) in nvml_sim::scenario::BUILTINS {
                let description = text
                    .lines()
                    .find_map(|l| l.strip_prefix("description = "))
                    .unwrap_or("\"\"");
                println!("{name:<12} {}", description.trim_matches('"'));
            }
            return ExitCode::SUCCESS;
        }
        _ => {}
    }
    let mut socket = nvml_sim::settings::control_socket().map(|p| p.to_string_lossy().into_owned());
    if args[0] == "--socket" {
        if args.len() < 2 {
            eprintln!("nvml-sim: --socket needs a path");
            return ExitCode::from(2);
        }
        socket = Some(args[1].clone());
        args.drain(..2);
    }
    let Some(socket) = socket else {
        eprintln!("nvml-sim: no control socket: pass --socket PATH or set NVML_SIM_CONTROL");
        return ExitCode::from(2);
    };
    let line = match request(&args) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("nvml-sim: {e}\n\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let reply = (|| -> std::io::Result<String> {
        let mut conn = UnixStream::connect(&socket)?;
        conn.write_all(format!("{}\n", line.trim()).as_bytes())?;
        let mut reply = String::new();
        BufReader::new(conn).read_line(&mut reply)?;
        Ok(reply)
    })();
    match reply {
        Ok(r) if r.starts_with("ok") => {
            println!(
                "{}",
                r.trim_end().strip_prefix("ok").unwrap_or("").trim_start()
            );
            ExitCode::SUCCESS
        }
        Ok(r) => {
            eprintln!(
                "nvml-sim: {}",
                r.trim_end()
                    .strip_prefix("error")
                    .unwrap_or(&r)
                    .trim_start()
            );
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("nvml-sim: cannot talk to {socket}: {e}");
            ExitCode::FAILURE
        }
    }
}
