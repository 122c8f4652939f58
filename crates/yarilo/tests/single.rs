#![allow(clippy::unwrap_used, clippy::expect_used)]
//! `yarilo single` and `yarilo config` as a user runs them: the real
//! binary, real sockets, real signals.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_yarilo");

struct Running {
    child: Child,
    telemetry: String,
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `yarilo single` in `cwd` with `args`, telemetry on an ephemeral
/// loopback port, and waits for the line announcing the telemetry address.
fn start(cwd: &Path, args: &[&str]) -> Running {
    let mut child = Command::new(BIN)
        .arg("single")
        .args(args)
        .current_dir(cwd)
        .env("TELEMETRY_LISTEN", "127.0.0.1:0")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn yarilo");
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if let Some(rest) = line.trim_start().strip_prefix("telemetry   http://") {
                let addr = rest.split_whitespace().next().unwrap_or("").to_string();
                let _ = tx.send(addr);
            }
        }
    });
    let addr = rx
        .recv_timeout(Duration::from_secs(60))
        .expect("yarilo single did not announce its telemetry address");
    Running {
        child,
        telemetry: format!("http://{addr}"),
    }
}

fn get(url: &str) -> (u16, String) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let r = reqwest::get(url).await.unwrap();
        (r.status().as_u16(), r.text().await.unwrap())
    })
}

fn post(url: &str) -> u16 {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        reqwest::Client::new()
            .post(url)
            .send()
            .await
            .unwrap()
            .status()
            .as_u16()
    })
}

fn sigterm_and_wait(run: &mut Running, within: Duration) -> Option<i32> {
    let pid = run.child.id().to_string();
    Command::new("kill").args(["-TERM", &pid]).status().unwrap();
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if let Some(status) = run.child.try_wait().unwrap() {
            return status.code();
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    None
}

#[test]
fn single_with_no_arguments_serves_probes_and_exits_cleanly_on_sigterm() {
    let cwd = tempfile::tempdir().unwrap();
    let mut run = start(cwd.path(), &[]);
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
    assert_eq!(sigterm_and_wait(&mut run, Duration::from_secs(10)), Some(0));

    // A second start reuses the certificate.
    let mut again = start(cwd.path(), &[]);
    assert_eq!(std::fs::read(&cert).unwrap(), first);
    assert_eq!(
        sigterm_and_wait(&mut again, Duration::from_secs(10)),
        Some(0)
    );
}

#[test]
fn data_flag_moves_the_data_directory() {
    let cwd = tempfile::tempdir().unwrap();
    let data = cwd.path().join("elsewhere");
    let mut run = start(cwd.path(), &["--data", data.to_str().unwrap()]);
    assert!(data.join("tls/server.key").exists());
    assert!(!cwd.path().join("yarilo-data").exists());
    assert_eq!(sigterm_and_wait(&mut run, Duration::from_secs(10)), Some(0));
}

fn write_config(dir: &Path, text: &str) -> std::path::PathBuf {
    let path = dir.join("yarilo.yaml");
    std::fs::write(&path, text).unwrap();
    path
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
        "general:\n  data_dir: data\ntelemetry:\n  liveness_watchdog:\n    liveness_watchdog_enabled: true\n    liveness_watchdog_interval_seconds: 2\n    liveness_watchdog_timeout_seconds: 1\n    liveness_watchdog_failure_threshold: 2\n    liveness_watchdog_fault_injection_enabled: true\n",
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
        "general:\n  data_dir: data\ntelemetry:\n  liveness_watchdog:\n    liveness_watchdog_enabled: true\n",
    );
    let run = start(dir.path(), &["--config", cfg.to_str().unwrap()]);
    assert_eq!(
        post(&format!("{}/debug/fault/deadlock", run.telemetry)),
        404
    );
    assert_eq!(get(&format!("{}/healthz", run.telemetry)).0, 200);
}
