#![allow(clippy::unwrap_used, clippy::expect_used)]
//! POP3, submission and LMTP through their login proxies, as separate
//! processes on loopback: `yarilo auth`, `yarilo locks` (embedded socket),
//! `yarilo pop3` + `pop3-login`, `yarilo submission` + `submission-login`
//! (relaying to an aiosmtpd server the test starts), `yarilo lmtp` +
//! `lmtp-login`, and `yarilo imap` + `imap-login` to read what LMTP
//! delivered. Real clients: Python's poplib, smtplib, imaplib.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{free_port, Process, BIN};

fn common_config(dir: &Path) -> String {
    format!(
        "general:\n  data_dir: {d}\n  hostname: test.invalid\n  xclient:\n    trusted_nets: [127.0.0.1/32]\n  haproxy:\n    enabled: true\n    trusted_nets: [127.0.0.2/32]\n    timeout: 3\n\
         auth:\n  disable_plaintext_auth: false\n  auth_failure_delay_seconds: 0\n\
         lmtp:\n  add_received_header: true\n\
         locks_service:\n  mode: embedded\n  socket: {d}/locks.sock\n\
         locks_client:\n  mode: embedded\n  socket: {d}/locks.sock\n",
        d = dir.display()
    )
}

fn component(dir: &Path, name: &str, extra: &str) -> Process {
    let path = dir.join(format!("{name}.yaml"));
    std::fs::write(&path, format!("{}{extra}", common_config(dir))).unwrap();
    let mut cmd = Command::new(BIN);
    cmd.args([name, "--config", path.to_str().unwrap()]);
    Process::start_logged(cmd, &dir.join(format!("{name}.log")))
}

/// A child process killed (by its own handle) when dropped.
struct Guard(Child);

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// aiosmtpd on `port`, appending each message (envelope and data) to
/// `spool` as JSON lines.
const RELAY: &str = r#"
import asyncio, json, os, sys
from aiosmtpd.controller import Controller
spool = os.environ["SPOOL"]
class H:
    async def handle_DATA(self, server, session, envelope):
        with open(spool, "a") as f:
            f.write(json.dumps({"from": envelope.mail_from, "to": envelope.rcpt_tos,
                                "data": envelope.content.decode("utf-8", "replace")}) + "\n")
        return "250 2.0.0 Queued"
c = Controller(H(), hostname="127.0.0.1", port=int(os.environ["PORT"]))
c.start()
print("relay ready", flush=True)
sys.stdin.read()
c.stop()
"#;

fn start_relay(port: u16, spool: &Path) -> Guard {
    let mut child = Command::new("python3")
        .args(["-c", RELAY])
        .env("PORT", port.to_string())
        .env("SPOOL", spool)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("python3 with aiosmtpd is required for these tests");
    let stdout = child.stdout.take().unwrap();
    let guard = Guard(child);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            let _ = tx.send(line);
        }
    });
    let line = rx
        .recv_timeout(Duration::from_secs(30))
        .expect("aiosmtpd relay did not start (is aiosmtpd installed?)");
    assert_eq!(line, "relay ready");
    guard
}

struct Cluster {
    dir: tempfile::TempDir,
    spool: PathBuf,
    pop3_login: String,
    submission_login: String,
    lmtp_login: String,
    imap_login: String,
    // Dropped (killed) in reverse order of start.
    procs: Vec<(&'static str, Process)>,
    _relay: Guard,
}

impl Cluster {
    fn process(&self, name: &str) -> &Process {
        &self.procs.iter().find(|(n, _)| *n == name).unwrap().1
    }

    fn log(&self, name: &str) -> String {
        std::fs::read_to_string(self.dir.path().join(format!("{name}.log"))).unwrap_or_default()
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        while let Some(p) = self.procs.pop() {
            drop(p);
        }
    }
}

fn cluster() -> Cluster {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(
        d.join("users"),
        "alice:{PLAIN}secret::::::\nbob:{PLAIN}secret::::::\n",
    )
    .unwrap();
    let spool = d.join("relay.jsonl");
    let relay_port = free_port();
    let relay = start_relay(relay_port, &spool);
    let mut procs = Vec::new();
    let mut auth = component(d, "auth", "auth_service:\n  listen: 127.0.0.1:0\n");
    let auth_addr = auth.announced("auth        ").trim().to_string();
    procs.push(("auth", auth));
    let locks = component(d, "locks", "");
    assert!(locks.becomes_ready(), "locks ready");
    procs.push(("locks", locks));
    let client = format!("auth_client:\n  address: {auth_addr}\n");
    let off = "  imaps:\n    enabled: false\n  pop3s:\n    enabled: false\n  submissions:\n    enabled: false\n";
    // (backend, login, service name, extra config of the backend)
    let pairs = [
        ("pop3", "pop3-login", "pop3", String::new()),
        (
            "submission",
            "submission-login",
            "submission",
            format!("submission:\n  relay_host: 127.0.0.1\n  relay_port: {relay_port}\n  relay_ssl: none\n"),
        ),
        ("lmtp", "lmtp-login", "lmtp", String::new()),
        ("imap", "imap-login", "imap", String::new()),
    ];
    let mut logins = Vec::new();
    for (backend, login, service, extra) in pairs {
        let port = free_port();
        let mut b = component(
            d,
            backend,
            &format!(
                "{client}{extra}services:\n  {service}:\n    address: 127.0.0.1\n    port: {port}\n{off}"
            ),
        );
        let label = format!("{service:<11} ");
        let backend_addr = b.announced(&label).trim().to_string();
        assert!(b.becomes_ready(), "{backend} ready");
        procs.push((backend, b));
        let lport = free_port();
        let mut l = component(
            d,
            login,
            &format!(
                "{client}services:\n  {service}:\n    address: 127.0.0.1\n    port: {lport}\n    haproxy_protocol: true\n{off}\
                 login:\n  {service}:\n    backend_addr: {backend_addr}\n"
            ),
        );
        let login_addr = l.announced(&label).trim().to_string();
        assert!(l.becomes_ready(), "{login} ready");
        procs.push((login, l));
        logins.push(login_addr);
    }
    Cluster {
        dir,
        spool,
        pop3_login: logins[0].clone(),
        submission_login: logins[1].clone(),
        lmtp_login: logins[2].clone(),
        imap_login: logins[3].clone(),
        procs,
        _relay: relay,
    }
}

/// Runs a Python script with `<NAME>_HOST`/`_PORT` for each login;
/// returns stdout, failing the test with stderr on a non-zero exit.
fn python(c: &Cluster, script: &str) -> String {
    let mut cmd = Command::new("python3");
    cmd.args(["-c", script]);
    for (name, addr) in [
        ("POP3", &c.pop3_login),
        ("SUBMISSION", &c.submission_login),
        ("LMTP", &c.lmtp_login),
        ("IMAP", &c.imap_login),
    ] {
        let (host, port) = addr.rsplit_once(':').unwrap();
        cmd.env(format!("{name}_HOST"), host);
        cmd.env(format!("{name}_PORT"), port);
    }
    let out = cmd.output().expect("python3 is required for these tests");
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "python failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

const LMTP_POP3_IMAP: &str = r#"
import imaplib, os, poplib, smtplib, socket, ssl
env = os.environ

class ProxiedLMTP(smtplib.LMTP):
    """LMTP from a trusted load balancer (127.0.0.2) that announces the
    real client 192.0.2.55 in a PROXY v1 header."""
    def _get_socket(self, host, port, timeout):
        s = socket.create_connection((host, port), timeout, ("127.0.0.2", 0))
        s.sendall(b"PROXY TCP4 192.0.2.55 127.0.0.1 40000 24\r\n")
        return s

lmtp = ProxiedLMTP(env["LMTP_HOST"], int(env["LMTP_PORT"]))
code, _ = lmtp.ehlo("mx.test.invalid")  # smtplib.LMTP sends LHLO
assert code == 250, code
msg = b"From: x@example.org\r\nSubject: via lmtp-login\r\n\r\n.leading dot\r\nbody\r\n"
refused = lmtp.sendmail("x@example.org", ["alice", "nobody-here"], msg)
assert list(refused) == ["nobody-here"] and refused["nobody-here"][0] == 550, refused
lmtp.quit()

# POP3 through pop3-login: USER/PASS, then the backend's TRANSACTION.
p = poplib.POP3(env["POP3_HOST"], int(env["POP3_PORT"]))
caps = p.capa()
assert "USER" in caps and "STLS" in caps and "SASL" in caps, caps
assert p.user("alice").startswith(b"+OK")
assert p.pass_("secret").startswith(b"+OK Logged in"), "login"
count, size = p.stat()
assert count == 1, (count, size)
_, lines, _ = p.retr(1)
text = b"\r\n".join(lines)
assert b"Subject: via lmtp-login" in text and b"\r\n.leading dot" in text, text
assert b"[192.0.2.55]" in text, text  # the client address reached the backend (XCLIENT)
# CAPA after login is the backend's: no USER/SASL/STLS any more.
post = p.capa()
assert "USER" not in post and "STLS" not in post, post
p.quit()

# AUTH PLAIN with STLS first.
p = poplib.POP3(env["POP3_HOST"], int(env["POP3_PORT"]))
ctx = ssl.create_default_context(); ctx.check_hostname = False; ctx.verify_mode = ssl.CERT_NONE
p.stls(ctx)
import base64
resp = p._shortcmd("AUTH PLAIN " + base64.b64encode(b"\0alice\0secret").decode())
assert resp.startswith(b"+OK Logged in"), resp
assert p.stat()[0] == 1
p.quit()

# The same message through imap-login.
m = imaplib.IMAP4(env["IMAP_HOST"], int(env["IMAP_PORT"]))
m.login("alice", "secret")
typ, data = m.select("INBOX", readonly=True)
assert typ == "OK" and data[0] == b"1", data
typ, data = m.fetch("1", "(BODY.PEEK[HEADER.FIELDS (SUBJECT)])")
assert b"via lmtp-login" in data[0][1], data
m.logout()
print("delivered and read")
"#;

#[test]
fn lmtp_through_lmtp_login_is_read_through_pop3_login_and_imap_login() {
    let c = cluster();
    assert!(python(&c, LMTP_POP3_IMAP).contains("delivered and read"));
    let pop3 = c.process("pop3");
    assert_eq!(
        pop3.metric("yarilo_backend_preambles_total{service=\"pop3\",result=\"ok\"}"),
        2.0
    );
    let login = c.process("pop3-login");
    assert_eq!(
        login.metric("yarilo_login_backend_handoffs_total{protocol=\"pop3\",result=\"ok\"}"),
        2.0
    );
    assert!(
        login
            .metric("yarilo_login_proxied_bytes_total{protocol=\"pop3\",direction=\"downstream\"}")
            > 0.0
    );
    let lmtp_login = c.process("lmtp-login");
    assert_eq!(
        lmtp_login.metric("yarilo_login_logins_total{protocol=\"lmtp\",result=\"unknown_user\"}"),
        1.0
    );
    // The POP3 backend logged the real client (loopback here) from ADDR.
    let log = c.log("pop3");
    assert!(
        log.contains("preamble accepted") && log.contains("client_ip=127.0.0.1"),
        "{log}"
    );
}

const SUBMIT: &str = r#"
import os, smtplib, ssl
env = os.environ
s = smtplib.SMTP(env["SUBMISSION_HOST"], int(env["SUBMISSION_PORT"]))
s.ehlo("client.test.invalid")
assert s.has_extn("auth") and s.has_extn("starttls") and s.has_extn("size"), s.esmtp_features
# Mail before AUTH is refused by the login.
code, _ = s.mail("alice@test.invalid")
assert code == 530, code
s.rset()
ctx = ssl.create_default_context(); ctx.check_hostname = False; ctx.verify_mode = ssl.CERT_NONE
s.starttls(context=ctx)
s.ehlo("client.test.invalid")
try:
    s.login("alice", "wrong")
    raise SystemExit("wrong password accepted")
except smtplib.SMTPAuthenticationError as e:
    assert e.smtp_code == 535, e
code, resp = s.login("alice", "secret")
assert code == 235, (code, resp)
# Forged sender: refused by the backend's sender check.
try:
    s.sendmail("mallory@evil.example", ["bob@example.org"], b"Subject: no\r\n\r\nno\r\n")
    raise SystemExit("forged sender accepted")
except smtplib.SMTPSenderRefused as e:
    assert e.smtp_code == 553, e
s.sendmail("alice@test.invalid", ["bob@example.org"], b"Subject: submitted via proxy\r\n\r\nhi\r\n")
# EHLO after AUTH is answered by the backend: no AUTH, no STARTTLS.
s.ehlo("client.test.invalid")
assert not s.has_extn("auth") and not s.has_extn("starttls"), s.esmtp_features
s.quit()
print("submitted")
"#;

#[test]
fn smtplib_authenticates_at_submission_login_and_the_backend_relays() {
    let c = cluster();
    assert!(python(&c, SUBMIT).contains("submitted"));
    let deadline = Instant::now() + Duration::from_secs(10);
    let spool = loop {
        let s = std::fs::read_to_string(&c.spool).unwrap_or_default();
        if !s.is_empty() || Instant::now() > deadline {
            break s;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let lines: Vec<&str> = spool.lines().collect();
    assert_eq!(lines.len(), 1, "{spool}");
    let m = lines[0];
    assert!(m.contains(r#""from": "alice@test.invalid""#), "{m}");
    assert!(m.contains(r#""to": ["bob@example.org"]"#), "{m}");
    assert!(m.contains("submitted via proxy"), "{m}");
    let login = c.process("submission-login");
    // smtplib tries each advertised mechanism (PLAIN, LOGIN) before it
    // gives up on a wrong password.
    assert!(
        login.metric(
            "yarilo_login_logins_total{protocol=\"submission\",result=\"bad_credentials\"}"
        ) >= 1.0
    );
    assert_eq!(
        c.process("submission")
            .metric("yarilo_backend_preambles_total{service=\"submission\",result=\"ok\"}"),
        1.0
    );
}

const POP3_WRONG: &str = r#"
import os, poplib
env = os.environ
p = poplib.POP3(env["POP3_HOST"], int(env["POP3_PORT"]))
p.user("alice")
try:
    p.pass_("wrong")
    raise SystemExit("wrong password accepted")
except poplib.error_proto as e:
    assert str(e).startswith("b'-ERR [AUTH]"), e
# Still in AUTHORIZATION: a second try works on the same connection.
p.user("alice")
try:
    p.pass_("wrong again")
except poplib.error_proto:
    pass
p.quit()
print("refused")
"#;

#[test]
fn a_wrong_pop3_password_is_answered_by_the_login_and_the_backend_is_never_dialled() {
    let c = cluster();
    assert!(python(&c, POP3_WRONG).contains("refused"));
    let login = c.process("pop3-login");
    assert_eq!(
        login.metric("yarilo_login_logins_total{protocol=\"pop3\",result=\"bad_credentials\"}"),
        2.0
    );
    assert_eq!(
        c.process("pop3")
            .metric("yarilo_listener_connections_total{service=\"pop3\"}"),
        0.0
    );
    for result in ["ok", "no_route", "connect_failed", "no_answer", "refused"] {
        assert_eq!(
            login.metric(&format!(
                "yarilo_login_backend_handoffs_total{{protocol=\"pop3\",result=\"{result}\"}}"
            )),
            0.0
        );
    }
}
