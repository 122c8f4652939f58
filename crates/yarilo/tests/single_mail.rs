#![allow(clippy::unwrap_used, clippy::expect_used)]
//! `yarilo single` as a new user tries it: start it with no configuration,
//! add a user with yarctl, deliver by LMTP, read by IMAP and POP3, and
//! submit through the relay to a test MTA.
//!
//! The embedded default's ports are fixed (1143, 2424, …): the test runs in
//! a private network namespace so it never meets another run on the same
//! machine.

mod common;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::{Process, BIN};

fn python(script: &str) -> String {
    let out = Command::new("python3")
        .arg("-c")
        .arg(script)
        .output()
        .expect("python3 not found: run scripts/setup-dev");
    assert!(
        out.status.success(),
        "python failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).to_string()
}

fn start(cwd: &Path) -> Process {
    let mut cmd = Command::new(BIN);
    cmd.arg("single").current_dir(cwd);
    Process::start(cmd)
}

#[test]
fn deliver_read_and_fetch_with_the_embedded_default() {
    yarilo_testkit::rerun::in_private_network(
        "deliver_read_and_fetch_with_the_embedded_default",
        deliver_read_and_fetch,
    );
}

fn deliver_read_and_fetch() {
    let cwd = tempfile::tempdir().unwrap();
    // What `yarctl user add alice --password … --data yarilo-data` does.
    let data = cwd.path().join("yarilo-data");
    std::fs::create_dir_all(&data).unwrap();
    tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(
            yarilo_auth::admin::UserStore::passwd_file(data.join("users")).add(
                "alice",
                "a-long-secret",
                None,
            ),
        )
        .unwrap();
    let mut run = start(cwd.path());
    assert_eq!(run.announced("imap ").trim(), "127.0.0.1:1143");
    assert_eq!(run.announced("pop3 ").trim(), "127.0.0.1:1110");
    assert_eq!(run.announced("lmtp ").trim(), "127.0.0.1:2424");
    assert_eq!(run.announced("submission ").trim(), "127.0.0.1:1587");

    // LMTP delivery, as an MTA would.
    let out = python(
        r#"
import smtplib
s = smtplib.LMTP("127.0.0.1", 2424)
s.sendmail("bob@example.org", ["alice"], b"From: bob@example.org\r\nSubject: first\r\n\r\nhello alice\r\n")
s.quit()
print("delivered")
"#,
    );
    assert!(out.contains("delivered"));

    // IMAP sees it (STARTTLS with the self-signed certificate).
    let out = python(
        r#"
import imaplib, ssl
ctx = ssl.create_default_context(); ctx.check_hostname = False; ctx.verify_mode = ssl.CERT_NONE
M = imaplib.IMAP4("127.0.0.1", 1143)
M.starttls(ssl_context=ctx)
M.login("alice", "a-long-secret")
typ, data = M.select("INBOX")
assert data == [b"1"], data
typ, data = M.fetch("1", "(BODY.PEEK[HEADER.FIELDS (SUBJECT RETURN-PATH DELIVERED-TO)])")
print(data[0][1].decode())
M.logout()
"#,
    );
    assert!(out.contains("Subject: first"), "{out}");
    assert!(out.contains("Return-Path: <bob@example.org>"), "{out}");

    // POP3 over implicit TLS sees the same message.
    let out = python(
        r#"
import poplib, ssl
ctx = ssl.create_default_context(); ctx.check_hostname = False; ctx.verify_mode = ssl.CERT_NONE
P = poplib.POP3_SSL("127.0.0.1", 1995, context=ctx)
P.user("alice"); P.pass_("a-long-secret")
count, size = P.stat()
print("count", count)
print(b"\n".join(P.retr(1)[1]).decode())
P.quit()
"#,
    );
    assert!(out.contains("count 1"), "{out}");
    assert!(out.contains("hello alice"), "{out}");

    // Submission with nothing listening on the relay port: a temporary
    // failure, never a silent drop.
    let out = python(
        r#"
import smtplib, ssl
host = open("/proc/sys/kernel/hostname").read().strip()
ctx = ssl.create_default_context(); ctx.check_hostname = False; ctx.verify_mode = ssl.CERT_NONE
s = smtplib.SMTP("127.0.0.1", 1587)
s.starttls(context=ctx)
s.login("alice", "a-long-secret")
try:
    s.sendmail(f"alice@{host}", ["carol@example.org"], b"Subject: out\r\n\r\nhi\r\n")
    print("accepted")
except smtplib.SMTPException as e:
    print("refused", e)
"#,
    );
    assert!(out.contains("refused (4"), "{out}");
    assert_eq!(run.sigterm_and_wait(Duration::from_secs(15)), Some(0));
}
