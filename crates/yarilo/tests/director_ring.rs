#![allow(clippy::unwrap_used, clippy::expect_used)]
//! The director ring as real `yarilo director` processes on distinct
//! loopback addresses, short intervals (1 s), real signals: formation,
//! `kill -9`, a restart of the killed member (a new incarnation), SIGTERM
//! (graceful leave), SIGSTOP (a hung member its neighbours must declare
//! dead) and SIGCONT (it refutes its tombstone and comes back).
//!
//! After every step each live member's view (admin API
//! `GET /api/director/members`) must hold exactly the live members with the
//! same incarnations, and every live member must answer LOOKUP for the same
//! users with the same backend. Timings are printed, never asserted; every
//! wait is bounded generously and fails naming what it waited for.
//! `bench/director/ring.sh` measures the same with default intervals.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Ipv4Addr, TcpStream};
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use common::{Process, BIN};

const SECRET: &str = "ring-procs-secret";
const TOKEN: &str = "ring-procs-token";
/// The fake backends every director has as static `mail_servers`.
const BACKENDS: [&str; 3] = ["127.1.0.1", "127.1.0.2", "127.1.0.3"];
/// How long any convergence may take before the test fails.
const WAIT: Duration = Duration::from_secs(60);
const USERS: usize = 200;

/// A member list as a director reports it: (addr, incarnation), sorted.
type View = Vec<(String, u64)>;

/// One director: its fixed ring address and, while it runs, its process.
struct Member {
    ip: Ipv4Addr,
    port: u16,
    config: PathBuf,
    dir: PathBuf,
    /// Starts so far (names each run's log).
    runs: u32,
    proc: Option<Process>,
    /// `http://ip:port` of the admin API of the current run.
    api: String,
    /// Running but SIGSTOPped: not expected in anyone's view.
    stopped: bool,
}

impl Member {
    fn addr(&self) -> String {
        format!("{}:{}", self.ip, self.port)
    }

    fn live(&self) -> bool {
        self.proc.is_some() && !self.stopped
    }

    fn start(&mut self) {
        self.runs += 1;
        let mut cmd = Command::new(BIN);
        cmd.args(["director", "--config", self.config.to_str().unwrap()]);
        let log = self.dir.join(format!("{}-run{}.log", self.ip, self.runs));
        let mut p = Process::start_logged(cmd, &log);
        let listen = p.announced("director    ").trim().to_string();
        assert_eq!(listen, self.addr(), "director listens where configured");
        self.api = format!("http://{}", p.announced("admin api   http://").trim());
        self.proc = Some(p);
        self.stopped = false;
    }

    fn signal(&self, signal: &str) {
        self.proc.as_ref().expect("member running").signal(signal);
    }

    /// The member list this director reports: (addr, incarnation), sorted;
    /// `None` while it does not answer.
    fn view(&self) -> Option<View> {
        let body = http_get(&format!("{}/api/director/members", self.api))?;
        parse_members(&body)
    }
}

/// A GET with the API token over a fresh connection, bounded to 2 s;
/// the body of a 200, else `None`.
fn http_get(url: &str) -> Option<String> {
    let rest = url.strip_prefix("http://")?;
    let (host, path) = rest.split_once('/').unwrap_or((rest, ""));
    let addr = host.parse().ok()?;
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    s.set_write_timeout(Some(Duration::from_secs(2))).ok()?;
    write!(
        s,
        "GET /{path} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {TOKEN}\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut reply = String::new();
    s.read_to_string(&mut reply).ok()?;
    let (head, body) = reply.split_once("\r\n\r\n")?;
    if !head.starts_with("HTTP/1.1 200") {
        return None;
    }
    if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        return Some(dechunk(body));
    }
    Some(body.to_string())
}

fn dechunk(mut body: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = body.split_once("\r\n") {
        let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if n == 0 || rest.len() < n {
            break;
        }
        out.push_str(&rest[..n]);
        body = rest[n..].trim_start_matches("\r\n");
    }
    out
}

/// `[{"addr":"…","incarnation":N,…},…]` → sorted (addr, incarnation).
fn parse_members(json: &str) -> Option<View> {
    let mut out = Vec::new();
    for object in json.split('}').filter(|o| o.contains('{')) {
        let addr = object.split("\"addr\":\"").nth(1)?.split('"').next()?;
        let inc = object.split("\"incarnation\":").nth(1)?;
        let inc: String = inc.chars().take_while(char::is_ascii_digit).collect();
        out.push((addr.to_string(), inc.parse().ok()?));
    }
    out.sort();
    Some(out)
}

/// The backend each of `USERS` users gets from LOOKUP on `addr`,
/// pipelined on one connection.
fn lookups(addr: &str) -> Vec<String> {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut r = BufReader::new(s.try_clone().unwrap());
    let mut line = String::new();
    r.read_line(&mut line).unwrap();
    assert!(
        line.starts_with("VERSION\tdirector\t1\t"),
        "{addr}: {line:?}"
    );
    let mut out = String::from("VERSION\tdirector\t1\t0\n");
    for i in 0..USERS {
        out.push_str(&format!("LOOKUP\tring-user-{i}\t\n"));
    }
    s.write_all(out.as_bytes()).unwrap();
    (0..USERS)
        .map(|i| {
            line.clear();
            r.read_line(&mut line)
                .unwrap_or_else(|e| panic!("{addr}: LOOKUP ring-user-{i}: {e}"));
            let f: Vec<&str> = line.trim_end().split('\t').collect();
            assert_eq!(f[0], "OK", "{addr}: LOOKUP ring-user-{i}: {line:?}");
            f[1].to_string()
        })
        .collect()
}

struct Ring {
    members: Vec<Member>,
    _dir: tempfile::TempDir,
}

impl Ring {
    /// Writes the configuration of `ips.len()` directors, each seeded with
    /// every address, each with its admin API on its own IP.
    fn new(ips: &[Ipv4Addr]) -> Ring {
        let dir = tempfile::tempdir().unwrap();
        // A port free on each IP a moment ago; a restart reuses it (a
        // director is known by its address).
        let addrs: Vec<(Ipv4Addr, u16)> = ips
            .iter()
            .map(|&ip| {
                let l = std::net::TcpListener::bind((ip, 0)).unwrap();
                (ip, l.local_addr().unwrap().port())
            })
            .collect();
        let peers: Vec<String> = addrs.iter().map(|(ip, p)| format!("{ip}:{p}")).collect();
        let servers: String = BACKENDS
            .iter()
            .map(|b| format!("    - host: {b}\n      port: 10143\n"))
            .collect();
        let members = addrs
            .iter()
            .map(|&(ip, port)| {
                let data = dir.path().join(ip.to_string());
                std::fs::create_dir_all(&data).unwrap();
                let config = dir.path().join(format!("{ip}.yaml"));
                std::fs::write(
                    &config,
                    format!(
                        "general:\n  data_dir: {data}\n\
                         director_service:\n  listen: {ip}:{port}\n  ring_secret: {SECRET}\n\
                         \x20 peers: [{peers}]\n  ping_interval: 1\n  ping_timeout: 1\n\
                         \x20 anti_entropy_interval: 1\n  seed_poll_interval: 1\n\
                         \x20 seed_poll_idle_interval: 1\n  session_grace_period: 2\n\
                         \x20 mail_servers:\n{servers}\
                         \x20 api:\n    listen: {ip}:0\n    token: {TOKEN}\n",
                        data = data.display(),
                        peers = peers.join(", "),
                    ),
                )
                .unwrap();
                Member {
                    ip,
                    port,
                    config,
                    dir: dir.path().to_path_buf(),
                    runs: 0,
                    proc: None,
                    api: String::new(),
                    stopped: false,
                }
            })
            .collect();
        Ring { members, _dir: dir }
    }

    fn live(&self) -> impl Iterator<Item = &Member> {
        self.members.iter().filter(|m| m.live())
    }

    /// Waits until every live member reports exactly the live members,
    /// all with the same incarnations; returns that view.
    fn converge(&self, step: &str, since: Instant) -> View {
        let mut want: Vec<String> = self.live().map(Member::addr).collect();
        want.sort();
        let deadline = Instant::now() + WAIT;
        loop {
            let last: Vec<(String, Option<View>)> =
                self.live().map(|m| (m.addr(), m.view())).collect();
            let first = last[0].1.clone();
            let agreed = first.as_ref().is_some_and(|v| {
                v.iter().map(|(a, _)| a).eq(want.iter()) && last.iter().all(|(_, w)| w == &first)
            });
            if agreed {
                let took = since.elapsed();
                println!(
                    "{step}: {} members agree after {:.2} s",
                    want.len(),
                    took.as_secs_f64()
                );
                return first.unwrap();
            }
            if Instant::now() > deadline {
                self.dump_logs();
                panic!(
                    "{step}: the live members {want:?} did not all report exactly themselves \
                     within {WAIT:?}; last views (addr → members):\n{last:#?}"
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Every live member answers every user with the same backend.
    fn lookups_agree(&self, step: &str) {
        let mut answers = self.live().map(|m| (m.addr(), lookups(&m.addr())));
        let (first_addr, first) = answers.next().unwrap();
        for (addr, got) in answers {
            for (i, (a, b)) in first.iter().zip(&got).enumerate() {
                assert_eq!(
                    a, b,
                    "{step}: ring-user-{i} is on {a} for {first_addr} but on {b} for {addr}"
                );
            }
        }
        let used: std::collections::BTreeSet<&String> = first.iter().collect();
        assert!(used.len() > 1, "{step}: {USERS} users all on one backend");
    }

    fn incarnation(view: &[(String, u64)], addr: &str) -> u64 {
        view.iter().find(|(a, _)| a == addr).unwrap().1
    }

    fn dump_logs(&self) {
        for m in &self.members {
            for run in 1..=m.runs {
                let log = m.dir.join(format!("{}-run{run}.log", m.ip));
                let text = std::fs::read_to_string(&log).unwrap_or_default();
                let tail: Vec<&str> = text.lines().rev().take(40).collect();
                eprintln!("---- {} run {run} (last 40 lines) ----", m.addr());
                for l in tail.iter().rev() {
                    eprintln!("{l}");
                }
            }
        }
    }
}

fn ips(first: u8, n: u8) -> Vec<Ipv4Addr> {
    (first..first + n)
        .map(|d| Ipv4Addr::new(127, 0, 0, d))
        .collect()
}

/// Formation, kill -9, restart, SIGTERM, restart, SIGSTOP, SIGCONT.
fn ring_survives_signals(ips: &[Ipv4Addr]) {
    let n = ips.len();
    let mut ring = Ring::new(ips);
    let started = Instant::now();
    for m in &mut ring.members {
        m.start();
    }
    let before = ring.converge("formation", started);
    ring.lookups_agree("formation");

    // kill -9 of a member in the middle of the ring order.
    let victim = n / 2;
    let old_inc = Ring::incarnation(&before, &ring.members[victim].addr());
    let t = Instant::now();
    ring.members[victim].signal("KILL");
    assert!(
        ring.members[victim]
            .proc
            .as_mut()
            .unwrap()
            .exits_within(Duration::from_secs(10)),
        "kill -9 ends the process"
    );
    ring.members[victim].proc = None;
    ring.converge("kill -9", t);
    ring.lookups_agree("kill -9");

    // The killed member restarts at the same address: a new incarnation.
    let t = Instant::now();
    ring.members[victim].start();
    let view = ring.converge("restart after kill -9", t);
    let new_inc = Ring::incarnation(&view, &ring.members[victim].addr());
    assert!(
        new_inc > old_inc,
        "restart: incarnation {new_inc} > {old_inc}"
    );
    ring.lookups_agree("restart after kill -9");

    // SIGTERM: a graceful leave (the lowest address).
    let leaver = 0;
    let t = Instant::now();
    ring.members[leaver].signal("TERM");
    let mut p = ring.members[leaver].proc.take().unwrap();
    ring.converge("SIGTERM", t);
    ring.lookups_agree("SIGTERM");
    assert!(
        p.exits_within(Duration::from_secs(30)),
        "SIGTERM: the director exits within 30 s"
    );
    drop(p);
    let t = Instant::now();
    ring.members[leaver].start();
    let before = ring.converge("restart after SIGTERM", t);
    ring.lookups_agree("restart after SIGTERM");

    // SIGSTOP: hung, its neighbours must declare it dead (the highest
    // address, so the ring wraps around it).
    let hung = n - 1;
    let old_inc = Ring::incarnation(&before, &ring.members[hung].addr());
    let t = Instant::now();
    ring.members[hung].signal("STOP");
    ring.members[hung].stopped = true;
    ring.converge("SIGSTOP", t);
    ring.lookups_agree("SIGSTOP");

    // SIGCONT: it learns its tombstone and rejoins with a higher incarnation.
    let t = Instant::now();
    ring.members[hung].signal("CONT");
    ring.members[hung].stopped = false;
    let view = ring.converge("SIGCONT", t);
    let new_inc = Ring::incarnation(&view, &ring.members[hung].addr());
    assert!(
        new_inc > old_inc,
        "SIGCONT: incarnation {new_inc} > {old_inc} (tombstone refuted)"
    );
    ring.lookups_agree("SIGCONT");
}

#[test]
fn three_directors_converge_after_kill_term_stop_and_restart() {
    ring_survives_signals(&ips(21, 3));
}

#[test]
fn five_directors_converge_after_kill_term_stop_and_restart() {
    ring_survives_signals(&ips(41, 5));
}
