#![allow(clippy::unwrap_used, clippy::expect_used)]
//! fetchmail against the real server, over STLS with certificate
//! checking: retrieve with keep + UIDL (nothing
//! downloaded twice), then flush (DELE + QUIT empties the mailbox).

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

use common::{message, Harness, Options, PASSWORD, USER};

/// Runs fetchmail once; returns (exit code, verbose log, messages in the
/// BSMTP output file after this run).
async fn fetchmail(h: &Harness, work: &Path, opts: &str) -> (i32, String, usize) {
    let out = work.join("out.bsmtp");
    let _ = std::fs::remove_file(&out);
    let rc = work.join("fetchmailrc");
    std::fs::write(
        &rc,
        format!(
            "set no syslog\n\
             poll localhost with proto POP3 port {port} uidl auth password\n\
             \x20 user \"{USER}\" there with password \"{PASSWORD}\" is \"local\" here\n\
             \x20 options {opts} sslcertck sslcertfile \"{cert}\" bsmtp \"{out}\"\n",
            port = h.port(),
            cert = h.cert.as_ref().expect("harness with STLS").display(),
            out = out.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&rc, std::fs::Permissions::from_mode(0o600)).unwrap();
    let mut cmd = Command::new("fetchmail");
    cmd.arg("-v")
        .arg("-f")
        .arg(&rc)
        .arg("--idfile")
        .arg(work.join("fetchids"))
        .arg("--pidfile")
        .arg(work.join("fetchmail.pid"))
        .env("HOME", work)
        .env("FETCHMAILHOME", work);
    let output = tokio::task::spawn_blocking(move || {
        cmd.output().unwrap_or_else(|e| {
            panic!("cannot run fetchmail ({e}); install it with scripts/setup-dev")
        })
    })
    .await
    .unwrap();
    let log = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    let fetched = std::fs::read_to_string(&out)
        .map(|s| s.lines().filter(|l| l.starts_with("MAIL FROM:")).count())
        .unwrap_or(0);
    (output.status.code().unwrap_or(-1), log, fetched)
}

#[tokio::test]
async fn fetchmail_keeps_with_uidl_then_flushes_with_dele_and_quit() {
    let h = Harness::start(Options {
        starttls: true,
        ..Options::default()
    })
    .await;
    let work = tempfile::tempdir().unwrap();
    h.deliver(&[&message("one", 2), &message("two", 40)]).await;

    // 1. keep: both fetched, nothing deleted.
    let (code, log, n) = fetchmail(&h, work.path(), "keep").await;
    assert_eq!(code, 0, "{log}");
    assert_eq!(n, 2, "{log}");
    assert!(
        log.contains("POP3> STLS"),
        "fetchmail upgraded with STLS:\n{log}"
    );
    assert!(log.contains("POP3> UIDL"), "fetchmail used UIDL:\n{log}");
    assert_eq!(h.inbox().await.refresh().await.unwrap().len(), 2);

    // 2. keep again: the UIDLs are known, nothing is downloaded twice.
    let (code, log, n) = fetchmail(&h, work.path(), "keep").await;
    assert_eq!(code, 1, "exit 1 = no mail:\n{log}");
    assert_eq!(n, 0, "{log}");

    // 3. One new message arrives; only it is fetched.
    h.deliver(&[&message("three", 1)]).await;
    let (code, log, n) = fetchmail(&h, work.path(), "keep").await;
    assert_eq!(code, 0, "{log}");
    assert_eq!(n, 1, "{log}");

    // 4. flush without keep: DELE everything, applied at QUIT.
    h.deliver(&[&message("four", 1)]).await;
    let (code, log, n) = fetchmail(&h, work.path(), "no keep flush").await;
    assert_eq!(code, 0, "{log}");
    assert_eq!(n, 1, "{log}");
    assert!(log.contains("POP3> DELE"), "{log}");
    assert!(log.contains("POP3> QUIT"), "{log}");
    assert_eq!(h.inbox().await.refresh().await.unwrap().len(), 0, "{log}");
}
