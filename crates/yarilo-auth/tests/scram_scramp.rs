//! SCRAM-SHA-256 and SCRAM-SHA-1 against an independent client: Python's
//! `scramp` (installed by scripts/setup-dev), over the real auth service.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;

use yarilo_auth::db::{Db, PasswdFile};
use yarilo_auth::{hash_password, Authenticator, Scheme};

const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/scram_scramp.py");

async fn scramp(addr: std::net::SocketAddr, mech: &str, user: &str, password: &str) -> String {
    let python = common::require("python3", "python3 and python3-scramp");
    let out = tokio::process::Command::new(python)
        .arg(SCRIPT)
        .args([
            &addr.ip().to_string(),
            &addr.port().to_string(),
            mech,
            user,
            password,
        ])
        .kill_on_drop(true)
        .output()
        .await
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !stderr.contains("No module named 'scramp'"),
        "Python's scramp is missing: run scripts/setup-dev"
    );
    assert!(out.status.success(), "scramp client failed: {stderr}");
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

fn doveadm_scram(password: &str) -> String {
    let doveadm = common::require("doveadm", "dovecot-core");
    let out = std::process::Command::new(doveadm)
        .args(["pw", "-s", "SCRAM-SHA-256", "-p", password])
        .output()
        .unwrap();
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

#[tokio::test]
async fn scramp_logs_in_with_scram_sha_256_and_sha_1() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("users");
    std::fs::write(
        &path,
        format!(
            "keys256:{}\nkeys1:{}\nplain:{{PLAIN}}pläin pw\ndove:{}\nargon:{}\n",
            hash_password(Scheme::ScramSha256, "keys pw").unwrap(),
            hash_password(Scheme::ScramSha1, "keys pw").unwrap(),
            doveadm_scram("dove pw"),
            hash_password(Scheme::Argon2id, "argon pw").unwrap(),
        ),
    )
    .unwrap();
    let db = Db::PasswdFile(PasswdFile::new(&path, Scheme::Plain));
    let auth = Arc::new(Authenticator::new(common::settings(), vec![db], vec![]));
    let server = common::start(auth).await;
    let a = server.addr;

    assert_eq!(
        scramp(a, "SCRAM-SHA-256", "keys256", "keys pw").await,
        "OK keys256"
    );
    assert_eq!(
        scramp(a, "SCRAM-SHA-1", "keys1", "keys pw").await,
        "OK keys1"
    );
    assert_eq!(
        scramp(a, "SCRAM-SHA-256", "plain", "pläin pw").await,
        "OK plain"
    );
    assert_eq!(
        scramp(a, "SCRAM-SHA-1", "plain", "pläin pw").await,
        "OK plain"
    );
    assert_eq!(
        scramp(a, "SCRAM-SHA-256", "dove", "dove pw").await,
        "OK dove"
    );

    assert_eq!(
        scramp(a, "SCRAM-SHA-256", "keys256", "wrong").await,
        "FAIL code=bad_credentials"
    );
    assert_eq!(
        scramp(a, "SCRAM-SHA-256", "nobody", "x").await,
        "FAIL code=bad_credentials"
    );
    // Stored keys of the other hash, or a one-way hash: SCRAM cannot work.
    assert_eq!(
        scramp(a, "SCRAM-SHA-1", "keys256", "keys pw").await,
        "FAIL code=bad_credentials"
    );
    assert_eq!(
        scramp(a, "SCRAM-SHA-256", "argon", "argon pw").await,
        "FAIL code=bad_credentials"
    );
}
