#![allow(clippy::unwrap_used, clippy::expect_used)]
//! The protocol at the line level: concurrent expunge, pipelining, limits,
//! SASL, plaintext refusal, STLS injection, shutdown, timeouts, metrics.

mod common;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use common::{message, Harness, LineClient, Options, PASSWORD, USER};
use yarilo_pop3::Pop3Server;

fn b64(s: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(s)
}

#[tokio::test]
async fn a_message_expunged_by_imap_after_list_answers_err_and_the_session_goes_on() {
    let h = Harness::start(Options::default()).await;
    let uids = h
        .deliver(&[&message("a", 1), &message("b", 1), &message("c", 1)])
        .await;
    let (mut c, _) = LineClient::connect(h.addr).await;
    c.login().await;
    assert_eq!(c.cmd("LIST").await, "+OK 3 messages:");
    assert_eq!(c.multiline().await.len(), 3);

    // An IMAP session expunges message 2 through the store.
    let gone = h.inbox().await.expunge(&[uids[1]]).await.unwrap();
    assert_eq!(gone, vec![uids[1]]);

    let r = c.cmd("RETR 2").await;
    assert!(r.starts_with("-ERR") && r.contains("expunged"), "{r}");
    // Numbers keep their meaning: 1 and 3 are still there.
    assert!(c.cmd("RETR 3").await.starts_with("+OK"));
    assert!(c.multiline().await.contains(&"Subject: c".to_string()));
    assert_eq!(c.cmd("UIDL").await, "+OK");
    assert_eq!(c.multiline().await.len(), 3, "the snapshot still lists 3");
    // DELE of the vanished one and QUIT succeed.
    assert!(c.cmd("DELE 2").await.starts_with("+OK"));
    assert!(c.cmd("DELE 1").await.starts_with("+OK"));
    assert!(c.cmd("QUIT").await.starts_with("+OK"));
    let view = h.inbox().await.refresh().await.unwrap();
    assert_eq!(view.uids(), vec![uids[2]]);
}

#[tokio::test]
async fn pipelined_commands_are_answered_in_order() {
    let h = Harness::start(Options::default()).await;
    h.deliver(&[&message("a", 2)]).await;
    let (mut c, _) = LineClient::connect(h.addr).await;
    c.send(&format!(
        "USER {USER}\r\nPASS {PASSWORD}\r\nSTAT\r\nUIDL 1\r\nTOP 1 0\r\nNOOP\r\nQUIT\r\n"
    ))
    .await;
    assert_eq!(c.line().await, "+OK");
    assert_eq!(c.line().await, "+OK Logged in.");
    assert!(c.line().await.starts_with("+OK 1 "));
    assert!(c.line().await.starts_with("+OK 1 "));
    assert_eq!(c.line().await, "+OK");
    let top = c.multiline().await;
    assert_eq!(top.last().map(String::as_str), Some(""));
    assert_eq!(c.line().await, "+OK");
    assert_eq!(c.line().await, "+OK Logging out.");
    assert_eq!(c.try_line().await, None);
}

#[tokio::test]
async fn too_many_bad_commands_close_the_connection() {
    let h = Harness::start(Options {
        max_bad_commands: 3,
        ..Options::default()
    })
    .await;
    let (mut c, _) = LineClient::connect(h.addr).await;
    assert_eq!(c.cmd("XYZZY").await, "-ERR Unknown command.");
    assert_eq!(
        c.cmd("STAT").await,
        "-ERR Command not allowed in this state."
    );
    assert_eq!(c.cmd("RETR zero").await, "-ERR Invalid message number.");
    assert_eq!(c.line().await, "-ERR Too many bad commands.");
    assert_eq!(c.try_line().await, None);
    assert!(h
        .metrics_text()
        .contains("yarilo_pop3_commands_total{command=\"unknown\",result=\"bad\"} 1"));
}

#[tokio::test]
async fn an_over_long_line_is_refused_and_the_session_survives() {
    let h = Harness::start(Options::default()).await;
    let (mut c, _) = LineClient::connect(h.addr).await;
    c.send(&format!("USER {}\r\n", "x".repeat(100_000))).await;
    assert_eq!(c.line().await, "-ERR Line too long.");
    assert_eq!(c.cmd("CAPA").await, "+OK");
    assert!(c.multiline().await.contains(&"USER".to_string()));
    c.login().await;
}

#[tokio::test]
async fn wrong_passwords_get_auth_code_and_end_the_session_after_the_limit() {
    let h = Harness::start(Options::default()).await;
    let (mut c, _) = LineClient::connect(h.addr).await;
    for i in 0..3 {
        assert_eq!(c.cmd(&format!("USER {USER}")).await, "+OK");
        assert_eq!(
            c.cmd("PASS wrong").await,
            "-ERR [AUTH] Authentication failed.",
            "attempt {i}"
        );
    }
    assert_eq!(
        c.line().await,
        "-ERR Too many invalid authentication attempts."
    );
    assert_eq!(c.try_line().await, None);
    assert_eq!(c_pass_without_user(h.addr).await, "-ERR No username given.");
    assert!(h
        .metrics_text()
        .contains("yarilo_pop3_logins_total{result=\"bad_credentials\"} 3"));
}

async fn c_pass_without_user(addr: SocketAddr) -> String {
    let (mut c, _) = LineClient::connect(addr).await;
    c.cmd("PASS x").await
}

#[tokio::test]
async fn sasl_plain_with_and_without_initial_response_and_cancel() {
    let h = Harness::start(Options::default()).await;
    let creds = b64(format!("\0{USER}\0{PASSWORD}").as_bytes());

    let (mut c, _) = LineClient::connect(h.addr).await;
    assert_eq!(c.cmd("AUTH").await, "+OK");
    let mechs = c.multiline().await;
    assert!(mechs.contains(&"PLAIN".to_string()), "{mechs:?}");
    assert_eq!(
        c.cmd(&format!("AUTH PLAIN {creds}")).await,
        "+OK Logged in."
    );
    assert_eq!(c.cmd("STAT").await, "+OK 0 0");

    let (mut c, _) = LineClient::connect(h.addr).await;
    assert_eq!(c.cmd("AUTH PLAIN").await, "+ ");
    assert_eq!(c.cmd(&creds).await, "+OK Logged in.");
    // A two-step AUTH is one command in the metrics.
    assert!(h
        .metrics_text()
        .contains("yarilo_pop3_commands_total{command=\"AUTH\",result=\"ok\"} 3\n"));

    let (mut c, _) = LineClient::connect(h.addr).await;
    assert_eq!(c.cmd("AUTH PLAIN").await, "+ ");
    assert!(c.cmd("*").await.starts_with("-ERR"));
    assert!(c.cmd("AUTH NOSUCH").await.starts_with("-ERR"));
    c.login().await;
}

#[tokio::test]
async fn sasl_scram_sends_the_server_final_as_a_challenge() {
    // RFC 5034 §4: additional data with success goes in a "+ " line.
    let h = Harness::start(Options::default()).await;
    let out = common::python(
        SCRAM_CLIENT,
        &[h.port().to_string(), USER.into(), PASSWORD.into()],
    )
    .await;
    assert!(out.contains("+OK Logged in."), "{out}");
}

/// SCRAM-SHA-256 by hand (RFC 5802/7677) with Python's hashlib.
const SCRAM_CLIENT: &str = r#"
import base64, hashlib, hmac, os, socket, sys
port, user, pw = int(sys.argv[1]), sys.argv[2], sys.argv[3]
s = socket.create_connection(("127.0.0.1", port), timeout=20)
f = s.makefile("rb")
def line():
    return f.readline().decode().rstrip("\r\n")
def send(x):
    s.sendall((x + "\r\n").encode())
line()
nonce = base64.b64encode(os.urandom(18)).decode()
first_bare = "n=%s,r=%s" % (user, nonce)
send("AUTH SCRAM-SHA-256 " + base64.b64encode(("n,," + first_bare).encode()).decode())
ch = line(); assert ch.startswith("+ "), ch
server_first = base64.b64decode(ch[2:]).decode()
attrs = dict(kv.split("=", 1) for kv in server_first.split(","))
salted = hashlib.pbkdf2_hmac("sha256", pw.encode(), base64.b64decode(attrs["s"]), int(attrs["i"]))
ckey = hmac.new(salted, b"Client Key", hashlib.sha256).digest()
skey = hashlib.sha256(ckey).digest()
final_wo = "c=biws,r=" + attrs["r"]
auth_msg = ",".join([first_bare, server_first, final_wo]).encode()
sig = hmac.new(skey, auth_msg, hashlib.sha256).digest()
proof = bytes(a ^ b for a, b in zip(ckey, sig))
send(base64.b64encode((final_wo + ",p=" + base64.b64encode(proof).decode()).encode()).decode())
ch = line(); assert ch.startswith("+ "), ch
server_final = base64.b64decode(ch[2:]).decode()
server_key = hmac.new(salted, b"Server Key", hashlib.sha256).digest()
expect = base64.b64encode(hmac.new(server_key, auth_msg, hashlib.sha256).digest()).decode()
assert server_final == "v=" + expect, server_final
send("")
print(line())
"#;

/// Serves one session over an in-memory pipe with a chosen client address.
fn pipe_session(
    server: Arc<Pop3Server>,
    peer: &str,
) -> (tokio::io::DuplexStream, tokio::task::JoinHandle<()>) {
    let (client, mut srv) = tokio::io::duplex(64 * 1024);
    let peer: SocketAddr = peer.parse().unwrap();
    let local: SocketAddr = "192.0.2.1:110".parse().unwrap();
    let task = tokio::spawn(async move {
        server
            .serve(&mut srv, peer, local, std::future::pending())
            .await;
    });
    (client, task)
}

#[tokio::test]
async fn plaintext_login_is_refused_on_an_unencrypted_remote_connection() {
    let h = Harness::start(Options::default()).await;
    let (pipe, _task) = pipe_session(h.server.clone(), "198.51.100.7:40000");
    let (mut c, _) = LineClient::greeted(pipe).await;
    assert_eq!(c.cmd("CAPA").await, "+OK");
    let capa = c.multiline().await;
    assert!(!capa.contains(&"USER".to_string()), "{capa:?}");
    assert!(!capa.iter().any(|l| l.contains("PLAIN")), "{capa:?}");
    assert_eq!(
        c.cmd(&format!("USER {USER}")).await,
        "-ERR [AUTH] Plaintext authentication disallowed on non-secure (SSL/TLS) connections."
    );
    let creds = b64(format!("\0{USER}\0{PASSWORD}").as_bytes());
    assert_eq!(
        c.cmd(&format!("AUTH PLAIN {creds}")).await,
        "-ERR [AUTH] Plaintext authentication disallowed on non-secure (SSL/TLS) connections."
    );

    // With disable_plaintext_auth off, the same client may log in.
    let h = Harness::start(Options {
        disable_plaintext_auth: false,
        ..Options::default()
    })
    .await;
    let (pipe, _task) = pipe_session(h.server.clone(), "198.51.100.7:40000");
    let (mut c, _) = LineClient::greeted(pipe).await;
    c.login().await;
}

#[tokio::test]
async fn input_pipelined_after_stls_is_discarded() {
    let h = Harness::start(Options {
        starttls: true,
        ..Options::default()
    })
    .await;
    let (mut c, _) = LineClient::connect(h.addr).await;
    // An attacker appends USER in plaintext after STLS.
    c.send(&format!("STLS\r\nUSER {USER}\r\n")).await;
    assert_eq!(c.line().await, "+OK Begin TLS negotiation now.");
    let tcp = c.into_inner();

    let mut roots = rustls::RootCertStore::empty();
    let pem = std::fs::read(h.cert.clone().unwrap()).unwrap();
    for cert in yarilo_tls::parse_certs(&pem).unwrap() {
        roots.add(cert).unwrap();
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    let tls = tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect("localhost".try_into().unwrap(), tcp)
        .await
        .unwrap();
    let mut c = LineClient::over(tls);
    assert_eq!(
        c.cmd(&format!("PASS {PASSWORD}")).await,
        "-ERR No username given."
    );
    assert_eq!(c.cmd("STLS").await, "-ERR TLS is already active.");
    c.login().await;
}

#[tokio::test]
async fn shutdown_answers_sys_temp_and_closes_between_commands() {
    let h = Harness::start(Options::default()).await;
    h.deliver(&[&message("a", 1)]).await;
    let (mut c, _) = LineClient::connect(h.addr).await;
    c.login().await;
    assert!(c.cmd("DELE 1").await.starts_with("+OK"));
    h.life.token.cancel();
    assert_eq!(c.line().await, "-ERR [SYS/TEMP] server shutting down");
    assert_eq!(c.try_line().await, None);
    // No QUIT, so the deletion did not happen.
    assert_eq!(h.inbox().await.refresh().await.unwrap().len(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_silent_client_is_disconnected_after_the_login_timeout() {
    let h = Harness::start(Options::default()).await;
    let (pipe, task) = pipe_session(h.server.clone(), "127.0.0.1:40000");
    let (mut c, _) = LineClient::greeted(pipe).await;
    c.timeout = Duration::from_secs(3600);
    // Paused time advances by itself while everything waits.
    assert_eq!(c.line().await, "-ERR Disconnected for inactivity.");
    assert_eq!(c.try_line().await, None);
    task.await.unwrap();
    assert!(h.metrics_text().contains("reason=\"timeout\""));
}

#[tokio::test]
async fn metrics_count_sessions_commands_logins_and_bytes() {
    let h = Harness::start(Options::default()).await;
    h.deliver(&[&message("a", 1)]).await;
    let (mut c, _) = LineClient::connect(h.addr).await;
    c.login().await;
    assert!(c.cmd("RETR 1").await.starts_with("+OK"));
    c.multiline().await;
    assert!(c
        .cmd("RETR 9")
        .await
        .starts_with("-ERR There's no message 9."));
    assert!(c.cmd("QUIT").await.starts_with("+OK"));
    assert_eq!(c.try_line().await, None);
    common::eventually(|| async { h.metrics_text().contains("yarilo_pop3_sessions_open 0") }).await;
    let m = h.metrics_text();
    for want in [
        "yarilo_pop3_sessions_total 1",
        "yarilo_pop3_commands_total{command=\"RETR\",result=\"ok\"} 1",
        "yarilo_pop3_commands_total{command=\"RETR\",result=\"no\"} 1",
        "yarilo_pop3_commands_total{command=\"PASS\",result=\"ok\"} 1",
        "yarilo_pop3_logins_total{result=\"ok\"} 1",
        "yarilo_pop3_disconnects_total{reason=\"quit\"} 1",
    ] {
        assert!(m.contains(want), "{want} missing from\n{m}");
    }
    assert!(m.contains("yarilo_pop3_sent_bytes_total{command=\"retr\"}"));
}
