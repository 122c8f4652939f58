//! Example commands from the RFCs parse to the expected values.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic

use yarilo_imap_proto::command::*;
use yarilo_imap_proto::{
    parse_command, Command, Date, DateTime, Flag, Mailbox, ParseOptions, SeqItem, SeqNum,
    SequenceSet,
};

fn parse(line: &str) -> Command {
    let buf = format!("{line}\r\n");
    match parse_command(buf.as_bytes(), ParseOptions::default()) {
        Ok((_, c)) => c,
        Err((tag, e)) => panic!("{line:?} failed: {e} (tag {tag:?})"),
    }
}

fn parse_raw(buf: &[u8]) -> Command {
    match parse_command(buf, ParseOptions::default()) {
        Ok((_, c)) => c,
        Err((tag, e)) => panic!(
            "{:?} failed: {e} (tag {tag:?})",
            String::from_utf8_lossy(buf)
        ),
    }
}

fn mb(s: &str) -> Mailbox {
    Mailbox::new(s)
}

fn date(y: u16, m: u8, d: u8) -> Date {
    Date::new(y, m, d).unwrap()
}

#[test]
fn rfc9051_any_and_not_authenticated_state_examples() {
    assert_eq!(parse("a441 CAPABILITY"), Command::Capability);
    assert_eq!(parse("a002 NOOP"), Command::Noop);
    assert_eq!(parse("A023 LOGOUT"), Command::Logout);
    assert_eq!(parse("a001 STARTTLS"), Command::StartTls);
    assert_eq!(
        parse("A001 AUTHENTICATE GSSAPI"),
        Command::Authenticate {
            mechanism: "GSSAPI".into(),
            initial: None
        }
    );
    assert_eq!(
        parse("a001 LOGIN SMITH SESAME"),
        Command::Login {
            username: b"SMITH".to_vec(),
            password: b"SESAME".to_vec()
        }
    );
    // RFC 4959 SASL-IR
    assert_eq!(
        parse("a01 AUTHENTICATE PLAIN dGVzdAB0ZXN0AHRlc3Q="),
        Command::Authenticate {
            mechanism: "PLAIN".into(),
            initial: Some(b"dGVzdAB0ZXN0AHRlc3Q=".to_vec())
        }
    );
    assert_eq!(
        parse("a02 AUTHENTICATE EXTERNAL ="),
        Command::Authenticate {
            mechanism: "EXTERNAL".into(),
            initial: Some(Vec::new())
        }
    );
    // RFC 2971
    assert_eq!(
        parse(r#"a023 ID ("name" "sodr" "version" "19.34" "vendor" "Pink Floyd Music Limited")"#),
        Command::Id(Some(vec![
            ("name".into(), Some("sodr".into())),
            ("version".into(), Some("19.34".into())),
            ("vendor".into(), Some("Pink Floyd Music Limited".into())),
        ]))
    );
    assert_eq!(parse("a ID NIL"), Command::Id(None));
    // RFC 5161 / RFC 9051
    assert_eq!(
        parse("t2 ENABLE CONDSTORE X-GOOD-IDEA"),
        Command::Enable(vec!["CONDSTORE".into(), "X-GOOD-IDEA".into()])
    );
    assert_eq!(
        parse("t1 ENABLE IMAP4rev2"),
        Command::Enable(vec!["IMAP4REV2".into()])
    );
}

#[test]
fn rfc9051_authenticated_state_examples() {
    let sel = |m: &str| Select {
        mailbox: mb(m),
        condstore: false,
        qresync: None,
    };
    assert_eq!(parse("A142 SELECT INBOX"), Command::Select(sel("INBOX")));
    assert_eq!(parse("A142 SELECT inbox"), Command::Select(sel("INBOX")));
    assert_eq!(
        parse("A932 EXAMINE blurdybloop"),
        Command::Examine(sel("blurdybloop"))
    );
    assert_eq!(
        parse("A003 CREATE owatagusiam/"),
        Command::Create {
            mailbox: mb("owatagusiam/"),
            special_use: vec![]
        }
    );
    assert_eq!(
        parse("A683 DELETE blurdybloop"),
        Command::Delete(mb("blurdybloop"))
    );
    assert_eq!(
        parse("A683 RENAME blurdybloop sarasoop"),
        Command::Rename {
            from: mb("blurdybloop"),
            to: mb("sarasoop")
        }
    );
    assert_eq!(
        parse("A002 SUBSCRIBE #news.comp.mail.mime"),
        Command::Subscribe(mb("#news.comp.mail.mime"))
    );
    assert_eq!(
        parse("A002 UNSUBSCRIBE #news.comp.mail.mime"),
        Command::Unsubscribe(mb("#news.comp.mail.mime"))
    );
    let list = |r: &str, p: &str| {
        Command::List(ListCommand {
            reference: r.into(),
            patterns: vec![p.into()],
            ..Default::default()
        })
    };
    assert_eq!(parse(r#"A101 LIST "" """#), list("", ""));
    assert_eq!(
        parse(r#"A102 LIST #news.comp.mail.misc """#),
        list("#news.comp.mail.misc", "")
    );
    assert_eq!(
        parse(r#"A103 LIST /usr/staff/jones """#),
        list("/usr/staff/jones", "")
    );
    assert_eq!(parse("A202 LIST ~/Mail/ %"), list("~/Mail/", "%"));
    assert_eq!(parse(r#"A682 LIST "" *"#), list("", "*"));
    assert_eq!(
        parse(r##"A002 LSUB "#news." "comp.mail.*""##),
        Command::Lsub {
            reference: "#news.".into(),
            pattern: "comp.mail.*".into()
        }
    );
    assert_eq!(parse("A001 NAMESPACE"), Command::Namespace);
    assert_eq!(
        parse("A042 STATUS blurdybloop (UIDNEXT MESSAGES)"),
        Command::Status {
            mailbox: mb("blurdybloop"),
            items: vec![StatusItem::UidNext, StatusItem::Messages]
        }
    );
    assert_eq!(
        parse("A042 STATUS blurdybloop (SIZE DELETED APPENDLIMIT HIGHESTMODSEQ)"),
        Command::Status {
            mailbox: mb("blurdybloop"),
            items: vec![
                StatusItem::Size,
                StatusItem::Deleted,
                StatusItem::AppendLimit,
                StatusItem::HighestModSeq
            ]
        }
    );
    assert_eq!(parse("A002 IDLE"), Command::Idle);
}

#[test]
fn rfc9051_append_example_with_literal() {
    let msg = "Date: Mon, 7 Feb 1994 21:52:25 -0800 (PST)\r\nFrom: Fred Foobar <foobar@Blurdybloop.example>\r\nSubject: afternoon meeting\r\nTo: mooch@owatagu.siam.edu.example\r\nMessage-Id: <B27397-0100000@Blurdybloop.example>\r\nMIME-Version: 1.0\r\nContent-Type: TEXT/PLAIN; CHARSET=US-ASCII\r\n\r\nHello Joe, do you think we can meet at 3:30 tomorrow?\r\n";
    let buf = format!(
        "A003 APPEND saved-messages (\\Seen) {{{}}}\r\n{msg}\r\n",
        msg.len()
    );
    assert_eq!(
        parse_raw(buf.as_bytes()),
        Command::Append {
            mailbox: mb("saved-messages"),
            messages: vec![AppendMessage {
                flags: vec![Flag::Seen],
                date: None,
                data: AppendData::Literal {
                    data: msg.as_bytes().to_vec(),
                    binary: false
                }
            }]
        }
    );
}

#[test]
fn rfc3502_multiappend_and_extensions_of_append() {
    let buf = b"A003 APPEND saved-messages (\\Seen) {5}\r\nhello (\\Seen) \" 7-Feb-1994 22:43:04 -0800\" {3}\r\nbye\r\n";
    let Command::Append { messages, .. } = parse_raw(buf) else {
        panic!()
    };
    assert_eq!(messages.len(), 2);
    assert_eq!(
        messages[1].date,
        Some(DateTime {
            date: date(1994, 2, 7),
            hour: 22,
            minute: 43,
            second: 4,
            zone_minutes: -480
        })
    );
    // RFC 3516 literal8 with NUL, RFC 7888 non-synchronizing literal
    let Command::Append { messages, .. } = parse_raw(b"A APPEND Drafts ~{3+}\r\na\0b\r\n") else {
        panic!()
    };
    assert_eq!(
        messages[0].data,
        AppendData::Literal {
            data: b"a\0b".to_vec(),
            binary: true
        }
    );
    // RFC 6855 UTF8
    let Command::Append { messages, .. } = parse_raw(b"A APPEND INBOX UTF8 (~{2}\r\nhi)\r\n")
    else {
        panic!()
    };
    assert_eq!(messages[0].data, AppendData::Utf8(b"hi".to_vec()));
    // RFC 4469 CATENATE
    let buf = b"A003 APPEND Drafts (\\Seen \\Draft $MDNSent) CATENATE (URL \"/Drafts;UIDVALIDITY=385759045/;UID=20/;section=HEADER\" TEXT {4}\r\n\r\n\r\n URL \"/Drafts;UIDVALIDITY=385759045/;UID=20/;section=1.MIME\")\r\n";
    let Command::Append { messages, .. } = parse_raw(buf) else {
        panic!()
    };
    assert_eq!(
        messages[0].flags,
        vec![Flag::Seen, Flag::Draft, Flag::Keyword("$MDNSent".into())]
    );
    assert_eq!(
        messages[0].data,
        AppendData::Catenate(vec![
            CatPart::Url("/Drafts;UIDVALIDITY=385759045/;UID=20/;section=HEADER".into()),
            CatPart::Text(b"\r\n\r\n".to_vec()),
            CatPart::Url("/Drafts;UIDVALIDITY=385759045/;UID=20/;section=1.MIME".into()),
        ])
    );
}

#[test]
fn rfc9051_selected_state_examples() {
    assert_eq!(parse("FXXZ CHECK"), Command::Check);
    assert_eq!(parse("A341 CLOSE"), Command::Close);
    assert_eq!(parse("A342 UNSELECT"), Command::Unselect);
    assert_eq!(parse("A202 EXPUNGE"), Command::Expunge);
    assert_eq!(
        parse("A003 UID EXPUNGE 3000:3002"),
        Command::UidExpunge(SequenceSet::range(3000, 3002))
    );
    assert_eq!(
        parse("A654 FETCH 2:4 (FLAGS BODY[HEADER.FIELDS (DATE FROM)])"),
        Command::Fetch {
            uid: false,
            set: SequenceSet::range(2, 4),
            attrs: FetchAttrs::List(vec![
                FetchAttr::Flags,
                FetchAttr::BodySection {
                    peek: false,
                    section: Section {
                        part: vec![],
                        text: Some(SectionText::HeaderFields(vec![
                            "DATE".into(),
                            "FROM".into()
                        ]))
                    },
                    partial: None
                }
            ]),
            modifiers: FetchModifiers::default()
        }
    );
    assert_eq!(
        parse("A999 UID FETCH 4827313:4828442 FLAGS"),
        Command::Fetch {
            uid: true,
            set: SequenceSet::range(4_827_313, 4_828_442),
            attrs: FetchAttrs::List(vec![FetchAttr::Flags]),
            modifiers: FetchModifiers::default()
        }
    );
    assert_eq!(
        parse("A1 FETCH 1 (BODY.PEEK[1.2.MIME] BODY[3.TEXT]<0.2048> BINARY.PEEK[1]<10.20> BINARY.SIZE[2] RFC822.SIZE)"),
        Command::Fetch {
            uid: false,
            set: SequenceSet::single(1),
            attrs: FetchAttrs::List(vec![
                FetchAttr::BodySection {
                    peek: true,
                    section: Section {
                        part: vec![1, 2],
                        text: Some(SectionText::Mime)
                    },
                    partial: None
                },
                FetchAttr::BodySection {
                    peek: false,
                    section: Section {
                        part: vec![3],
                        text: Some(SectionText::Text)
                    },
                    partial: Some(Partial {
                        origin: 0,
                        count: 2048
                    })
                },
                FetchAttr::Binary {
                    peek: true,
                    part: vec![1],
                    partial: Some(Partial {
                        origin: 10,
                        count: 20
                    })
                },
                FetchAttr::BinarySize(vec![2]),
                FetchAttr::Rfc822Size,
            ]),
            modifiers: FetchModifiers::default()
        }
    );
    assert!(matches!(
        parse("a FETCH 1:* ALL"),
        Command::Fetch {
            attrs: FetchAttrs::All,
            ..
        }
    ));
    assert_eq!(
        parse(r"A003 STORE 2:4 +FLAGS (\Deleted)"),
        Command::Store(Store {
            uid: false,
            set: SequenceSet::range(2, 4),
            unchanged_since: None,
            mode: StoreMode::Add,
            silent: false,
            flags: vec![Flag::Deleted]
        })
    );
    assert_eq!(
        parse("A003 COPY 2:4 MEETING"),
        Command::Copy {
            uid: false,
            set: SequenceSet::range(2, 4),
            mailbox: mb("MEETING")
        }
    );
    // RFC 6851
    assert_eq!(
        parse("a UID MOVE 42:69 foo"),
        Command::Move {
            uid: true,
            set: SequenceSet::range(42, 69),
            mailbox: mb("foo")
        }
    );
}

#[test]
fn rfc9051_search_examples() {
    let Command::Search(s) =
        parse(r#"A282 SEARCH RETURN (MIN COUNT) FLAGGED SINCE 1-Feb-1994 NOT FROM "Smith""#)
    else {
        panic!()
    };
    assert_eq!(s.ret, Some(vec![SearchReturn::Min, SearchReturn::Count]));
    assert_eq!(
        s.keys,
        vec![
            SearchKey::Flagged,
            SearchKey::Since(date(1994, 2, 1)),
            SearchKey::Not(Box::new(SearchKey::From(b"Smith".to_vec())))
        ]
    );
    let Command::Search(s) =
        parse(r#"A283 SEARCH RETURN () FLAGGED SINCE 1-Feb-1994 NOT FROM "Smith""#)
    else {
        panic!()
    };
    assert_eq!(s.ret, Some(vec![]));
    let Command::Search(s) = parse("A285 UID SEARCH RETURN (MIN MAX) 1:5000") else {
        panic!()
    };
    assert!(s.uid);
    assert_eq!(
        s.keys,
        vec![SearchKey::SequenceSet(SequenceSet::range(1, 5000))]
    );
    let Command::Search(s) =
        parse_raw("A286 SEARCH CHARSET UTF-8 TEXT {10}\r\nМойка\r\n".as_bytes())
    else {
        panic!()
    };
    assert_eq!(s.charset.as_deref(), Some("UTF-8"));
    assert_eq!(s.keys, vec![SearchKey::Text("Мойка".as_bytes().to_vec())]);
    let Command::Search(s) = parse("A1 SEARCH OR (SEEN UNDELETED) HEADER X-Spam yes UID 1:*,7")
    else {
        panic!()
    };
    assert_eq!(
        s.keys,
        vec![
            SearchKey::Or(
                Box::new(SearchKey::And(vec![SearchKey::Seen, SearchKey::Undeleted])),
                Box::new(SearchKey::Header("X-Spam".into(), b"yes".to_vec()))
            ),
            SearchKey::Uid(SequenceSet::Set(vec![
                SeqItem::Range(SeqNum::Value(1), SeqNum::Largest),
                SeqItem::One(SeqNum::Value(7))
            ]))
        ]
    );
}

#[test]
fn modified_utf7_names_are_decoded_unless_utf8_is_enabled() {
    let (_, c) = parse_command(
        b"a SELECT ~peter/mail/&U,BTFw-/&ZeVnLIqe-\r\n",
        ParseOptions::default(),
    )
    .unwrap();
    assert_eq!(
        c,
        Command::Select(Select {
            mailbox: mb("~peter/mail/\u{53f0}\u{5317}/\u{65e5}\u{672c}\u{8a9e}"),
            condstore: false,
            qresync: None
        })
    );
    let opts = ParseOptions { utf8_names: true };
    let (_, c) = parse_command("a SELECT \"Entwürfe &\"\r\n".as_bytes(), opts).unwrap();
    assert!(matches!(c, Command::Select(s) if s.mailbox.as_str() == "Entwürfe &"));
    // 8-bit names are invalid modified UTF-7: the command still parses
    // (any astring is a mailbox name) and names no mailbox that can
    // exist, so the session answers NO, as Dovecot does, not BAD.
    let (_, c) = parse_command(
        "a SELECT \"Entwürfe\"\r\n".as_bytes(),
        ParseOptions::default(),
    )
    .unwrap();
    assert!(
        matches!(c, Command::Select(s) if s.mailbox.is_undecodable() && s.mailbox.as_str() == "Entwürfe")
    );
}

#[test]
fn invalid_commands_report_the_tag() {
    for (line, tag) in [
        ("a1 FOO\r\n", Some("a1")),
        ("a2 FETCH 0 FLAGS\r\n", Some("a2")),
        ("a3 STORE 1 FLAGS (\\Recent)\r\n", Some("a3")),
        ("a4 LIST (RECURSIVEMATCH) \"\" *\r\n", Some("a4")),
        ("a5 FETCH 1 (FLAGS) (VANISHED)\r\n", Some("a5")),
        ("a6 SEARCH BEFORE 30-Feb-2020\r\n", Some("a6")),
        ("a7 LOGIN\r\n", Some("a7")),
        ("a8 NOOP extra\r\n", Some("a8")),
        ("+ NOOP\r\n", None),
        ("\r\n", None),
    ] {
        let r = parse_command(line.as_bytes(), ParseOptions::default());
        let (t, _) = r.expect_err(line);
        assert_eq!(t.as_deref(), tag, "{line:?}");
    }
}

#[test]
fn more_rfc_and_client_commands_parse() {
    for line in [
        r#"A01 LIST "" % RETURN (SPECIAL-USE)"#,
        r#"A02 LIST (SPECIAL-USE) "" *"#,
        r#"A03 LIST (REMOTE) "" *"#,
        r#"A04 LIST (SUBSCRIBED) "" "*" RETURN (CHILDREN)"#,
        r#"A05 LIST "" "foo" RETURN (STATUS (MESSAGES UIDNEXT SIZE))"#,
        r#"A06 LIST () "" "%" RETURN ()"#,
        "abc FETCH 1:3 (BODY[HEADER.FIELDS.NOT (X-SPAM \"Received\")])",
        "abc FETCH 1 BODY[]",
        "abc FETCH 1 (BODY.PEEK[]<0.100> BINARY[] MODSEQ SAVEDATE EMAILID THREADID)",
        "abc FETCH 1:* FAST",
        "abc FETCH 1:* FULL",
        "abc UID FETCH 1:* (UID FLAGS) (CHANGEDSINCE 1)",
        r#"a SEARCH SENTSINCE 1-Feb-1994 SENTBEFORE "10-Feb-1994" SENTON 5-feb-1994"#,
        "A1 SEARCH 1,3:5 OR ANSWERED (DELETED DRAFT)",
        "A SEARCH KEYWORD $Forwarded UNKEYWORD $Junk NEW OLD RECENT",
        r#"A SEARCH CHARSET "UTF-8" SUBJECT "x" BCC y CC z TO w BODY b TEXT t"#,
        "A SEARCH ALL LARGER 10 SMALLER 20 ON 1-Jan-2000 BEFORE 2-Jan-2000 UNANSWERED UNDELETED UNDRAFT UNFLAGGED UNSEEN",
        "A SEARCH MODSEQ 5 OLDER 3600 SAVEDSINCE 1-Jan-2020 SAVEDON 2-Jan-2020 EMAILID M1 THREADID T1",
        "A SORT RETURN (MIN MAX COUNT ALL) (ARRIVAL CC DATE FROM SIZE SUBJECT TO DISPLAYTO) US-ASCII ALL",
        "A UID THREAD REFERENCES UTF-8 ALL",
        "A THREAD REFS UTF-8 UNDELETED",
        "a STORE 1 FLAGS \\Seen \\Answered",
        "a STORE 1:* -FLAGS.SILENT ($Junk)",
        "a UID STORE $ +FLAGS ()",
        "a UID COPY 1:* \"Sent Items\"",
        "a MOVE $ Trash",
        "a EXAMINE INBOX (QRESYNC (1 2))",
        "a SELECT INBOX (QRESYNC (1 2 1:5) CONDSTORE)",
        "a GETMETADATA INBOX (MAXSIZE 10) /private/comment",
        "a GETMETADATA (DEPTH 1) \"INBOX\" \"/private/filters/values\"",
        "a NOTIFY SET (selected-delayed (FlagChange AnnotationChange)) (inboxes (MailboxName SubscriptionChange MailboxMetadataChange ServerMetadataChange)) (personal NONE) (subscribed (MessageNew))",
        "a ENABLE UTF8=ACCEPT QRESYNC",
        "a AUTHENTICATE SCRAM-SHA-256 biwsbj11c2VyLHI9ZnlrbytkMmxiYkZnT05Sdjlxa3hkYXdM",
        "a LOGIN \"us\\\"er\" {0+}",
    ] {
        let buf = if line.ends_with("{0+}") {
            format!("{line}\r\n\r\n")
        } else {
            format!("{line}\r\n")
        };
        if let Err((_, e)) = parse_command(buf.as_bytes(), ParseOptions::default()) {
            panic!("{line:?}: {e}");
        }
    }
}

#[test]
fn malformed_commands_are_rejected() {
    for line in [
        "a SELECT",
        "a SELECT INBOX (FOO)",
        "a FETCH 1 (FLAGS",
        "a FETCH 1 BODY[1.MIME",
        "a FETCH 1 BODY[MIME]",
        "a FETCH 1 BODY[1TEXT]",
        "a FETCH 1 BODY[]<1>",
        "a FETCH 1 BODY[]<1.0>",
        "a FETCH 1 BINARY[1.TEXT]",
        "a FETCH 1 FOO",
        "a SEARCH",
        "a SEARCH FOO",
        "a SEARCH RETURN (BOGUS) ALL",
        "a SEARCH OR ALL",
        "a SEARCH YOUNGER 0",
        "a SEARCH ON 1-Foo-2000",
        "a STORE 1 +FLAGS (\\*)",
        "a STORE 1 FLAG (\\Seen)",
        "a LIST (BOGUS) \"\" *",
        "a LIST \"\" * RETURN (BOGUS)",
        "a STATUS INBOX ()",
        "a STATUS INBOX (BOGUS)",
        "a APPEND INBOX",
        "a APPEND INBOX (\\Seen) \"bad date\" {1}\r\nx",
        "a APPEND INBOX UTF8 ({1}\r\nx)",
        "a APPEND INBOX CATENATE ()",
        "a UID FROB 1",
        "a ENABLE",
        "a ID (\"k\")",
        "a SETQUOTA root (STORAGE)",
        "a NOTIFY SET (bogus (MessageNew))",
        "a CANCELUPDATE",
        "a CANCELUPDATE C01",
        "a URLFETCH",
        "a LOGIN \"a\rb\" c",
        "a SORT (SUBJECT) ALL",
        "a THREAD REFERENCES",
    ] {
        let buf = format!("{line}\r\n");
        assert!(
            parse_command(buf.as_bytes(), ParseOptions::default()).is_err(),
            "{line:?} should be rejected"
        );
    }
}
