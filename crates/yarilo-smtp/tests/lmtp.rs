//! LMTP end to end: the real server on 127.0.0.1:0 over a temp maildir,
//! driven by swaks, Python's smtplib and a raw client.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{env, messages, python, run, start_lmtp, Client};
use yarilo_smtp::LmtpSettings;
use yarilo_store::{AppendOptions, UserInfo};

const USERS: &str = "\
alice@example.org:{PLAIN}pw::::::
bob@example.org:{PLAIN}pw::::::
carol@example.org:{PLAIN}pw::::::userdb_quota_rule=*:bytes=300
dave@example.org:{PLAIN}pw::::::userdb_quota_rule=*:messages=1
";

fn settings(e: &common::Env) -> LmtpSettings {
    LmtpSettings::from_config(&e.config)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn swaks_delivers_with_return_path_and_delivered_to() {
    let e = env(USERS, "");
    let srv = start_lmtp(&e, settings(&e)).await;
    let (ok, out, err) = run(
        "swaks",
        vec![
            "--server".into(),
            srv.addr.ip().to_string(),
            "--port".into(),
            srv.addr.port().to_string(),
            "--protocol".into(),
            "LMTP".into(),
            "--from".into(),
            "sender@remote.example".into(),
            "--to".into(),
            "alice@example.org".into(),
            "--header".into(),
            "Subject: via swaks".into(),
            "--body".into(),
            "hello from swaks".into(),
        ],
    )
    .await;
    assert!(ok, "swaks failed:\n{out}\n{err}");
    assert!(out.contains("250 2.0.0 <alice@example.org>"), "{out}");
    let msgs = messages(&e.store, "alice@example.org", "INBOX").await;
    assert_eq!(msgs.len(), 1);
    let m = &msgs[0];
    assert!(m.starts_with("Return-Path: <sender@remote.example>\nDelivered-To: alice@example.org\nReceived: from "), "{m}");
    assert!(m.contains("Subject: via swaks"), "{m}");
    assert!(m.contains("hello from swaks"), "{m}");
    assert!(
        !m.contains('\r'),
        "stored with LF line endings like Dovecot"
    );
    let metrics = srv.metrics();
    assert!(
        metrics.contains("yarilo_lmtp_deliveries_total{result=\"ok\"} 1"),
        "{metrics}"
    );
    assert!(
        metrics.contains("yarilo_lmtp_delivery_seconds_count 1"),
        "{metrics}"
    );
}

const SMTPLIB_MIXED: &str = r#"
import smtplib, sys, json
host, port = sys.argv[1], int(sys.argv[2])
s = smtplib.LMTP(host, port)
code, _ = s.ehlo_or_helo_if_needed() or (None, None)
res = {"lhlo": s.esmtp_features}
print(s.mail("sender@remote.example"))
rcpts = ["alice@example.org", "nobody@example.org", "carol@example.org", "dave@example.org", "bob@example.org"]
accepted = []
res["rcpt"] = {}
for r in rcpts:
    c, m = s.rcpt(r)
    res["rcpt"][r] = [c, m.decode()]
    if c == 250:
        accepted.append(r)
body = "Subject: mixed\r\n\r\n" + ("x" * 70 + "\r\n") * 8
c, m = s.data(body)
replies = [[c, m.decode()]]
for _ in accepted[1:]:
    c, m = s.getreply()
    replies.append([c, m.decode()])
res["data"] = dict(zip(accepted, replies))
s.quit()
print(json.dumps(res))
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn smtplib_multi_recipient_gets_one_reply_per_recipient() {
    let e = env(USERS, "");
    // dave may hold one message and already does.
    let dave = e
        .store
        .user(&UserInfo {
            user: "dave@example.org".into(),
            home: String::new(),
        })
        .await
        .unwrap();
    dave.open("INBOX")
        .await
        .unwrap()
        .append(
            b"Subject: old\r\n\r\nold\r\n".to_vec(),
            AppendOptions::default(),
        )
        .await
        .unwrap();
    let srv = start_lmtp(&e, settings(&e)).await;
    let (ok, out, err) = python(
        SMTPLIB_MIXED,
        vec![srv.addr.ip().to_string(), srv.addr.port().to_string()],
    )
    .await;
    assert!(ok, "python failed:\n{out}\n{err}");
    let json = out.lines().last().unwrap();
    let v: serde_json::Value = serde_json::from_str(json).unwrap();
    let rcpt = |u: &str| v["rcpt"][u][0].as_u64().unwrap();
    assert_eq!(rcpt("alice@example.org"), 250);
    assert_eq!(rcpt("nobody@example.org"), 550);
    assert!(v["rcpt"]["nobody@example.org"][1]
        .as_str()
        .unwrap()
        .starts_with("5.1.1"));
    assert_eq!(
        rcpt("carol@example.org"),
        250,
        "carol is under quota at RCPT"
    );
    assert_eq!(rcpt("dave@example.org"), 552, "dave is full at RCPT");
    assert!(v["rcpt"]["dave@example.org"][1]
        .as_str()
        .unwrap()
        .starts_with("5.2.2"));
    assert_eq!(rcpt("bob@example.org"), 250);
    let data = |u: &str| v["data"][u][0].as_u64().unwrap();
    assert_eq!(data("alice@example.org"), 250);
    assert_eq!(
        data("carol@example.org"),
        552,
        "the message does not fit carol's quota"
    );
    assert!(v["data"]["carol@example.org"][1]
        .as_str()
        .unwrap()
        .starts_with("5.2.2"));
    assert_eq!(data("bob@example.org"), 250);
    // One copy each, each with its own Delivered-To.
    let a = messages(&e.store, "alice@example.org", "INBOX").await;
    let b = messages(&e.store, "bob@example.org", "INBOX").await;
    assert_eq!((a.len(), b.len()), (1, 1));
    assert!(a[0].contains("Delivered-To: alice@example.org\n"));
    assert!(b[0].contains("Delivered-To: bob@example.org\n"));
    assert!(messages(&e.store, "carol@example.org", "INBOX")
        .await
        .is_empty());
    assert_eq!(
        messages(&e.store, "dave@example.org", "INBOX").await.len(),
        1
    );
    let m = srv.metrics();
    assert!(
        m.contains("yarilo_lmtp_deliveries_total{result=\"ok\"} 2"),
        "{m}"
    );
    assert!(
        m.contains("yarilo_lmtp_deliveries_total{result=\"quota\"} 2"),
        "{m}"
    );
    assert!(
        m.contains("yarilo_lmtp_deliveries_total{result=\"unknown_user\"} 1"),
        "{m}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_messages_are_refused_at_mail_and_after_data() {
    let e = env(USERS, "lmtp:\n  max_message_size: 1024\n");
    let srv = start_lmtp(&e, settings(&e)).await;
    let mut c = Client::connect(srv.addr).await;
    let (code, lines) = c.cmd("LHLO client.test").await;
    assert_eq!(code, 250);
    assert!(lines.iter().any(|l| l == "250-SIZE 1024"), "{lines:?}");
    let (code, lines) = c.cmd("MAIL FROM:<s@x.example> SIZE=5000").await;
    assert_eq!(code, 552, "{lines:?}");
    assert!(lines[0].starts_with("552 5.3.4"));
    assert_eq!(c.cmd("MAIL FROM:<s@x.example>").await.0, 250);
    assert_eq!(c.cmd("RCPT TO:<alice@example.org>").await.0, 250);
    assert_eq!(c.cmd("RCPT TO:<bob@example.org>").await.0, 250);
    assert_eq!(c.cmd("DATA").await.0, 354);
    let mut body = String::from("Subject: big\r\n\r\n");
    for _ in 0..40 {
        body.push_str(&"y".repeat(60));
        body.push_str("\r\n");
    }
    body.push_str(".\r\n");
    c.send(body.as_bytes()).await;
    for who in ["alice", "bob"] {
        let (code, lines) = c.reply().await;
        assert_eq!(code, 552);
        assert!(
            lines[0].starts_with(&format!("552 5.3.4 <{who}@example.org>")),
            "{lines:?}"
        );
    }
    // The session is still usable.
    assert_eq!(c.cmd("NOOP").await.0, 250);
    assert!(messages(&e.store, "alice@example.org", "INBOX")
        .await
        .is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelined_commands_are_answered_in_order() {
    let e = env(USERS, "");
    let srv = start_lmtp(&e, settings(&e)).await;
    let mut c = Client::connect(srv.addr).await;
    c.send(
        b"LHLO client.test\r\nMAIL FROM:<s@x.example>\r\nRCPT TO:<alice@example.org>\r\n\
RCPT TO:<ghost@example.org>\r\nRCPT TO:<bob@example.org>\r\nDATA\r\n",
    )
    .await;
    let codes: Vec<u16> = {
        let mut v = Vec::new();
        for _ in 0..6 {
            v.push(c.reply().await.0);
        }
        v
    };
    assert_eq!(codes, vec![250, 250, 250, 550, 250, 354]);
    // Body, then a second transaction, all in one write.
    c.send(
        b"Subject: p1\r\n\r\n..dot-stuffed\r\n.\r\nMAIL FROM:<>\r\nRCPT TO:<bob@example.org>\r\nDATA\r\n",
    )
    .await;
    let mut codes = Vec::new();
    for _ in 0..5 {
        codes.push(c.reply().await.0);
    }
    assert_eq!(codes, vec![250, 250, 250, 250, 354]);
    c.send(b"Subject: p2\r\n\r\nsecond\r\n.\r\nQUIT\r\n").await;
    assert_eq!(c.reply().await.0, 250);
    assert_eq!(c.reply().await.0, 221);
    let a = messages(&e.store, "alice@example.org", "INBOX").await;
    assert_eq!(a.len(), 1);
    assert!(a[0].contains("\n.dot-stuffed\n"), "{}", a[0]);
    let b = messages(&e.store, "bob@example.org", "INBOX").await;
    assert_eq!(b.len(), 2);
    assert!(b[1].starts_with("Return-Path: <>\n"), "{}", b[1]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bdat_chunks_are_reassembled_and_answered_per_recipient() {
    let e = env(USERS, "");
    let srv = start_lmtp(&e, settings(&e)).await;
    let mut c = Client::connect(srv.addr).await;
    let (_, lines) = c.cmd("LHLO client.test").await;
    assert!(lines.iter().any(|l| l.ends_with("CHUNKING")), "{lines:?}");
    let part1 = b"Subject: chunked\r\n\r\n.not stuffed";
    let part2 = b"\r\nend\r\n";
    let mut wire = Vec::new();
    wire.extend_from_slice(b"MAIL FROM:<s@x.example> BODY=8BITMIME\r\nRCPT TO:<alice@example.org>\r\nRCPT TO:<bob@example.org>\r\n");
    wire.extend_from_slice(format!("BDAT {}\r\n", part1.len()).as_bytes());
    wire.extend_from_slice(part1);
    wire.extend_from_slice(format!("BDAT {} LAST\r\n", part2.len()).as_bytes());
    wire.extend_from_slice(part2);
    c.send(&wire).await;
    let mut replies = Vec::new();
    for _ in 0..6 {
        replies.push(c.reply().await.1[0].clone());
    }
    assert!(
        replies[3].starts_with(&format!("250 2.0.0 {} octets", part1.len())),
        "{replies:?}"
    );
    assert!(
        replies[4].starts_with("250 2.0.0 <alice@example.org>"),
        "{replies:?}"
    );
    assert!(
        replies[5].starts_with("250 2.0.0 <bob@example.org>"),
        "{replies:?}"
    );
    // BDAT without a transaction: the chunk is consumed, the stream stays in sync.
    c.send(b"BDAT 5 LAST\r\nHELLONOOP\r\n").await;
    assert_eq!(c.reply().await.0, 503);
    assert_eq!(c.reply().await.0, 250);
    let a = messages(&e.store, "alice@example.org", "INBOX").await;
    assert!(
        a[0].ends_with("Subject: chunked\n\n.not stuffed\nend\n"),
        "{}",
        a[0]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn detail_goes_to_its_mailbox_when_enabled_and_falls_back_to_inbox() {
    let e = env(USERS, "lmtp:\n  save_to_detail_mailbox: true\n");
    let us = e
        .store
        .user(&UserInfo {
            user: "alice@example.org".into(),
            home: String::new(),
        })
        .await
        .unwrap();
    us.create("lists").await.unwrap();
    let srv = start_lmtp(&e, settings(&e)).await;
    let mut c = Client::connect(srv.addr).await;
    c.cmd("LHLO client.test").await;
    for (rcpt, subject) in [
        ("alice+lists@example.org", "to-lists"),
        ("alice+nope@example.org", "to-inbox"),
    ] {
        assert_eq!(c.cmd("MAIL FROM:<s@x.example>").await.0, 250);
        assert_eq!(c.cmd(&format!("RCPT TO:<{rcpt}>")).await.0, 250);
        assert_eq!(c.cmd("DATA").await.0, 354);
        c.send(format!("Subject: {subject}\r\n\r\nx\r\n.\r\n").as_bytes())
            .await;
        assert_eq!(c.reply().await.0, 250);
    }
    let lists = messages(&e.store, "alice@example.org", "lists").await;
    assert_eq!(lists.len(), 1);
    assert!(lists[0].contains("Delivered-To: alice+lists@example.org\n"));
    assert!(lists[0].contains("Subject: to-lists"));
    let inbox = messages(&e.store, "alice@example.org", "INBOX").await;
    assert_eq!(inbox.len(), 1);
    assert!(inbox[0].contains("Subject: to-inbox"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn xclient_is_honoured_only_from_trusted_networks() {
    let e = env(USERS, "");
    let mut s = settings(&e);
    s.xclient_trusted_nets = vec!["127.0.0.0/8".parse().unwrap()];
    let srv = start_lmtp(&e, s).await;
    let mut c = Client::connect(srv.addr).await;
    let (_, lines) = c.cmd("LHLO director.test").await;
    assert!(lines.iter().any(|l| l.contains("XCLIENT")), "{lines:?}");
    let (code, lines) = c.cmd("XCLIENT ADDR=192.0.2.7").await;
    assert_eq!(lines[0], "220 2.0.0 OK");
    assert_eq!(code, 220);
    c.cmd("MAIL FROM:<s@x.example>").await;
    c.cmd("RCPT TO:<alice@example.org>").await;
    c.cmd("DATA").await;
    c.send(b"Subject: x\r\n\r\nx\r\n.\r\n").await;
    assert_eq!(c.reply().await.0, 250);
    let a = messages(&e.store, "alice@example.org", "INBOX").await;
    assert!(a[0].contains("([192.0.2.7])"), "{}", a[0]);

    let untrusted = start_lmtp(&e, settings(&e)).await;
    let mut c = Client::connect(untrusted.addr).await;
    let (_, lines) = c.cmd("LHLO x.test").await;
    assert!(!lines.iter().any(|l| l.contains("XCLIENT")));
    let (code, lines) = c.cmd("XCLIENT ADDR=192.0.2.7").await;
    assert_eq!(code, 550, "{lines:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn protocol_errors_are_answered_and_bounded() {
    let e = env(USERS, "lmtp:\n  max_bad_commands: 3\n");
    let srv = start_lmtp(&e, settings(&e)).await;
    let mut c = Client::connect(srv.addr).await;
    assert_eq!(c.cmd("MAIL FROM:<a@b>").await.0, 503, "LHLO first");
    assert_eq!(c.cmd("EHLO x").await.0, 500);
    c.cmd("LHLO x").await;
    assert_eq!(c.cmd("RCPT TO:<alice@example.org>").await.0, 503);
    assert_eq!(c.cmd("DATA").await.0, 503);
    c.cmd("MAIL FROM:<a@b>").await;
    assert_eq!(c.cmd("DATA").await.0, 503, "no valid recipients");
    let long = format!("NOOP {}", "x".repeat(5000));
    assert_eq!(c.cmd(&long).await.0, 500);
    assert_eq!(c.cmd("BOGUS").await.0, 500);
    let (code, lines) = c.reply().await;
    assert_eq!(
        code, 421,
        "the third bad command closes the session: {lines:?}"
    );
    assert!(lines[0].starts_with("421 4.7.0"), "{lines:?}");
}
