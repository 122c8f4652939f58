#![allow(clippy::unwrap_used, clippy::expect_used)]
//! `yarilo single` and `yarilo config` as a user runs them: the real
//! binary, real sockets, real signals.
//!
//! The embedded default binds fixed ports (1143, 1110, …): a test that runs
//! it does so in a private network namespace, so that parallel runs on one
//! machine never meet. Every other test binds ephemeral ports only.

mod common;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::{get, post, write_config, Process, BIN};
use yarilo_testkit::rerun::in_private_network;

/// A configuration that serves no mail protocol: for tests of the
/// process itself (data directory, probes, watchdog), so that nothing
/// binds a fixed port.
const NO_SERVICES: &str = "services:\n  imap: { enabled: false }\n  imaps: { enabled: false }\n  pop3: { enabled: false }\n  pop3s: { enabled: false }\n  lmtp: { enabled: false }\n  submission: { enabled: false }\n  submissions: { enabled: false }\n  managesieve: { enabled: false }\n  jmap: { enabled: false }\n";

/// `yarilo single` in `cwd` with `args`.
fn start(cwd: &Path, args: &[&str]) -> Process {
    let mut cmd = Command::new(BIN);
    cmd.arg("single").args(args).current_dir(cwd);
    Process::start(cmd)
}

#[test]
fn single_with_no_arguments_serves_probes_and_exits_cleanly_on_sigterm() {
    in_private_network(
        "single_with_no_arguments_serves_probes_and_exits_cleanly_on_sigterm",
        no_arguments,
    );
}

fn no_arguments() {
    let cwd = tempfile::tempdir().unwrap();
    let mut run = start(cwd.path(), &[]);
    // The documented default ports, on loopback.
    for (name, addr) in [
        ("imap ", "127.0.0.1:1143"),
        ("imaps ", "127.0.0.1:1993"),
        ("pop3 ", "127.0.0.1:1110"),
        ("pop3s ", "127.0.0.1:1995"),
        ("lmtp ", "127.0.0.1:2424"),
        ("submission ", "127.0.0.1:1587"),
        ("submissions ", "127.0.0.1:1465"),
    ] {
        assert_eq!(run.announced(name).trim(), addr, "{name}");
        std::net::TcpStream::connect(addr).unwrap_or_else(|e| panic!("{name}{addr}: {e}"));
    }
    assert_eq!(get(&format!("{}/healthz", run.telemetry)).0, 200);
    let (status, body) = get(&format!("{}/readyz", run.telemetry));
    assert_eq!(status, 200, "{body}");
    let (status, text) = get(&format!("{}/metrics", run.telemetry));
    assert_eq!(status, 200);
    let scrape = prometheus_parse::Scrape::parse(text.lines().map(|l| Ok(l.to_string()))).unwrap();
    let info = scrape
        .samples
        .iter()
        .find(|s| s.metric == "yarilo_build_info")
        .expect("build info metric");
    assert_eq!(info.labels.get("component"), Some("single"));
    let cert = cwd.path().join("yarilo-data/tls/server.crt");
    assert!(
        cert.exists(),
        "self-signed certificate generated under the data dir"
    );
    let first = std::fs::read(&cert).unwrap();

    // The default grace period is 10 s; with no sessions it exits at once.
    assert_eq!(run.sigterm_and_wait(Duration::from_secs(10)), Some(0));

    // A second start reuses the certificate.
    let mut again = start(cwd.path(), &[]);
    assert_eq!(std::fs::read(&cert).unwrap(), first);
    assert_eq!(again.sigterm_and_wait(Duration::from_secs(10)), Some(0));
}

#[test]
fn data_flag_moves_the_data_directory() {
    let cwd = tempfile::tempdir().unwrap();
    let data = cwd.path().join("elsewhere");
    let cfg = write_config(cwd.path(), NO_SERVICES);
    let mut run = start(
        cwd.path(),
        &[
            "--data",
            data.to_str().unwrap(),
            "--config",
            cfg.to_str().unwrap(),
        ],
    );
    assert!(data.join("tls/server.key").exists());
    assert!(!cwd.path().join("yarilo-data").exists());
    assert_eq!(run.sigterm_and_wait(Duration::from_secs(10)), Some(0));
}

#[test]
fn config_check_names_a_misspelt_key_and_its_line() {
    let dir = tempfile::tempdir().unwrap();
    let bad = write_config(
        dir.path(),
        "general:\n  hostname: mx.example.org\ntelemetry:\n  listen: 127.0.0.1:9100\n  liveness_watchdog:\n    liveness_watchdog_enabeld: true\n",
    );
    let out = Command::new(BIN)
        .args(["config", "check", "--config"])
        .arg(&bad)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("telemetry.liveness_watchdog.liveness_watchdog_enabeld"),
        "{err}"
    );
    assert!(err.contains(":6:"), "line number in {err}");

    let good = write_config(dir.path(), "services:\n  imaps:\n    port: 10993\n");
    let out = Command::new(BIN)
        .args(["config", "check", "--config"])
        .arg(&good)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn config_dump_shows_defaults_and_hides_nothing_it_should_not() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = write_config(dir.path(), "services:\n  imaps:\n    port: 10993\n");
    let out = Command::new(BIN)
        .args(["config", "dump", "--config"])
        .arg(&cfg)
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("port: 10993"), "{text}");
    assert!(
        text.contains("liveness_watchdog_failure_threshold: 3"),
        "{text}"
    );
    // The dump is itself a valid configuration.
    let again = write_config(dir.path(), &text);
    let out = Command::new(BIN)
        .args(["config", "check", "--config"])
        .arg(&again)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn watchdog_fault_injection_fails_healthz_after_the_threshold() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = write_config(
        dir.path(),
        &format!("general:\n  data_dir: data\ntelemetry:\n  liveness_watchdog:\n    liveness_watchdog_enabled: true\n    liveness_watchdog_interval_seconds: 2\n    liveness_watchdog_timeout_seconds: 1\n    liveness_watchdog_failure_threshold: 2\n    liveness_watchdog_fault_injection_enabled: true\n{NO_SERVICES}"),
    );
    let run = start(dir.path(), &["--config", cfg.to_str().unwrap()]);
    assert_eq!(get(&format!("{}/healthz", run.telemetry)).0, 200);
    assert_eq!(
        post(&format!("{}/debug/fault/deadlock", run.telemetry)),
        202
    );
    // Still healthy right after: one failed check is below the threshold.
    assert_eq!(get(&format!("{}/healthz", run.telemetry)).0, 200);
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut seen_503 = false;
    while Instant::now() < deadline {
        if get(&format!("{}/healthz", run.telemetry)).0 == 503 {
            seen_503 = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(
        seen_503,
        "/healthz never failed after the injected deadlock"
    );
    let (_, metrics) = get(&format!("{}/metrics", run.telemetry));
    assert!(
        metrics.contains("yarilo_telemetry_watchdog_healthy 0"),
        "{metrics}"
    );
}

#[test]
fn without_fault_injection_the_debug_endpoint_does_not_exist() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = write_config(
        dir.path(),
        &format!("general:\n  data_dir: data\ntelemetry:\n  liveness_watchdog:\n    liveness_watchdog_enabled: true\n{NO_SERVICES}"),
    );
    let run = start(dir.path(), &["--config", cfg.to_str().unwrap()]);
    assert_eq!(
        post(&format!("{}/debug/fault/deadlock", run.telemetry)),
        404
    );
    assert_eq!(get(&format!("{}/healthz", run.telemetry)).0, 200);
}
