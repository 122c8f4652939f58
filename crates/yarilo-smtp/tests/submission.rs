//! Submission end to end: Python's smtplib submits through yarilo to an
//! aiosmtpd MTA started by the test, which reports the envelope it got.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::process::Stdio;
use std::time::Duration;

use common::{env, python, start_submission, start_submission_tls, Client};
use tokio::io::{AsyncBufReadExt, BufReader};
use yarilo_smtp::SubmissionSettings;

const USERS: &str = "\
alice@example.org:{PLAIN}pw::::::userdb_submission_from=sales@example.org,@lists.example.org
bob@example.org:{PLAIN}pw::::::
";

/// An aiosmtpd MTA that offers DSN (aiosmtpd itself does not know the
/// parameters, so they are taken off the line before it parses), accepts
/// AUTH PLAIN from anyone, refuses `reject*` recipients and prints each
/// message's envelope as JSON.
const MTA: &str = r#"
import asyncio, json, re, sys
from aiosmtpd.smtp import SMTP, AuthResult

DSN_MAIL = ("RET", "ENVID")
DSN_RCPT = ("NOTIFY", "ORCPT")

def take(arg, keys):
    found = {}
    kept = []
    for word in arg.split(" "):
        k = word.split("=", 1)[0].upper()
        if k in keys and "=" in word:
            found[k] = word.split("=", 1)[1]
        else:
            kept.append(word)
    return " ".join(kept), found

class Handler:
    async def handle_EHLO(self, server, session, envelope, hostname, responses):
        session.host_name = hostname
        responses.insert(len(responses) - 1, "250-DSN")
        return responses
    async def handle_RCPT(self, server, session, envelope, address, rcpt_options):
        if address.startswith("reject"):
            return "550 5.1.1 <%s> no such user here" % address
        envelope.rcpt_tos.append(address)
        return "250 2.1.5 OK"
    async def handle_DATA(self, server, session, envelope):
        print(json.dumps({
            "from": envelope.mail_from,
            "rcpts": envelope.rcpt_tos,
            "mail_dsn": server.dsn_mail,
            "rcpt_dsn": server.dsn_rcpt,
            "auth": session.auth_data.decode() if isinstance(session.auth_data, bytes) else session.auth_data,
            "data": envelope.content.decode("utf-8", "replace"),
        }), flush=True)
        return "250 2.0.0 queued as T1"

def authenticator(server, session, envelope, mechanism, auth_data):
    return AuthResult(success=True, auth_data=auth_data.login)

class DsnSMTP(SMTP):
    async def smtp_MAIL(self, arg):
        self.dsn_rcpt = []
        if arg:
            arg, self.dsn_mail = take(arg, DSN_MAIL)
        await super().smtp_MAIL(arg)
    async def smtp_RCPT(self, arg):
        if arg:
            arg, found = take(arg, DSN_RCPT)
            self.dsn_rcpt.append(found)
        await super().smtp_RCPT(arg)

async def main():
    loop = asyncio.get_running_loop()
    def factory():
        s = DsnSMTP(Handler(), authenticator=authenticator, auth_require_tls=False, enable_SMTPUTF8=True)
        s.dsn_mail = {}
        s.dsn_rcpt = []
        return s
    server = await loop.create_server(factory, "127.0.0.1", 0)
    print("PORT", server.sockets[0].getsockname()[1], flush=True)
    await asyncio.Event().wait()

asyncio.run(main())
"#;

struct Mta {
    child: tokio::process::Child,
    lines: tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
    port: u16,
}

impl Mta {
    async fn start() -> Mta {
        let mut child = tokio::process::Command::new("python3")
            .arg("-c")
            .arg(MTA)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run python3 ({e}); run scripts/setup-dev"));
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let first = tokio::time::timeout(Duration::from_secs(20), lines.next_line())
            .await
            .expect("aiosmtpd did not start (is it installed? scripts/setup-dev)")
            .unwrap()
            .expect("aiosmtpd exited; is it installed? run scripts/setup-dev");
        let port = first.strip_prefix("PORT ").unwrap().trim().parse().unwrap();
        Mta { child, lines, port }
    }

    async fn next_message(&mut self) -> serde_json::Value {
        let line = tokio::time::timeout(Duration::from_secs(20), self.lines.next_line())
            .await
            .expect("no message reached the MTA")
            .unwrap()
            .unwrap();
        serde_json::from_str(&line).unwrap()
    }
}

impl Drop for Mta {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
    }
}

fn settings(e: &common::Env, relay_port: u16) -> SubmissionSettings {
    let mut s = SubmissionSettings::from_config(&e.config);
    s.relay.host = "127.0.0.1".into();
    s.relay.port = relay_port;
    s
}

const SUBMIT: &str = r#"
import smtplib, sys, json
host, port = sys.argv[1], int(sys.argv[2])
s = smtplib.SMTP(host, port)
s.ehlo("client.test")
s.login("alice@example.org", "pw")
msg = "From: alice@example.org\r\nTo: bob@remote.example\r\nSubject: submitted\r\n\r\nhello\r\n.leading dot\r\n"
refused = s.sendmail("alice@example.org",
    ["bob@remote.example", "reject@remote.example", "carol@remote.example"], msg,
    mail_options=["RET=HDRS", "ENVID=env+2Did42"],
    rcpt_options=["NOTIFY=SUCCESS,FAILURE", "ORCPT=rfc822;bob@remote.example"])
print(json.dumps({k: [v[0], v[1].decode()] for k, v in refused.items()}))
s.quit()
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn submitted_message_reaches_the_mta_with_its_envelope_intact() {
    let e = env(USERS, "");
    let mut mta = Mta::start().await;
    let mut s = settings(&e, mta.port);
    s.relay.user = "relayuser".into();
    s.relay.password = yarilo_config::Secret::new("relaypw");
    let srv = start_submission(&e, s).await;
    let (ok, out, err) = python(
        SUBMIT,
        vec![srv.addr.ip().to_string(), srv.addr.port().to_string()],
    )
    .await;
    assert!(ok, "smtplib failed:\n{out}\n{err}");
    let refused: serde_json::Value = serde_json::from_str(out.lines().last().unwrap()).unwrap();
    assert_eq!(
        refused["reject@remote.example"][0], 550,
        "the relay's refusal is passed through"
    );
    assert!(refused["reject@remote.example"][1]
        .as_str()
        .unwrap()
        .contains("no such user here"));
    let m = mta.next_message().await;
    assert_eq!(m["from"], "alice@example.org");
    assert_eq!(
        m["rcpts"],
        serde_json::json!(["bob@remote.example", "carol@remote.example"])
    );
    assert_eq!(m["mail_dsn"]["RET"], "HDRS");
    assert_eq!(m["mail_dsn"]["ENVID"], "env+2Did42");
    for r in m["rcpt_dsn"].as_array().unwrap() {
        assert_eq!(r["NOTIFY"], "SUCCESS,FAILURE");
        assert_eq!(r["ORCPT"], "rfc822;bob@remote.example");
    }
    assert_eq!(m["auth"], "relayuser", "yarilo authenticated at the relay");
    let data = m["data"].as_str().unwrap();
    assert!(
        data.starts_with("Received: from client.test ([127.0.0.1])"),
        "{data}"
    );
    assert!(data.contains("with ESMTPA id"), "{data}");
    assert!(data.contains("Subject: submitted"), "{data}");
    assert!(
        data.contains("\r\n.leading dot\r\n"),
        "dot-stuffing round-trips: {data:?}"
    );
    let metrics = srv.metrics();
    assert!(
        metrics.contains("yarilo_submission_messages_total{result=\"ok\"} 1"),
        "{metrics}"
    );
    assert!(
        metrics.contains("yarilo_submission_recipients_total{result=\"relay_rejected\"} 1"),
        "{metrics}"
    );
}

async fn login(c: &mut Client, user: &str) {
    use base64::Engine;
    let token = base64::engine::general_purpose::STANDARD.encode(format!("\0{user}\0pw"));
    let (code, lines) = c.cmd(&format!("AUTH PLAIN {token}")).await;
    assert_eq!(code, 235, "{lines:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mail_from_must_belong_to_the_authenticated_user() {
    let e = env(USERS, "");
    let mut mta = Mta::start().await;
    let srv = start_submission(&e, settings(&e, mta.port)).await;
    let mut c = Client::connect(srv.addr).await;
    let (_, lines) = c.cmd("EHLO client.test").await;
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("250-AUTH ") && l.contains("PLAIN")),
        "{lines:?}"
    );
    assert!(lines.iter().any(|l| l == "250-DSN"), "{lines:?}");
    let (code, lines) = c.cmd("MAIL FROM:<alice@example.org>").await;
    assert_eq!(code, 530, "AUTH first: {lines:?}");
    assert!(lines[0].starts_with("530 5.7.0"));
    let (code, _) = c.cmd("AUTH PLAIN AGFsaWNlQGV4YW1wbGUub3JnAHdyb25n").await;
    assert_eq!(code, 535, "wrong password");
    login(&mut c, "alice@example.org").await;
    let (code, lines) = c.cmd("MAIL FROM:<bob@example.org>").await;
    assert_eq!(code, 553, "{lines:?}");
    assert!(lines[0].starts_with("553 5.7.1"), "{lines:?}");
    assert_eq!(c.cmd("MAIL FROM:<>").await.0, 553);
    // Aliases from the userdb field, exact and by domain.
    assert_eq!(c.cmd("MAIL FROM:<Sales@Example.org>").await.0, 250);
    assert_eq!(c.cmd("RSET").await.0, 250);
    assert_eq!(c.cmd("MAIL FROM:<news@lists.example.org>").await.0, 250);
    assert_eq!(c.cmd("RCPT TO:<x@remote.example>").await.0, 250);
    assert_eq!(c.cmd("DATA").await.0, 354);
    c.send(b"Subject: alias\r\n\r\nx\r\n.\r\n").await;
    let (code, lines) = c.reply().await;
    assert_eq!(code, 250, "{lines:?}");
    assert!(
        lines[0].contains("queued as T1"),
        "the relay's own 250: {lines:?}"
    );
    let m = mta.next_message().await;
    assert_eq!(m["from"], "news@lists.example.org");
    let metrics = srv.metrics();
    assert!(
        metrics.contains("yarilo_submission_senders_total{result=\"forged\"} 2"),
        "{metrics}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relay_down_gives_a_temporary_failure() {
    let e = env(USERS, "");
    // A port nobody listens on.
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let srv = start_submission(&e, settings(&e, port)).await;
    let mut c = Client::connect(srv.addr).await;
    c.cmd("EHLO client.test").await;
    login(&mut c, "bob@example.org").await;
    let (code, lines) = c.cmd("MAIL FROM:<bob@example.org>").await;
    assert_eq!(code, 451, "{lines:?}");
    assert!(lines[0].starts_with("451 4.4.1"), "{lines:?}");
    // Nothing was accepted, so DATA cannot pretend otherwise.
    assert_eq!(c.cmd("DATA").await.0, 503);
    assert_eq!(c.cmd("QUIT").await.0, 221);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relay_dying_mid_transaction_gives_a_temporary_failure_at_data() {
    let e = env(USERS, "");
    let mut mta = Mta::start().await;
    let srv = start_submission(&e, settings(&e, mta.port)).await;
    let mut c = Client::connect(srv.addr).await;
    c.cmd("EHLO client.test").await;
    login(&mut c, "bob@example.org").await;
    assert_eq!(c.cmd("MAIL FROM:<bob@example.org>").await.0, 250);
    assert_eq!(c.cmd("RCPT TO:<x@remote.example>").await.0, 250);
    mta.child.kill().await.unwrap();
    assert_eq!(c.cmd("DATA").await.0, 354);
    c.send(b"Subject: lost relay\r\n\r\nx\r\n.\r\n").await;
    let (code, lines) = c.reply().await;
    assert!((400..500).contains(&code), "never a silent 250: {lines:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_submission_is_refused() {
    let e = env(USERS, "submission:\n  max_message_size: 1000\n");
    let mut mta = Mta::start().await;
    let srv = start_submission(&e, settings(&e, mta.port)).await;
    let mut c = Client::connect(srv.addr).await;
    c.cmd("EHLO client.test").await;
    login(&mut c, "bob@example.org").await;
    assert_eq!(c.cmd("MAIL FROM:<bob@example.org> SIZE=5000").await.0, 552);
    assert_eq!(c.cmd("MAIL FROM:<bob@example.org>").await.0, 250);
    assert_eq!(c.cmd("RCPT TO:<x@remote.example>").await.0, 250);
    assert_eq!(c.cmd("DATA").await.0, 354);
    let mut body = "Subject: big\r\n\r\n".to_string();
    body.push_str(&format!("{}\r\n", "z".repeat(70)).repeat(30));
    body.push_str(".\r\n");
    c.send(body.as_bytes()).await;
    let (code, lines) = c.reply().await;
    assert_eq!(code, 552, "{lines:?}");
    // The relay transaction was reset; a small message still goes through.
    assert_eq!(c.cmd("MAIL FROM:<bob@example.org>").await.0, 250);
    assert_eq!(c.cmd("RCPT TO:<y@remote.example>").await.0, 250);
    assert_eq!(c.cmd("DATA").await.0, 354);
    c.send(b"Subject: small\r\n\r\nx\r\n.\r\n").await;
    assert_eq!(c.reply().await.0, 250);
    let m = mta.next_message().await;
    assert_eq!(m["rcpts"], serde_json::json!(["y@remote.example"]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_starttls_handshake_is_disconnected() {
    let e = env(USERS, "");
    let mut s = settings(&e, 25);
    s.starttls_timeout = Duration::from_secs(1);
    let (cert, key, _) = yarilo_tls::ensure_self_signed(&e.path.join("tls"), "mx.test").unwrap();
    let certs = yarilo_tls::CertStore::load(vec![(cert, key)]).unwrap();
    let srv = start_submission_tls(&e, s, Some(certs.acceptor("1.2").unwrap())).await;
    let mut c = Client::connect(srv.addr).await;
    let (_, lines) = c.cmd("EHLO client.test").await;
    assert!(
        lines.iter().any(|l| l.get(4..) == Some("STARTTLS")),
        "{lines:?}"
    );
    let (code, lines) = c.cmd("STARTTLS").await;
    assert_eq!(code, 220, "{lines:?}");
    // The start of a TLS record, then nothing: only the bound ends it.
    c.send(&[0x16, 0x03, 0x01]).await;
    assert!(
        c.closed_within(Duration::from_secs(30)).await,
        "still connected"
    );
}
