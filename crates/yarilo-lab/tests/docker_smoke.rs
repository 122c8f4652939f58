#![allow(clippy::unwrap_used, clippy::expect_used)]
//! The lab's smoke subset on the docker substrate, as CI runs it: the
//! short variant of `backend-failover` (kill -9 of a backend pod under
//! IMAP and LMTP load, every checker true) and two negative controls that
//! must come out false (`control-split-ring`: single writer and
//! convergence; `control-tls`: certificates replaced without a restart).
//!
//! Images: `YARILO_LAB_IMAGES` (the `images/build` output, so CI builds
//! release binaries once) or else throwaway images from the `yarilo`
//! binary this test run built. Needs the Docker engine and root (the
//! cluster DNS binds port 53 on the run's bridge; packet rules go into pod
//! namespaces): scripts/setup-dev checks both.

use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn yarilo_binary() -> PathBuf {
    // target/<profile>/deps/docker_smoke-… → target/<profile>/yarilo
    let exe = std::env::current_exe().unwrap();
    let dir = exe.parent().and_then(|d| d.parent()).unwrap();
    let bin = dir.join("yarilo");
    assert!(
        bin.exists(),
        "{} is missing: build it first (cargo build -p yarilo --bin yarilo), or set YARILO_LAB_IMAGES to the images/build output",
        bin.display()
    );
    bin
}

fn run(scenario: &str) {
    let out = tempfile::tempdir().unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_yarilo-lab"));
    cmd.current_dir(root())
        .args([
            "run",
            &format!("scenarios/{scenario}.yaml"),
            "--smoke",
            "--out",
        ])
        .arg(out.path());
    if std::env::var_os("YARILO_LAB_IMAGES").is_none() {
        cmd.arg("--binary").arg(yarilo_binary());
    }
    let o = cmd.output().expect("running yarilo-lab");
    let stdout = String::from_utf8_lossy(&o.stdout);
    println!("{stdout}");
    let results = std::fs::read_to_string(out.path().join("results.json")).unwrap_or_default();
    assert!(
        o.status.success(),
        "{scenario}: verdicts did not match\n{stdout}\n{}\n{results}",
        String::from_utf8_lossy(&o.stderr)
            .lines()
            .rev()
            .take(40)
            .collect::<Vec<_>>()
            .join("\n")
    );
    for f in [
        "results.json",
        "history.jsonl",
        "faults.jsonl",
        "junit.xml",
        "environment.json",
        "reproduce.txt",
        "timeline.html",
    ] {
        assert!(out.path().join(f).exists(), "{scenario}: no {f}");
    }
}

#[test]
fn backend_failover_smoke_passes() {
    run("backend-failover");
}

#[test]
fn the_split_ring_control_fails_single_writer_and_convergence() {
    run("control-split-ring");
}

#[test]
fn the_unrestarted_rotation_control_fails_tls() {
    run("control-tls");
}
