#![allow(clippy::unwrap_used, clippy::expect_used)]
//! The standalone shape as real processes on loopback: `yarilo auth`,
//! `yarilo warden` (the logins count connections and sessions there),
//! `yarilo locks` in remote mode on a real `redis-server`, two `yarilo imap`
//! backends on one mail volume, each behind its own `imap-login`, and
//! `yarilo lmtp` behind `lmtp-login`. mbsync syncs through a login.
//! A delivery through LMTP reaches an IDLE session on an IMAP backend
//! (through the locks service's event channel), and two clients appending
//! through the two backends at the same time leave every message once with
//! a UID of its own.

mod common;

use std::path::Path;
use std::process::Command;

use common::{free_port, Process, BIN};

fn common_config(dir: &Path, locks: &str) -> String {
    let warden = WARDEN.get().map(String::as_str).unwrap_or("");
    format!(
        "general:\n  data_dir: {d}\n  hostname: test.invalid\n  xclient:\n    trusted_nets: [127.0.0.1/32]\n\
         auth:\n  disable_plaintext_auth: false\n  auth_failure_delay_seconds: 0\n\
         imap:\n  auth_failure_delay_seconds: 0\n\
         locks_client:\n  mode: remote\n  endpoints: [{locks}]\n\
         warden_client:\n  enabled: true\n  fail_open: false\n  endpoints: [\"{warden}\"]\n",
        d = dir.display()
    )
}

/// Address of the locks service (set once, before any component starts).
static LOCKS: std::sync::OnceLock<String> = std::sync::OnceLock::new();
/// Address of the warden service.
static WARDEN: std::sync::OnceLock<String> = std::sync::OnceLock::new();

fn component(dir: &Path, name: &str, file: &str, extra: &str) -> Process {
    let path = dir.join(format!("{file}.yaml"));
    let locks = LOCKS.get().map(String::as_str).unwrap_or("");
    std::fs::write(&path, format!("{}{extra}", common_config(dir, locks))).unwrap();
    let mut cmd = Command::new(BIN);
    cmd.args([name, "--config", path.to_str().unwrap()]);
    Process::start_logged(cmd, &dir.join(format!("{file}.log")))
}

const OFF: &str = "  imaps:\n    enabled: false\n  pop3s:\n    enabled: false\n  submissions:\n    enabled: false\n";

/// A backend and its login for `service`; returns the login's address.
fn pair(
    d: &Path,
    procs: &mut Vec<Process>,
    client: &str,
    backend: &str,
    login: &str,
    service: &str,
    suffix: &str,
) -> String {
    let label = format!("{service:<11} ");
    let port = free_port();
    let mut b = component(
        d,
        backend,
        &format!("{backend}{suffix}"),
        &format!(
            "{client}services:\n  {service}:\n    address: 127.0.0.1\n    port: {port}\n{OFF}"
        ),
    );
    let backend_addr = b.announced(&label).trim().to_string();
    assert!(b.becomes_ready(), "{backend}{suffix} ready");
    procs.push(b);
    let lport = free_port();
    let mut l = component(
        d,
        login,
        &format!("{login}{suffix}"),
        &format!(
            "{client}services:\n  {service}:\n    address: 127.0.0.1\n    port: {lport}\n{OFF}\
             login:\n  {service}:\n    backend_addr: {backend_addr}\n"
        ),
    );
    let login_addr = l.announced(&label).trim().to_string();
    assert!(l.becomes_ready(), "{login}{suffix} ready");
    procs.push(l);
    login_addr
}

const SCRIPT: &str = r#"
import imaplib, os, smtplib, socket, threading, time

def hp(name):
    h, p = os.environ[name].rsplit(":", 1)
    return h, int(p)

# A session on backend A idles on INBOX.
a = imaplib.IMAP4(*hp("IMAP_A"))
a.login("alice", "secret")
a.select("INBOX")
tag = a._new_tag().decode()
a.send(f"{tag} IDLE\r\n".encode())
assert a.readline().startswith(b"+")

# LMTP delivery through lmtp-login to the LMTP backend.
t0 = time.time()
s = smtplib.LMTP(*hp("LMTP"))
s.sendmail("bob@example.org", ["alice"], b"Subject: via lmtp\r\n\r\nhello\r\n")
s.quit()
a.sock.settimeout(10)
while True:
    line = a.readline()
    if line == b"* 1 EXISTS\r\n":
        break
print(f"idle on backend A saw the LMTP delivery after {time.time() - t0:.3f}s")
a.sock.settimeout(None)
a.send(b"DONE\r\n")
while not a.readline().startswith(tag.encode()):
    pass

# Two writers through the two backends at once.
N = 40
def writer(name, label):
    c = imaplib.IMAP4(*hp(name))
    c.login("alice", "secret")
    for i in range(N):
        typ, data = c.append("INBOX", "", None, f"Subject: {label} {i}\r\nMessage-ID: <{label}{i}@x>\r\n\r\nbody\r\n".encode())
        assert typ == "OK", data
    c.logout()
ts = [threading.Thread(target=writer, args=("IMAP_A", "a")), threading.Thread(target=writer, args=("IMAP_B", "b"))]
for t in ts: t.start()
for t in ts: t.join()

b = imaplib.IMAP4(*hp("IMAP_B"))
b.login("alice", "secret")
for c in (a, b):
    c.select("INBOX")
    typ, data = c.uid("SEARCH", "ALL")
    uids = data[0].split()
    assert len(uids) == 2 * N + 1 and len(set(uids)) == len(uids), (len(uids), len(set(uids)))
    typ, data = c.fetch("1:*", "(BODY.PEEK[HEADER.FIELDS (MESSAGE-ID)])")
    ids = [d[1] for d in data if isinstance(d, tuple)]
    assert len(set(ids)) == len(ids) == 2 * N + 1, len(set(ids))

# A flag set through B reaches A at its next NOOP.
b.store("2", "+FLAGS", "(\\Flagged)")
typ, data = a.noop()
flags = a.untagged_responses.get("FETCH", [])
assert any(b"\\Flagged" in f for f in flags), flags
print("standalone ok")
"#;

#[test]
fn lmtp_reaches_an_idle_session_and_two_backends_share_one_volume() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(d.join("users"), "alice:{PLAIN}secret::::::\n").unwrap();
    let mut procs = Vec::new();
    // Locks on Redis, as in production (remote mode).
    let redis = yarilo_testkit::RedisServer::start();
    let locks_addr = format!("127.0.0.1:{}", free_port());
    LOCKS.set(locks_addr.clone()).unwrap();
    let warden_addr = format!("127.0.0.1:{}", free_port());
    WARDEN.set(warden_addr.clone()).unwrap();
    let mut auth = component(d, "auth", "auth", "auth_service:\n  listen: 127.0.0.1:0\n");
    let auth_addr = auth.announced("auth        ").trim().to_string();
    procs.push(auth);
    let locks = component(
        d,
        "locks",
        "locks",
        &format!(
            "locks_service:\n  mode: remote\n  listen: {locks_addr}\n  redis: {}\n",
            redis.url()
        ),
    );
    assert!(locks.becomes_ready(), "locks ready");
    procs.push(locks);
    let warden = component(
        d,
        "warden",
        "warden",
        &format!("warden_service:\n  listen: {warden_addr}\n"),
    );
    assert!(warden.becomes_ready(), "warden ready");
    procs.push(warden);
    let client = format!("auth_client:\n  address: {auth_addr}\n");
    let imap_a = pair(d, &mut procs, &client, "imap", "imap-login", "imap", "-a");
    let imap_b = pair(d, &mut procs, &client, "imap", "imap-login", "imap", "-b");
    let lmtp = pair(d, &mut procs, &client, "lmtp", "lmtp-login", "lmtp", "");
    let out = Command::new("python3")
        .args(["-c", SCRIPT])
        .env("IMAP_A", &imap_a)
        .env("IMAP_B", &imap_b)
        .env("LMTP", &lmtp)
        .output()
        .expect("python3 is required: run scripts/setup-dev");
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        stdout.contains("standalone ok"),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    println!("{stdout}");

    // mbsync through login B: a local Maildir with folders goes up, then
    // a second sync changes nothing.
    let local = d.join("local");
    for f in ["INBOX", "Archive"] {
        for sub in ["cur", "new", "tmp"] {
            std::fs::create_dir_all(local.join(f).join(sub)).unwrap();
        }
    }
    for i in 0..30 {
        std::fs::write(
            local
                .join("Archive/cur")
                .join(format!("17000000{i:02}.M{i}.local:2,S")),
            format!("Subject: archived {i}\r\nMessage-ID: <ar{i}@local>\r\n\r\nold mail\r\n"),
        )
        .unwrap();
    }
    let (host, port) = imap_b.rsplit_once(':').unwrap();
    let rc = d.join("mbsyncrc");
    std::fs::write(
        &rc,
        format!(
            "IMAPAccount y\nHost {host}\nPort {port}\nUser alice\nPass secret\nSSLType None\nAuthMechs LOGIN\n\n\
             IMAPStore remote\nAccount y\n\n\
             MaildirStore local\nPath {p}/\nInbox {p}/INBOX\nSubFolders Verbatim\n\n\
             Channel c\nFar :remote:\nNear :local:\nPatterns *\nCreate Both\nSyncState *\n",
            p = local.display()
        ),
    )
    .unwrap();
    for round in 0..2 {
        let out = Command::new("mbsync")
            .args(["-c", rc.to_str().unwrap(), "-a"])
            .output()
            .expect("mbsync not found: run scripts/setup-dev (isync)");
        assert!(
            out.status.success(),
            "mbsync round {round}: {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let count = |dir: &str| {
        ["cur", "new"]
            .iter()
            .map(|s| std::fs::read_dir(local.join(dir).join(s)).unwrap().count())
            .sum::<usize>()
    };
    // INBOX: the LMTP message and the 80 appends came down once each.
    assert_eq!(count("INBOX"), 81);
    assert_eq!(count("Archive"), 30);
    // Every IMAP login went through warden (fail_open is off here, so a
    // login that did not would have been refused).
    let admitted: f64 = procs
        .iter()
        .map(|p| {
            p.metric("yarilo_login_warden_admissions_total{protocol=\"imap\",stage=\"session\",result=\"ok\"}")
        })
        .sum();
    assert!(admitted >= 5.0, "warden admitted {admitted} IMAP sessions");
    while let Some(p) = procs.pop() {
        drop(p);
    }
    drop(redis);
}
