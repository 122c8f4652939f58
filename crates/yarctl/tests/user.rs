#![allow(clippy::unwrap_used, clippy::expect_used)]
//! `yarctl user` as operators run it, several at once: every add lands
//! (writers are serialized on `<users>.lock`) and the file stays private.

use std::os::unix::fs::PermissionsExt;
use std::process::Command;

const YARCTL: &str = env!("CARGO_BIN_EXE_yarctl");

#[test]
fn parallel_user_adds_all_land() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let kids: Vec<_> = (0..12)
        .map(|i| {
            Command::new(YARCTL)
                .args([
                    "user",
                    "add",
                    &format!("user{i}"),
                    "--password",
                    "a-long-secret",
                ])
                .args(["--scheme", "SHA512-CRYPT"])
                .arg("--data")
                .arg(&data)
                .spawn()
                .unwrap()
        })
        .collect();
    for mut k in kids {
        assert!(k.wait().unwrap().success());
    }
    let out = Command::new(YARCTL)
        .args(["user", "list", "--data"])
        .arg(&data)
        .output()
        .unwrap();
    assert!(out.status.success());
    let listed = String::from_utf8_lossy(&out.stdout);
    for i in 0..12 {
        assert!(
            listed.lines().any(|l| l.trim() == format!("user{i}")),
            "user{i} lost: {listed}"
        );
    }
    let mode = std::fs::metadata(data.join("users"))
        .unwrap()
        .permissions()
        .mode()
        & 0o777;
    assert_eq!(mode, 0o600, "the users file holds hashes");
}
