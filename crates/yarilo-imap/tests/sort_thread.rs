//! SORT, SORT=DISPLAY, THREAD, ESORT, PARTIAL and CONTEXT=SEARCH/SORT
//! (RFC 5256, 5957, 5267, 9394) against the real server, exact responses.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{Raw, USER};

/// Header lines, internal date, body.
const MESSAGES: &[(&str, &str, &str)] = &[
    (
        "From: \"Zed\" <mike@a.org>\r\nTo: bob@b.org\r\nCc: carol@c.org\r\nSubject: Re: [fwd: Re: x]\r\nDate: Mon, 03 Jan 2022 00:00:00 +0000\r\nMessage-ID: <m1@t>\r\nReferences: <gone@t>\r\n",
        "02-Jan-2022 00:00:00 +0000",
        "one\r\n",
    ),
    (
        "From: Bob <bob@b.org>\r\nTo: zoe@z.org\r\nSubject: [PATCH] Re: foo (fwd)\r\nDate: Sat, 01 Jan 2022 00:00:00 +0000\r\nMessage-ID: <m2@t>\r\n",
        "01-Jan-2022 00:00:00 +0000",
        "a much longer body, so that this message is the largest one of all\r\n\r\n\r\n\r\n\r\n",
    ),
    (
        "From: carl@c.org\r\nTo: amy@a.org\r\nCc: bob@b.org\r\nSubject: foo\r\nDate: Wed, 05 Jan 2022 00:00:00 +0000\r\nMessage-ID: <m3@t>\r\nIn-Reply-To: <m2@t>\r\n",
        "04-Jan-2022 00:00:00 +0000",
        "3\r\n",
    ),
    (
        "From: =?UTF-8?Q?=C3=89mile?= <emile@e.org>\r\nSubject: x\r\nMessage-ID: <m4@t>\r\nReferences: <gone@t>\r\n",
        "03-Jan-2022 12:00:00 +0000",
        "four\r\n",
    ),
    (
        "From: \"adam\" <zz@z.org>\r\nTo: \"Bob\" <bob@b.org>\r\nSubject: bar\r\nDate: Sun, 02 Jan 2022 00:00:00 +0000\r\nMessage-ID: <m5@t>\r\nReferences: <m3@t>\r\n",
        "06-Jan-2022 00:00:00 +0000",
        "five five\r\n",
    ),
];

async fn append(c: &mut Raw, tag: &str, flags: &str, date: &str, msg: &str) {
    let r = c
        .cmd(&format!(
            "{tag} APPEND INBOX ({flags}) \"{date}\" {{{}+}}\r\n{msg}",
            msg.len()
        ))
        .await;
    assert!(r.last().unwrap().starts_with(&format!("{tag} OK")), "{r:?}");
}

async fn loaded() -> (common::Server, Raw) {
    loaded_with(500_000).await
}

/// The messages in INBOX, with `imap.sort_cache_messages` set.
async fn loaded_with(sort_cache_messages: usize) -> (common::Server, Raw) {
    let s = common::start_with(|c| c.imap.sort_cache_messages = sort_cache_messages).await;
    let mut c = Raw::login(s.addr, USER).await;
    for (i, (h, date, body)) in MESSAGES.iter().enumerate() {
        append(
            &mut c,
            &format!("p{i}"),
            "",
            date,
            &format!("{h}\r\n{body}"),
        )
        .await;
    }
    let r = c.cmd("s SELECT INBOX").await;
    assert!(r.last().unwrap().starts_with("s OK"), "{r:?}");
    (s, c)
}

/// The single untagged line of a command, checking the tagged OK.
async fn one(c: &mut Raw, cmd: &str) -> String {
    let r = c.cmd(cmd).await;
    assert_eq!(r.len(), 2, "{cmd}: {r:?}");
    assert!(r[1].contains(" OK "), "{cmd}: {r:?}");
    r[0].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn capabilities_are_advertised() {
    let s = common::start().await;
    let mut c = Raw::login(s.addr, USER).await;
    let caps = one(&mut c, "c CAPABILITY").await;
    for cap in [
        " SORT ",
        " SORT=DISPLAY ",
        " ESORT ",
        " THREAD=ORDEREDSUBJECT ",
        " THREAD=REFERENCES ",
        " THREAD=REFS ",
        " CONTEXT=SEARCH ",
        " CONTEXT=SORT ",
        " PARTIAL ",
    ] {
        assert!(caps.contains(cap), "{cap} missing: {caps}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sort_by_every_key() {
    let (_s, c) = loaded().await;
    check_sort_by_every_key(c).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sort_by_every_key_without_the_header_cache() {
    let (_s, c) = loaded_with(0).await;
    check_sort_by_every_key(c).await;
}

async fn check_sort_by_every_key(mut c: Raw) {
    let cases = [
        ("ARRIVAL", "2 1 4 3 5"),
        // Sent date; message 4 has no Date: its INTERNALDATE counts.
        ("DATE", "2 5 1 4 3"),
        ("FROM", "2 3 4 1 5"),
        // Display name, else the address; É sorts as E + accent.
        ("DISPLAYFROM", "5 2 3 4 1"),
        // No To sorts first (empty string); ties keep mailbox order.
        ("TO", "4 3 1 5 2"),
        ("DISPLAYTO", "4 3 5 1 2"),
        ("CC", "2 4 5 3 1"),
        // Base subjects: x, foo, foo, x, bar.
        ("SUBJECT", "5 2 3 1 4"),
        ("REVERSE SUBJECT", "1 4 2 3 5"),
        ("REVERSE DATE", "3 4 1 5 2"),
        ("SUBJECT REVERSE DATE", "5 3 2 4 1"),
    ];
    for (i, (key, want)) in cases.iter().enumerate() {
        let got = one(&mut c, &format!("t{i} SORT ({key}) UTF-8 ALL")).await;
        assert_eq!(got, format!("* SORT {want}"), "SORT ({key})");
    }
    // SIZE: by RFC822.SIZE, computed here from what was appended.
    let mut sizes: Vec<(usize, usize)> = MESSAGES
        .iter()
        .enumerate()
        .map(|(i, (h, _, b))| (h.len() + 2 + b.len(), i + 1))
        .collect();
    sizes.sort();
    let want: Vec<String> = sizes.iter().map(|s| s.1.to_string()).collect();
    assert_eq!(
        one(&mut c, "z1 SORT (SIZE) UTF-8 ALL").await,
        format!("* SORT {}", want.join(" "))
    );
    // UID SORT with search keys; US-ASCII is accepted too.
    assert_eq!(
        one(&mut c, "z2 UID SORT (DATE) US-ASCII SUBJECT foo").await,
        "* SORT 2 3"
    );
    assert_eq!(one(&mut c, "z3 SORT (DATE) UTF-8 DELETED").await, "* SORT");
    let r = c.cmd("z4 SORT (DATE) KOI8-R ALL").await;
    assert_eq!(
        r,
        vec!["z4 NO [BADCHARSET (UTF-8 US-ASCII)] Unsupported charset."]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thread_algorithms() {
    let (_s, c) = loaded().await;
    check_thread_algorithms(c).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thread_algorithms_without_the_header_cache() {
    let (_s, c) = loaded_with(0).await;
    check_thread_algorithms(c).await;
}

async fn check_thread_algorithms(mut c: Raw) {
    // 1 and 4 share the missing parent <gone@t>: a dummy root holds
    // them; 3 replies to 2 (In-Reply-To), 5 to 3 (References).
    assert_eq!(
        one(&mut c, "h1 THREAD REFERENCES UTF-8 ALL").await,
        "* THREAD (2 3 5)((1)(4))"
    );
    // REFS: the thread with the newest message last.
    assert_eq!(
        one(&mut c, "h2 UID THREAD REFS UTF-8 ALL").await,
        "* THREAD ((1)(4))(2 3 5)"
    );
    assert_eq!(
        one(&mut c, "h3 THREAD ORDEREDSUBJECT UTF-8 ALL").await,
        "* THREAD (2 3)(5)(1 4)"
    );
    // Threads of the matching messages only: 5's parent is not searched.
    assert_eq!(
        one(&mut c, "h4 THREAD REFERENCES UTF-8 NOT SUBJECT foo").await,
        "* THREAD (5)((1)(4))"
    );
    assert_eq!(
        one(&mut c, "h5 THREAD REFERENCES UTF-8 DELETED").await,
        "* THREAD"
    );
    let r = c.cmd("h6 THREAD JWZ UTF-8 ALL").await;
    assert_eq!(r, vec!["h6 BAD Unknown thread algorithm."]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn esort_and_partial() {
    let (_s, mut c) = loaded().await;
    let cases = [
        // RFC 5267 §3.1: MIN/MAX are the first and last in sort order.
        (
            "SORT RETURN (MIN MAX COUNT) (DATE) UTF-8 ALL",
            "MIN 2 MAX 3 COUNT 5",
        ),
        // §3.2: ALL in sort order, ranges only where ascending.
        (
            "UID SORT RETURN (ALL) (REVERSE SUBJECT) UTF-8 ALL",
            "UID ALL 1,4,2:3,5",
        ),
        ("SORT RETURN () (SUBJECT) UTF-8 SUBJECT foo", "ALL 2:3"),
        ("SORT RETURN (COUNT) (DATE) UTF-8 DELETED", "COUNT 0"),
        ("SORT RETURN (MIN MAX ALL) (DATE) UTF-8 DELETED", ""),
        // PARTIAL positions of the sorted result (RFC 5267 §4.4) and
        // from its end (RFC 9394).
        (
            "SORT RETURN (PARTIAL 2:3) (DATE) UTF-8 ALL",
            "PARTIAL (2:3 5,1)",
        ),
        (
            "SORT RETURN (PARTIAL -1:-2) (DATE) UTF-8 ALL",
            "PARTIAL (-1:-2 4,3)",
        ),
        (
            "SORT RETURN (PARTIAL 6:9) (DATE) UTF-8 ALL",
            "PARTIAL (6:9 NIL)",
        ),
        ("SEARCH RETURN (PARTIAL 4:10) ALL", "PARTIAL (4:10 4:5)"),
        (
            "UID SEARCH RETURN (PARTIAL -2:-1 COUNT) ALL",
            "UID PARTIAL (-2:-1 4:5) COUNT 5",
        ),
        ("SEARCH RETURN (CONTEXT COUNT) SUBJECT x", "COUNT 2"),
    ];
    for (i, (cmd, want)) in cases.iter().enumerate() {
        let tag = format!("e{i}");
        let got = one(&mut c, &format!("{tag} {cmd}")).await;
        let head = format!("* ESEARCH (TAG \"{tag}\")");
        let want = if want.is_empty() {
            head
        } else {
            format!("{head} {want}")
        };
        assert_eq!(got, want, "{cmd}");
    }
    let r = c
        .cmd("x1 SORT RETURN (PARTIAL 1:2 ALL) (DATE) UTF-8 ALL")
        .await;
    assert!(r[0].starts_with("x1 BAD"), "{r:?}");
}

fn esearch(lines: &[String]) -> Vec<&str> {
    lines
        .iter()
        .filter(|l| l.starts_with("* ESEARCH"))
        .map(String::as_str)
        .collect()
}

fn at(lines: &[String], prefix: &str) -> usize {
    lines
        .iter()
        .position(|l| l.starts_with(prefix))
        .unwrap_or_else(|| panic!("{prefix} not in {lines:?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn context_updates_follow_other_sessions() {
    let s = common::start().await;
    let mut a = Raw::login(s.addr, USER).await;
    let mut b = Raw::login(s.addr, USER).await;
    for (i, subj) in ["b", "d", "f"].iter().enumerate() {
        let m = format!("Subject: {subj}\r\n\r\nx");
        append(
            &mut a,
            &format!("p{i}"),
            "",
            "01-Jan-2022 00:00:00 +0000",
            &m,
        )
        .await;
    }
    let r = a.cmd("s SELECT INBOX").await;
    assert!(r.last().unwrap().starts_with("s OK"), "{r:?}");

    // RFC 5267 §4.3 example B01: UPDATE with COUNT.
    let r = a.cmd("u1 UID SEARCH RETURN (UPDATE COUNT) UNSEEN").await;
    assert_eq!(
        r,
        vec![
            "* ESEARCH (TAG \"u1\") UID COUNT 3",
            "u1 OK Search completed, will notify."
        ]
    );
    let r = a
        .cmd("s1 UID SORT RETURN (UPDATE) (SUBJECT) UTF-8 UNSEEN")
        .await;
    assert_eq!(
        r,
        vec![
            "* ESEARCH (TAG \"s1\") UID ALL 1:3",
            "s1 OK Sort completed, will notify."
        ]
    );
    let r = a.cmd("u1 SORT RETURN (UPDATE) (DATE) UTF-8 FLAGGED").await;
    assert_eq!(r, vec!["u1 BAD Tag reuse."]);

    // Another session delivers: ADDTO after the EXISTS; the sorted
    // context inserts "c" at position 2.
    append(
        &mut b,
        "b1",
        "",
        "02-Jan-2022 00:00:00 +0000",
        "Subject: c\r\n\r\nx",
    )
    .await;
    let r = a.cmd("n1 NOOP").await;
    assert_eq!(
        esearch(&r),
        vec![
            "* ESEARCH (TAG \"u1\") UID ADDTO (0 4)",
            "* ESEARCH (TAG \"s1\") UID ADDTO (2 4)"
        ],
        "{r:?}"
    );
    assert!(at(&r, "* 4 EXISTS") < at(&r, "* ESEARCH"), "{r:?}");

    // A flag change elsewhere: REMOVEFROM with the FETCH.
    let r = b.cmd("b2 SELECT INBOX").await;
    assert!(r.last().unwrap().starts_with("b2 OK"), "{r:?}");
    let r = b.cmd("b3 STORE 1 +FLAGS.SILENT (\\Seen)").await;
    assert!(r.last().unwrap().starts_with("b3 OK"), "{r:?}");
    let r = a.cmd("n2 NOOP").await;
    // Message 1 was appended before anyone selected INBOX: it is \Recent
    // in `a`, the first session to select it.
    assert_eq!(
        r,
        vec![
            "* 1 FETCH (FLAGS (\\Seen \\Recent))",
            "* ESEARCH (TAG \"u1\") UID REMOVEFROM (0 1)",
            "* ESEARCH (TAG \"s1\") UID REMOVEFROM (1 1)",
            "n2 OK NOOP completed."
        ]
    );

    // An expunge elsewhere: REMOVEFROM before the EXPUNGE (§4.3.4).
    let r = b.cmd("b4 STORE 3 +FLAGS.SILENT (\\Deleted)").await;
    assert!(r.last().unwrap().starts_with("b4 OK"), "{r:?}");
    let r = b.cmd("b5 EXPUNGE").await;
    assert!(r.last().unwrap().starts_with("b5 OK"), "{r:?}");
    let r = a.cmd("n3 NOOP").await;
    assert_eq!(
        r,
        vec![
            "* ESEARCH (TAG \"u1\") UID REMOVEFROM (0 3)",
            "* ESEARCH (TAG \"s1\") UID REMOVEFROM (3 3)",
            "* 3 EXPUNGE",
            "n3 OK NOOP completed."
        ]
    );

    // A context by sequence numbers: MSNs in the updates.
    let r = a.cmd("m1 SEARCH RETURN (UPDATE) UNSEEN").await;
    assert_eq!(
        r,
        vec![
            "* ESEARCH (TAG \"m1\") ALL 2:3",
            "m1 OK Search completed, will notify."
        ]
    );
    let r = b.cmd("b6 UID STORE 2 +FLAGS.SILENT (\\Seen)").await;
    assert!(r.last().unwrap().starts_with("b6 OK"), "{r:?}");
    let r = a.cmd("n4 NOOP").await;
    assert_eq!(
        r,
        vec![
            "* 2 FETCH (FLAGS (\\Seen \\Recent))",
            "* ESEARCH (TAG \"u1\") UID REMOVEFROM (0 2)",
            "* ESEARCH (TAG \"s1\") UID REMOVEFROM (2 2)",
            "* ESEARCH (TAG \"m1\") REMOVEFROM (0 2)",
            "n4 OK NOOP completed."
        ]
    );

    // The session's own STORE notifies too, before its tagged reply.
    let r = a.cmd("st UID STORE 2 -FLAGS.SILENT (\\Seen)").await;
    assert_eq!(
        esearch(&r),
        vec![
            "* ESEARCH (TAG \"u1\") UID ADDTO (0 2)",
            "* ESEARCH (TAG \"s1\") UID ADDTO (2 2)",
            "* ESEARCH (TAG \"m1\") ADDTO (0 2)"
        ],
        "{r:?}"
    );

    // CANCELUPDATE (§4.3.5) stops them all.
    let r = a.cmd("c1 CANCELUPDATE \"u1\" \"s1\" \"m1\"").await;
    assert_eq!(r, vec!["c1 OK No further updates."]);
    let r = b.cmd("b7 UID STORE 2 +FLAGS.SILENT (\\Seen)").await;
    assert!(r.last().unwrap().starts_with("b7 OK"), "{r:?}");
    let r = a.cmd("n5 NOOP").await;
    assert_eq!(
        r,
        vec![
            "* 2 FETCH (FLAGS (\\Seen \\Recent))",
            "n5 OK NOOP completed."
        ]
    );
    let r = a.cmd("c2 CANCELUPDATE \"u1\"").await;
    assert!(r[0].starts_with("c2 BAD"), "{r:?}");
    // Not selected: CANCELUPDATE is a selected-state command.
    let r = a.cmd("cl CLOSE").await;
    assert!(r.last().unwrap().starts_with("cl OK"), "{r:?}");
    let r = a.cmd("c3 CANCELUPDATE \"x\"").await;
    assert!(r[0].starts_with("c3 BAD"), "{r:?}");
}

/// The header facts cache (shared by sessions) follows expunges, new
/// messages and a budget smaller than the mailbox.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn header_cache_follows_changes_and_budget() {
    for budget in [500_000, 3] {
        let (s, mut c) = loaded_with(budget).await;
        let mut other = Raw::login(s.addr, USER).await;
        other.cmd("o1 SELECT INBOX").await;
        // Fill the cache from another session.
        assert_eq!(
            one(&mut other, "o2 SORT (DATE) UTF-8 ALL").await,
            "* SORT 2 5 1 4 3"
        );
        assert_eq!(
            one(&mut c, "a1 UID SORT (DATE) UTF-8 ALL").await,
            "* SORT 2 5 1 4 3"
        );
        // Expunge UID 5, append a new oldest message (UID 6).
        other.cmd("o3 UID STORE 5 +FLAGS.SILENT (\\Deleted)").await;
        other.cmd("o4 EXPUNGE").await;
        append(
            &mut other,
            "o5",
            "",
            "01-Jan-2020 00:00:00 +0000",
            "Subject: Re: foo\r\nDate: Wed, 01 Jan 2020 00:00:00 +0000\r\nMessage-ID: <m6@t>\r\nIn-Reply-To: <m3@t>\r\n\r\nsix\r\n",
        )
        .await;
        // The session sorts what it was told about; NOOP brings it up.
        let r = c.cmd("a2 NOOP").await;
        assert!(r.contains(&"* 5 EXISTS".to_string()), "{r:?}");
        assert_eq!(
            one(&mut c, "a2 UID SORT (DATE) UTF-8 ALL").await,
            "* SORT 6 2 1 4 3",
            "budget {budget}"
        );
        assert_eq!(
            one(&mut c, "a3 UID THREAD REFERENCES UTF-8 ALL").await,
            "* THREAD (2 3 6)((1)(4))",
            "budget {budget}"
        );
        assert_eq!(
            one(&mut c, "a4 UID SORT (SUBJECT) UTF-8 ALL").await,
            "* SORT 2 3 6 1 4",
            "budget {budget}"
        );
    }
}

/// More messages than one read batch (512): the facts of several batches
/// are parsed concurrently and must all land, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn header_cache_fills_over_several_batches() {
    const N: u32 = 1300;
    for budget in [500_000, 700] {
        let s = common::start_with(|c| c.imap.sort_cache_messages = budget).await;
        let info = yarilo_store::UserInfo {
            user: USER.into(),
            home: String::new(),
        };
        let inbox = s
            .store
            .user(&info)
            .await
            .unwrap()
            .open("INBOX")
            .await
            .unwrap();
        // Sent dates run backwards against arrival; every 7th has none.
        let msgs = (1..=N)
            .map(|i| {
                let date = if i % 7 == 0 {
                    String::new()
                } else {
                    let minutes = N - i;
                    format!(
                        "Date: Sat, 01 Jan 2022 {:02}:{:02}:00 +0000\r\n",
                        minutes / 60,
                        minutes % 60
                    )
                };
                (
                    format!("Subject: m{i}\r\n{date}Message-ID: <{i}@t>\r\n\r\nx\r\n").into_bytes(),
                    Default::default(),
                )
            })
            .collect();
        inbox.deliver(msgs).await.unwrap();
        let mut c = Raw::login(s.addr, USER).await;
        c.cmd("s SELECT INBOX").await;
        // No Date: INTERNALDATE (delivery time, after every Date: here).
        let mut want: Vec<u32> = (1..=N).rev().filter(|i| i % 7 != 0).collect();
        want.extend((1..=N).filter(|i| i % 7 == 0));
        let want: Vec<String> = want.iter().map(u32::to_string).collect();
        for tag in ["a1", "a2"] {
            assert_eq!(
                one(&mut c, &format!("{tag} UID SORT (DATE) UTF-8 ALL")).await,
                format!("* SORT {}", want.join(" ")),
                "budget {budget}"
            );
        }
    }
}
