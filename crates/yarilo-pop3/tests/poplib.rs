#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Python's poplib against the real server: retrieve, TOP, UIDL, DELE +
//! QUIT, RSET, STLS and implicit TLS.

mod common;

use common::{crlf, message, python, Harness, Options, PASSWORD, USER};

/// Logs in and prints what the standard library client sees, as JSON.
const SESSION: &str = r#"
import json, poplib, sys
port = int(sys.argv[1])
p = poplib.POP3("127.0.0.1", port, timeout=20)
out = {"welcome": p.getwelcome().decode()}
out["capa"] = sorted(p.capa().keys())
p.user(sys.argv[2]); p.pass_(sys.argv[3])
out["stat"] = list(p.stat())
resp, lines, _ = p.list()
out["list"] = [l.decode() for l in lines]
resp, lines, _ = p.uidl()
out["uidl"] = [l.decode() for l in lines]
out["uidl_1"] = p.uidl(1).decode()
resp, lines, octets = p.retr(1)
out["retr_1"] = b"\r\n".join(lines).decode() + "\r\n"
out["retr_1_resp"] = resp.decode()
resp, lines, _ = p.top(2, 1)
out["top_2_1"] = [l.decode() for l in lines]
out["dele_3"] = p.dele(3).decode()
try:
    p.retr(3)
    out["retr_deleted"] = "no error"
except poplib.error_proto as e:
    out["retr_deleted"] = str(e)
out["rset"] = p.rset().decode()
out["stat_after_rset"] = list(p.stat())
p.dele(1)
p.dele(3)
out["quit"] = p.quit().decode()
print(json.dumps(out))
"#;

fn json(s: &str) -> serde_json::Value {
    serde_json::from_str(s.trim()).unwrap_or_else(|e| panic!("{e}: {s}"))
}

#[tokio::test]
async fn poplib_retrieves_tops_and_deletes_only_at_quit() {
    let h = Harness::start(Options::default()).await;
    let msgs = [message("one", 3), message("two", 5), message("three", 1)];
    let uids = h
        .deliver(&msgs.iter().map(|m| m.as_slice()).collect::<Vec<_>>())
        .await;
    let uidvalidity = h.inbox().await.view().uidvalidity();
    let out = json(
        &python(
            SESSION,
            &[h.port().to_string(), USER.into(), PASSWORD.into()],
        )
        .await,
    );
    assert!(out["welcome"].as_str().unwrap().starts_with("+OK"));
    let capa: Vec<&str> = out["capa"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    for c in [
        "CAPA",
        "TOP",
        "UIDL",
        "RESP-CODES",
        "PIPELINING",
        "AUTH-RESP-CODE",
        "USER",
        "SASL",
        "IMPLEMENTATION",
    ] {
        assert!(capa.contains(&c), "{c} missing from {capa:?}");
    }
    assert!(!capa.contains(&"STLS"), "no certificate, no STLS");

    // Sizes are exact with CRLF line ends (RFC 1939 §5).
    let sizes: Vec<usize> = msgs.iter().map(|m| crlf(m).len()).collect();
    let total: usize = sizes.iter().sum();
    assert_eq!(out["stat"], serde_json::json!([3, total]));
    assert_eq!(
        out["list"],
        serde_json::json!([
            format!("1 {}", sizes[0]),
            format!("2 {}", sizes[1]),
            format!("3 {}", sizes[2])
        ])
    );
    let uidl = |u: u32| format!("{u:08x}{uidvalidity:08x}");
    assert_eq!(
        out["uidl"],
        serde_json::json!([
            format!("1 {}", uidl(uids[0])),
            format!("2 {}", uidl(uids[1])),
            format!("3 {}", uidl(uids[2]))
        ])
    );
    assert_eq!(out["uidl_1"], format!("+OK 1 {}", uidl(uids[0])));

    // RETR: the stored message with CRLF, dot-stuffing undone by poplib.
    assert_eq!(
        out["retr_1"].as_str().unwrap().as_bytes(),
        crlf(&msgs[0]).as_slice()
    );
    assert_eq!(out["retr_1_resp"], format!("+OK {} octets", sizes[0]));
    // TOP 2 1: header, blank line, one body line.
    let top: Vec<&str> = out["top_2_1"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert_eq!(top[..2], ["From: bob@example.org", "To: alice@example.org"]);
    assert_eq!(top[top.len() - 2..], ["", "line 0 of two"]);

    assert!(out["dele_3"].as_str().unwrap().starts_with("+OK"));
    assert!(out["retr_deleted"].as_str().unwrap().contains("-ERR"));
    assert_eq!(out["stat_after_rset"], serde_json::json!([3, total]));
    assert!(out["quit"].as_str().unwrap().starts_with("+OK"));

    // UPDATE state: 1 and 3 are gone, 2 is left and was not retrieved.
    let view = h.inbox().await.refresh().await.unwrap();
    assert_eq!(view.uids(), vec![uids[1]]);
}

#[tokio::test]
async fn a_session_dropped_without_quit_deletes_nothing() {
    let h = Harness::start(Options::default()).await;
    h.deliver(&[&message("a", 1), &message("b", 1)]).await;
    python(
        r#"
import poplib, sys
p = poplib.POP3("127.0.0.1", int(sys.argv[1]), timeout=20)
p.user(sys.argv[2]); p.pass_(sys.argv[3])
p.dele(1); p.dele(2)
p.sock.close()
"#,
        &[h.port().to_string(), USER.into(), PASSWORD.into()],
    )
    .await;
    // The server notices EOF; the mailbox is untouched either way.
    common::eventually(|| async { h.metrics_text().contains("reason=\"eof\"") }).await;
    assert_eq!(h.inbox().await.refresh().await.unwrap().len(), 2);
}

#[tokio::test]
async fn retrieved_messages_are_marked_seen_at_quit() {
    let h = Harness::start(Options::default()).await;
    let uids = h.deliver(&[&message("a", 1), &message("b", 1)]).await;
    python(
        r#"
import poplib, sys
p = poplib.POP3("127.0.0.1", int(sys.argv[1]), timeout=20)
p.user(sys.argv[2]); p.pass_(sys.argv[3])
p.retr(2); p.top(1, 0)
p.quit()
"#,
        &[h.port().to_string(), USER.into(), PASSWORD.into()],
    )
    .await;
    let view = h.inbox().await.refresh().await.unwrap();
    let seen = |u: u32| {
        view.by_uid(u)
            .unwrap()
            .flags
            .contains(yarilo_store::Flags::SEEN)
    };
    assert!(seen(uids[1]), "RETR marks \\Seen");
    assert!(!seen(uids[0]), "TOP does not");
}

const TLS_SESSION: &str = r#"
import poplib, ssl, sys
port, cafile, mode = int(sys.argv[1]), sys.argv[2], sys.argv[5]
ctx = ssl.create_default_context(cafile=cafile)
if mode == "stls":
    p = poplib.POP3("localhost", port, timeout=20)
    before = sorted(p.capa().keys())
    print("before", " ".join(before))
    p.stls(ctx)
else:
    p = poplib.POP3_SSL("localhost", port, context=ctx, timeout=20)
after = sorted(p.capa().keys())
print("after", " ".join(after))
print("version", p.sock.version())
p.user(sys.argv[3]); p.pass_(sys.argv[4])
print("stat", *p.stat())
p.quit()
"#;

#[tokio::test]
async fn stls_upgrades_with_a_self_signed_certificate() {
    let h = Harness::start(Options {
        starttls: true,
        ..Options::default()
    })
    .await;
    h.deliver(&[&message("a", 1)]).await;
    let cert = h.cert.clone().unwrap().display().to_string();
    let out = python(
        TLS_SESSION,
        &[
            h.port().to_string(),
            cert,
            USER.into(),
            PASSWORD.into(),
            "stls".into(),
        ],
    )
    .await;
    let line = |k: &str| {
        out.lines()
            .find(|l| l.starts_with(k))
            .unwrap_or_else(|| panic!("{k} in {out}"))
            .to_string()
    };
    assert!(line("before").contains("STLS"));
    assert!(!line("after").contains("STLS"), "STLS gone once TLS is on");
    assert!(line("version").contains("TLSv1."));
    assert!(line("stat").starts_with("stat 1 "));
}

#[tokio::test]
async fn pop3s_serves_over_implicit_tls() {
    let h = Harness::start(Options {
        implicit_tls: true,
        ..Options::default()
    })
    .await;
    let cert = h.cert.clone().unwrap().display().to_string();
    let out = python(
        TLS_SESSION,
        &[
            h.port().to_string(),
            cert,
            USER.into(),
            PASSWORD.into(),
            "ssl".into(),
        ],
    )
    .await;
    assert!(out.contains("stat 0 0"), "{out}");
    assert!(!out.contains("STLS"));
}
