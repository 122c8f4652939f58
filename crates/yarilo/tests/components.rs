#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Stand-alone components started as an operator would: the real binary,
//! through its `yarilo-<component>` link, with a configuration file.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::{Process, BIN};

fn start(program: &Path, args: &[&str]) -> Process {
    let mut cmd = Command::new(program);
    cmd.args(args);
    Process::start(cmd)
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
    assert!(run.becomes_ready());

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

    assert_eq!(run.sigterm_and_wait(Duration::from_secs(15)), Some(0));
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
    assert!(run.becomes_ready());
    assert_eq!(run.sigterm_and_wait(Duration::from_secs(15)), Some(0));

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
    let mut run = start(
        Path::new(BIN),
        &["director", "--config", config.to_str().unwrap()],
    );
    let addr = run.announced("director    ");
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
    assert_eq!(run.sigterm_and_wait(Duration::from_secs(15)), Some(0));
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
    let mut run = start(
        Path::new(BIN),
        &["auth", "--config", config.to_str().unwrap()],
    );
    let addr = run.announced("auth        ");
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
    assert_eq!(run.sigterm_and_wait(Duration::from_secs(15)), Some(0));
}
