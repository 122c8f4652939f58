#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Stand-alone components started as an operator would: the real binary,
//! through its `yarilo-<component>` link, with a configuration file.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_yarilo");

struct Running {
    child: Child,
    telemetry: String,
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start(program: &Path, args: &[&str]) -> Running {
    let mut child = Command::new(program)
        .args(args)
        .env("TELEMETRY_LISTEN", "127.0.0.1:0")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn yarilo");
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if let Some(rest) = line.trim_start().strip_prefix("telemetry   http://") {
                let _ = tx.send(rest.split_whitespace().next().unwrap_or("").to_string());
            }
        }
    });
    let addr = rx
        .recv_timeout(Duration::from_secs(60))
        .expect("component did not announce its telemetry address");
    Running {
        child,
        telemetry: format!("http://{addr}"),
    }
}

fn status(url: &str) -> u16 {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async { reqwest::get(url).await.unwrap().status().as_u16() })
}

/// Readiness is polled, as a kubelet does: a component registers its
/// checks once its service is bound, a moment after telemetry is up.
fn becomes_ready(telemetry: &str) -> bool {
    let deadline = Instant::now() + Duration::from_secs(15);
    while Instant::now() < deadline {
        if status(&format!("{telemetry}/readyz")) == 200 {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    false
}

fn sigterm_and_wait(run: &mut Running) -> Option<i32> {
    Command::new("kill")
        .args(["-TERM", &run.child.id().to_string()])
        .status()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(15);
    while Instant::now() < deadline {
        if let Some(s) = run.child.try_wait().unwrap() {
            return s.code();
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    None
}

#[test]
fn locks_component_through_its_link_serves_the_wire_protocol() {
    let dir = tempfile::tempdir().unwrap();
    let link = dir.path().join("yarilo-locks");
    std::os::unix::fs::symlink(BIN, &link).unwrap();
    let socket = dir.path().join("locks.sock");
    let config = dir.path().join("yarilo.yaml");
    std::fs::write(
        &config,
        format!(
            "general:\n  data_dir: {}\nlocks_service:\n  mode: embedded\n  socket: {}\n",
            dir.path().display(),
            socket.display()
        ),
    )
    .unwrap();
    let mut run = start(&link, &["--config", config.to_str().unwrap()]);
    assert!(becomes_ready(&run.telemetry));

    let mut conn = UnixStream::connect(&socket).unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    conn.write_all(
        b"VERSION\t1\nLOCK\tmbox:alice:INBOX\ttest\t30000\nLOCK\tmbox:alice:INBOX\tother\t30000\n",
    )
    .unwrap();
    let mut got = String::new();
    let mut buf = [0u8; 256];
    while got.matches('\n').count() < 3 {
        let n = conn.read(&mut buf).unwrap();
        assert!(n > 0, "connection closed early: {got:?}");
        got.push_str(std::str::from_utf8(&buf[..n]).unwrap());
    }
    let lines: Vec<&str> = got.lines().collect();
    assert_eq!(lines[0], "VERSION\t1\tOK");
    assert!(lines[1].starts_with("OK\t"), "{got:?}");
    assert_eq!(lines[2], "BUSY\ttest");

    assert_eq!(sigterm_and_wait(&mut run), Some(0));
    assert!(!socket.exists(), "the socket is removed on shutdown");
}

#[test]
fn warden_component_starts_and_refuses_memory_state_with_replicas() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("yarilo.yaml");
    std::fs::write(
        &config,
        format!(
            "general:\n  data_dir: {}\nwarden_service:\n  listen: 127.0.0.1:0\n",
            dir.path().display()
        ),
    )
    .unwrap();
    let mut run = start(
        Path::new(BIN),
        &["warden", "--config", config.to_str().unwrap()],
    );
    assert!(becomes_ready(&run.telemetry));
    assert_eq!(sigterm_and_wait(&mut run), Some(0));

    std::fs::write(
        &config,
        format!(
            "general:\n  data_dir: {}\nwarden_service:\n  listen: 127.0.0.1:0\n  state_backend: memory\n  replicas: 2\n",
            dir.path().display()
        ),
    )
    .unwrap();
    let out = Command::new(BIN)
        .args(["warden", "--config", config.to_str().unwrap()])
        .env("TELEMETRY_LISTEN", "127.0.0.1:0")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("replicas"), "{err}");
}

#[test]
fn director_component_answers_lookup_for_a_static_backend() {
    use std::net::TcpStream;
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("yarilo.yaml");
    std::fs::write(
        &config,
        format!(
            "general:\n  data_dir: {}\ndirector_service:\n  listen: 127.0.0.1:0\n  api:\n    listen: \"\"\n  mail_servers:\n    - host: 127.0.0.2\n      port: 10143\n",
            dir.path().display()
        ),
    )
    .unwrap();
    let mut child = Command::new(BIN)
        .args(["director", "--config", config.to_str().unwrap()])
        .env("TELEMETRY_LISTEN", "127.0.0.1:0")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let mut lines = BufReader::new(stdout).lines().map_while(Result::ok);
    let addr = lines
        .find_map(|l| {
            l.trim_start()
                .strip_prefix("director    ")
                .map(str::to_string)
        })
        .expect("director address announced");
    let mut run = Running {
        child,
        telemetry: String::new(),
    };
    let mut conn = TcpStream::connect(addr.trim()).unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    conn.write_all(b"VERSION\tdirector\t1\t0\nLOOKUP\talice@example.org\t\timap\n")
        .unwrap();
    let mut reader = BufReader::new(conn.try_clone().unwrap());
    let mut got = Vec::new();
    while got.len() < 2 {
        let mut line = String::new();
        assert!(
            reader.read_line(&mut line).unwrap() > 0,
            "closed early: {got:?}"
        );
        got.push(line.trim_end().to_string());
    }
    assert!(got[0].starts_with("VERSION\tdirector\t1"), "{got:?}");
    assert_eq!(got[1], "OK\t127.0.0.2\t10143");
    assert_eq!(sigterm_and_wait(&mut run), Some(0));
}

#[test]
fn auth_component_issues_a_token_that_verifies_once() {
    use std::net::TcpStream;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("users"), "alice:{PLAIN}secret::::::\n").unwrap();
    let config = dir.path().join("yarilo.yaml");
    std::fs::write(
        &config,
        format!(
            "general:\n  data_dir: {}\nauth_service:\n  listen: 127.0.0.1:0\n",
            dir.path().display()
        ),
    )
    .unwrap();
    let mut child = Command::new(BIN)
        .args(["auth", "--config", config.to_str().unwrap()])
        .env("TELEMETRY_LISTEN", "127.0.0.1:0")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let mut lines = BufReader::new(stdout).lines().map_while(Result::ok);
    let addr = lines
        .find_map(|l| {
            l.trim_start()
                .strip_prefix("auth        ")
                .map(str::to_string)
        })
        .expect("auth address announced");
    let mut run = Running {
        child,
        telemetry: String::new(),
    };
    let mut conn = TcpStream::connect(addr.trim()).unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut reader = BufReader::new(conn.try_clone().unwrap());
    let mut read_line = || {
        let mut line = String::new();
        assert!(
            reader.read_line(&mut line).unwrap() > 0,
            "connection closed"
        );
        line.trim_end().to_string()
    };
    conn.write_all(b"VERSION\tauth\t1\t0\n").unwrap();
    assert!(read_line().starts_with("VERSION\tauth\t1"));
    let mut login = |id: u32, session: &str| {
        let req = format!(
            "AUTH\t{id}\tPLAIN\tservice=imap\tip=127.0.0.1\tsession={session}\tsecured\tresp=AGFsaWNlAHNlY3JldA==\n"
        );
        conn.write_all(req.as_bytes()).unwrap();
        let line = read_line();
        assert!(
            line.starts_with(&format!("OK\t{id}\t")) && line.contains("user=alice"),
            "{line}"
        );
        let token = line
            .split('\t')
            .find_map(|f| f.strip_prefix("token=").map(str::to_string))
            .unwrap();
        assert_eq!(token.len(), 64);
        token
    };
    let first = login(1, "s1");
    let second = login(2, "s2");
    let verify = |id: u32, token: &str, session: &str, service: &str| {
        format!("VERIFY\t{id}\ttoken={token}\tsession={session}\tservice={service}\n")
    };
    let mut conn2 = conn.try_clone().unwrap();
    conn2
        .write_all(verify(3, &first, "s1", "imap").as_bytes())
        .unwrap();
    let ok = read_line();
    assert!(
        ok.starts_with("OK\t3\t") && ok.contains("user=alice"),
        "{ok}"
    );
    conn2
        .write_all(verify(4, &first, "s1", "imap").as_bytes())
        .unwrap();
    assert!(
        read_line().starts_with("FAIL\t4\t"),
        "a token verifies once"
    );
    conn2
        .write_all(verify(5, &second, "s2", "pop3").as_bytes())
        .unwrap();
    assert!(
        read_line().starts_with("FAIL\t5\t"),
        "a token is bound to its service"
    );
    assert_eq!(sigterm_and_wait(&mut run), Some(0));
}
