#![allow(clippy::unwrap_used, clippy::expect_used)]
//! The login layer as the seeds define it, through real processes on
//! loopback (`yarilo auth`, `locks`, `warden`, `imap` + `imap-login`,
//! `pop3` + `pop3-login`):
//!
//! - a trusted forwarder's client address (IMAP `XCLIENT` and ID
//!   `x-originating-ip`, POP3 `XCLIENT`) becomes the client for
//!   `allow_nets` and the preamble, and an untrusted peer's is refused;
//! - a login killed mid-session leaves no session count behind in warden
//!   (the login, not the backend, writes SESSION_START/END).

mod common;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{free_port, Process, BIN};

fn base_config(dir: &Path) -> String {
    format!(
        "general:\n  data_dir: {d}\n  hostname: test.invalid\n  xclient:\n    enabled: true\n    trusted_nets: [127.0.0.1/32]\n\
         auth:\n  disable_plaintext_auth: false\n  auth_failure_delay_seconds: 0\n\
         imap:\n  auth_failure_delay_seconds: 0\n\
         locks_service:\n  mode: embedded\n  socket: {d}/locks.sock\n\
         locks_client:\n  mode: embedded\n  socket: {d}/locks.sock\n",
        d = dir.display()
    )
}

fn start(dir: &Path, file: &str, command: &str, extra: &str) -> Process {
    let path = dir.join(format!("{file}.yaml"));
    std::fs::write(&path, format!("{}{extra}", base_config(dir))).unwrap();
    let mut cmd = Command::new(BIN);
    cmd.args([command, "--config", path.to_str().unwrap()]);
    Process::start_logged(cmd, &dir.join(format!("{file}.log")))
}

fn python(script: &str, addr: &str) -> String {
    let (host, port) = addr.rsplit_once(':').unwrap();
    let out = Command::new("python3")
        .args(["-c", script])
        .env("HOST", host)
        .env("PORT", port)
        .output()
        .expect("python3 is required: run scripts/setup-dev");
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "python failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// carol may log in only from 192.0.2.0/24.
const IMAP_FORWARDING: &str = r#"
import os, socket
host, port = os.environ["HOST"], int(os.environ["PORT"])

def session(source):
    s = socket.create_connection((host, port), source_address=(source, 0), timeout=10)
    f = s.makefile("rwb")
    assert f.readline().startswith(b"* OK"), "greeting"
    def cmd(line):
        f.write(line + b"\r\n"); f.flush()
        tag = line.split(b" ")[0]
        while True:
            l = f.readline()
            if l.startswith(tag + b" "):
                return l
    return s, cmd

# From the trusted forwarder, without forwarding: 127.0.0.1 is not in
# carol's allow_nets.
s, cmd = session("127.0.0.1")
r = cmd(b"a LOGIN carol secret")
assert b" NO " in r, r
s.close()

# XCLIENT (the earlier director seed's wire form), then LOGIN.
s, cmd = session("127.0.0.1")
r = cmd(b"XCONN XCLIENT ADDR=192.0.2.5")
assert r.startswith(b"XCONN OK XCLIENT"), r
r = cmd(b"b LOGIN carol secret")
assert b"b OK" in r, r
assert cmd(b"c LOGOUT").startswith(b"c OK")
s.close()

# Dovecot's ID field.
s, cmd = session("127.0.0.1")
r = cmd(b'i ID ("name" "webmail" "x-originating-ip" "192.0.2.6")')
assert r.startswith(b"i OK"), r
r = cmd(b"d LOGIN carol secret")
assert b"d OK" in r, r
s.close()

# An untrusted peer may not forward: XCLIENT is refused, the ID field
# ignored.
s, cmd = session("127.0.0.5")
r = cmd(b"XCONN XCLIENT ADDR=192.0.2.5")
assert r.startswith(b"XCONN NO"), r
r = cmd(b'i ID ("x-originating-ip" "192.0.2.6")')
assert r.startswith(b"i OK"), r
r = cmd(b"e LOGIN carol secret")
assert b" NO " in r, r
s.close()
print("imap forwarding ok")
"#;

const POP3_FORWARDING: &str = r#"
import os, poplib
host, port = os.environ["HOST"], int(os.environ["PORT"])
p = poplib.POP3(host, port)
assert p._shortcmd("XCLIENT ADDR=192.0.2.9").startswith(b"+OK XCLIENT accepted")
p.user("carol")
p.pass_("secret")
p.quit()
print("pop3 forwarding ok")
"#;

#[test]
fn forwarded_client_addresses_are_believed_from_trusted_peers_only() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(
        d.join("users"),
        "carol:{PLAIN}secret::::::allow_nets=192.0.2.0/24\n",
    )
    .unwrap();
    let mut auth = start(d, "auth", "auth", "auth_service:\n  listen: 127.0.0.1:0\n");
    let auth_addr = auth.announced("auth        ").trim().to_string();
    let locks = start(d, "locks", "locks", "");
    assert!(locks.becomes_ready());
    let client = format!("auth_client:\n  address: {auth_addr}\n");
    let mut imap = start(
        d,
        "imap",
        "imap",
        &format!(
            "{client}services:\n  imap:\n    address: 127.0.0.1\n    port: {}\n  imaps:\n    enabled: false\n",
            free_port()
        ),
    );
    let imap_hop = imap.announced("imap        ").trim().to_string();
    let mut pop3 = start(
        d,
        "pop3",
        "pop3",
        &format!(
            "{client}services:\n  pop3:\n    address: 127.0.0.1\n    port: {}\n  pop3s:\n    enabled: false\n",
            free_port()
        ),
    );
    let pop3_hop = pop3.announced("pop3        ").trim().to_string();
    let mut imap_login = start(
        d,
        "imap-login",
        "imap-login",
        &format!(
            "{client}services:\n  imap:\n    address: 127.0.0.1\n    port: {}\n    xclient_protocol: true\n  imaps:\n    enabled: false\n\
             login:\n  imap:\n    backend_addr: {imap_hop}\n",
            free_port()
        ),
    );
    let imap_addr = imap_login.announced("imap        ").trim().to_string();
    let mut pop3_login = start(
        d,
        "pop3-login",
        "pop3-login",
        &format!(
            "{client}services:\n  pop3:\n    address: 127.0.0.1\n    port: {}\n    xclient_protocol: true\n  pop3s:\n    enabled: false\n\
             login:\n  pop3:\n    backend_addr: {pop3_hop}\n",
            free_port()
        ),
    );
    let pop3_addr = pop3_login.announced("pop3        ").trim().to_string();
    assert!(imap_login.becomes_ready() && pop3_login.becomes_ready());
    assert!(python(IMAP_FORWARDING, &imap_addr).contains("imap forwarding ok"));
    assert!(python(POP3_FORWARDING, &pop3_addr).contains("pop3 forwarding ok"));
    // The backends saw the forwarded clients in the preamble.
    let log = std::fs::read_to_string(d.join("imap.log")).unwrap();
    assert!(
        log.contains("192.0.2.5") && log.contains("192.0.2.6"),
        "{log}"
    );
    let log = std::fs::read_to_string(d.join("pop3.log")).unwrap();
    assert!(log.contains("192.0.2.9"), "{log}");
}

const HOLD: &str = r#"
import imaplib, os, time
m = imaplib.IMAP4(os.environ["HOST"], int(os.environ["PORT"]))
m.login("alice", "secret")
m.select("INBOX")
print("in", flush=True)
time.sleep(60)
"#;

const ONE_LOGIN: &str = r#"
import imaplib, os
m = imaplib.IMAP4(os.environ["HOST"], int(os.environ["PORT"]))
try:
    m.login("alice", "secret")
    print("OK")
    m.logout()
except imaplib.IMAP4.error as e:
    print("NO", e)
"#;

/// The login writes SESSION_START/END (docs/login.md, "Who counts
/// sessions"): when it dies mid-session, warden releases what it counted
/// as soon as the login's connection to warden is gone, so the user can
/// log in again through another login at once.
#[test]
fn a_login_killed_mid_session_leaves_no_session_count_behind() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(d.join("users"), "alice:{PLAIN}secret::::::\n").unwrap();
    let mut auth = start(d, "auth", "auth", "auth_service:\n  listen: 127.0.0.1:0\n");
    let auth_addr = auth.announced("auth        ").trim().to_string();
    let locks = start(d, "locks", "locks", "");
    assert!(locks.becomes_ready());
    let warden_addr = format!("127.0.0.1:{}", free_port());
    let warden = start(
        d,
        "warden",
        "warden",
        &format!(
            "warden_service:\n  listen: {warden_addr}\n  limits:\n    max_sessions_per_user: 1\n"
        ),
    );
    assert!(warden.becomes_ready());
    let client = format!("auth_client:\n  address: {auth_addr}\n");
    let mut imap = start(
        d,
        "imap",
        "imap",
        &format!(
            "{client}services:\n  imap:\n    address: 127.0.0.1\n    port: {}\n  imaps:\n    enabled: false\n",
            free_port()
        ),
    );
    let hop = imap.announced("imap        ").trim().to_string();
    let login_config = |port: u16| {
        format!(
        "{client}warden_client:\n  enabled: true\n  endpoints: [\"{warden_addr}\"]\n\
         services:\n  imap:\n    address: 127.0.0.1\n    port: {port}\n  imaps:\n    enabled: false\n\
         login:\n  imap:\n    backend_addr: {hop}\n"
    )
    };
    let mut first = start(d, "imap-login-1", "imap-login", &login_config(free_port()));
    let addr = first.announced("imap        ").trim().to_string();
    let (host, p) = addr.rsplit_once(':').unwrap();
    let mut holder = Command::new("python3")
        .args(["-c", HOLD])
        .env("HOST", host)
        .env("PORT", p)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(holder.stdout.as_mut().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line.trim(), "in");
    let second = python(ONE_LOGIN, &addr);
    assert!(second.starts_with("NO"), "the limit holds: {second}");
    // kill -9 mid-session.
    first.signal("KILL");
    assert!(first.exits_within(Duration::from_secs(10)));
    drop(first);
    let mut again = start(d, "imap-login-2", "imap-login", &login_config(free_port()));
    let addr = again.announced("imap        ").trim().to_string();
    assert_eq!(
        python(ONE_LOGIN, &addr).trim(),
        "OK",
        "the dead login's session was released"
    );
    let _ = holder.kill();
    let _ = holder.wait();
}
