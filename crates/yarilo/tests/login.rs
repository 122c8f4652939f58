#![allow(clippy::unwrap_used, clippy::expect_used)]
//! The standalone shape on loopback, as separate processes: `yarilo auth`,
//! `yarilo locks` (embedded socket), one `yarilo imap` backend and one
//! `yarilo imap-login`, each with its own configuration file. Real clients
//! (Python's imaplib) go through the login proxy; the backend's gate is
//! probed directly.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::{free_port, Process, BIN};

struct Cluster {
    dir: tempfile::TempDir,
    auth_addr: String,
    login_addr: String,
    backend_addr: String,
    backend_log: PathBuf,
    // Dropped (killed) in reverse order of start.
    login: Process,
    backend: Process,
    _locks: Process,
    _auth: Process,
}

fn common_config(dir: &Path) -> String {
    format!(
        "general:\n  data_dir: {d}\n  hostname: test.invalid\n  xclient:\n    trusted_nets: [127.0.0.1/32]\n  haproxy:\n    enabled: true\n    trusted_nets: [127.0.0.2/32]\n    timeout: 3\n\
         auth:\n  disable_plaintext_auth: false\n  auth_failure_delay_seconds: 0\n\
         imap:\n  auth_failure_delay_seconds: 0\n\
         locks_service:\n  mode: embedded\n  socket: {d}/locks.sock\n\
         locks_client:\n  mode: embedded\n  socket: {d}/locks.sock\n",
        d = dir.display()
    )
}

fn component(dir: &Path, name: &str, extra: &str, log: Option<&Path>) -> Process {
    let path = dir.join(format!("{name}.yaml"));
    std::fs::write(&path, format!("{}{extra}", common_config(dir))).unwrap();
    let mut cmd = Command::new(BIN);
    cmd.args([name, "--config", path.to_str().unwrap()]);
    match log {
        Some(l) => Process::start_logged(cmd, l),
        None => Process::start(cmd),
    }
}

fn cluster() -> Cluster {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(
        d.join("users"),
        "alice:{PLAIN}secret::::::\ncarol:{PLAIN}secret::::::allow_nets=192.0.2.0/24\n\
         dave:{PLAIN}secret::::::nologin reason=Moved\n",
    )
    .unwrap();
    let mut auth = component(d, "auth", "auth_service:\n  listen: 127.0.0.1:0\n", None);
    let auth_addr = auth.announced("auth        ").trim().to_string();
    let locks = component(d, "locks", "", None);
    assert!(locks.becomes_ready(), "locks service ready");
    let client = format!("auth_client:\n  address: {auth_addr}\n");
    let backend_port = free_port();
    let backend_log = d.join("backend.log");
    let mut backend = component(
        d,
        "imap",
        &format!(
            "{client}services:\n  imap:\n    address: 127.0.0.1\n    port: {backend_port}\n  imaps:\n    enabled: false\n\
             login:\n  preamble_timeout_ms: 2000\n"
        ),
        Some(&backend_log),
    );
    let backend_addr = backend.announced("imap        ").trim().to_string();
    assert!(backend.becomes_ready(), "backend ready");
    let login_port = free_port();
    let mut login = component(
        d,
        "imap-login",
        &format!(
            "{client}services:\n  imap:\n    address: 127.0.0.1\n    port: {login_port}\n    haproxy_protocol: true\n  imaps:\n    enabled: false\n\
             login:\n  imap:\n    backend_addr: {backend_addr}\n"
        ),
        None,
    );
    let login_addr = login.announced("imap        ").trim().to_string();
    assert!(login.becomes_ready(), "login ready");
    Cluster {
        dir,
        auth_addr,
        login_addr,
        backend_addr,
        backend_log,
        login,
        backend,
        _locks: locks,
        _auth: auth,
    }
}

/// Runs a Python script with `HOST`/`PORT` of the login proxy set;
/// returns stdout, failing the test with stderr on a non-zero exit.
fn python(c: &Cluster, script: &str) -> String {
    let (host, port) = c.login_addr.rsplit_once(':').unwrap();
    let out = Command::new("python3")
        .args(["-c", script])
        .env("HOST", host)
        .env("PORT", port)
        .output()
        .expect("python3 is required for these tests");
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "python failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

const WORKFLOW: &str = r#"
import imaplib, os, ssl
host, port = os.environ["HOST"], int(os.environ["PORT"])

# Plain LOGIN (loopback counts as secure).
m = imaplib.IMAP4(host, port)
pre = m.capabilities
assert "STARTTLS" in pre and "AUTH=PLAIN" in pre, pre
typ, caps = m.login("alice", "secret")
assert typ == "OK", (typ, caps)
# The tagged OK carried the backend's list in its response code…
code = m.response("CAPABILITY")[1][0].decode().split()
assert "MOVE" in code and any(c.startswith("APPENDLIMIT=") for c in code), code
# …and CAPABILITY now goes to the backend: it has what pre-login lacks.
typ, data = m.capability()
post = data[0].decode().split()
assert "MOVE" in post and any(c.startswith("APPENDLIMIT=") for c in post), post
assert "STARTTLS" not in post and "AUTH=PLAIN" not in post, post
typ, _ = m.select("INBOX")
assert typ == "OK"
msg = b"From: a@test.invalid\r\nSubject: through the proxy\r\n\r\nhello\r\n"
typ, data = m.append("INBOX", "(\\Seen)", None, msg)
assert typ == "OK", data
typ, data = m.fetch("1", "(BODY.PEEK[HEADER.FIELDS (SUBJECT)])")
assert typ == "OK" and b"through the proxy" in data[0][1], data
m.logout()

# STARTTLS, then AUTHENTICATE PLAIN with a continuation (no SASL-IR).
m = imaplib.IMAP4(host, port)
ctx = ssl.create_default_context()
ctx.check_hostname = False
ctx.verify_mode = ssl.CERT_NONE
m.starttls(ctx)
typ, _ = m.authenticate("PLAIN", lambda _: b"\0alice\0secret")
assert typ == "OK"
typ, data = m.select("INBOX", readonly=True)
assert typ == "OK" and data[0] == b"1", data
typ, data = m.fetch("1", "(FLAGS)")
assert b"\\Seen" in data[0], data
m.logout()
print("workflow ok")
"#;

#[test]
fn imaplib_logs_in_through_the_proxy_and_selects_appends_and_fetches() {
    let c = cluster();
    assert!(python(&c, WORKFLOW).contains("workflow ok"));
    assert_eq!(
        c.backend
            .metric("yarilo_backend_preambles_total{service=\"imap\",result=\"ok\"}"),
        2.0
    );
    assert_eq!(
        c.login
            .metric("yarilo_login_backend_handoffs_total{protocol=\"imap\",result=\"ok\"}"),
        2.0
    );
    assert!(
        c.login
            .metric("yarilo_login_proxied_bytes_total{protocol=\"imap\",direction=\"downstream\"}")
            > 0.0
    );
    // The backend's own record of each session it served: a start (the
    // gate's `preamble accepted`) and an end with the same session id.
    // The lab's single-writer check reads these two lines.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let log = std::fs::read_to_string(&c.backend_log).unwrap();
        let starts: Vec<&str> = log
            .lines()
            .filter(|l| l.contains("preamble accepted"))
            .collect();
        let ends: Vec<&str> = log.lines().filter(|l| l.contains("session end")).collect();
        if ends.len() == 2 {
            assert_eq!(starts.len(), 2, "{log}");
            for end in ends {
                assert!(
                    end.contains("alice") && end.contains("service=\"imap\""),
                    "{end}"
                );
                let session = end
                    .split("session=")
                    .nth(1)
                    .unwrap()
                    .split_whitespace()
                    .next()
                    .unwrap();
                assert!(
                    starts.iter().any(|s| s.contains(session)),
                    "no start for {session}: {log}"
                );
            }
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "two session ends expected: {log}"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

const WRONG_PASSWORD: &str = r#"
import imaplib, os
m = imaplib.IMAP4(os.environ["HOST"], int(os.environ["PORT"]))
try:
    m.login("alice", "wrong")
    raise SystemExit("login with a wrong password succeeded")
except imaplib.IMAP4.error as e:
    assert "AUTHENTICATIONFAILED" in str(e), e
# The connection is still usable in the not-authenticated state.
typ, _ = m.noop()
assert typ == "OK"
# nologin: refused in the login process with its reason.
try:
    m.login("dave", "secret")
    raise SystemExit("nologin user logged in")
except imaplib.IMAP4.error as e:
    assert "UNAVAILABLE" in str(e) and "Moved" in str(e), e
m.logout()
print("refused")
"#;

#[test]
fn wrong_password_and_nologin_are_answered_by_the_login_and_the_backend_is_never_dialled() {
    let c = cluster();
    assert!(python(&c, WRONG_PASSWORD).contains("refused"));
    assert_eq!(
        c.login
            .metric("yarilo_login_logins_total{protocol=\"imap\",result=\"bad_credentials\"}"),
        1.0
    );
    assert_eq!(
        c.login
            .metric("yarilo_login_logins_total{protocol=\"imap\",result=\"nologin\"}"),
        1.0
    );
    // Not one connection reached the backend, not one hand-off started.
    assert_eq!(
        c.backend
            .metric("yarilo_listener_connections_total{service=\"imap\"}"),
        0.0
    );
    for result in ["ok", "no_route", "connect_failed", "no_answer", "refused"] {
        assert_eq!(
            c.login.metric(&format!(
                "yarilo_login_backend_handoffs_total{{protocol=\"imap\",result=\"{result}\"}}"
            )),
            0.0
        );
    }
}

/// A PROXY v2 header for TCP over IPv4.
fn proxy_v2(src: [u8; 4], dst: [u8; 4], sport: u16, dport: u16) -> Vec<u8> {
    let mut h = b"\r\n\r\n\0\r\nQUIT\n".to_vec();
    h.push(0x21); // v2, PROXY
    h.push(0x11); // TCP over IPv4
    h.extend_from_slice(&12u16.to_be_bytes());
    h.extend_from_slice(&src);
    h.extend_from_slice(&dst);
    h.extend_from_slice(&sport.to_be_bytes());
    h.extend_from_slice(&dport.to_be_bytes());
    h
}

/// Connects to `to` from the loopback address `from` (all of 127/8 is
/// local on Linux), with a read timeout.
fn connect_from(from: &str, to: &str) -> TcpStream {
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
    let std = stream.into_std().unwrap();
    std.set_nonblocking(false).unwrap();
    std.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    std
}

fn read_line(r: &mut BufReader<TcpStream>) -> String {
    let mut line = String::new();
    r.read_line(&mut line).unwrap();
    line
}

#[test]
fn proxy_v2_from_a_trusted_net_gives_the_real_client_ip_to_auth_and_backend() {
    let c = cluster();
    // carol may log in only from 192.0.2.0/24: from plain loopback she is
    // refused by allow_nets in the login process…
    let mut s = connect_from("127.0.0.1", &c.login_addr);
    let mut r = BufReader::new(s.try_clone().unwrap());
    assert!(read_line(&mut r).starts_with("* OK [CAPABILITY"));
    s.write_all(b"a LOGIN carol secret\r\n").unwrap();
    let refused = read_line(&mut r);
    assert!(
        refused.starts_with("a NO [AUTHENTICATIONFAILED]"),
        "{refused}"
    );
    drop(r);
    drop(s);
    assert_eq!(
        c.login
            .metric("yarilo_login_logins_total{protocol=\"imap\",result=\"not_allowed_net\"}"),
        1.0
    );
    // …and admitted behind a PROXY v2 header naming 192.0.2.7, sent by a
    // trusted load balancer (127.0.0.2).
    let mut s = connect_from("127.0.0.2", &c.login_addr);
    s.write_all(&proxy_v2([192, 0, 2, 7], [127, 0, 0, 1], 40000, 143))
        .unwrap();
    let mut r = BufReader::new(s.try_clone().unwrap());
    assert!(read_line(&mut r).starts_with("* OK [CAPABILITY"));
    // Pipelined after LOGIN: must reach the backend intact.
    s.write_all(b"a LOGIN carol secret\r\nb NOOP\r\nc LOGOUT\r\n")
        .unwrap();
    let ok = read_line(&mut r);
    assert!(ok.starts_with("a OK [CAPABILITY IMAP4rev1"), "{ok}");
    assert!(read_line(&mut r).starts_with("b OK"));
    assert!(read_line(&mut r).starts_with("* BYE"));
    assert!(read_line(&mut r).starts_with("c OK"));
    let log = std::fs::read_to_string(&c.backend_log).unwrap();
    assert!(
        log.lines().any(|l| l.contains("preamble accepted")
            && l.contains("client_ip=192.0.2.7")
            && l.contains("user=carol")),
        "the backend saw the real client address:\n{log}"
    );
}

/// Authenticates `user` on the auth service directly, as a login would;
/// returns the token for `session`.
fn token_for(c: &Cluster, user: &str, session: &str) -> String {
    let mut conn = TcpStream::connect(&c.auth_addr).unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut r = BufReader::new(conn.try_clone().unwrap());
    conn.write_all(b"VERSION\tauth\t1\t0\n").unwrap();
    assert!(read_line(&mut r).starts_with("VERSION\tauth\t1"));
    let ir = base64_plain(user, "secret");
    conn.write_all(
        format!(
            "AUTH\t1\tPLAIN\tservice=imap\tip=127.0.0.1\tsession={session}\tsecured\tresp={ir}\n"
        )
        .as_bytes(),
    )
    .unwrap();
    let line = read_line(&mut r);
    line.split(['\t', '\n'])
        .find_map(|f| f.strip_prefix("token=").map(str::to_string))
        .unwrap_or_else(|| panic!("no token in {line:?}"))
}

fn base64_plain(user: &str, pass: &str) -> String {
    const T: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let raw = format!("\0{user}\0{pass}").into_bytes();
    let mut out = String::new();
    for chunk in raw.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(T[((n >> (18 - 6 * i)) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// Sends `bytes` to the backend from `from` and returns everything it
/// answered before closing.
fn probe_backend(c: &Cluster, from: &str, bytes: &[u8]) -> String {
    let mut s = connect_from(from, &c.backend_addr);
    s.write_all(bytes).unwrap();
    let mut got = Vec::new();
    let _ = s.read_to_end(&mut got);
    String::from_utf8_lossy(&got).to_string()
}

fn preamble(user: &str, session: &str, token: &str) -> String {
    format!("YARILO\tADDR=192.0.2.9\tSESSION={session}\tUSER={user}\tTOKEN={token}\tTAG=t1\n")
}

#[test]
fn backend_refuses_forged_replayed_malformed_and_untrusted_preambles() {
    let c = cluster();
    let m = |result: &str| {
        c.backend.metric(&format!(
            "yarilo_backend_preambles_total{{service=\"imap\",result=\"{result}\"}}"
        ))
    };
    // Not a preamble at all.
    assert_eq!(
        probe_backend(&c, "127.0.0.1", b"a1 LOGIN alice secret\r\n"),
        ""
    );
    assert_eq!(m("malformed"), 1.0);
    // Well-formed, but a token the auth service never issued.
    let forged = preamble("alice", "s-forged", &"ab".repeat(32));
    assert_eq!(probe_backend(&c, "127.0.0.1", forged.as_bytes()), "");
    assert_eq!(m("verify_failed"), 1.0);
    // A real token works once; its replay is refused.
    let token = token_for(&c, "alice", "s-real");
    let real = preamble("alice", "s-real", &token);
    let mut s = connect_from("127.0.0.1", &c.backend_addr);
    s.write_all(real.as_bytes()).unwrap();
    let mut r = BufReader::new(s.try_clone().unwrap());
    let first = read_line(&mut r);
    assert!(first.starts_with("t1 OK [CAPABILITY "), "{first}");
    s.write_all(b"t2 LOGOUT\r\n").unwrap();
    drop(r);
    drop(s);
    assert_eq!(m("ok"), 1.0);
    assert_eq!(probe_backend(&c, "127.0.0.1", real.as_bytes()), "");
    assert_eq!(m("verify_failed"), 2.0);
    // A valid token from a peer outside general.xclient.trusted_nets is
    // never even read.
    let token = token_for(&c, "alice", "s-untrusted");
    let p = preamble("alice", "s-untrusted", &token);
    assert_eq!(probe_backend(&c, "127.0.0.3", p.as_bytes()), "");
    assert_eq!(m("untrusted"), 1.0);
    // Silence is cut off by the preamble timeout.
    let started = std::time::Instant::now();
    assert_eq!(probe_backend(&c, "127.0.0.1", b""), "");
    assert!(started.elapsed() < Duration::from_secs(8));
    assert_eq!(m("timeout"), 1.0);
    let _ = &c.dir;
}

/// The director shape: imap-login asks `yarilo director` (LOOKUP) which
/// backend serves the user, then hands the session there.
#[test]
fn the_login_routes_through_the_director_to_the_backend() {
    let c = cluster();
    let d = c.dir.path();
    let backend_port = c.backend_addr.rsplit_once(':').unwrap().1;
    let mut director = component(
        d,
        "director",
        &format!(
            "director_service:\n  listen: 127.0.0.1:0\n  api:\n    listen: \"\"\n  mail_servers:\n    - host: 127.0.0.1\n      port: {backend_port}\n"
        ),
        None,
    );
    let director_addr = director.announced("director    ").trim().to_string();
    let port = free_port();
    let mut login = component(
        d,
        "imap-login",
        &format!(
            "auth_client:\n  address: {}\nservices:\n  imap:\n    address: 127.0.0.1\n    port: {port}\n  imaps:\n    enabled: false\n\
             login:\n  imap:\n    director_addr: {director_addr}\n",
            c.auth_addr
        ),
        None,
    );
    let login_addr = login.announced("imap        ").trim().to_string();
    assert!(login.becomes_ready(), "director-routed login ready");
    let (host, port) = login_addr.rsplit_once(':').unwrap();
    let out = Command::new("python3")
        .args([
            "-c",
            r#"
import imaplib, os
m = imaplib.IMAP4(os.environ["HOST"], int(os.environ["PORT"]))
typ, _ = m.login("alice", "secret")
assert typ == "OK"
typ, data = m.select("INBOX")
assert typ == "OK", data
m.logout()
print("routed ok")
"#,
        ])
        .env("HOST", host)
        .env("PORT", port)
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("routed ok"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The session went to the backend the director named.
    assert_eq!(
        c.backend
            .metric("yarilo_backend_preambles_total{service=\"imap\",result=\"ok\"}"),
        1.0
    );
    assert_eq!(
        login.metric("yarilo_login_backend_handoffs_total{protocol=\"imap\",result=\"ok\"}"),
        1.0
    );
    drop(login);
    drop(director);
}

const API_TOKEN: &str = "login-test-token";

/// Waits up to 15 s for `cond`, failing with `what` it waited for.
fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    while std::time::Instant::now() < deadline {
        if cond() {
            return;
        }
        std::thread::sleep(Duration::from_millis(25));
    }
    panic!("timed out after 15 s waiting for {what}");
}

/// One admin API call with the bearer token; status and JSON body.
fn api(method: &str, url: &str, body: Option<serde_json::Value>) -> (u16, serde_json::Value) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let client = reqwest::Client::builder()
            .timeout(Duration::from_secs(5))
            .build()
            .unwrap();
        let mut req = match method {
            "GET" => client.get(url),
            _ => client.post(url),
        }
        .bearer_auth(API_TOKEN);
        if let Some(b) = body {
            req = req
                .header("content-type", "application/json")
                .body(b.to_string());
        }
        let r = req.send().await.unwrap();
        let status = r.status().as_u16();
        let text = r.text().await.unwrap();
        (
            status,
            serde_json::from_str(&text).unwrap_or(serde_json::Value::Null),
        )
    })
}

/// Sessions the director tracks: (total, on the backend at 127.0.0.1).
fn director_sessions(api_url: &str) -> (u64, u64) {
    let (_, status) = api("GET", &format!("{api_url}/api/director/status"), None);
    let (_, backends) = api("GET", &format!("{api_url}/api/director/backends"), None);
    let on_backend = backends
        .as_array()
        .into_iter()
        .flatten()
        .find(|b| b["ip"] == "127.0.0.1")
        .and_then(|b| b["sessions"].as_u64())
        .unwrap_or(u64::MAX);
    (status["sessions"].as_u64().unwrap_or(u64::MAX), on_backend)
}

/// Connects to the login, logs in as alice, returns the stream and its
/// reader once the backend's tagged OK has been relayed.
fn logged_in(login_addr: &str, tag: &str) -> (TcpStream, BufReader<TcpStream>) {
    let mut s = connect_from("127.0.0.1", login_addr);
    let mut r = BufReader::new(s.try_clone().unwrap());
    assert!(read_line(&mut r).starts_with("* OK [CAPABILITY"));
    s.write_all(format!("{tag} LOGIN alice secret\r\n").as_bytes())
        .unwrap();
    let ok = read_line(&mut r);
    assert!(ok.starts_with(&format!("{tag} OK [CAPABILITY")), "{ok}");
    (s, r)
}

/// A `yarilo director` on 127.0.0.1:`port` (0: any) with the admin API
/// and the cluster's backend as its static mail server: the process with
/// its LOOKUP address, and the API's base URL.
fn director_with_api(c: &Cluster, port: u16) -> ((Process, String), String) {
    let backend_port = c.backend_addr.rsplit_once(':').unwrap().1;
    let mut director = component(
        c.dir.path(),
        "director",
        &format!(
            "director_service:\n  listen: 127.0.0.1:{port}\n  user_kick_delay: -1\n  api:\n    listen: 127.0.0.1:0\n    token: {API_TOKEN}\n  mail_servers:\n    - host: 127.0.0.1\n      port: {backend_port}\n"
        ),
        None,
    );
    let addr = director.announced("director    ").trim().to_string();
    let api_url = format!(
        "http://{}",
        director.announced("admin api   http://").trim()
    );
    ((director, addr), api_url)
}

/// An imap-login routing by `director_addr`, once its director connection
/// watches kicks: the process and its client address.
fn director_login(c: &Cluster, director_addr: &str) -> (Process, String) {
    let port = free_port();
    let mut login = component(
        c.dir.path(),
        "imap-login",
        &format!(
            "auth_client:\n  address: {}\nservices:\n  imap:\n    address: 127.0.0.1\n    port: {port}\n  imaps:\n    enabled: false\n\
             login:\n  imap:\n    director_addr: {director_addr}\n",
            c.auth_addr
        ),
        None,
    );
    let login_addr = login.announced("imap        ").trim().to_string();
    assert!(login.becomes_ready(), "director-routed login ready");
    wait_for(
        "the login's director connection (KICK-WATCH) to come up",
        || login.metric("yarilo_login_director_connected") == 1.0,
    );
    (login, login_addr)
}

/// The director shape with the director told about every piped session:
/// the director's admin API shows the session while it is open and not
/// after LOGOUT, and an admin kick of the user closes the client's
/// connection.
#[test]
fn a_director_routed_session_is_reported_to_the_director_and_ends_on_its_kick() {
    let c = cluster();
    let (director, api_url) = director_with_api(&c, 0);
    let (login, login_addr) = director_login(&c, &director.1);
    assert_eq!(director_sessions(&api_url), (0, 0));

    // Open: the director counts the session on the backend it chose.
    let (mut s, mut r) = logged_in(&login_addr, "a");
    wait_for("the director to show alice's session on 127.0.0.1", || {
        director_sessions(&api_url) == (1, 1)
    });
    // LOGOUT: the backend closes, the client closes, the pipe ends and
    // the director forgets the session.
    s.write_all(b"b LOGOUT\r\n").unwrap();
    assert!(read_line(&mut r).starts_with("* BYE"));
    assert!(read_line(&mut r).starts_with("b OK"));
    let mut rest = Vec::new();
    r.read_to_end(&mut rest)
        .expect("the login closes the client's side after the backend's");
    drop((s, r));
    wait_for("the director to drop the session after LOGOUT", || {
        director_sessions(&api_url) == (0, 0)
    });
    assert_eq!(
        login.metric(
            "yarilo_login_director_reports_total{protocol=\"imap\",op=\"open\",result=\"ok\"}"
        ),
        1.0
    );
    assert_eq!(
        login.metric(
            "yarilo_login_director_reports_total{protocol=\"imap\",op=\"close\",result=\"ok\"}"
        ),
        1.0
    );

    // An admin kick ends a piped session: the client's connection closes.
    let (s, mut r) = logged_in(&login_addr, "c");
    wait_for("the director to show the second session", || {
        director_sessions(&api_url) == (1, 1)
    });
    let (status, kicked) = api(
        "POST",
        &format!("{api_url}/api/director/users/kick"),
        Some(serde_json::json!({ "user": "alice", "tag": "" })),
    );
    assert_eq!((status, &kicked["kicks"]), (200, &serde_json::json!(1)));
    let mut rest = Vec::new();
    match r.read_to_end(&mut rest) {
        Ok(_) => {}
        Err(e) => panic!("the kicked session's connection was not closed within 10 s: {e}"),
    }
    assert_eq!(String::from_utf8_lossy(&rest), "", "no goodbye on a kick");
    wait_for("the director to drop the kicked session", || {
        director_sessions(&api_url) == (0, 0)
    });
    assert_eq!(
        login.metric("yarilo_login_director_kicks_total{protocol=\"imap\"}"),
        1.0
    );
    drop(s);
    drop(login);
    drop(director);
}

/// A director killed and started again on its address knows nothing; the
/// login's redialled connection reports its live session again, and its
/// end reaches the new director.
#[test]
fn a_restarted_director_learns_the_live_sessions_again() {
    let c = cluster();
    let port = free_port();
    let (director, api_url) = director_with_api(&c, port);
    let (login, login_addr) = director_login(&c, &director.1);
    let (mut s, mut r) = logged_in(&login_addr, "a");
    wait_for("the first director to show the session", || {
        director_sessions(&api_url) == (1, 1)
    });
    drop(director);
    wait_for("the login to notice the director is gone", || {
        login.metric("yarilo_login_director_connected") == 0.0
    });
    let (director, api_url) = director_with_api(&c, port);
    wait_for("the restarted director to learn the live session", || {
        director_sessions(&api_url) == (1, 1)
    });
    // The session survived the director's restart and still works.
    s.write_all(b"b NOOP\r\n").unwrap();
    assert!(read_line(&mut r).starts_with("b OK"));
    s.write_all(b"c LOGOUT\r\n").unwrap();
    assert!(read_line(&mut r).starts_with("* BYE"));
    assert!(read_line(&mut r).starts_with("c OK"));
    drop((s, r));
    wait_for("the restarted director to drop the session", || {
        director_sessions(&api_url) == (0, 0)
    });
    drop(login);
    drop(director);
}

/// A PROXY header from an address outside `general.haproxy.trusted_nets`
/// is not believed: it reaches the protocol as (bad) data, and the login
/// goes by the real peer address.
#[test]
fn a_proxy_header_from_an_untrusted_address_is_not_believed() {
    let c = cluster();
    let mut s = connect_from("127.0.0.3", &c.login_addr);
    let mut r = BufReader::new(s.try_clone().unwrap());
    assert!(read_line(&mut r).starts_with("* OK [CAPABILITY"));
    s.write_all(&proxy_v2([192, 0, 2, 7], [127, 0, 0, 1], 40000, 143))
        .unwrap();
    s.write_all(b"\r\na LOGIN carol secret\r\n").unwrap();
    // The header's bytes are answered as bad input; the LOGIN is judged
    // by 127.0.0.3, outside carol's allow_nets.
    let answer = loop {
        let l = read_line(&mut r);
        if l.starts_with("a ") {
            break l;
        }
        assert!(l.contains(" BAD ") || l.starts_with("* OK"), "{l}");
    };
    assert!(
        answer.starts_with("a NO [AUTHENTICATIONFAILED]"),
        "{answer}"
    );
    assert_eq!(
        c.login
            .metric("yarilo_login_logins_total{protocol=\"imap\",result=\"not_allowed_net\"}"),
        1.0
    );
    assert_eq!(
        c.backend
            .metric("yarilo_backend_preambles_total{service=\"imap\",result=\"ok\"}"),
        0.0
    );
}
