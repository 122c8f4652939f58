//! IMAP with real clients and exact responses.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{Raw, USER};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn imaplib_full_workflow() {
    let s = common::start().await;
    let out = common::python(
        "imaplib_workflow.py",
        &[
            s.addr.port().to_string(),
            USER.to_string(),
            common::PASS.to_string(),
            s.maildir(USER).display().to_string(),
        ],
    )
    .await;
    assert!(out.contains("workflow ok"), "{out}");
    println!("{out}");
}

/// A third-party suite: IMAPClient's live tests (52, with and without
/// UIDs); only skips for capabilities not claimed are allowed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn imapclient_live_test_suite_passes() {
    let s = common::start().await;
    let out = common::python(
        "imapclient_livetest.py",
        &[
            s.addr.port().to_string(),
            USER.to_string(),
            common::PASS.to_string(),
        ],
    )
    .await;
    assert!(out.contains("0 failures"), "{out}");
    println!("{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn select_and_updates_are_exact() {
    let s = common::start().await;
    let mut a = Raw::login(s.addr, USER).await;
    let mut b = Raw::login(s.addr, USER).await;
    let r = a.cmd("a1 SELECT INBOX").await;
    assert_eq!(
        r[0],
        "* FLAGS (\\Answered \\Flagged \\Deleted \\Seen \\Draft)"
    );
    assert_eq!(
        r[1],
        "* OK [PERMANENTFLAGS (\\Answered \\Flagged \\Deleted \\Seen \\Draft \\*)] Flags permitted."
    );
    assert_eq!(r[2], "* 0 EXISTS");
    assert_eq!(r[3], "* 0 RECENT");
    assert!(r[4].starts_with("* OK [UIDVALIDITY "), "{r:?}");
    assert_eq!(r[5], "* OK [UIDNEXT 1] Predicted next UID");
    assert!(r.last().unwrap().starts_with("a1 OK [READ-WRITE]"), "{r:?}");

    // Another session appends three messages.
    for i in 1..=3 {
        b.send(&format!(
            "b{i} APPEND INBOX {{20+}}\r\nSubject: m{i}\r\n\r\nhello"
        ))
        .await;
        let l = b.line().await;
        assert!(l.starts_with(&format!("b{i} OK [APPENDUID ")), "{l}");
    }
    let r = a.cmd("a2 NOOP").await;
    assert_eq!(r, vec!["* 3 EXISTS", "* 3 RECENT", "a2 OK NOOP completed."]);

    // \Recent belongs to the first session that saw the messages.
    let r = b.cmd("b4 SELECT INBOX").await;
    assert!(r.contains(&"* 0 RECENT".to_string()), "{r:?}");

    // b expunges message 2; a gets no EXPUNGE during FETCH by MSN (it
    // sees the state it was told about), but gets it at the next NOOP,
    // and the numbering follows.
    b.cmd("b5 STORE 2 +FLAGS.SILENT (\\Deleted)").await;
    let r = b.cmd("b6 EXPUNGE").await;
    assert_eq!(r, vec!["* 2 EXPUNGE", "b6 OK Expunge completed."]);
    let r = a.cmd("a3 FETCH 1:3 (UID)").await;
    assert_eq!(
        r,
        vec![
            "* 1 FETCH (UID 1)",
            "* 2 FETCH (UID 2)",
            "* 3 FETCH (UID 3)",
            "a3 OK Fetch completed."
        ],
        "{r:?}"
    );
    let r = a.cmd("a4 NOOP").await;
    assert_eq!(r, vec!["* 2 EXPUNGE", "a4 OK NOOP completed."]);
    let r = a.cmd("a5 FETCH 2 (UID FLAGS)").await;
    assert_eq!(r[0], "* 2 FETCH (UID 3 FLAGS (\\Recent))");

    // Flag changes by b reach a as FETCH FLAGS; CONDSTORE adds MODSEQ.
    a.cmd("a6 ENABLE CONDSTORE").await;
    b.cmd("b7 STORE 1 +FLAGS.SILENT (\\Seen)").await;
    let r = a.cmd("a7 NOOP").await;
    assert_eq!(r.len(), 2, "{r:?}");
    assert!(
        r[0].starts_with("* 1 FETCH (FLAGS (\\Seen \\Recent) MODSEQ ("),
        "{r:?}"
    );

    // Errors carry the right codes.
    let r = a.cmd("a8 SELECT Nope").await;
    assert_eq!(
        r,
        vec![
            "* OK [CLOSED] Previous mailbox closed.",
            "a8 NO [NONEXISTENT] Mailbox doesn't exist."
        ]
    );
    let r = a.cmd("a9 FETCH 1 FLAGS").await;
    assert_eq!(r, vec!["a9 BAD No mailbox selected."]);
    let r = a.cmd("a10 APPEND Nope {5}").await;
    assert_eq!(r, vec!["a10 NO [TRYCREATE] Mailbox doesn't exist."]);
    let r = a.cmd("a11 APPEND INBOX {99999999999}").await;
    assert_eq!(r, vec!["a11 NO [TOOBIG] Message too large."]);
    let r = a.cmd("a12 LOGOUT").await;
    assert_eq!(r, vec!["* BYE Logging out", "a12 OK Logout completed."]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn qresync_reports_vanished() {
    let s = common::start().await;
    let mut a = Raw::login(s.addr, USER).await;
    a.cmd("a1 ENABLE QRESYNC").await;
    for i in 1..=4 {
        a.send(&format!(
            "x{i} APPEND INBOX {{20+}}\r\nSubject: q{i}\r\n\r\nhello"
        ))
        .await;
        a.line().await;
    }
    let r = a.cmd("a2 SELECT INBOX").await;
    let uidvalidity: u32 = r
        .iter()
        .find_map(|l| l.strip_prefix("* OK [UIDVALIDITY "))
        .and_then(|l| l.split(']').next())
        .unwrap()
        .parse()
        .unwrap();
    let hms: u64 = r
        .iter()
        .find_map(|l| l.strip_prefix("* OK [HIGHESTMODSEQ "))
        .and_then(|l| l.split(']').next())
        .unwrap()
        .parse()
        .unwrap();
    a.cmd("a3 UID STORE 2,3 +FLAGS.SILENT (\\Deleted)").await;
    let r = a.cmd("a4 UID EXPUNGE 2").await;
    assert_eq!(r, vec!["* VANISHED 2", "a4 OK Expunge completed."]);
    a.cmd("a5 UNSELECT").await;
    let r = a
        .cmd(&format!(
            "a6 SELECT INBOX (QRESYNC ({uidvalidity} {hms} 1:4))"
        ))
        .await;
    assert!(r.contains(&"* VANISHED (EARLIER) 2".to_string()), "{r:?}");
    assert!(
        r.iter()
            .any(|l| l.starts_with("* 2 FETCH (UID 3 FLAGS (\\Deleted) MODSEQ (")),
        "{r:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limits_and_login_failures() {
    let s = common::start().await;
    let mut c = Raw::connect(s.addr).await;
    let r = c.cmd("a1 LOGIN alice wrong").await;
    assert_eq!(
        r,
        vec!["a1 NO [AUTHENTICATIONFAILED] Authentication failed."]
    );
    let r = c.cmd("a2 SELECT INBOX").await;
    assert_eq!(r, vec!["a2 BAD Please log in first."]);
    let long = "x".repeat(70_000);
    let r = c.cmd(&format!("a3 NOOP {long}")).await;
    assert!(r.last().unwrap().contains("BAD"), "{r:?}");
    let r = c.cmd("a4 CAPABILITY").await;
    assert!(
        r[0].starts_with("* CAPABILITY IMAP4rev1 IMAP4rev2"),
        "{r:?}"
    );
    assert!(r[0].contains("STARTTLS"), "{r:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extensions_exact() {
    let s = common::start().await;
    let mut a = Raw::login(s.addr, USER).await;
    let r = a.cmd("e1 NAMESPACE").await;
    assert_eq!(
        r,
        vec![
            "* NAMESPACE ((\"\" \"/\")) NIL NIL",
            "e1 OK Namespace completed."
        ]
    );
    let r = a.cmd("e2 ENABLE IMAP4rev2 CONDSTORE X-UNKNOWN").await;
    assert_eq!(r, vec!["* ENABLED IMAP4rev2 CONDSTORE", "e2 OK Enabled."]);

    // MULTIAPPEND with LITERAL+: all messages or none.
    let m1 = "Subject: one\r\nMIME-Version: 1.0\r\nContent-Type: text/plain\r\nContent-Transfer-Encoding: base64\r\n\r\naGVsbG8gd29ybGQ=\r\n";
    let m2 = "Subject: two\r\n\r\nsecond body\r\n";
    a.send(&format!(
        "e3 APPEND INBOX (\\Seen) {{{}+}}\r\n{m1} (\\Flagged) {{{}+}}\r\n{m2}",
        m1.len(),
        m2.len()
    ))
    .await;
    let l = a.line().await;
    assert!(
        l.starts_with("e3 OK [APPENDUID ") && l.contains(" 1:2] "),
        "{l}"
    );
    let r = a.cmd("e4 SELECT INBOX").await;
    assert!(r.contains(&"* 2 EXISTS".to_string()), "{r:?}");
    assert!(r.contains(&"* LIST () \"/\" INBOX".to_string()), "{r:?}");
    assert!(
        !r.iter().any(|l| l.contains("RECENT")),
        "rev2 has no RECENT: {r:?}"
    );

    // ESEARCH and SEARCHRES.
    let r = a.cmd("e5 UID SEARCH RETURN (MIN MAX COUNT ALL) ALL").await;
    assert_eq!(
        r,
        vec![
            "* ESEARCH (TAG \"e5\") UID MIN 1 MAX 2 COUNT 2 ALL 1:2",
            "e5 OK Search completed."
        ]
    );
    let r = a.cmd("e6 SEARCH RETURN (SAVE) FLAGGED").await;
    assert_eq!(r, vec!["e6 OK Search completed."]);
    let r = a.cmd("e7 FETCH $ (UID)").await;
    assert_eq!(r, vec!["* 2 FETCH (UID 2)", "e7 OK Fetch completed."]);
    let r = a.cmd("e8 SEARCH RETURN () SUBJECT two").await;
    assert_eq!(
        r,
        vec!["* ESEARCH (TAG \"e8\") ALL 2", "e8 OK Search completed."]
    );

    // BINARY decodes the transfer encoding.
    let r = a.cmd("e9 FETCH 1 (BINARY.PEEK[1] BINARY.SIZE[1])").await;
    assert_eq!(
        r[0],
        "* 1 FETCH (BINARY[1] \"hello world\" BINARY.SIZE[1] 11)"
    );

    // STATUS=SIZE and LIST-STATUS.
    let r = a
        .cmd("e10 STATUS INBOX (MESSAGES SIZE UNSEEN HIGHESTMODSEQ)")
        .await;
    let size = m1.len() + m2.len();
    assert!(
        r[0].starts_with(&format!(
            "* STATUS INBOX (MESSAGES 2 SIZE {size} UNSEEN 1 HIGHESTMODSEQ "
        )),
        "{r:?}"
    );
    a.cmd("e11 CREATE Lists/Deep").await;
    let r = a
        .cmd("e12 LIST (SUBSCRIBED RECURSIVEMATCH) \"\" \"*\" RETURN (CHILDREN STATUS (MESSAGES))")
        .await;
    assert!(
        r.iter()
            .any(|l| l == "* LIST (\\Subscribed \\HasNoChildren \\Sent) \"/\" Sent"),
        "{r:?}"
    );
    assert!(r.iter().any(|l| l == "* STATUS Sent (MESSAGES 0)"), "{r:?}");
    let r = a.cmd("e13 LIST \"\" \"Lists/%\"").await;
    assert_eq!(
        r,
        vec![
            "* LIST (\\HasNoChildren) \"/\" Lists/Deep",
            "e13 OK List completed."
        ]
    );
    let r = a.cmd("e14 LIST \"\" \"%\"").await;
    assert!(
        r.iter()
            .any(|l| l == "* LIST (\\NonExistent \\HasChildren) \"/\" Lists"),
        "{r:?}"
    );
    let r = a.cmd("e15 CREATE Bad.Name").await;
    assert_eq!(
        r,
        vec!["e15 NO [CANNOT] Character not allowed in mailbox name: '.'"]
    );

    // UNCHANGEDSINCE: a stale modseq is refused with MODIFIED.
    let r = a
        .cmd("e16 UID STORE 1 (UNCHANGEDSINCE 1) +FLAGS (\\Answered)")
        .await;
    assert_eq!(r, vec!["e16 OK [MODIFIED 1] Conditional STORE failed."]);
    let r = a.cmd("e17 ID (\"name\" \"test\")").await;
    assert!(r[0].starts_with("* ID (\"name\" \"yarilo\""), "{r:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quota_from_userdb_rules() {
    let s = common::start().await;
    // A user with limits, as the passwd-file userdb field says.
    let users = s.data().join("users");
    let mut text = std::fs::read_to_string(&users).unwrap();
    text.push_str(&format!(
        "quota:{}::::::userdb_quota_rule=*:storage=1k userdb_quota_rule2=*:messages=2\n",
        std::fs::read_to_string(&users)
            .unwrap()
            .lines()
            .next()
            .unwrap()
            .split(':')
            .nth(1)
            .unwrap()
    ));
    std::fs::write(&users, text).unwrap();
    let mut a = Raw::login(s.addr, "quota").await;
    let r = a.cmd("q1 GETQUOTAROOT INBOX").await;
    assert_eq!(
        r,
        vec![
            "* QUOTAROOT INBOX \"\"",
            "* QUOTA \"\" (STORAGE 0 1 MESSAGE 0 2)",
            "q1 OK Getquotaroot completed."
        ]
    );
    a.send("q2 APPEND INBOX {20+}\r\nSubject: q1\r\n\r\nhello")
        .await;
    assert!(a.line().await.starts_with("q2 OK [APPENDUID"));
    let big = "x".repeat(2000);
    let r = a
        .cmd(&format!("q3 APPEND INBOX {{{}+}}\r\n{big}", big.len()))
        .await;
    assert_eq!(r, vec!["q3 NO [OVERQUOTA] Quota exceeded."]);
    let r = a.cmd("q4 GETQUOTA \"\"").await;
    assert_eq!(r[0], "* QUOTA \"\" (STORAGE 1 1 MESSAGE 1 2)");
    let r = a.cmd("q5 SETQUOTA \"\" (STORAGE 10)").await;
    assert_eq!(
        r,
        vec!["q5 NO [NOPERM] Quota limits are set in the userdb."]
    );
    // Unlimited users have no quota root.
    let mut b = Raw::login(s.addr, USER).await;
    let r = b.cmd("b1 GETQUOTAROOT INBOX").await;
    assert_eq!(
        r,
        vec!["* QUOTAROOT INBOX", "b1 OK Getquotaroot completed."]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compress_deflate_with_python_zlib() {
    let s = common::start().await;
    let out = common::python(
        "compress.py",
        &[
            s.addr.port().to_string(),
            USER.to_string(),
            common::PASS.to_string(),
            "200".to_string(),
        ],
    )
    .await;
    assert!(out.contains("compress:"), "{out}");
    println!("{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metadata_server_and_mailbox() {
    let s = common::start().await;
    let mut a = Raw::login(s.addr, USER).await;
    let r = a
        .cmd("m1 SETMETADATA \"\" (/private/comment \"My own comment\")")
        .await;
    assert_eq!(r, vec!["m1 OK Setmetadata completed."]);
    let r = a.cmd("m2 GETMETADATA \"\" /private/comment").await;
    assert_eq!(
        r,
        vec![
            "* METADATA \"\" (/private/comment \"My own comment\")",
            "m2 OK Getmetadata completed."
        ]
    );
    let r = a
        .cmd("m3 SETMETADATA INBOX (/shared/vendor/a \"1\" /shared/vendor/a/b \"22\")")
        .await;
    assert_eq!(r, vec!["m3 OK Setmetadata completed."]);
    let r = a
        .cmd("m4 GETMETADATA (DEPTH infinity MAXSIZE 1) INBOX (/shared/vendor)")
        .await;
    assert_eq!(
        r,
        vec![
            "* METADATA INBOX (/shared/vendor/a \"1\")",
            "m4 OK [METADATA LONGENTRIES 2] Getmetadata completed."
        ]
    );
    let r = a.cmd("m5 GETMETADATA INBOX /private/none").await;
    assert_eq!(r[0], "* METADATA INBOX (/private/none NIL)");
    let r = a.cmd("m6 SETMETADATA INBOX (/shared/vendor/a NIL)").await;
    assert_eq!(r, vec!["m6 OK Setmetadata completed."]);
    let r = a
        .cmd("m7 GETMETADATA (DEPTH 1) INBOX (/shared/vendor/a)")
        .await;
    assert_eq!(
        r[0], "* METADATA INBOX (/shared/vendor/a/b \"22\")",
        "{r:?}"
    );
    let r = a.cmd("m8 SETMETADATA Nope (/private/x \"y\")").await;
    assert_eq!(r, vec!["m8 NO [NONEXISTENT] Mailbox doesn't exist."]);
    let r = a.cmd("m9 SETMETADATA \"\" (/bogus/x \"y\")").await;
    assert!(r[0].starts_with("m9 BAD"), "{r:?}");
    // Entries follow a RENAME.
    a.cmd("m10 CREATE Old").await;
    a.cmd("m11 SETMETADATA Old (/private/x \"kept\")").await;
    a.cmd("m12 RENAME Old New").await;
    let r = a.cmd("m13 GETMETADATA New /private/x").await;
    assert_eq!(r[0], "* METADATA New (/private/x \"kept\")", "{r:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_workarounds() {
    let s = common::start_with(|c| {
        c.imap.client_workarounds = vec![
            "delay-newmail".into(),
            "tb-extra-mailbox-sep".into(),
            "tb-lsub-flags".into(),
        ]
    })
    .await;
    let mut a = Raw::login(s.addr, USER).await;
    let mut b = Raw::login(s.addr, USER).await;
    a.cmd("a1 SELECT INBOX").await;
    b.send("b1 APPEND INBOX {20+}\r\nSubject: w1\r\n\r\nhello")
        .await;
    assert!(b.line().await.starts_with("b1 OK"));
    // delay-newmail: not after STATUS/LIST, only at NOOP.
    let r = a.cmd("a2 LIST \"\" INBOX").await;
    assert!(!r.iter().any(|l| l.contains("EXISTS")), "{r:?}");
    let r = a.cmd("a3 NOOP").await;
    assert!(r.contains(&"* 1 EXISTS".to_string()), "{r:?}");
    // tb-extra-mailbox-sep: "Sent/" is "Sent".
    let r = a.cmd("a4 STATUS Sent/ (MESSAGES)").await;
    assert_eq!(r[0], "* STATUS Sent/ (MESSAGES 0)");
    // tb-lsub-flags: child flags in LSUB.
    let r = a.cmd("a5 LSUB \"\" Sent").await;
    assert_eq!(r[0], "* LSUB (\\HasNoChildren) \"/\" Sent");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn catenate_with_a_url_into_another_mailbox() {
    let s = common::start().await;
    let mut a = Raw::login(s.addr, USER).await;
    let m = "Subject: source\r\nMIME-Version: 1.0\r\nContent-Type: multipart/mixed; boundary=b\r\n\r\n--b\r\nContent-Type: text/plain\r\n\r\nfirst part\r\n--b\r\nContent-Type: text/plain\r\n\r\nsecond part\r\n--b--\r\n";
    a.send(&format!("c1 APPEND Drafts {{{}+}}\r\n{m}", m.len()))
        .await;
    let l = a.line().await;
    assert!(l.starts_with("c1 OK [APPENDUID "), "{l}");
    let uidvalidity = l
        .trim_start_matches("c1 OK [APPENDUID ")
        .split(' ')
        .next()
        .unwrap()
        .to_string();
    let head = "Subject: forwarded\r\n\r\n";
    let r = a
        .cmd(&format!(
            "c2 APPEND INBOX CATENATE (TEXT {{{}+}}\r\n{head} URL \"/Drafts;UIDVALIDITY={uidvalidity}/;UID=1/;SECTION=2\" TEXT {{2+}}\r\n\r\n)",
            head.len()
        ))
        .await;
    assert!(r.last().unwrap().starts_with("c2 OK [APPENDUID "), "{r:?}");
    a.cmd("c3 SELECT INBOX").await;
    let r = a.cmd("c4 FETCH 1 BODY.PEEK[]").await;
    assert_eq!(r[1], "Subject: forwarded", "{r:?}");
    assert_eq!(r[3], "second part");
    // A URL that names nothing: the whole APPEND fails with BADURL.
    let r = a
        .cmd("c5 APPEND INBOX CATENATE (URL \"/Drafts/;UID=99\" TEXT {3+}\r\nx\r\n)")
        .await;
    assert_eq!(r.last().unwrap(), "c5 NO [BADURL /Drafts/;UID=99] Bad URL.");
    let r = a.cmd("c6 STATUS INBOX (MESSAGES)").await;
    assert_eq!(r[0], "* STATUS INBOX (MESSAGES 1)");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn notify_reports_deliveries_to_other_mailboxes() {
    let s = common::start().await;
    let mut a = Raw::login(s.addr, USER).await;
    a.cmd("n0 CREATE Work").await;
    a.cmd("n1 SELECT INBOX").await;
    let r = a
        .cmd("n2 NOTIFY SET (selected (MessageNew MessageExpunge)) (personal (MessageNew MessageExpunge AnnotationChange))")
        .await;
    assert_eq!(
        r,
        vec!["n2 NO [BADEVENT (MessageNew MessageExpunge FlagChange MailboxName SubscriptionChange MailboxMetadataChange ServerMetadataChange)] Unsupported event."]
    );
    let r = a
        .cmd("n3 NOTIFY SET (selected (MessageNew MessageExpunge)) (personal (MessageNew MessageExpunge FlagChange MailboxName SubscriptionChange))")
        .await;
    assert_eq!(r, vec!["n3 OK NOTIFY completed."]);

    // A delivery made by another component of the deployment (here the
    // store used directly, as an LMTP process would) reaches the session
    // through the event bus.
    let info = yarilo_store::UserInfo {
        user: USER.into(),
        home: String::new(),
    };
    let work = s
        .store
        .user(&info)
        .await
        .unwrap()
        .open("Work")
        .await
        .unwrap();
    work.deliver(vec![(
        b"Subject: n\r\n\r\nhi\r\n".to_vec(),
        Default::default(),
    )])
    .await
    .unwrap();
    let r = a.cmd("n4 NOOP").await;
    assert!(
        r.iter()
            .any(|l| l.starts_with("* STATUS Work (MESSAGES 1 UIDNEXT 2 UIDVALIDITY ")),
        "{r:?}"
    );

    // While idling, within the second.
    a.send("n5 IDLE").await;
    assert!(a.line().await.starts_with('+'));
    let started = std::time::Instant::now();
    work.deliver(vec![(
        b"Subject: n2\r\n\r\nhi\r\n".to_vec(),
        Default::default(),
    )])
    .await
    .unwrap();
    let l = a.line().await;
    assert!(l.starts_with("* STATUS Work (MESSAGES 2 UIDNEXT 3"), "{l}");
    println!("NOTIFY during IDLE after {:?}", started.elapsed());
    a.send("DONE").await;
    assert_eq!(a.line().await, "n5 OK Idle completed.");
    // Mailbox names and subscriptions changed by another session.
    let mut b = Raw::login(s.addr, USER).await;
    b.cmd("b1 CREATE Projects").await;
    b.cmd("b2 RENAME Projects Archive2").await;
    b.cmd("b3 SUBSCRIBE Archive2").await;
    let r = a.cmd("n7 NOOP").await;
    assert_eq!(
        &r[..3],
        &[
            "* LIST () \"/\" Projects".to_string(),
            "* LIST () \"/\" Archive2 (\"OLDNAME\" (Projects))".to_string(),
            "* LIST (\\Subscribed) \"/\" Archive2".to_string(),
        ],
        "{r:?}"
    );
    let r = a.cmd("n6 NOTIFY NONE").await;
    assert_eq!(r, vec!["n6 OK NOTIFY completed."]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn urlauth_generate_fetch_and_reset() {
    let s = common::start().await;
    let mut a = Raw::login(s.addr, USER).await;
    a.send("u1 APPEND INBOX {25+}\r\nSubject: u\r\n\r\nsecret body")
        .await;
    assert!(a.line().await.starts_with("u1 OK"));
    let url = format!("imap://{USER}@test.invalid/INBOX/;UID=1/;SECTION=TEXT;URLAUTH=authuser");
    let r = a.cmd(&format!("u2 GENURLAUTH \"{url}\" INTERNAL")).await;
    let line = &r[0];
    assert!(
        line.starts_with(&format!("* GENURLAUTH \"{url}:internal:")),
        "{r:?}"
    );
    let signed = line
        .trim_start_matches("* GENURLAUTH \"")
        .trim_end_matches('"')
        .to_string();
    let r = a.cmd(&format!("u3 URLFETCH \"{signed}\"")).await;
    assert_eq!(
        r[0],
        format!("* URLFETCH {signed} \"secret body\""),
        "{r:?}"
    );
    // A forged token or a URL for someone else fetches nothing.
    let forged = format!("{}0000", &signed[..signed.len() - 4]);
    let r = a.cmd(&format!("u4 URLFETCH \"{forged}\"")).await;
    assert_eq!(r[0], format!("* URLFETCH {forged} NIL"));
    let r = a
        .cmd("u5 GENURLAUTH \"imap://bob@test.invalid/INBOX/;UID=1;URLAUTH=anonymous\" INTERNAL")
        .await;
    assert!(r[0].starts_with("u5 NO [BADURL "), "{r:?}");
    // RESETKEY revokes.
    assert_eq!(
        a.cmd("u6 RESETKEY").await,
        vec!["u6 OK Resetkey completed."]
    );
    let r = a.cmd(&format!("u7 URLFETCH \"{signed}\"")).await;
    assert_eq!(r[0], format!("* URLFETCH {signed} NIL"));
}

/// Signs `url` (ending in `;URLAUTH=...`) and returns the full URL.
async fn genurlauth(a: &mut Raw, tag: &str, url: &str) -> String {
    let r = a.cmd(&format!("{tag} GENURLAUTH \"{url}\" INTERNAL")).await;
    assert!(r.last().unwrap().starts_with(&format!("{tag} OK")), "{r:?}");
    r[0].trim_start_matches("* GENURLAUTH \"")
        .trim_end_matches('"')
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn urlauth_binary_extended_urlfetch() {
    let s = common::start().await;
    let mut a = Raw::login(s.addr, USER).await;
    let caps = a.cmd("c CAPABILITY").await;
    assert!(caps[0].contains(" URLAUTH URLAUTH=BINARY"), "{caps:?}");
    let msg = "Subject: bin\r\nMIME-Version: 1.0\r\nContent-Type: multipart/mixed; boundary=B\r\n\r\n--B\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Transfer-Encoding: base64\r\n\r\naGVsbG8gd29ybGQ=\r\n--B\r\nContent-Type: application/octet-stream\r\nContent-Transfer-Encoding: base64\r\n\r\nAGJpbgA=\r\n--B\r\nContent-Type: application/x-odd\r\nContent-Transfer-Encoding: x-unknown\r\n\r\n??\r\n--B--\r\n";
    let r = a
        .cmd(&format!("a APPEND INBOX {{{}+}}\r\n{msg}", msg.len()))
        .await;
    assert!(r.last().unwrap().starts_with("a OK"), "{r:?}");
    let base = format!("imap://{USER}@test.invalid/INBOX/;UID=1");
    let text = genurlauth(&mut a, "g1", &format!("{base}/;SECTION=1;URLAUTH=authuser")).await;
    let bin = genurlauth(&mut a, "g2", &format!("{base}/;SECTION=2;URLAUTH=authuser")).await;
    let odd = genurlauth(&mut a, "g3", &format!("{base}/;SECTION=3;URLAUTH=authuser")).await;
    let gone = genurlauth(&mut a, "g4", &format!("{base}/;SECTION=7;URLAUTH=authuser")).await;

    // Decoded text, with the structure describing the decoded octets.
    let r = a
        .cmd(&format!(
            "f1 URLFETCH (\"{text}\" BODYPARTSTRUCTURE BINARY)"
        ))
        .await;
    assert_eq!(
        r,
        vec![
            format!("* URLFETCH {text} (BODYPARTSTRUCTURE (\"text\" \"plain\" (\"charset\" \"utf-8\") NIL NIL \"7bit\" 11 0 NIL NIL NIL NIL)) (BINARY \"hello world\")"),
            "f1 OK Urlfetch completed.".to_string(),
        ]
    );
    // NUL octets force literal8; the simple form still works beside it.
    let r = a
        .cmd(&format!("f2 URLFETCH (\"{bin}\" BINARY) \"{text}\""))
        .await;
    assert_eq!(
        r.join("\r\n"),
        format!(
            "* URLFETCH {bin} (BINARY ~{{5}}\r\n\0bin\0) {text} \"aGVsbG8gd29ybGQ=\"\r\nf2 OK Urlfetch completed."
        )
    );
    // BODY: as stored, with the stored structure.
    let r = a
        .cmd(&format!("f3 URLFETCH (\"{bin}\" BODY BODYPARTSTRUCTURE)"))
        .await;
    assert_eq!(
        r[0],
        format!("* URLFETCH {bin} (BODYPARTSTRUCTURE (\"application\" \"octet-stream\" NIL NIL NIL \"base64\" 8 NIL NIL NIL NIL)) (BODY \"AGJpbgA=\")")
    );
    // RFC 5524 §3.2: a part that cannot be decoded is NIL data, the URL
    // itself is fine; a URL naming nothing is NIL as in RFC 4467.
    let r = a
        .cmd(&format!(
            "f4 URLFETCH (\"{odd}\" BINARY) (\"{gone}\" BINARY)"
        ))
        .await;
    assert_eq!(
        r,
        vec![
            format!("* URLFETCH {odd} (BINARY NIL) {gone} NIL"),
            "f4 OK Urlfetch completed.".to_string(),
        ]
    );
    // A forged token is NIL in the extended form too.
    let forged = format!("{}0000", &bin[..bin.len() - 4]);
    let r = a
        .cmd(&format!(
            "f5 URLFETCH (\"{forged}\" BINARY BODYPARTSTRUCTURE)"
        ))
        .await;
    assert_eq!(r[0], format!("* URLFETCH {forged} NIL"));
    // BODY and BINARY together is a syntax error, and nothing is sent.
    let r = a.cmd(&format!("f6 URLFETCH (\"{bin}\" BODY BINARY)")).await;
    assert_eq!(
        r,
        vec!["f6 BAD URL cannot have both BODY and BINARY fetch parameters."]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn notify_metadata_changes_from_other_sessions_and_components() {
    let s = common::start().await;
    let mut a = Raw::login(s.addr, USER).await;
    let mut b = Raw::login(s.addr, USER).await;
    a.cmd("m0 CREATE Work").await;
    a.cmd("m1 CREATE Other").await;
    a.cmd("m2 SELECT INBOX").await;
    let r = a
        .cmd("m3 NOTIFY SET (selected (MessageNew MessageExpunge MailboxMetadataChange)) (mailboxes Work (MailboxMetadataChange ServerMetadataChange))")
        .await;
    assert_eq!(r, vec!["m3 OK NOTIFY completed."]);

    // Another session: a watched mailbox, the server, an unwatched mailbox
    // and the selected one. Only entry names travel (RFC 5464 §4.4.2).
    for (i, cmd) in [
        "SETMETADATA Work (/private/comment \"hello\" /shared/comment \"x\")",
        "SETMETADATA \"\" (/shared/admin \"mailto:a@b\")",
        "SETMETADATA Other (/private/comment \"quiet\")",
        "SETMETADATA INBOX (/private/Comment \"in\")",
    ]
    .iter()
    .enumerate()
    {
        let r = b.cmd(&format!("b{i} {cmd}")).await;
        assert_eq!(r, vec![format!("b{i} OK Setmetadata completed.")]);
    }
    let r = a.cmd("m4 NOOP").await;
    assert_eq!(
        r,
        vec![
            "* METADATA Work /private/comment /shared/comment",
            "* METADATA \"\" /shared/admin",
            "* METADATA INBOX /private/comment",
            "m4 OK NOOP completed.",
        ]
    );

    // A change made through the store by another component (as a Sieve or
    // admin process would) arrives on the event bus, also while idling.
    let info = yarilo_store::UserInfo {
        user: USER.into(),
        home: String::new(),
    };
    let store = s.store.user(&info).await.unwrap();
    a.send("m5 IDLE").await;
    assert!(a.line().await.starts_with('+'));
    let started = std::time::Instant::now();
    store
        .set_metadata("Work", vec![("/private/comment".into(), None)])
        .await
        .unwrap()
        .unwrap();
    assert_eq!(a.line().await, "* METADATA Work /private/comment");
    println!(
        "METADATA notification during IDLE after {:?}",
        started.elapsed()
    );
    a.send("DONE").await;
    assert_eq!(a.line().await, "m5 OK Idle completed.");

    // A refused SETMETADATA changes nothing and announces nothing; another
    // user's change is not this user's news.
    let r = b.cmd("b9 SETMETADATA Work (/other/x \"1\")").await;
    assert!(r[0].starts_with("b9 BAD"), "{r:?}");
    let mut bob = Raw::login(s.addr, "bob").await;
    bob.cmd("o1 CREATE Work").await;
    let r = bob
        .cmd("o2 SETMETADATA Work (/private/comment \"bob's\")")
        .await;
    assert_eq!(r, vec!["o2 OK Setmetadata completed."]);
    assert_eq!(a.cmd("m6 NOOP").await, vec!["m6 OK NOOP completed."]);

    // Without the events, nothing is sent.
    assert_eq!(
        a.cmd("m7 NOTIFY SET (mailboxes Work (MessageNew MessageExpunge))")
            .await,
        vec!["m7 OK NOTIFY completed."]
    );
    b.cmd("b10 SETMETADATA Work (/private/comment \"again\")")
        .await;
    assert_eq!(a.cmd("m8 NOOP").await, vec!["m8 OK NOOP completed."]);
}
