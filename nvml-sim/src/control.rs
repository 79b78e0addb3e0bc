//! The control socket: another process injects faults into a running
//! simulated fleet. Protocol (README, "Control protocol"): one request per
//! line, a TOML inline table with an `action` key; one reply per line,
//! `ok <text>` or `error <text>`.

use crate::fault::{parse_inline, Fault};
use crate::state::{lock, CHANGED};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;

/// Binds the socket and serves it on a background thread for the life of
/// the process (it must outlive nvmlShutdown to deliver `driver-load`).
pub fn start(path: PathBuf) -> std::io::Result<()> {
    if path.exists() {
        // A socket left by an earlier run would make bind fail.
        let _ = std::fs::remove_file(&path);
    }
    let listener = UnixListener::bind(&path)?;
    std::thread::Builder::new()
        .name("nvml-sim-control".into())
        .spawn(move || {
            for conn in listener.incoming().flatten() {
                let _ = std::thread::Builder::new()
                    .name("nvml-sim-client".into())
                    .spawn(move || serve(conn));
            }
        })?;
    Ok(())
}

fn serve(conn: UnixStream) {
    let Ok(mut writer) = conn.try_clone() else {
        return;
    };
    for line in BufReader::new(conn).lines() {
        let Ok(line) = line else { return };
        if line.trim().is_empty() {
            continue;
        }
        let reply = match handle(&line) {
            Ok(text) => format!("ok {text}\n"),
            Err(text) => format!("error {}\n", text.replace('\n', " ")),
        };
        if writer.write_all(reply.as_bytes()).is_err() {
            return;
        }
    }
}

/// Executes one request line and returns the reply text.
pub fn handle(line: &str) -> Result<String, crate::value::Invalid> {
    let table = parse_inline(line)?;
    let action = table
        .get("action")
        .and_then(|v| v.as_str())
        .ok_or("request has no `action`")?;
    match action {
        "calls" => Ok(crate::calls::to_inline()),
        "driver-time" => Ok(crate::latency::to_inline()),
        "reset-calls" => {
            crate::calls::reset();
            crate::latency::reset();
            Ok("call counters cleared".into())
        }
        "status" => {
            let st = lock();
            let sim = st.sim.as_ref().ok_or("not initialized")?;
            Ok(format!(
                "{{ scenario = {:?}, gpus = {}, seconds = {:.3}, scenario_seconds = {:.3}, initialized = {}, driver_loaded = {} }}",
                sim.scenario,
                sim.gpus.len(),
                sim.t(),
                sim.scenario_t(),
                st.refcount,
                sim.driver_loaded
            ))
        }
        _ => {
            let fault = Fault::from_table(table)?;
            let mut st = lock();
            let sim = st
                .sim
                .as_mut()
                .ok_or("the simulated driver has not been initialized")?;
            sim.advance();
            let result = sim.apply(&fault);
            CHANGED.notify_all();
            result
        }
    }
}
