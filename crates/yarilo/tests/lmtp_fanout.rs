#![allow(clippy::unwrap_used, clippy::expect_used)]
//! lmtp-login in the director shape: `yarilo director` spreads users over
//! two `yarilo lmtp` backends; one LMTP transaction for eight recipients is
//! split by lmtp-login into one preamble-authenticated backend connection
//! per recipient, delivered in parallel, and every recipient gets the
//! message. The backends admit nothing without a verified preamble, and
//! warden limits concurrent deliveries per user (checked per RCPT).

mod common;

use std::path::Path;
use std::process::Command;

use common::{free_port, Process, BIN};

fn component(dir: &Path, name: &str, file: &str, extra: &str) -> Process {
    let path = dir.join(format!("{file}.yaml"));
    let config = format!(
        "general:\n  data_dir: {d}\n  hostname: test.invalid\n  xclient:\n    trusted_nets: [127.0.0.1/32]\n\
         auth:\n  disable_plaintext_auth: false\n\
         locks_service:\n  mode: embedded\n  socket: {d}/locks.sock\n\
         locks_client:\n  mode: embedded\n  socket: {d}/locks.sock\n{extra}",
        d = dir.display()
    );
    std::fs::write(&path, config).unwrap();
    let mut cmd = Command::new(BIN);
    cmd.args([name, "--config", path.to_str().unwrap()]);
    Process::start_logged(cmd, &dir.join(format!("{file}.log")))
}

const USERS: [&str; 8] = ["u1", "u2", "u3", "u4", "u5", "u6", "u7", "u8"];

#[test]
fn one_transaction_is_split_over_two_backends_by_the_director() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let users: String = USERS
        .iter()
        .map(|u| format!("{u}:{{PLAIN}}secret::::::\n"))
        .collect();
    std::fs::write(d.join("users"), users).unwrap();
    let mut procs = Vec::new();
    let warden_addr = format!("127.0.0.1:{}", free_port());
    let warden = component(
        d,
        "warden",
        "warden",
        &format!(
            "warden_service:\n  listen: {warden_addr}\n  limits:\n    max_deliveries_per_user: 1\n"
        ),
    );
    assert!(warden.becomes_ready(), "warden ready");
    procs.push(warden);
    let mut auth = component(d, "auth", "auth", "auth_service:\n  listen: 127.0.0.1:0\n");
    let auth_addr = auth.announced("auth        ").trim().to_string();
    procs.push(auth);
    let locks = component(d, "locks", "locks", "");
    assert!(locks.becomes_ready(), "locks ready");
    procs.push(locks);
    let client = format!("auth_client:\n  address: {auth_addr}\n");
    let off = "  imaps:\n    enabled: false\n  pop3s:\n    enabled: false\n  submissions:\n    enabled: false\n";
    // Two LMTP backends on two loopback addresses (the director tells
    // backends apart by address).
    let mut backends = Vec::new();
    let mut hops: Vec<String> = Vec::new();
    let mut servers = String::new();
    for (i, ip) in ["127.0.0.1", "127.0.0.4"].iter().enumerate() {
        let port = free_port();
        let mut b = component(
            d,
            "lmtp",
            &format!("lmtp-{i}"),
            &format!(
                "{client}login:\n  preamble_timeout_ms: 1000\nservices:\n  lmtp:\n    address: {ip}\n    port: {port}\n{off}"
            ),
        );
        hops.push(b.announced("lmtp        ").trim().to_string());
        assert!(b.becomes_ready(), "lmtp backend {i} ready");
        servers.push_str(&format!("    - host: {ip}\n      port: {port}\n"));
        backends.push(b);
    }
    let mut director = component(
        d,
        "director",
        "director",
        &format!("director_service:\n  listen: 127.0.0.1:0\n  api:\n    listen: \"\"\n  mail_servers:\n{servers}"),
    );
    let director_addr = director.announced("director    ").trim().to_string();
    procs.push(director);
    let lport = free_port();
    let mut login = component(
        d,
        "lmtp-login",
        "lmtp-login",
        &format!(
            "{client}services:\n  lmtp:\n    address: 127.0.0.1\n    port: {lport}\n{off}\
             warden_client:\n  enabled: true\n  endpoints: [\"{warden_addr}\"]\n\
             login:\n  lmtp:\n    director_addr: {director_addr}\n"
        ),
    );
    let login_addr = login.announced("lmtp        ").trim().to_string();
    assert!(login.becomes_ready(), "lmtp-login ready");
    let (host, port) = login_addr.rsplit_once(':').unwrap();
    let out = Command::new("python3")
        .args([
            "-c",
            r#"
import os, smtplib
s = smtplib.LMTP(os.environ["HOST"], int(os.environ["PORT"]))
users = ["u1", "u2", "u3", "u4", "u5", "u6", "u7", "u8"]
refused = s.sendmail("sender@example.org", users, b"Subject: fan-out\r\n\r\nto all\r\n")
assert refused == {}, refused
s.quit()
print("delivered")
"#,
        ])
        .env("HOST", host)
        .env("PORT", port)
        .output()
        .expect("python3 is required: run scripts/setup-dev");
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("delivered"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Every recipient has the message exactly once.
    for u in USERS {
        let maildir = d.join("mail").join(u);
        let n: usize = ["new", "cur"]
            .iter()
            .map(|s| {
                std::fs::read_dir(maildir.join(s))
                    .map(|r| r.count())
                    .unwrap_or(0)
            })
            .sum();
        assert_eq!(n, 1, "{u} has {n} messages");
    }
    // Both backends delivered some of them.
    for (i, b) in backends.iter().enumerate() {
        let ok = b.metric("yarilo_lmtp_deliveries_total{result=\"ok\"}");
        assert!(ok >= 1.0, "backend {i} delivered {ok}");
        println!("backend {i} delivered {ok} of 8");
    }
    // Both recipients resolve to u1: the second delivery to u1 in the
    // same transaction is over max_deliveries_per_user (1) and gets a
    // temporary failure; the first is delivered.
    let out = Command::new("python3")
        .args([
            "-c",
            r#"
import os, smtplib
s = smtplib.LMTP(os.environ["HOST"], int(os.environ["PORT"]))
refused = s.sendmail("sender@example.org", ["u1", "u1+x"], b"Subject: twice\r\n\r\nhi\r\n")
print(refused)
assert list(refused) == ["u1+x"], refused
code, text = refused["u1+x"]
assert code == 451 and b"4.7.0" in text, refused
s.quit()
print("limited")
"#,
        ])
        .env("HOST", host)
        .env("PORT", port)
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("limited"),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let n: usize = ["new", "cur"]
        .iter()
        .map(|s| {
            std::fs::read_dir(d.join("mail").join("u1").join(s))
                .map(|r| r.count())
                .unwrap_or(0)
        })
        .sum();
    assert_eq!(
        n, 2,
        "u1 got the fan-out message and one copy of the second"
    );

    // An MTA (or anyone) talking to a backend's LMTP port directly gets
    // no greeting: without a verified preamble the connection is closed.
    for (i, b) in backends.iter().enumerate() {
        let mut s = std::net::TcpStream::connect(&hops[i]).unwrap();
        s.set_read_timeout(Some(std::time::Duration::from_secs(10)))
            .unwrap();
        let mut got = Vec::new();
        let _ = std::io::Read::read_to_end(&mut s, &mut got);
        assert!(
            got.is_empty(),
            "backend {i} spoke without a preamble: {:?}",
            String::from_utf8_lossy(&got)
        );
        let refused =
            b.metric("yarilo_backend_preambles_total{service=\"lmtp\",result=\"timeout\"}");
        assert!(refused >= 1.0, "backend {i} counted the refusal");
        let ok = b.metric("yarilo_backend_preambles_total{service=\"lmtp\",result=\"ok\"}");
        assert!(ok >= 1.0, "backend {i} admitted lmtp-login's preambles");
    }
    drop(login);
    drop(backends);
    while let Some(p) = procs.pop() {
        drop(p);
    }
}
