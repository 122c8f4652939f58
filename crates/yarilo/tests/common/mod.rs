//! Running the real `yarilo` binary in tests: start it with telemetry on
//! an ephemeral port, read what it announces, probe it over HTTP, stop it
//! with a real signal. Every wait is bounded.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};

pub const BIN: &str = env!("CARGO_BIN_EXE_yarilo");

/// A running yarilo process; killed when dropped.
pub struct Process {
    child: Child,
    lines: Receiver<String>,
    seen: Vec<String>,
    /// `http://<addr>` of its telemetry server.
    pub telemetry: String,
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Process {
    /// Starts `cmd` with telemetry on 127.0.0.1:0 and waits for the
    /// telemetry address it prints.
    pub fn start(mut cmd: Command) -> Process {
        let mut child = cmd
            .env("TELEMETRY_LISTEN", "127.0.0.1:0")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn yarilo");
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut p = Process {
            child,
            lines,
            seen: Vec::new(),
            telemetry: String::new(),
        };
        let addr = p.announced("telemetry   http://");
        let addr = addr.split_whitespace().next().unwrap_or("").to_string();
        p.telemetry = format!("http://{addr}");
        p
    }

    /// The rest of the first output line (leading spaces trimmed) that
    /// starts with `prefix`, waiting up to a minute for it.
    pub fn announced(&mut self, prefix: &str) -> String {
        let found = |l: &String| l.trim_start().strip_prefix(prefix).map(str::to_string);
        if let Some(rest) = self.seen.iter().find_map(found) {
            return rest;
        }
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = self
                .lines
                .recv_timeout(left)
                .unwrap_or_else(|_| panic!("yarilo never printed a line starting with {prefix:?}"));
            let hit = found(&line);
            self.seen.push(line);
            if let Some(rest) = hit {
                return rest;
            }
        }
    }

    /// Polls `/readyz` as a kubelet would, up to 15 s.
    pub fn becomes_ready(&self) -> bool {
        let deadline = Instant::now() + Duration::from_secs(15);
        while Instant::now() < deadline {
            if get(&format!("{}/readyz", self.telemetry)).0 == 200 {
                return true;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        false
    }

    /// Sends `signal` (a `kill` name: `KILL`, `TERM`, `STOP`, `CONT`).
    pub fn signal(&self, signal: &str) {
        let ok = Command::new("kill")
            .args([&format!("-{signal}"), &self.child.id().to_string()])
            .status()
            .expect("the `kill` command is required (procps)")
            .success();
        assert!(ok, "kill -{signal} {} failed", self.child.id());
    }

    /// Waits up to `within` for the process to exit; whether it did.
    pub fn exits_within(&mut self, within: Duration) -> bool {
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            if self.child.try_wait().unwrap().is_some() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    }

    /// Sends SIGTERM and waits up to `within` for the exit code.
    pub fn sigterm_and_wait(&mut self, within: Duration) -> Option<i32> {
        Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .unwrap();
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status.code();
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        None
    }
}

fn block_on<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(f)
}

/// GET: status and body.
pub fn get(url: &str) -> (u16, String) {
    block_on(async {
        let r = reqwest::get(url).await.unwrap();
        (r.status().as_u16(), r.text().await.unwrap())
    })
}

/// POST with no body: status.
pub fn post(url: &str) -> u16 {
    block_on(async {
        reqwest::Client::new()
            .post(url)
            .send()
            .await
            .unwrap()
            .status()
            .as_u16()
    })
}

/// Writes `yarilo.yaml` in `dir`.
pub fn write_config(dir: &std::path::Path, text: &str) -> std::path::PathBuf {
    let path = dir.join("yarilo.yaml");
    std::fs::write(&path, text).unwrap();
    path
}

impl Process {
    /// Like [`Process::start`], with the process's log (stderr) written to
    /// `log` so a test can read what it logged.
    pub fn start_logged(mut cmd: Command, log: &std::path::Path) -> Process {
        let file = std::fs::File::create(log).unwrap();
        let mut child = cmd
            .env("TELEMETRY_LISTEN", "127.0.0.1:0")
            .stdout(Stdio::piped())
            .stderr(Stdio::from(file))
            .spawn()
            .expect("spawn yarilo");
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut p = Process {
            child,
            lines,
            seen: Vec::new(),
            telemetry: String::new(),
        };
        let addr = p.announced("telemetry   http://");
        let addr = addr.split_whitespace().next().unwrap_or("").to_string();
        p.telemetry = format!("http://{addr}");
        p
    }

    /// The value of one sample on `/metrics` (`name{labels}` exactly as
    /// exposed), 0 when absent.
    pub fn metric(&self, sample: &str) -> f64 {
        let (_, text) = get(&format!("{}/metrics", self.telemetry));
        text.lines()
            .find_map(|l| l.strip_prefix(sample).and_then(|v| v.strip_prefix(' ')))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0.0)
    }
}

/// A loopback port that was free a moment ago, for configuration keys
/// that refuse port 0 (`services.*.port`).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}
