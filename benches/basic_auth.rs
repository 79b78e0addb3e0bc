//! What a basic-auth check costs, through the same `WebConfigWatcher` the
//! server uses: a wrong password and an unknown user must cost the same
//! (one bcrypt verification each, so a client cannot tell which users
//! exist), and a right password is served from the cache after the first.
//!
//! `cargo bench --bench basic_auth`; figures in docs/web-config.md.

use std::time::Duration;

use base64::Engine;
use criterion::{criterion_group, criterion_main, Criterion};
use hyper::header::HeaderValue;
use nvml_exporter::web_config::{AuthDecision, WebConfigWatcher};

/// The cost exporter-toolkit's docs use in their example hashes.
const COST: u32 = 10;

fn header(user: &str, password: &str) -> HeaderValue {
    let b64 = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
    HeaderValue::from_str(&format!("Basic {b64}")).expect("ASCII header")
}

fn basic_auth(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("web.yml");
    let hash = bcrypt::hash("right", COST).expect("bcrypt hash");
    std::fs::write(&path, format!("basic_auth_users:\n  alice: {hash}\n")).expect("write config");
    let watcher = WebConfigWatcher::new_unwatched(&path).expect("valid web config");

    let mut group = c.benchmark_group(format!("basic_auth_bcrypt_cost_{COST}"));
    group
        .sample_size(10)
        .measurement_time(Duration::from_secs(10));
    for (name, user, password, expected) in [
        ("wrong_password", "alice", "wrong", AuthDecision::Denied),
        ("unknown_user", "mallory", "wrong", AuthDecision::Denied),
        (
            "right_password_cached",
            "alice",
            "right",
            AuthDecision::Allowed,
        ),
    ] {
        let h = header(user, password);
        assert_eq!(watcher.authorize(Some(&h)), expected, "{name}");
        group.bench_function(name, |b| b.iter(|| watcher.authorize(Some(&h))));
    }
    group.finish();
}

criterion_group!(benches, basic_auth);
criterion_main!(benches);
