//! Exact-response regressions for behaviours a third-party IMAP
//! compliance run found (one test per finding; RFC examples and the
//! cases it named).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{Raw, USER};

/// APPENDs `msg` to `mailbox` with a LITERAL+ literal.
async fn append(c: &mut Raw, mailbox: &str, msg: &str) {
    let r = c
        .cmd(&format!("ap APPEND {mailbox} {{{}+}}\r\n{msg}", msg.len()))
        .await;
    assert!(r.last().unwrap().starts_with("ap OK"), "{r:?}");
}

/// The session still answers after whatever came before.
async fn still_usable(c: &mut Raw) {
    assert_eq!(
        c.cmd("zz NOOP").await.last().unwrap(),
        "zz OK NOOP completed."
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn framed_commands_never_cost_the_connection() {
    let s = common::start().await;
    let mut a = Raw::login(s.addr, USER).await;
    let r = a
        .cmd("d1 LIST \"\" !#$&'+,-.0123456789:;<=>?@^_`|[}%*")
        .await;
    assert_eq!(r, vec!["d1 OK List completed."]);
    still_usable(&mut a).await;
    let r = a.cmd("d2 LIST \"\" [}").await;
    assert_eq!(r, vec!["d2 OK List completed."]);
    still_usable(&mut a).await;
    let r = a.cmd("d3 NOTIFY SET (selected (Unknown))").await;
    assert_eq!(r.len(), 1, "{r:?}");
    assert!(r[0].starts_with("d3 "), "{r:?}");
    still_usable(&mut a).await;
    let r = a
        .cmd("d4 APPEND INBOX CATENATE (URL \"/INBOX;UIDVALIDITY=1/;UID=1\")")
        .await;
    assert_eq!(
        r,
        vec!["d4 NO [BADURL /INBOX;UIDVALIDITY=1/;UID=1] Bad URL."]
    );
    still_usable(&mut a).await;
    // Commands that parse but are refused with BAD, many in a row (more
    // than `imap.max_bad_commands`), never end the session.
    for _ in 0..25 {
        let r = a.cmd("d5 NOTIFY SET (selected (MessageNew))").await;
        assert_eq!(r.len(), 1, "{r:?}");
        assert!(r[0].starts_with("d5 BAD "), "{r:?}");
        let r = a.cmd("d6 CLOSE").await;
        assert_eq!(r, vec!["d6 BAD No mailbox selected."]);
    }
    still_usable(&mut a).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn any_astring_is_a_mailbox_name() {
    let s = common::start().await;
    let mut a = Raw::login(s.addr, USER).await;
    let name = "!#$&'+,-.0123456789:;<=>?@^_`|[}";
    let r = a.cmd(&format!("m1 SELECT {name}")).await;
    assert_eq!(r, vec!["m1 NO [NONEXISTENT] Mailbox doesn't exist."]);
    let r = a.cmd("m2 LIST \"\" ~foo").await;
    assert_eq!(r, vec!["m2 OK List completed."]);
    let r = a.cmd("m3 SELECT ~foo").await;
    assert_eq!(r, vec!["m3 NO [NONEXISTENT] Mailbox doesn't exist."]);
    let r = a.cmd("m4 STATUS ~foo (MESSAGES)").await;
    assert_eq!(r, vec!["m4 NO [NONEXISTENT] Mailbox doesn't exist."]);
    still_usable(&mut a).await;
}

/// The UIDVALIDITY a STATUS line reports.
fn uidvalidity_of(line: &str) -> String {
    line.split("UIDVALIDITY ")
        .nth(1)
        .unwrap()
        .split([' ', ')'])
        .next()
        .unwrap()
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn notify_set_status_accepts_each_message_event_alone() {
    let s = common::start().await;
    let mut a = Raw::login(s.addr, USER).await;
    a.cmd("n0 CREATE Work").await;
    append(&mut a, "Work", "Subject: x\r\n\r\nx\r\n").await;
    let r = a.cmd("n1 STATUS Work (UIDVALIDITY)").await;
    let uv = uidvalidity_of(&r[0]);
    // Asked from another session: STATUS HIGHESTMODSEQ enables CONDSTORE.
    let mut b = Raw::login(s.addr, USER).await;
    let r = b.cmd("b1 STATUS Work (HIGHESTMODSEQ)").await;
    let hms = r[0]
        .trim_start_matches("* STATUS Work (HIGHESTMODSEQ ")
        .trim_end_matches(')')
        .to_string();
    let r = a
        .cmd("n2 NOTIFY SET STATUS (mailboxes Work (MessageExpunge))")
        .await;
    assert_eq!(
        r,
        vec!["* STATUS Work (MESSAGES 1)", "n2 OK NOTIFY completed."]
    );
    let r = a
        .cmd("n3 NOTIFY SET STATUS (mailboxes Work (MessageNew))")
        .await;
    assert_eq!(
        r,
        vec![
            format!("* STATUS Work (MESSAGES 1 UIDNEXT 2 UIDVALIDITY {uv})"),
            "n3 OK NOTIFY completed.".to_string()
        ]
    );
    let r = a
        .cmd("n4 NOTIFY SET STATUS (mailboxes Work (FlagChange))")
        .await;
    assert_eq!(
        r,
        vec![
            format!("* STATUS Work (UIDVALIDITY {uv} HIGHESTMODSEQ {hms})"),
            "n4 OK NOTIFY completed.".to_string()
        ]
    );
    // For the selected mailbox the RFC 5465 §5 pairing still holds.
    let r = a.cmd("n5 NOTIFY SET (selected (MessageNew))").await;
    assert_eq!(
        r,
        vec!["n5 BAD MessageNew and MessageExpunge must be given together (and with FlagChange)."]
    );
    still_usable(&mut a).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn catenate_with_an_unresolvable_url_is_badurl() {
    let s = common::start().await;
    let mut a = Raw::login(s.addr, USER).await;
    append(&mut a, "INBOX", "Subject: s\r\n\r\nbody\r\n").await;
    let r = a.cmd("c0 STATUS INBOX (UIDVALIDITY)").await;
    let wrong: u64 = uidvalidity_of(&r[0]).parse::<u64>().unwrap() + 1;
    let url = format!("/INBOX;UIDVALIDITY={wrong}/;UID=1");
    // Alone: the command has no literal at all.
    let r = a
        .cmd(&format!("c1 APPEND INBOX CATENATE (URL \"{url}\")"))
        .await;
    assert_eq!(r, vec![format!("c1 NO [BADURL {url}] Bad URL.")]);
    let r = a
        .cmd("c2 APPEND INBOX CATENATE (URL \"/INBOX/;UID=9\")")
        .await;
    assert_eq!(r, vec!["c2 NO [BADURL /INBOX/;UID=9] Bad URL."]);
    // In a MULTIAPPEND, a TEXT literal after the bad URL.
    let m = "Subject: m\r\n\r\nm\r\n";
    let r = a
        .cmd(&format!(
            "c3 APPEND INBOX {{{}+}}\r\n{m} CATENATE (URL \"{url}\" TEXT {{3+}}\r\nabc)",
            m.len()
        ))
        .await;
    assert_eq!(r, vec![format!("c3 NO [BADURL {url}] Bad URL.")]);
    still_usable(&mut a).await;
    // A synchronizing TEXT literal is refused without waiting for it.
    a.send(&format!(
        "c4 APPEND INBOX {{{}+}}\r\n{m} CATENATE (URL \"{url}\" TEXT {{3}}",
        m.len()
    ))
    .await;
    assert_eq!(a.line().await, format!("c4 NO [BADURL {url}] Bad URL."));
    still_usable(&mut a).await;
    let r = a.cmd("c5 STATUS INBOX (MESSAGES)").await;
    assert_eq!(r[0], "* STATUS INBOX (MESSAGES 1)");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn examine_shows_recent_without_taking_it() {
    let s = common::start().await;
    let mut a = Raw::login(s.addr, USER).await;
    append(&mut a, "INBOX", "Subject: 1\r\n\r\n1\r\n").await;
    append(&mut a, "INBOX", "Subject: 2\r\n\r\n2\r\n").await;
    let r = a.cmd("e1 EXAMINE INBOX").await;
    assert_eq!(r[2..4], ["* 2 EXISTS", "* 2 RECENT"], "{r:?}");
    let r = a.cmd("e2 FETCH 2 FLAGS").await;
    assert_eq!(r[0], "* 2 FETCH (FLAGS (\\Recent))");
    let mut b = Raw::login(s.addr, USER).await;
    let r = b.cmd("e3 SELECT INBOX").await;
    assert_eq!(r[2..4], ["* 2 EXISTS", "* 2 RECENT"], "{r:?}");
    let r = a.cmd("e4 EXAMINE INBOX").await;
    assert_eq!(r[3..5], ["* 2 EXISTS", "* 0 RECENT"], "{r:?}");
}

/// A mailbox of five short messages, selected.
async fn five(s: &common::Server) -> Raw {
    let mut a = Raw::login(s.addr, USER).await;
    for i in 1..=5 {
        append(
            &mut a,
            "INBOX",
            &format!("Subject: m{i}\r\n\r\nbody {i}\r\n"),
        )
        .await;
    }
    a.cmd("s0 SELECT INBOX").await;
    a
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partial_written_high_to_low_is_the_same_range() {
    let s = common::start().await;
    let mut a = five(&s).await;
    let r = a.cmd("p1 SEARCH RETURN (PARTIAL 4:2) ALL").await;
    assert_eq!(
        r,
        vec![
            "* ESEARCH (TAG \"p1\") PARTIAL (2:4 2:4)",
            "p1 OK Search completed."
        ]
    );
    let r = a.cmd("p2 UID SEARCH RETURN (PARTIAL 4:2) ALL").await;
    assert_eq!(
        r,
        vec![
            "* ESEARCH (TAG \"p2\") UID PARTIAL (2:4 2:4)",
            "p2 OK Search completed."
        ]
    );
    let r = a
        .cmd("p3 SORT RETURN (PARTIAL 3:1) (REVERSE SUBJECT) UTF-8 ALL")
        .await;
    assert_eq!(
        r,
        vec![
            "* ESEARCH (TAG \"p3\") PARTIAL (1:3 5,4,3)",
            "p3 OK Sort completed."
        ]
    );
}

/// `(MODSEQ n)` of message `msn`.
async fn modseq_of(a: &mut Raw, msn: u32) -> u64 {
    let r = a.cmd(&format!("mq FETCH {msn} (MODSEQ)")).await;
    let l = r.iter().find(|l| l.contains("MODSEQ (")).unwrap();
    l.split("MODSEQ (")
        .nth(1)
        .unwrap()
        .trim_end_matches("))")
        .parse()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn esearch_modseq_with_min_or_max_alone_is_that_message() {
    let s = common::start().await;
    let mut a = five(&s).await;
    a.cmd("q1 STORE 4 +FLAGS (\\Flagged)").await;
    let (m1, m4, m5) = (
        modseq_of(&mut a, 1).await,
        modseq_of(&mut a, 4).await,
        modseq_of(&mut a, 5).await,
    );
    assert!(m4 > m5 && m5 > m1, "{m1} {m4} {m5}");
    let r = a.cmd("q2 SEARCH RETURN (MIN) MODSEQ 1").await;
    assert_eq!(r[0], format!("* ESEARCH (TAG \"q2\") MIN 1 MODSEQ {m1}"));
    let r = a.cmd("q3 SEARCH RETURN (MAX) MODSEQ 1").await;
    assert_eq!(r[0], format!("* ESEARCH (TAG \"q3\") MAX 5 MODSEQ {m5}"));
    // Both: the higher of the two; with ALL or COUNT: the whole set.
    let r = a.cmd("q4 SEARCH RETURN (MIN MAX) MODSEQ 1").await;
    assert_eq!(
        r[0],
        format!("* ESEARCH (TAG \"q4\") MIN 1 MAX 5 MODSEQ {m5}")
    );
    let r = a.cmd("q5 SEARCH RETURN (MIN COUNT) MODSEQ 1").await;
    assert_eq!(
        r[0],
        format!("* ESEARCH (TAG \"q5\") MIN 1 COUNT 5 MODSEQ {m4}")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn first_condstore_enabling_command_reports_highestmodseq() {
    let s = common::start().await;
    let mut a = five(&s).await;
    let r = a.cmd("c0 STATUS INBOX (MESSAGES)").await;
    assert_eq!(r.len(), 2, "{r:?}");
    let r = a.cmd("c1 FETCH 2 (MODSEQ)").await;
    assert_eq!(r.len(), 3, "{r:?}");
    assert!(r[0].starts_with("* OK [HIGHESTMODSEQ "), "{r:?}");
    assert!(r[1].starts_with("* 2 FETCH (MODSEQ ("), "{r:?}");
    assert_eq!(r[2], "c1 OK Fetch completed.");
    // Only the first.
    let r = a.cmd("c2 FETCH 2 (MODSEQ)").await;
    assert_eq!(r.len(), 2, "{r:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sent_dates_compare_the_written_calendar_day() {
    let s = common::start().await;
    let mut a = Raw::login(s.addr, USER).await;
    for date in [
        "Sat, 24 Mar 2007 23:00:00 +0200",
        "Sun, 25 Mar 2007 01:00:00 +0200",
        "Sat, 24 Mar 2007 23:30:00 -0700",
    ] {
        append(
            &mut a,
            "INBOX",
            &format!("Date: {date}\r\nSubject: d\r\n\r\nd\r\n"),
        )
        .await;
    }
    // No Date: at all: INTERNALDATE stands in.
    append(
        &mut a,
        "INBOX \"25-Mar-2007 12:00:00 +0000\"",
        "Subject: undated\r\n\r\nd\r\n",
    )
    .await;
    a.cmd("d0 SELECT INBOX").await;
    for (cmd, want) in [
        ("SENTON 24-Mar-2007", "* SEARCH 1 3"),
        ("SENTON 25-Mar-2007", "* SEARCH 2 4"),
        ("SENTBEFORE 25-Mar-2007", "* SEARCH 1 3"),
        ("SENTSINCE 25-Mar-2007", "* SEARCH 2 4"),
        (
            "SENTSINCE 24-Mar-2007 SENTBEFORE 25-Mar-2007",
            "* SEARCH 1 3",
        ),
        ("NOT SENTON 24-Mar-2007", "* SEARCH 2 4"),
    ] {
        let r = a.cmd(&format!("d1 SEARCH {cmd}")).await;
        assert_eq!(r, vec![want, "d1 OK Search completed."], "{cmd}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn address_searches_match_the_parsed_addresses() {
    let s = common::start().await;
    let mut a = Raw::login(s.addr, USER).await;
    for h in [
        "From: <user-from (comment)@ (comment) domain.org>",
        "To: undisclosed: a@example.org, \"B Person\" <b@example.net>;",
        "Cc: =?UTF-8?Q?J=C3=B6rg_Smith?= <joerg@example.com>\r\nBcc: hidden@\r\n example.com",
    ] {
        append(&mut a, "INBOX", &format!("{h}\r\nSubject: a\r\n\r\nb\r\n")).await;
    }
    a.cmd("a0 SELECT INBOX").await;
    for (cmd, want) in [
        ("FROM user-from@domain.org", "* SEARCH 1"),
        ("FROM comment", "* SEARCH"),
        ("TO b@example.net", "* SEARCH 2"),
        ("TO a@example.org", "* SEARCH 2"),
        ("TO \"B Person\"", "* SEARCH 2"),
        ("TO \"Person <b@\"", "* SEARCH 2"),
        ("CC \"rg Smith\"", "* SEARCH 3"),
        ("CC joerg@example.com", "* SEARCH 3"),
        ("BCC hidden@example.com", "* SEARCH 3"),
    ] {
        let r = a.cmd(&format!("a1 SEARCH {cmd}")).await;
        assert_eq!(r, vec![want, "a1 OK Search completed."], "{cmd}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn childinfo_only_for_mailboxes_outside_the_selection() {
    let s = common::start().await;
    let mut a = Raw::login(s.addr, USER).await;
    for m in ["Foo", "Foo/Bar", "Baz", "Baz/Qux", "Plain"] {
        a.cmd(&format!("l0 CREATE {m}")).await;
    }
    for m in ["Foo", "Foo/Bar", "Baz/Qux"] {
        a.cmd(&format!("l1 SUBSCRIBE {m}")).await;
    }
    let r = a
        .cmd("l2 LIST (SUBSCRIBED RECURSIVEMATCH) \"\" (\"Ba%\" \"Foo\" \"Foo/%\")")
        .await;
    assert_eq!(
        r,
        vec![
            "* LIST (\\HasChildren) \"/\" Baz (\"CHILDINFO\" (\"SUBSCRIBED\"))",
            "* LIST (\\Subscribed \\HasChildren) \"/\" Foo",
            "* LIST (\\Subscribed \\HasNoChildren) \"/\" Foo/Bar",
            "l2 OK List completed.",
        ]
    );
    let r = a.cmd("l3 LIST (SUBSCRIBED) \"\" \"F%\"").await;
    assert_eq!(
        r,
        vec![
            "* LIST (\\Subscribed \\HasChildren) \"/\" Foo",
            "l3 OK List completed.",
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn binary_parts_body_is_base64_binary_is_exact() {
    let s = common::start().await;
    let mut a = Raw::login(s.addr, USER).await;
    let data: &[u8] = &[0, 1, 0xff, b'\n', b'a', b'b', 0x80];
    let mut msg = b"MIME-Version: 1.0\r\nContent-Type: multipart/mixed; boundary=b\r\n\r\n--b\r\nContent-Type: application/octet-stream\r\nContent-Transfer-Encoding: binary\r\n\r\n".to_vec();
    msg.extend_from_slice(data);
    msg.extend_from_slice(b"\r\n--b--\r\n");
    let mut cmd = format!("b1 APPEND INBOX ~{{{}+}}\r\n", msg.len()).into_bytes();
    cmd.extend_from_slice(&msg);
    let r = a.cmd_bytes("b1", &cmd).await;
    assert!(
        r.starts_with(b"b1 OK [APPENDUID "),
        "{}",
        String::from_utf8_lossy(&r)
    );
    // The same with a synchronizing literal8 (the data follows the "+").
    a.send(&format!("b0 APPEND INBOX ~{{{}}}", msg.len())).await;
    assert!(a.line().await.starts_with('+'));
    let r = a.cmd_bytes("b0", &msg).await;
    assert!(
        r.starts_with(b"b0 OK [APPENDUID "),
        "{}",
        String::from_utf8_lossy(&r)
    );
    a.cmd("b2 SELECT INBOX").await;
    let r = a.cmd("b3 FETCH 1:2 (BINARY.SIZE[1] RFC822.SIZE)").await;
    assert_eq!(
        r,
        vec![
            format!("* 1 FETCH (BINARY.SIZE[1] 7 RFC822.SIZE {})", msg.len()),
            format!("* 2 FETCH (BINARY.SIZE[1] 7 RFC822.SIZE {})", msg.len()),
            "b3 OK Fetch completed.".to_string()
        ]
    );
    let r = a.cmd_bytes("b4", b"b4 FETCH 1 (BINARY.PEEK[1])").await;
    let mut want = b"* 1 FETCH (BINARY[1] ~{7}\r\n".to_vec();
    want.extend_from_slice(data);
    want.extend_from_slice(b")\r\nb4 OK Fetch completed.\r\n");
    assert_eq!(r, want, "{}", String::from_utf8_lossy(&r));
    // BODY: 7-bit safe, base64, and the MIME header says so.
    let r = a.cmd("b5 FETCH 1 (BODY.PEEK[1])").await;
    assert_eq!(
        r,
        vec![
            "* 1 FETCH (BODY[1] {14}",
            "AAH/CmFigA==",
            ")",
            "b5 OK Fetch completed."
        ]
    );
    let r = a.cmd("b6 FETCH 1 (BODY.PEEK[1.MIME])").await;
    assert_eq!(
        r[1..4],
        [
            "Content-Type: application/octet-stream",
            "Content-Transfer-Encoding: base64",
            ""
        ],
        "{r:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_expunged_elsewhere_are_served_while_in_view() {
    let s = common::start().await;
    let mut a = five(&s).await;
    let mut b = Raw::login(s.addr, USER).await;
    b.cmd("x0 SELECT INBOX").await;
    let r = b.cmd("x1 STORE 2:3 +FLAGS.SILENT (\\Deleted)").await;
    assert_eq!(r, vec!["x1 OK Store completed."]);
    let r = b.cmd("x2 EXPUNGE").await;
    assert_eq!(
        r,
        vec!["* 3 EXPUNGE", "* 2 EXPUNGE", "x2 OK Expunge completed."]
    );
    // A has not been told: 2 and 3 are still its messages 2 and 3, and
    // what is cached of them is served, as Dovecot does.
    let r = a
        .cmd("y1 FETCH 2:3 (FLAGS BODY.PEEK[HEADER.FIELDS (SUBJECT)])")
        .await;
    assert_eq!(
        r,
        vec![
            "* 2 FETCH (FLAGS (\\Recent) BODY[HEADER.FIELDS (SUBJECT)] {15}",
            "Subject: m2",
            "",
            ")",
            "* 3 FETCH (FLAGS (\\Recent) BODY[HEADER.FIELDS (SUBJECT)] {15}",
            "Subject: m3",
            "",
            ")",
            "y1 OK Fetch completed.",
        ]
    );
    // Setting \Seen on a message that is gone does not fail the FETCH.
    let r = a.cmd("y2 FETCH 2 (BODY[HEADER.FIELDS (SUBJECT)])").await;
    assert_eq!(
        r[0], "* 2 FETCH (BODY[HEADER.FIELDS (SUBJECT)] {15}",
        "{r:?}"
    );
    assert_eq!(r.last().unwrap(), "y2 OK Fetch completed.");
    // Only a body that truly cannot be read any more fails.
    let r = a.cmd("y4 FETCH 1:3 (BODY.PEEK[TEXT])").await;
    assert_eq!(
        r,
        vec![
            "* 1 FETCH (BODY[TEXT] {8}",
            "body 1",
            ")",
            "y4 NO [EXPUNGEISSUED] Some messages were also expunged.",
        ]
    );
    let r = a
        .cmd("y3 UID FETCH 3 (UID BODY.PEEK[HEADER.FIELDS (SUBJECT)])")
        .await;
    assert_eq!(
        r[0], "* 3 FETCH (UID 3 BODY[HEADER.FIELDS (SUBJECT)] {15}",
        "{r:?}"
    );
    assert_eq!(
        r[r.len() - 3..],
        ["* 3 EXPUNGE", "* 2 EXPUNGE", "y3 OK Fetch completed."]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn urlfetch_binary_of_a_message_part_decodes_the_parts_inside() {
    let s = common::start().await;
    let mut a = Raw::login(s.addr, USER).await;
    let inner = "Subject: inner\r\nMIME-Version: 1.0\r\nContent-Type: multipart/mixed; boundary=I\r\n\r\n--I\r\nContent-Type: text/plain\r\nContent-Transfer-Encoding: base64\r\n\r\naGVsbG8=\r\n--I\r\nContent-Type: application/octet-stream\r\nContent-Transfer-Encoding: base64\r\n\r\nAGJpbgA=\r\n--I--\r\n";
    let msg = format!("Subject: outer\r\nMIME-Version: 1.0\r\nContent-Type: multipart/mixed; boundary=O\r\n\r\n--O\r\nContent-Type: text/plain\r\n\r\nsee attached\r\n--O\r\nContent-Type: message/rfc822\r\n\r\n{inner}\r\n--O--\r\n");
    append(&mut a, "INBOX", &msg).await;
    let r = a
        .cmd(&format!(
            "g GENURLAUTH \"imap://{USER}@test.invalid/INBOX/;UID=1/;SECTION=2;URLAUTH=authuser\" INTERNAL"
        ))
        .await;
    let url = r[0]
        .trim_start_matches("* GENURLAUTH \"")
        .trim_end_matches('"')
        .to_string();
    let r = a
        .cmd_bytes(
            "f1",
            format!("f1 URLFETCH (\"{url}\" BODYPARTSTRUCTURE BINARY)").as_bytes(),
        )
        .await;
    // The parts inside decoded, each header saying `binary`, and the
    // structure describing those octets.
    let body = "Subject: inner\r\nMIME-Version: 1.0\r\nContent-Type: multipart/mixed; boundary=I\r\n\r\n--I\r\nContent-Type: text/plain\r\nContent-Transfer-Encoding: binary\r\n\r\nhello\r\n--I\r\nContent-Type: application/octet-stream\r\nContent-Transfer-Encoding: binary\r\n\r\n\0bin\0\r\n--I--\r\n";
    let want = format!(
        "* URLFETCH {url} (BODYPARTSTRUCTURE (\"message\" \"rfc822\" NIL NIL NIL \"binary\" {} (NIL \"inner\" NIL NIL NIL NIL NIL NIL NIL NIL) ((\"text\" \"plain\" (\"charset\" \"us-ascii\") NIL NIL \"binary\" 5 0 NIL NIL NIL NIL)(\"application\" \"octet-stream\" NIL NIL NIL \"binary\" 5 NIL NIL NIL NIL) \"mixed\" (\"boundary\" \"I\") NIL NIL NIL) 15 NIL NIL NIL NIL)) (BINARY ~{{{}}}\r\n{body})\r\nf1 OK Urlfetch completed.\r\n",
        body.len(),
        body.len()
    );
    assert_eq!(String::from_utf8_lossy(&r), want);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sort_cc_and_displayto() {
    let s = common::start().await;
    let mut a = Raw::login(s.addr, USER).await;
    for h in [
        "Cc: \"Zed\" <bob@x.org>\r\nTo: \"Beta\" <z@x.org>",
        "Cc: Alice@y.org\r\nTo: <a@x.org>",
        "To: =?UTF-8?Q?Gamma?= <b@x.org>",
        "Cc: carol@z.org, alice@a.org\r\nTo: \"alpha\" <y@x.org>, \"Aaron\" <aa@x.org>",
        "To: \"Beta\" <q@x.org>",
    ]
    .iter()
    .enumerate()
    {
        let target = format!("INBOX \"0{}-Jan-2020 00:00:00 +0000\"", h.0 + 1);
        append(
            &mut a,
            &target,
            &format!("{}\r\nSubject: s\r\n\r\nb\r\n", h.1),
        )
        .await;
    }
    a.cmd("o0 SELECT INBOX").await;
    for (cmd, want) in [
        // Keys: "", "alice", "bob", "carol" (3 and 5 have none: seq order).
        ("(CC)", "* SORT 3 5 2 1 4"),
        ("(REVERSE CC)", "* SORT 4 1 2 3 5"),
        ("(CC REVERSE ARRIVAL)", "* SORT 5 3 2 1 4"),
        // Keys: "beta", "a@x.org", "gamma", "alpha", "beta".
        ("(DISPLAYTO)", "* SORT 2 4 1 5 3"),
        ("(REVERSE DISPLAYTO)", "* SORT 3 1 5 4 2"),
    ] {
        let r = a.cmd(&format!("o1 SORT {cmd} UTF-8 ALL")).await;
        assert_eq!(r, vec![want, "o1 OK Sort completed."], "{cmd}");
    }
    // The addr-spec a DISPLAYTO key falls back to is the parsed one:
    // comments around the `@` do not hide the domain, and ENVELOPE's
    // MISSING_DOMAIN placeholder is not part of it.
    a.cmd("o2 CREATE Disp").await;
    append(&mut a, "Disp", "To: user-to@e.org\r\n\r\nb\r\n").await;
    append(
        &mut a,
        "Disp",
        "To: <user-to (comment)@ (comment) domain.org>\r\n\r\nb\r\n",
    )
    .await;
    // No domain at all: the local part alone, not a placeholder.
    append(&mut a, "Disp", "To: user-to\r\n\r\nb\r\n").await;
    a.cmd("o3 SELECT Disp").await;
    let r = a.cmd("o4 SORT (DISPLAYTO) UTF-8 ALL").await;
    assert_eq!(r, vec!["* SORT 3 2 1", "o4 OK Sort completed."]);
}
