#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Warden in the login processes, as separate processes on loopback:
//! `yarilo auth`, `yarilo locks` (embedded socket), `yarilo warden`
//! (memory state, low limits), one `yarilo imap` backend and
//! `imap-login`, `pop3-login`, `submission-login` with
//! `warden_client.enabled`. The POP3 and submission logins route to a
//! port nobody listens on: whatever they refuse is refused before any
//! hand-off, which their `backend_handoffs` metrics prove.
//!
//! Distinct loopback source addresses (all of 127/8 is local on Linux)
//! keep each case's per-IP count separate within one warden.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::{free_port, Process, BIN};

/// `\0alice\0secret`
const ALICE_PLAIN: &str = "AGFsaWNlAHNlY3JldA==";

fn base_config(dir: &Path) -> String {
    format!(
        "general:\n  data_dir: {d}\n  hostname: test.invalid\n  xclient:\n    trusted_nets: [127.0.0.1/32]\n\
         auth:\n  disable_plaintext_auth: false\n  auth_failure_delay_seconds: 0\n\
         imap:\n  auth_failure_delay_seconds: 0\n\
         locks_service:\n  mode: embedded\n  socket: {d}/locks.sock\n\
         locks_client:\n  mode: embedded\n  socket: {d}/locks.sock\n",
        d = dir.display()
    )
}

fn component(dir: &Path, name: &str, extra: &str) -> Process {
    named_component(dir, name, name, extra)
}

/// `yarilo <command>` with its configuration in `<file>.yaml` and its log
/// in `<file>.log`.
fn named_component(dir: &Path, file: &str, command: &str, extra: &str) -> Process {
    let path = dir.join(format!("{file}.yaml"));
    std::fs::write(&path, format!("{}{extra}", base_config(dir))).unwrap();
    let mut cmd = Command::new(BIN);
    cmd.args([command, "--config", path.to_str().unwrap()]);
    Process::start_logged(cmd, &dir.join(format!("{file}.log")))
}

struct Cluster {
    dir: tempfile::TempDir,
    auth_addr: String,
    warden_addr: String,
    imap_addr: String,
    pop3_addr: String,
    submission_addr: String,
    // Dropped (killed) in reverse order of start.
    submission_login: Process,
    pop3_login: Process,
    imap_login: Process,
    backend: Process,
    warden: Process,
    _locks: Process,
    _auth: Process,
}

/// The cluster with warden's `limits` (YAML lines indented by four).
fn cluster(limits: &str) -> Cluster {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(d.join("users"), "alice:{PLAIN}secret::::::\n").unwrap();
    let mut auth = component(d, "auth", "auth_service:\n  listen: 127.0.0.1:0\n");
    let auth_addr = auth.announced("auth        ").trim().to_string();
    let locks = component(d, "locks", "");
    assert!(locks.becomes_ready(), "locks service ready");
    let warden_addr = format!("127.0.0.1:{}", free_port());
    let warden = component(
        d,
        "warden",
        &format!("warden_service:\n  listen: {warden_addr}\n  limits:\n{limits}"),
    );
    assert!(warden.becomes_ready(), "warden ready");
    let client = format!("auth_client:\n  address: {auth_addr}\n");
    let mut backend = component(
        d,
        "imap",
        &format!(
            "{client}services:\n  imap:\n    address: 127.0.0.1\n    port: {}\n",
            free_port()
        ),
    );
    let backend_addr = backend.announced("imap        ").trim().to_string();
    assert!(backend.becomes_ready(), "backend ready");
    let nowhere = format!("127.0.0.1:{}", free_port());
    let warden_client = format!(
        "warden_client:\n  enabled: true\n  endpoints: [\"{warden_addr}\"]\n  request_timeout_ms: 3000\n"
    );
    let login = |name: &str, services: &str, route: &str| {
        component(
            d,
            name,
            &format!(
                "{client}{warden_client}services:\n{services}\
                 login:\n  warden_penalty_max_delay_ms: 20\n  {route}\n"
            ),
        )
    };
    // One after the other: the first creates the self-signed client
    // certificate under the shared data_dir, the others load it.
    let mut imap_login = login(
        "imap-login",
        &format!(
            "  imap:\n    address: 127.0.0.1\n    port: {}\n  imaps:\n    enabled: false\n",
            free_port()
        ),
        &format!("imap:\n    backend_addr: {backend_addr}"),
    );
    let imap_addr = imap_login.announced("imap        ").trim().to_string();
    let mut pop3_login = login(
        "pop3-login",
        &format!(
            "  pop3:\n    address: 127.0.0.1\n    port: {}\n  pop3s:\n    enabled: false\n",
            free_port()
        ),
        &format!("pop3:\n    backend_addr: {nowhere}"),
    );
    let pop3_addr = pop3_login.announced("pop3        ").trim().to_string();
    let mut submission_login = login(
        "submission-login",
        &format!(
            "  submission:\n    address: 127.0.0.1\n    port: {}\n  submissions:\n    enabled: false\n",
            free_port()
        ),
        &format!("submission:\n    backend_addr: {nowhere}"),
    );
    let submission_addr = submission_login
        .announced("submission  ")
        .trim()
        .to_string();
    for p in [&imap_login, &pop3_login, &submission_login] {
        assert!(p.becomes_ready(), "login ready");
    }
    Cluster {
        dir,
        auth_addr,
        warden_addr,
        imap_addr,
        pop3_addr,
        submission_addr,
        submission_login,
        pop3_login,
        imap_login,
        backend,
        warden,
        _locks: locks,
        _auth: auth,
    }
}

/// A line-oriented client connected from the loopback address `from`.
struct Client {
    r: BufReader<TcpStream>,
    w: TcpStream,
}

impl Client {
    fn connect(from: &str, to: &str) -> Client {
        let to: SocketAddr = to.parse().unwrap();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let stream = rt.block_on(async {
            let s = tokio::net::TcpSocket::new_v4().unwrap();
            s.bind(format!("{from}:0").parse().unwrap()).unwrap();
            s.connect(to).await.unwrap()
        });
        let w = stream.into_std().unwrap();
        w.set_nonblocking(false).unwrap();
        w.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        Client {
            r: BufReader::new(w.try_clone().unwrap()),
            w,
        }
    }

    /// One line; empty at EOF.
    fn line(&mut self) -> String {
        let mut l = String::new();
        match self.r.read_line(&mut l) {
            Ok(_) => l,
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => String::new(),
            Err(e) => panic!("read: {e}"),
        }
    }

    /// Lines until one starts with `prefix`; that line.
    fn until(&mut self, prefix: &str) -> String {
        loop {
            let l = self.line();
            assert!(!l.is_empty(), "EOF before a line starting with {prefix:?}");
            if l.starts_with(prefix) {
                return l;
            }
        }
    }

    fn send(&mut self, s: &str) {
        self.w.write_all(s.as_bytes()).unwrap();
        self.w.write_all(b"\r\n").unwrap();
    }

    /// True when the server closed the connection with nothing more to
    /// read (false after the 10 s read timeout).
    fn closed(&mut self) -> bool {
        let mut rest = Vec::new();
        match self.r.read_to_end(&mut rest) {
            Ok(_) => rest.is_empty(),
            Err(e) => e.kind() == std::io::ErrorKind::ConnectionReset,
        }
    }
}

/// Polls `check` every 50 ms for up to `secs` seconds.
fn eventually(secs: u64, mut check: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while Instant::now() < deadline {
        if check() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    false
}

fn admissions(p: &Process, protocol: &str, stage: &str, result: &str) -> f64 {
    p.metric(&format!(
        "yarilo_login_warden_admissions_total{{protocol=\"{protocol}\",stage=\"{stage}\",result=\"{result}\"}}"
    ))
}

fn handoffs(p: &Process, protocol: &str) -> f64 {
    ["ok", "no_route", "connect_failed", "no_answer", "refused"]
        .iter()
        .map(|r| {
            p.metric(&format!(
                "yarilo_login_backend_handoffs_total{{protocol=\"{protocol}\",result=\"{r}\"}}"
            ))
        })
        .sum()
}

#[test]
fn connections_over_the_per_ip_limit_get_each_protocols_refusal_instead_of_a_greeting() {
    let c = cluster("    max_connections_per_ip: 2\n    max_auth_failures: 2\n");

    // IMAP from 127.0.0.3: two greetings, then BYE for the third.
    let mut held: Vec<Client> = (0..2)
        .map(|_| {
            let mut s = Client::connect("127.0.0.3", &c.imap_addr);
            assert!(s.line().starts_with("* OK [CAPABILITY"));
            s
        })
        .collect();
    let mut third = Client::connect("127.0.0.3", &c.imap_addr);
    let bye = third.line();
    assert_eq!(bye, "* BYE [UNAVAILABLE] Too many connections\r\n");
    assert!(third.closed(), "the refused connection is closed");
    // Another address is not affected.
    let mut other = Client::connect("127.0.0.7", &c.imap_addr);
    assert!(other.line().starts_with("* OK"));
    // Closing one releases its slot (DISCONNECT).
    drop(held.pop());
    assert!(
        eventually(10, || {
            let mut s = Client::connect("127.0.0.3", &c.imap_addr);
            s.line().starts_with("* OK")
        }),
        "a slot freed by a closed connection is reused"
    );

    // POP3 from 127.0.0.4.
    let _pop3: Vec<Client> = (0..2)
        .map(|_| {
            let mut s = Client::connect("127.0.0.4", &c.pop3_addr);
            assert!(s.line().starts_with("+OK"));
            s
        })
        .collect();
    let mut third = Client::connect("127.0.0.4", &c.pop3_addr);
    assert_eq!(third.line(), "-ERR [SYS/TEMP] Too many connections\r\n");
    assert!(third.closed());

    // Submission from 127.0.0.5.
    let _smtp: Vec<Client> = (0..2)
        .map(|_| {
            let mut s = Client::connect("127.0.0.5", &c.submission_addr);
            assert!(s.line().starts_with("220 "));
            s
        })
        .collect();
    let mut third = Client::connect("127.0.0.5", &c.submission_addr);
    assert_eq!(
        third.line(),
        "421 4.7.0 test.invalid Too many connections\r\n"
    );
    assert!(third.closed());

    // The penalty: two wrong passwords from 127.0.0.6 (each reported with
    // AUTH_FAIL), then warden refuses new connections from it.
    let mut s = Client::connect("127.0.0.6", &c.imap_addr);
    assert!(s.line().starts_with("* OK"));
    for tag in ["a", "b"] {
        s.send(&format!("{tag} LOGIN alice wrong"));
        let no = s.until(tag);
        assert!(
            no.starts_with(&format!("{tag} NO [AUTHENTICATIONFAILED]")),
            "{no}"
        );
    }
    let mut late = Client::connect("127.0.0.6", &c.imap_addr);
    assert_eq!(
        late.line(),
        "* BYE [UNAVAILABLE] Too many failed logins\r\n"
    );

    for (p, proto) in [
        (&c.imap_login, "imap"),
        (&c.pop3_login, "pop3"),
        (&c.submission_login, "submission"),
    ] {
        assert!(
            admissions(p, proto, "connect", "ip_connections") >= 1.0,
            "{proto} counted its refusal"
        );
        assert_eq!(handoffs(p, proto), 0.0, "{proto} never handed off");
    }
    assert_eq!(admissions(&c.imap_login, "imap", "connect", "penalty"), 1.0);
    assert_eq!(
        c.imap_login
            .metric("yarilo_login_warden_auth_failures_total{protocol=\"imap\"}"),
        2.0
    );
    // No login succeeded, so nothing ever reached the backend.
    assert_eq!(
        c.backend
            .metric("yarilo_listener_connections_total{service=\"imap\"}"),
        0.0
    );
    assert!(
        c.warden
            .metric("yarilo_warden_connect_total{result=\"refused\"}")
            >= 4.0
    );
}

/// Logs alice in over IMAP; the connection is then piped to the backend.
fn imap_login_alice(c: &Cluster, from: &str) -> Client {
    let mut s = Client::connect(from, &c.imap_addr);
    assert!(s.line().starts_with("* OK"));
    s.send("a LOGIN alice secret");
    let ok = s.until("a ");
    assert!(ok.starts_with("a OK"), "{ok}");
    s
}

#[test]
fn a_login_over_the_per_user_session_limit_is_refused_and_no_backend_is_dialled() {
    let c = cluster("    max_sessions_per_user: 1\n");
    let mut first = imap_login_alice(&c, "127.0.0.1");
    first.send("b SELECT INBOX");
    assert!(first.until("b ").starts_with("b OK"));

    // IMAP: tagged NO [LIMIT], still not authenticated.
    let mut s = Client::connect("127.0.0.1", &c.imap_addr);
    assert!(s.line().starts_with("* OK"));
    s.send("a LOGIN alice secret");
    assert_eq!(
        s.until("a "),
        "a NO [LIMIT] Too many sessions for this user.\r\n"
    );
    s.send("b NOOP");
    assert!(s.until("b ").starts_with("b OK"), "the connection goes on");

    // POP3: -ERR [IN-USE].
    let mut p = Client::connect("127.0.0.1", &c.pop3_addr);
    assert!(p.line().starts_with("+OK"));
    p.send("USER alice");
    assert!(p.line().starts_with("+OK"));
    p.send("PASS secret");
    assert_eq!(
        p.line(),
        "-ERR [IN-USE] Too many sessions for this user.\r\n"
    );

    // Submission: 454 4.7.0 to AUTH.
    let mut m = Client::connect("127.0.0.1", &c.submission_addr);
    assert!(m.line().starts_with("220 "));
    m.send("EHLO client.invalid");
    m.until("250 ");
    m.send(&format!("AUTH PLAIN {ALICE_PLAIN}"));
    assert_eq!(m.line(), "454 4.7.0 Too many sessions for this user\r\n");

    // Only the first session reached the backend.
    assert_eq!(
        c.backend
            .metric("yarilo_backend_preambles_total{service=\"imap\",result=\"ok\"}"),
        1.0
    );
    assert_eq!(
        c.backend
            .metric("yarilo_listener_connections_total{service=\"imap\"}"),
        1.0
    );
    assert_eq!(
        c.imap_login
            .metric("yarilo_login_backend_handoffs_total{protocol=\"imap\",result=\"ok\"}"),
        1.0
    );
    assert_eq!(handoffs(&c.pop3_login, "pop3"), 0.0);
    assert_eq!(handoffs(&c.submission_login, "submission"), 0.0);
    assert_eq!(
        admissions(&c.imap_login, "imap", "session", "user_sessions"),
        1.0
    );
    assert_eq!(
        admissions(&c.pop3_login, "pop3", "session", "user_sessions"),
        1.0
    );
    assert_eq!(
        admissions(
            &c.submission_login,
            "submission",
            "session",
            "user_sessions"
        ),
        1.0
    );

    // The first session ends (SESSION_END): alice may log in again.
    first.send("c LOGOUT");
    first.until("c ");
    drop(first);
    assert!(
        eventually(10, || {
            let mut s = Client::connect("127.0.0.1", &c.imap_addr);
            s.line();
            s.send("a LOGIN alice secret");
            s.until("a ").starts_with("a OK")
        }),
        "the slot is released when the piped session ends"
    );
}

/// Sends `EMIT <user> <reason>` to warden as its own client would.
fn emit_kick(warden: &str, user: &str) {
    let mut s = Client::connect("127.0.0.1", warden);
    s.w.write_all(b"VERSION\twarden\t1\t0\n").unwrap();
    assert!(s.line().starts_with("VERSION\twarden\t1"));
    s.w.write_all(format!("EMIT\t{user}\ttest kick\n").as_bytes())
        .unwrap();
    assert_eq!(s.line(), "OK\n");
}

#[test]
fn a_kick_from_warden_closes_the_users_piped_imap_session() {
    let c = cluster("    max_connections_per_ip: 10\n");
    assert!(
        eventually(15, || c
            .imap_login
            .metric("yarilo_login_warden_kick_subscribed")
            == 1.0),
        "imap-login subscribed to the kick bus"
    );
    let mut s = imap_login_alice(&c, "127.0.0.1");
    s.send("b SELECT INBOX");
    assert!(s.until("b ").starts_with("b OK"));
    // A kick for someone else leaves the session alone.
    emit_kick(&c.warden_addr, "bob");
    s.send("c NOOP");
    assert!(s.until("c ").starts_with("c OK"));

    let started = Instant::now();
    emit_kick(&c.warden_addr, "alice");
    assert!(s.closed(), "the kicked session is closed");
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(
        c.imap_login
            .metric("yarilo_login_warden_kicks_total{protocol=\"imap\"}"),
        1.0
    );
    assert!(c.warden.metric("yarilo_warden_kick_delivered_total") >= 1.0);
    // The session slot is released too.
    assert!(eventually(10, || c
        .imap_login
        .metric("yarilo_login_sessions_proxied{protocol=\"imap\"}")
        == 0.0));
}

#[test]
fn logins_keep_working_while_warden_is_down_unless_fail_open_is_off() {
    let mut c = cluster("    max_connections_per_ip: 10\n");
    assert!(c.warden.sigterm_and_wait(Duration::from_secs(15)).is_some());
    // Warden is gone; the logins fail open.
    let mut s = imap_login_alice(&c, "127.0.0.1");
    s.send("b NOOP");
    assert!(s.until("b ").starts_with("b OK"));
    assert_eq!(
        admissions(&c.imap_login, "imap", "connect", "failopen"),
        1.0
    );
    assert_eq!(
        admissions(&c.imap_login, "imap", "session", "failopen"),
        1.0
    );
    assert!(
        c.imap_login
            .metric("yarilo_login_warden_errors_total{protocol=\"imap\",op=\"connect\"}")
            >= 1.0
    );

    // With fail_open: false the same outage refuses new connections.
    let mut closed = named_component(
        c.dir.path(),
        "imap-login-fail-closed",
        "imap-login",
        &format!(
            "auth_client:\n  address: {}\n\
             warden_client:\n  enabled: true\n  fail_open: false\n  endpoints: [\"{}\"]\n\
             services:\n  imap:\n    address: 127.0.0.1\n    port: {}\n  imaps:\n    enabled: false\n\
             login:\n  imap:\n    backend_addr: 127.0.0.1:{}\n",
            c.auth_addr,
            c.warden_addr,
            free_port(),
            free_port()
        ),
    );
    let addr = closed.announced("imap        ").trim().to_string();
    let mut refused = Client::connect("127.0.0.1", &addr);
    assert_eq!(
        refused.line(),
        "* BYE [UNAVAILABLE] Server temporarily unavailable\r\n"
    );
    assert!(refused.closed());
    assert_eq!(admissions(&closed, "imap", "connect", "failclosed"), 1.0);
}
