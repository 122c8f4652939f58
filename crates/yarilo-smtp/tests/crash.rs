//! A delivery acknowledged with 250 survives SIGKILL of the server right
//! after the acknowledgement: the LMTP server runs in a child process (this
//! test binary re-executed), is killed the moment the client reads 250, and
//! a fresh store over the same maildir must find the message.
//!
//! (SIGKILL keeps the kernel's page cache, so this proves the ordering
//! "append returned → 250", not power-loss durability, which rests on the
//! store's fsyncs.)

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::{BufRead, BufReader};
use std::process::Stdio;

use common::{env_at, messages, store_at, Client};

const TEST: &str = "delivery_acknowledged_with_250_survives_sigkill";
const DIR_ENV: &str = "YARILO_SMTP_CRASH_DIR";
const USERS: &str = "alice@example.org:{PLAIN}pw::::::\n";

/// The child's part: an LMTP server over the shared maildir until killed.
async fn serve_until_killed(dir: &str) {
    let e = env_at(std::path::Path::new(dir), "");
    let settings = yarilo_smtp::LmtpSettings::from_config(&e.config);
    let srv = common::start_lmtp(&e, settings).await;
    println!("LISTENING {}", srv.addr.port());
    std::future::pending::<()>().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delivery_acknowledged_with_250_survives_sigkill() {
    // The same test, re-run by itself as the server process to kill.
    if yarilo_testkit::rerun::role().as_deref() == Some("lmtp-server") {
        let dir = std::env::var(DIR_ENV).unwrap();
        return serve_until_killed(&dir).await;
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("users"), USERS).unwrap();
    for round in 0..3 {
        let mut child = yarilo_testkit::rerun::child(TEST, "lmtp-server")
            .env(DIR_ENV, dir.path())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let port: u16 = tokio::task::spawn_blocking(move || {
            for line in BufReader::new(stdout).lines() {
                let line = line.unwrap();
                // libtest prints "test <name> ... " before our output.
                if let Some((_, p)) = line.split_once("LISTENING ") {
                    return p.trim().parse().unwrap();
                }
            }
            panic!("child exited without listening");
        })
        .await
        .unwrap();
        let mut c = Client::connect(([127, 0, 0, 1], port).into()).await;
        c.cmd("LHLO crash.test").await;
        assert_eq!(c.cmd("MAIL FROM:<s@x.example>").await.0, 250);
        assert_eq!(c.cmd("RCPT TO:<alice@example.org>").await.0, 250);
        assert_eq!(c.cmd("DATA").await.0, 354);
        c.send(format!("Subject: crash round {round}\r\n\r\nbody\r\n.\r\n").as_bytes())
            .await;
        let (code, lines) = c.reply().await;
        // SIGKILL the moment the acknowledgement is read.
        child.kill().unwrap();
        child.wait().unwrap();
        assert_eq!(code, 250, "{lines:?}");
        let fresh = store_at(dir.path());
        let msgs = messages(&fresh, "alice@example.org", "INBOX").await;
        assert_eq!(msgs.len(), round + 1, "round {round}");
        assert!(msgs[round].contains(&format!("Subject: crash round {round}")));
    }
}
