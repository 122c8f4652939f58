//! MULTIAPPEND (RFC 3502) is all or nothing: a command that fails at any
//! message, or whose client goes away in the middle, leaves the mailbox
//! exactly as it was; one that succeeds reports every UID.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::{Raw, USER};

/// Long enough for a session to notice its peer went away; only a bound.
const GENEROUS: Duration = Duration::from_secs(30);

fn msg(n: u32) -> String {
    format!("Subject: m{n}\r\n\r\nbody {n}\r\n")
}

/// `{len+}` literal followed by the message, as one MULTIAPPEND item.
fn item(m: &str) -> String {
    format!("{{{}+}}\r\n{m}", m.len())
}

/// Adds a passwd-file user `name` (alice's password) with `extra` userdb
/// fields.
fn add_user(s: &common::Server, name: &str, extra: &str) {
    let users = s.data().join("users");
    let text = std::fs::read_to_string(&users).unwrap();
    let hash = text.lines().next().unwrap().split(':').nth(1).unwrap();
    let line = format!("{name}:{hash}::::::{extra}\n");
    std::fs::write(&users, text.clone() + &line).unwrap();
}

/// Files in the user's INBOX Maildir subdirectory `sub`.
fn files(s: &common::Server, user: &str, sub: &str) -> Vec<String> {
    let dir = s.maildir(user).join(sub);
    match std::fs::read_dir(&dir) {
        Ok(rd) => rd
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect(),
        Err(_) => Vec::new(),
    }
}

fn assert_nothing_on_disk(s: &common::Server, user: &str) {
    for sub in ["cur", "new", "tmp"] {
        assert_eq!(files(s, user, sub), Vec::<String>::new(), "{sub}/");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multiappend_over_quota_at_the_third_message_appends_none() {
    let s = common::start().await;
    add_user(&s, "quota", "userdb_quota_rule=*:messages=2");
    let mut a = Raw::login(s.addr, "quota").await;
    let r = a.cmd("s1 STATUS INBOX (MESSAGES UIDNEXT)").await;
    assert_eq!(
        r,
        vec![
            "* STATUS INBOX (MESSAGES 0 UIDNEXT 1)",
            "s1 OK Status completed."
        ]
    );
    let (m1, m2, m3) = (msg(1), msg(2), msg(3));
    let r = a
        .cmd(&format!(
            "a1 APPEND INBOX {} {} {}",
            item(&m1),
            item(&m2),
            item(&m3)
        ))
        .await;
    assert_eq!(r, vec!["a1 NO [OVERQUOTA] Quota exceeded."]);
    let r = a.cmd("s2 STATUS INBOX (MESSAGES UIDNEXT)").await;
    assert_eq!(
        r,
        vec![
            "* STATUS INBOX (MESSAGES 0 UIDNEXT 1)",
            "s2 OK Status completed."
        ]
    );
    assert_nothing_on_disk(&s, "quota");
    // Two fit: the same messages without the third go through.
    let r = a
        .cmd(&format!("a2 APPEND INBOX {} {}", item(&m1), item(&m2)))
        .await;
    assert_eq!(r.len(), 1, "{r:?}");
    assert!(r[0].starts_with("a2 OK [APPENDUID ") && r[0].ends_with(" 1:2] Append completed."));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multiappend_with_the_third_message_over_the_limit_appends_none() {
    let s = common::start_with(|c| c.imap.append_limit = 100).await;
    let mut a = Raw::login(s.addr, USER).await;
    let (m1, m2) = (msg(1), msg(2));
    // The third literal is refused when announced, before its data.
    a.send(&format!(
        "a1 APPEND INBOX {} {} {{200}}",
        item(&m1),
        item(&m2)
    ))
    .await;
    assert_eq!(a.line().await, "a1 NO [TOOBIG] Message too large.");
    // The same with a non-synchronizing third literal: its data is read
    // and dropped, the command still fails as a whole.
    let big = "x".repeat(200);
    let r = a
        .cmd(&format!(
            "a2 APPEND INBOX {} {} {}",
            item(&m1),
            item(&m2),
            item(&big)
        ))
        .await;
    assert_eq!(r, vec!["a2 NO [TOOBIG] Message too large."]);
    let r = a.cmd("s1 STATUS INBOX (MESSAGES UIDNEXT)").await;
    assert_eq!(
        r,
        vec![
            "* STATUS INBOX (MESSAGES 0 UIDNEXT 1)",
            "s1 OK Status completed."
        ]
    );
    assert_nothing_on_disk(&s, USER);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multiappend_cut_off_in_the_second_literal_appends_none() {
    let s = common::start().await;
    let mut a = Raw::login(s.addr, USER).await;
    let (m1, m2) = (msg(1), msg(2));
    // A synchronizing second literal: its "+ OK" proves the first message
    // was taken in before the connection goes.
    a.send(&format!("a1 APPEND INBOX {} {{{}}}", item(&m1), m2.len()))
        .await;
    assert_eq!(a.line().await, "+ OK");
    a.write_raw(&m2.as_bytes()[..5]).await.unwrap();
    drop(a);
    assert!(
        s.metric_reaches("yarilo_imap_sessions_open 0", GENEROUS)
            .await,
        "the session did not end"
    );
    let mut b = Raw::login(s.addr, USER).await;
    let r = b.cmd("s1 STATUS INBOX (MESSAGES UIDNEXT)").await;
    assert_eq!(
        r,
        vec![
            "* STATUS INBOX (MESSAGES 0 UIDNEXT 1)",
            "s1 OK Status completed."
        ]
    );
    assert_nothing_on_disk(&s, USER);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multiappend_reports_every_uid_and_keeps_the_order() {
    let s = common::start().await;
    let mut a = Raw::login(s.addr, USER).await;
    let r = a.cmd("s1 STATUS INBOX (UIDVALIDITY)").await;
    let uv = r[0]
        .trim_start_matches("* STATUS INBOX (UIDVALIDITY ")
        .trim_end_matches(')')
        .to_string();
    let (m1, m2, m3) = (msg(1), msg(2), msg(3));
    let r = a
        .cmd(&format!(
            "a1 APPEND INBOX (\\Seen) {} {} (\\Flagged) {}",
            item(&m1),
            item(&m2),
            item(&m3)
        ))
        .await;
    assert_eq!(
        r,
        vec![format!("a1 OK [APPENDUID {uv} 1:3] Append completed.")]
    );
    a.cmd("x1 SELECT INBOX").await;
    let r = a
        .cmd("f1 UID FETCH 1:* (FLAGS BODY.PEEK[HEADER.FIELDS (SUBJECT)])")
        .await;
    assert_eq!(
        r,
        vec![
            "* 1 FETCH (UID 1 FLAGS (\\Seen \\Recent) BODY[HEADER.FIELDS (SUBJECT)] {15}",
            "Subject: m1",
            "",
            ")",
            "* 2 FETCH (UID 2 FLAGS (\\Recent) BODY[HEADER.FIELDS (SUBJECT)] {15}",
            "Subject: m2",
            "",
            ")",
            "* 3 FETCH (UID 3 FLAGS (\\Flagged \\Recent) BODY[HEADER.FIELDS (SUBJECT)] {15}",
            "Subject: m3",
            "",
            ")",
            "f1 OK Fetch completed."
        ]
    );
}
