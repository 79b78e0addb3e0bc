//! The child-process pattern: a test that needs a driver of its own runs
//! itself in a fresh process of this test binary.
//!
//! The simulated driver is one library per process, and its scenario and
//! clock come from the process's environment, read at the first `nvmlInit`.
//! So a test that loads it starts with `in_own_process!(its_name);`: in the
//! test harness's process that runs the test again, alone, in a child
//! process (`<this binary> <module>::<name> --exact`), and fails with the
//! child's output unless the child passed exactly that one test; in the
//! child it falls through to the test's body. The children run one at a
//! time, as the former one-binary-per-test layout ran them, so a test that
//! measures the driver's timing does not share the machine with another
//! simulated fleet of this binary. nvml-sim's `tests/library/` runs its
//! tests the same way, with this file (`#[path]`).

use std::io::Read;
use std::process::{Command, Stdio};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

/// Set in a child process: the test it runs.
const CHILD_TEST: &str = "NVML_EXPORTER_SAMPLER_CHILD";

/// A child still running after this long is killed, and its test fails
/// with what it printed so far: a wedged child would otherwise wedge the
/// whole binary.
const CHILD_TIMEOUT: Duration = Duration::from_secs(600);

/// One child at a time.
static CHILDREN: Mutex<()> = Mutex::new(());

/// Runs the calling test, `test` of module `module` (`module_path!()`), in
/// a child process and returns `false` when called in the test harness's
/// process; returns `true` in that child, where the test's body runs.
pub fn run_in_own_process(module: &str, test: &str) -> bool {
    // `sampler::call_counts` names the test `call_counts::<test>`.
    let name = match module.split_once("::") {
        Some((_, path)) => format!("{path}::{test}"),
        None => test.to_string(),
    };
    if std::env::var(CHILD_TEST).is_ok_and(|t| t == name) {
        return true;
    }
    let _one_at_a_time = CHILDREN.lock().unwrap_or_else(PoisonError::into_inner);
    let exe = std::env::current_exe().expect("the test binary's path");
    let mut child = Command::new(&exe)
        .args([
            name.as_str(),
            "--exact",
            "--nocapture",
            "--test-threads=1",
            "--include-ignored",
        ])
        .env(CHILD_TEST, &name)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {} for {name}: {e}", exe.display()));
    let stdout = drain(child.stdout.take());
    let stderr = drain(child.stderr.take());
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("waiting for the child") {
            break Some(status);
        }
        if started.elapsed() > CHILD_TIMEOUT {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let stdout = stdout.join().unwrap_or_default();
    let stderr = stderr.join().unwrap_or_default();
    // A child whose filter matched no test exits 0 too: it must have run
    // (and passed) exactly this one. What the test prints comes between
    // the harness's `test <name> ... ` and its `ok`.
    let ran = stdout.contains(&format!("test {name} ... "))
        && stdout.contains("test result: ok. 1 passed;");
    let verdict = match status {
        Some(status) if status.success() && ran => None,
        Some(status) if status.success() => Some(format!(
            "its child process ran no test named {name} ({status})"
        )),
        Some(status) => Some(format!("it failed in its child process ({status})")),
        None => Some(format!(
            "its child process was still running after {CHILD_TIMEOUT:?} and was killed"
        )),
    };
    if let Some(verdict) = verdict {
        panic!(
            "{name}: {verdict}; the child's output follows\n\
             ---- child stdout ----\n{stdout}\n---- child stderr ----\n{stderr}"
        );
    }
    // What the test printed (call counts, timings), for `--nocapture`.
    print!("{stdout}");
    eprint!("{stderr}");
    false
}

/// Reads a child's pipe to its end on a thread of its own, so that a
/// child that prints much never blocks on a full pipe.
fn drain<R: Read + Send + 'static>(pipe: Option<R>) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let mut bytes = Vec::new();
        if let Some(mut pipe) = pipe {
            let _ = pipe.read_to_end(&mut bytes);
        }
        String::from_utf8_lossy(&bytes).into_owned()
    })
}

/// Runs the rest of the calling test in a process of its own (see the
/// module's comment): `in_own_process!(test_name);` as its first line.
macro_rules! in_own_process {
    ($test:ident) => {
        if !$crate::child::run_in_own_process(module_path!(), stringify!($test)) {
            return;
        }
    };
}

/// The helper fails the harness's test, with the child's output, when the
/// child fails, and when it ran no test of that name.
#[test]
fn a_failing_or_missing_child_test_fails_the_parent_with_its_output() {
    let message = |test: &'static str| -> String {
        let failed = std::panic::catch_unwind(|| run_in_own_process(module_path!(), test));
        let payload = failed.expect_err("the parent's test must fail");
        payload
            .downcast_ref::<String>()
            .cloned()
            .unwrap_or_default()
    };
    let failed = message("fails_in_its_own_process");
    assert!(
        failed.contains("it failed in its child process")
            && failed.contains("failed on purpose in its own process"),
        "{failed}"
    );
    let missing = message("no_such_test");
    assert!(
        missing.contains("ran no test named child::no_such_test"),
        "{missing}"
    );
}

/// The fixture of the test above: fails in a child process only.
#[test]
#[ignore = "a fixture, run in a child process by the test above"]
fn fails_in_its_own_process() {
    assert!(
        std::env::var(CHILD_TEST).is_err(),
        "failed on purpose in its own process"
    );
}
