#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Routing as the seeds define it, through real processes on loopback:
//! `yarilo auth`, `yarilo locks` (embedded socket), `yarilo director`,
//! three `yarilo imap` backends on their own loopback addresses each
//! registered by a `yarilo backend-reg` sidecar (two in tag `a`, one in
//! tag `b`), and one `yarilo imap-login` routing by `director_addr` with
//! the static tag `a`. Python's imaplib is the client.
//!
//! - a per-user `director_tag` wins over the login's static one;
//! - registered pods are dialled on the login's own protocol port (their
//!   BACKEND-UP port is nominal);
//! - a user being moved waits for the director's confirmed-kill hold
//!   instead of failing the LOOKUP;
//! - a dead registered backend is reported by the login
//!   (BACKEND-UNREACHABLE) and evicted before its lease expires.

mod common;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{free_port, Process, BIN};

const TOKEN: &str = "seed-routing-token";

fn base_config(dir: &Path) -> String {
    format!(
        "general:\n  data_dir: {d}\n  hostname: test.invalid\n  xclient:\n    trusted_nets: [127.0.0.0/8]\n\
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

/// An admin API call with the token: status and body.
fn api(base: &str, method: &str, path: &str, body: Option<&str>) -> (u16, String) {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(async {
            let client = reqwest::Client::new();
            let url = format!("{base}{path}");
            let req = match method {
                "POST" => client.post(&url),
                _ => client.get(&url),
            }
            .bearer_auth(TOKEN)
            .timeout(Duration::from_secs(10));
            let req = match body {
                Some(b) => req
                    .header("content-type", "application/json")
                    .body(b.to_string()),
                None => req,
            };
            let r = req.send().await.unwrap();
            (r.status().as_u16(), r.text().await.unwrap())
        })
}

fn backend_ips(api_base: &str) -> Vec<String> {
    let (status, body) = api(api_base, "GET", "/api/director/backends", None);
    assert_eq!(status, 200, "{body}");
    let list: serde_json::Value = serde_json::from_str(&body).unwrap();
    let mut ips: Vec<String> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["ip"].as_str().unwrap().to_string())
        .collect();
    ips.sort();
    ips
}

fn wait_for(what: &str, within: Duration, mut ok: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !ok() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// One IMAP login through the proxy: `OK` or the error text.
const LOGIN: &str = r#"
import imaplib, os, sys
m = imaplib.IMAP4(os.environ["HOST"], int(os.environ["PORT"]))
try:
    m.login(os.environ["U"], "secret")
except imaplib.IMAP4.error as e:
    print("NO", e)
    sys.exit(0)
typ, _ = m.select("INBOX")
assert typ == "OK"
m.logout()
print("OK")
"#;

/// Logs in and holds the session until killed.
const HOLD: &str = r#"
import imaplib, os, sys, time
m = imaplib.IMAP4(os.environ["HOST"], int(os.environ["PORT"]))
m.login(os.environ["U"], "secret")
m.select("INBOX")
print("in", flush=True)
try:
    for _ in range(120):
        m.noop()
        time.sleep(0.5)
except Exception as e:
    print("ended", e, flush=True)
"#;

fn python(script: &str, addr: &str, user: &str) -> String {
    let (host, port) = addr.rsplit_once(':').unwrap();
    let out = Command::new("python3")
        .args(["-c", script])
        .env("HOST", host)
        .env("PORT", port)
        .env("U", user)
        .output()
        .expect("python3 is required: run scripts/setup-dev");
    assert!(
        out.status.success(),
        "python: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

struct Backend {
    ip: &'static str,
    tag: &'static str,
    proc: Option<Process>,
    _reg: Process,
}

impl Backend {
    fn handoffs(&self) -> f64 {
        self.proc
            .as_ref()
            .unwrap()
            .metric("yarilo_backend_preambles_total{service=\"imap\",result=\"ok\"}")
    }
}

#[test]
fn director_routing_follows_the_seeds() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(
        d.join("users"),
        "alice:{PLAIN}secret::::::\nbob:{PLAIN}secret::::::director_tag=b\n\
         carol:{PLAIN}secret::::::\n",
    )
    .unwrap();
    let mut auth = start(d, "auth", "auth", "auth_service:\n  listen: 127.0.0.1:0\n");
    let auth_addr = auth.announced("auth        ").trim().to_string();
    let locks = start(d, "locks", "locks", "");
    assert!(locks.becomes_ready(), "locks ready");
    let client = format!("auth_client:\n  address: {auth_addr}\n");
    let mut director = start(
        d,
        "director",
        "director",
        &format!(
            "director_service:\n  listen: 127.0.0.1:0\n  backend_expire: 600\n  \
             backend_unreachable_reporters: 1\n  user_kick_delay: 3\n  \
             api:\n    listen: 127.0.0.1:0\n    token: {TOKEN}\n"
        ),
    );
    let director_addr = director.announced("director    ").trim().to_string();
    let api_base = format!(
        "http://{}",
        director.announced("admin api   http://").trim()
    );

    // Every backend listens on the same port on its own address: the
    // login's own imap port. The sidecars register a nominal port 9.
    let port = free_port();
    let mut backends: Vec<Backend> = [
        ("127.0.0.61", "a"),
        ("127.0.0.63", "a"),
        ("127.0.0.62", "b"),
    ]
    .into_iter()
    .map(|(ip, tag)| {
        let mut p = start(
            d,
            &format!("imap-{ip}"),
            "imap",
            &format!(
                "{client}services:\n  imap:\n    address: {ip}\n    port: {port}\n  imaps:\n    enabled: false\n"
            ),
        );
        p.announced("imap        ");
        assert!(p.becomes_ready(), "backend {ip} ready");
        let reg = start(
            d,
            &format!("reg-{ip}"),
            "backend-reg",
            &format!(
                "backend_register:\n  director_addr: {director_addr}\n  register_interval: 1\n  \
                 tag: {tag}\n  address: {ip}\n  port: 9\n  readyz_urls: [\"{}/readyz\"]\n",
                p.telemetry
            ),
        );
        Backend {
            ip,
            tag,
            proc: Some(p),
            _reg: reg,
        }
    })
    .collect();
    wait_for("the three registrations", Duration::from_secs(30), || {
        backend_ips(&api_base).len() == 3
    });
    let mut login = start(
        d,
        "imap-login",
        "imap-login",
        &format!(
            "{client}services:\n  imap:\n    address: 127.0.0.1\n    port: {port}\n  imaps:\n    enabled: false\n\
             login:\n  connect_timeout_ms: 1000\n  imap:\n    director_addr: {director_addr}\n    director_tag: a\n"
        ),
    );
    let login_addr = login.announced("imap        ").trim().to_string();
    assert!(login.becomes_ready(), "login ready");
    wait_for("the login's director link", Duration::from_secs(20), || {
        login.metric("yarilo_login_director_connected") == 1.0
    });

    // 1 + 2: alice (no field) goes to tag a, bob (director_tag=b) to the
    // only backend of tag b, each dialled on the login's port.
    assert_eq!(python(LOGIN, &login_addr, "alice"), "OK");
    assert_eq!(python(LOGIN, &login_addr, "bob"), "OK");
    let b_backend = backends.iter().find(|b| b.tag == "b").unwrap();
    assert_eq!(b_backend.handoffs(), 1.0, "bob's session is on tag b's pod");
    let on_a: f64 = backends
        .iter()
        .filter(|b| b.tag == "a")
        .map(Backend::handoffs)
        .sum();
    assert_eq!(on_a, 1.0, "alice's session is on a pod of tag a");

    // 4: carol holds a session; an admin move to the other pod of tag a
    // holds her LOOKUPs until the kick (3 s later) closed it. Her next
    // login waits that out — longer than login.connect_timeout_ms — and
    // lands on the new pod.
    let (host, p) = login_addr.rsplit_once(':').unwrap();
    let mut holder = Command::new("python3")
        .args(["-c", HOLD])
        .env("HOST", host)
        .env("PORT", p)
        .env("U", "carol")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(holder.stdout.as_mut().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line.trim(), "in");
    let (status, body) = api(&api_base, "GET", "/api/director/map?user=carol&tag=a", None);
    assert_eq!(status, 200, "{body}");
    let map: serde_json::Value = serde_json::from_str(&body).unwrap();
    let from = map["backend"].as_str().unwrap().to_string();
    let to = backends
        .iter()
        .find(|b| b.tag == "a" && b.ip != from)
        .unwrap()
        .ip;
    let before = backends.iter().find(|b| b.ip == to).unwrap().handoffs();
    let move_body = format!("{{\"user\":\"carol\",\"tag\":\"a\",\"backend\":\"{to}\"}}");
    let (status, body) = api(
        &api_base,
        "POST",
        "/api/director/users/move",
        Some(&move_body),
    );
    assert_eq!(status, 200, "{body}");
    let started = Instant::now();
    assert_eq!(
        python(LOGIN, &login_addr, "carol"),
        "OK",
        "the moved user's login waits for the hold"
    );
    println!(
        "login of a moved user completed after {:.2} s (kick delay 3 s)",
        started.elapsed().as_secs_f64()
    );
    let after = backends.iter().find(|b| b.ip == to).unwrap().handoffs();
    assert_eq!(after, before + 1.0, "carol now on {to}");
    let _ = holder.kill();
    let _ = holder.wait();

    // 3: the pod serving alice dies. The next login fails (the pod is
    // still in the ring), the login reports it, the director evicts it
    // at once (one reporter), and the login after that lands elsewhere.
    let (_, body) = api(&api_base, "GET", "/api/director/map?user=alice&tag=a", None);
    let map: serde_json::Value = serde_json::from_str(&body).unwrap();
    let dead = map["backend"].as_str().unwrap().to_string();
    let victim = backends.iter_mut().find(|b| b.ip == dead).unwrap();
    drop(victim.proc.take());
    let failed = python(LOGIN, &login_addr, "alice");
    assert!(failed.starts_with("NO"), "{failed}");
    wait_for("the dead pod's eviction", Duration::from_secs(10), || {
        !backend_ips(&api_base).contains(&dead)
    });
    let again = python(LOGIN, &login_addr, "alice");
    if again != "OK" {
        let log = std::fs::read_to_string(d.join("imap-login.log")).unwrap_or_default();
        let tail: Vec<&str> = log.lines().rev().take(15).collect();
        panic!(
            "after the report alice goes to the surviving pod: {again}\n{}",
            tail.join("\n")
        );
    }
    assert!(
        login.metric(
            "yarilo_login_director_reports_total{protocol=\"imap\",op=\"unreachable\",result=\"ok\"}"
        ) >= 1.0
    );
    drop(login);
    drop(backends);
    drop(director);
    drop(locks);
    drop(auth);
}

/// `session_grace_period` as the seed defines it: after SIGTERM the
/// director leaves the ring and keeps answering the LOOKUP it is holding,
/// well past the 5 s it used to cap shutdown at, then exits.
#[test]
fn a_stopping_director_still_answers_a_held_lookup_within_its_grace_period() {
    use std::io::{Read, Write};
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let mut director = start(
        d,
        "director",
        "director",
        &format!(
            "director_service:\n  listen: 127.0.0.1:0\n  session_grace_period: 20\n  \
             user_kill_timeout: 7\n  user_kick_delay: -1\n  mail_servers:\n    - host: 127.0.0.71\n      port: 143\n    \
             - host: 127.0.0.72\n      port: 143\n  api:\n    listen: 127.0.0.1:0\n    token: {TOKEN}\n"
        ),
    );
    let addr = director.announced("director    ").trim().to_string();
    let api_base = format!(
        "http://{}",
        director.announced("admin api   http://").trim()
    );
    let connect = || {
        let mut s = std::net::TcpStream::connect(&addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let mut r = BufReader::new(s.try_clone().unwrap());
        let mut hello = String::new();
        r.read_line(&mut hello).unwrap();
        s.write_all(b"VERSION\tdirector\t1\t0\n").unwrap();
        (s, r)
    };
    let ask = |s: &mut std::net::TcpStream, r: &mut BufReader<std::net::TcpStream>, line: &str| {
        s.write_all(line.as_bytes()).unwrap();
        let mut reply = String::new();
        r.read_line(&mut reply).unwrap();
        reply
    };
    // A live session of dave on his pod, then an admin move: his LOOKUPs
    // are held until the session closes or user_kill_timeout passes.
    let (mut s, mut r) = connect();
    let first = ask(&mut s, &mut r, "LOOKUP\tdave\t\timap\n");
    let from = first.split('\t').nth(1).unwrap().to_string();
    let to = if from == "127.0.0.71" {
        "127.0.0.72"
    } else {
        "127.0.0.71"
    };
    assert_eq!(
        ask(
            &mut s,
            &mut r,
            &format!("SESSION-OPEN\ts1\tdave\t\t{from}\timap\n")
        ),
        "OK\n"
    );
    let body = format!("{{\"user\":\"dave\",\"backend\":\"{to}\"}}");
    let (status, text) = api(&api_base, "POST", "/api/director/users/move", Some(&body));
    assert_eq!(status, 200, "{text}");
    let (mut held, mut held_r) = connect();
    held.write_all(b"LOOKUP\tdave\t\timap\n").unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let stopped = Instant::now();
    director.signal("TERM");
    let mut reply = String::new();
    held_r.read_line(&mut reply).unwrap();
    println!(
        "held LOOKUP answered {:.2} s after SIGTERM",
        stopped.elapsed().as_secs_f64()
    );
    assert_eq!(
        reply,
        format!("OK\t{to}\t143\n"),
        "answered during the grace period"
    );
    assert!(
        director.exits_within(Duration::from_secs(25)),
        "the director exits within session_grace_period"
    );
    // The idle connection was closed at shutdown.
    let mut rest = Vec::new();
    let _ = r.get_mut().read_to_end(&mut rest);
    drop(s);
}
