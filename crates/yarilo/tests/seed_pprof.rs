#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Profiling a running component (deployment seed, "Profiling a live
//! pod"): `yarilo single` with `telemetry.pprof` on, under IMAP load, and
//! `yarctl pprof top` — the project's stand-in for `go tool pprof -top`
//! on hosts without Go — reading the CPU, heap and block profiles it
//! serves. No index page; a warning at start.

mod common;

use std::path::Path;
use std::process::Command;

use common::{free_port, get, Process, BIN};

fn yarctl() -> std::path::PathBuf {
    let path = Path::new(BIN).with_file_name("yarctl");
    assert!(
        path.exists(),
        "{} is missing: build the workspace (`cargo build --workspace` or scripts/test)",
        path.display()
    );
    path
}

/// `yarctl pprof top <url>`: its output, failing the test on an error.
fn top(url: &str) -> String {
    let out = Command::new(yarctl())
        .args(["pprof", "top", url, "--count", "15"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "yarctl pprof top {url}: {}{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    println!("yarctl pprof top {url}\n{stdout}");
    stdout
}

fn samples(top: &str) -> u64 {
    top.lines()
        .find_map(|l| l.strip_prefix("Samples: "))
        .and_then(|l| l.split(',').next())
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0)
}

const LOAD: &str = r#"
import imaplib, os, time
m = imaplib.IMAP4("127.0.0.1", int(os.environ["PORT"]))
m.login("alice", "secret")
for i in range(150):
    body = ("Subject: load %d\r\n\r\n" % i + "the quick brown fox jumps over the lazy dog\r\n" * 40).encode()
    m.append("INBOX", None, None, body)
m.select("INBOX")
end = time.time() + float(os.environ["SECONDS"])
n = 0
while time.time() < end:
    m.search(None, 'BODY', '"lazy cat"')
    n += 1
m.logout()
print("searches", n)
"#;

#[test]
fn yarctl_reads_cpu_heap_and_block_profiles_from_a_running_component() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(d.join("users"), "alice:{PLAIN}secret::::::\n").unwrap();
    let port = free_port();
    let config = d.join("yarilo.yaml");
    std::fs::write(
        &config,
        format!(
            "general:\n  data_dir: {d}\n  hostname: test.invalid\n\
             auth:\n  disable_plaintext_auth: false\n\
             telemetry:\n  pprof:\n    enabled: true\n    heapEnabled: true\n    \
             block_profile_rate: 1\n    mutex_profile_fraction: 1\n\
             services:\n  imap:\n    address: 127.0.0.1\n    port: {port}\n  imaps:\n    enabled: false\n  \
             pop3:\n    enabled: false\n  pop3s:\n    enabled: false\n  lmtp:\n    enabled: false\n  \
             submission:\n    enabled: false\n  submissions:\n    enabled: false\n  \
             managesieve:\n    enabled: false\n  jmap:\n    enabled: false\n",
            d = d.display()
        ),
    )
    .unwrap();
    let log = d.join("single.log");
    let mut cmd = Command::new(BIN);
    // Denser heap sampling than the built-in one sample per 512 KiB, so a
    // short test sees samples (jemalloc reads MALLOC_CONF after its
    // compiled-in options).
    cmd.args(["single", "--config", config.to_str().unwrap()])
        .env("MALLOC_CONF", "lg_prof_sample:12");
    let single = Process::start_logged(cmd, &log);
    assert!(single.becomes_ready(), "single ready");
    let t = single.telemetry.clone();
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(
        text.lines()
            .any(|l| l.contains("WARN") && l.contains("profiling is on")),
        "a warning at start:\n{text}"
    );
    assert_eq!(get(&format!("{t}/debug/pprof/")).0, 404, "no index page");

    // Load for longer than the CPU profile runs.
    let load = Command::new("python3")
        .args(["-c", LOAD])
        .env("PORT", port.to_string())
        .env("SECONDS", "8")
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("python3 is required: run scripts/setup-dev");
    std::thread::sleep(std::time::Duration::from_secs(2));
    let cpu = top(&format!("{t}/debug/pprof/profile?seconds=3"));
    assert!(cpu.starts_with("Type: "), "{cpu}");
    assert!(samples(&cpu) > 0, "CPU samples:\n{cpu}");
    assert!(
        cpu.lines().skip(4).any(|l| l.contains("::")),
        "function names resolved:\n{cpu}"
    );
    let out = load.wait_with_output().unwrap();
    assert!(out.status.success(), "the load ran");

    let heap = top(&format!("{t}/debug/pprof/heap"));
    assert!(samples(&heap) > 0, "heap samples:\n{heap}");
    let block = top(&format!("{t}/debug/pprof/block"));
    assert!(block.starts_with("Type: delay (nanoseconds)"), "{block}");
    assert!(samples(&block) > 0, "the APPENDs' lock waits:\n{block}");
    let (status, tasks) = get(&format!("{t}/debug/pprof/tasks"));
    assert_eq!(status, 200);
    assert!(tasks.contains("alive_tasks"), "{tasks}");
}
