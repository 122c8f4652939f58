//! Response encoding: RFC examples byte for byte, quoting rules, and round
//! trips through the command parser.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic

use proptest::prelude::*;
use yarilo_imap_proto::command::{Section, SectionText, StatusItem};
use yarilo_imap_proto::response::*;
use yarilo_imap_proto::{
    parse_command, Command, Date, DateTime, Flag, Mailbox, ParseOptions, SequenceSet,
};

fn enc(r: &Response) -> String {
    String::from_utf8(r.to_bytes(EncodeOptions::default())).unwrap()
}

fn data(d: Data) -> String {
    enc(&Response::Data(d))
}

fn s(x: &str) -> Option<Vec<u8>> {
    Some(x.as_bytes().to_vec())
}

fn addr(name: Option<&str>, mailbox: &str, host: &str) -> Address {
    Address {
        name: name.and_then(s),
        adl: None,
        mailbox: s(mailbox),
        host: s(host),
    }
}

#[test]
fn status_responses_and_codes() {
    let r = Response::Status {
        tag: None,
        kind: StatusKind::Ok,
        code: Some(Code::UidValidity(3_857_529_045)),
        text: "UIDs valid".into(),
    };
    assert_eq!(enc(&r), "* OK [UIDVALIDITY 3857529045] UIDs valid\r\n");
    assert_eq!(
        enc(&Response::ok(
            "A142",
            Some(Code::ReadWrite),
            "SELECT completed"
        )),
        "A142 OK [READ-WRITE] SELECT completed\r\n"
    );
    let r = Response::Status {
        tag: None,
        kind: StatusKind::Ok,
        code: Some(Code::PermanentFlags(vec![
            Flag::Deleted,
            Flag::Seen,
            Flag::Wildcard,
        ])),
        text: "Limited".into(),
    };
    assert_eq!(
        enc(&r),
        "* OK [PERMANENTFLAGS (\\Deleted \\Seen \\*)] Limited\r\n"
    );
    assert_eq!(
        enc(&Response::ok(
            "A003",
            Some(Code::AppendUid {
                uidvalidity: 38505,
                uids: SequenceSet::single(3955)
            }),
            "APPEND completed"
        )),
        "A003 OK [APPENDUID 38505 3955] APPEND completed\r\n"
    );
    assert_eq!(
        enc(&Response::ok(
            "A004",
            Some(Code::CopyUid {
                uidvalidity: 38505,
                from: SequenceSet::from_numbers([304, 319, 320]),
                to: SequenceSet::from_numbers([3956, 3957, 3958])
            }),
            "Done"
        )),
        "A004 OK [COPYUID 38505 304,319:320 3956:3958] Done\r\n"
    );
    assert_eq!(
        enc(&Response::no(
            "A1",
            Some(Code::TryCreate),
            "no such mailbox"
        )),
        "A1 NO [TRYCREATE] no such mailbox\r\n"
    );
    assert_eq!(
        enc(&Response::no(
            "A1",
            Some(Code::OverQuota),
            "Quota exceeded\r\n(Mailbox is full)"
        )),
        "A1 NO [OVERQUOTA] Quota exceeded  (Mailbox is full)\r\n"
    );
    assert_eq!(
        enc(&Response::ok(
            "a",
            Some(Code::HighestModSeq(715_194_045_007)),
            "Highest"
        )),
        "a OK [HIGHESTMODSEQ 715194045007] Highest\r\n"
    );
    assert_eq!(
        enc(&Response::ok(
            "a",
            Some(Code::Modified(SequenceSet::from_numbers([7, 9]))),
            "Conditional STORE failed"
        )),
        "a OK [MODIFIED 7,9] Conditional STORE failed\r\n"
    );
    assert_eq!(
        enc(&Response::Status {
            tag: None,
            kind: StatusKind::Ok,
            code: Some(Code::Closed),
            text: String::new()
        }),
        "* OK [CLOSED] ok\r\n"
    );
    assert_eq!(
        enc(&Response::Status {
            tag: None,
            kind: StatusKind::Ok,
            code: Some(Code::Capability(vec![
                "IMAP4rev1".into(),
                "IMAP4rev2".into()
            ])),
            text: "ready".into()
        }),
        "* OK [CAPABILITY IMAP4rev1 IMAP4rev2] ready\r\n"
    );
    assert_eq!(enc(&Response::Continue(String::new())), "+ OK\r\n");
    assert_eq!(enc(&Response::Challenge(String::new())), "+ \r\n");
}

#[test]
fn mailbox_data() {
    assert_eq!(data(Data::Exists(172)), "* 172 EXISTS\r\n");
    assert_eq!(data(Data::Expunge(3)), "* 3 EXPUNGE\r\n");
    assert_eq!(
        data(Data::Flags(vec![
            Flag::Answered,
            Flag::Flagged,
            Flag::Deleted,
            Flag::Seen,
            Flag::Draft
        ])),
        "* FLAGS (\\Answered \\Flagged \\Deleted \\Seen \\Draft)\r\n"
    );
    assert_eq!(
        data(Data::List(ListItem {
            attributes: vec!["\\Noselect".into()],
            delimiter: Some('/'),
            mailbox: Mailbox::new("~/Mail/foo"),
            extended: vec![]
        })),
        "* LIST (\\Noselect) \"/\" ~/Mail/foo\r\n"
    );
    assert_eq!(
        data(Data::List(ListItem {
            attributes: vec!["\\Subscribed".into()],
            delimiter: Some('/'),
            mailbox: Mailbox::new("Foo bar"),
            extended: vec![ListExtended::ChildInfo(vec!["SUBSCRIBED".into()])]
        })),
        "* LIST (\\Subscribed) \"/\" \"Foo bar\" (\"CHILDINFO\" (\"SUBSCRIBED\"))\r\n"
    );
    // Modified UTF-7 unless UTF-8 is enabled.
    let l = Response::Data(Data::List(ListItem {
        attributes: vec![],
        delimiter: None,
        mailbox: Mailbox::new("Entwürfe & Co"),
        extended: vec![ListExtended::OldName(Mailbox::new("Alt"))],
    }));
    assert_eq!(
        enc(&l),
        "* LIST () NIL \"Entw&APw-rfe &- Co\" (\"OLDNAME\" (Alt))\r\n"
    );
    assert_eq!(
        String::from_utf8(l.to_bytes(EncodeOptions { utf8: true })).unwrap(),
        "* LIST () NIL \"Entwürfe & Co\" (\"OLDNAME\" (Alt))\r\n"
    );
    assert_eq!(
        data(Data::Status {
            mailbox: Mailbox::new("blurdybloop"),
            items: vec![
                (StatusItem::Messages, StatusValue::Number(231)),
                (StatusItem::UidNext, StatusValue::Number(44292)),
                (StatusItem::AppendLimit, StatusValue::Nil),
                (StatusItem::MailboxId, StatusValue::Id("F2212ea87-6097-4256-9d51-71338625".into())),
            ]
        }),
        "* STATUS blurdybloop (MESSAGES 231 UIDNEXT 44292 APPENDLIMIT NIL MAILBOXID (F2212ea87-6097-4256-9d51-71338625))\r\n"
    );
    assert_eq!(
        data(Data::ESearch(ESearch {
            tag: Some("A285".into()),
            uid: true,
            items: vec![ESearchItem::Min(7), ESearchItem::Max(3800)]
        })),
        "* ESEARCH (TAG \"A285\") UID MIN 7 MAX 3800\r\n"
    );
    assert_eq!(
        data(Data::ESearch(ESearch {
            tag: Some("A282".into()),
            uid: false,
            items: vec![
                ESearchItem::All(SequenceSet::from_numbers([2, 10, 11])),
                ESearchItem::Count(3),
                ESearchItem::ModSeq(917_162_500)
            ]
        })),
        "* ESEARCH (TAG \"A282\") ALL 2,10:11 COUNT 3 MODSEQ 917162500\r\n"
    );
    assert_eq!(
        data(Data::ESearch(ESearch {
            tag: Some("E01".into()),
            uid: true,
            items: vec![
                ESearchItem::Partial {
                    range: (-1, -100),
                    set: None
                },
                ESearchItem::AddTo(vec![(1, SequenceSet::single(2733))])
            ]
        })),
        "* ESEARCH (TAG \"E01\") UID PARTIAL (-1:-100 NIL) ADDTO (1 2733)\r\n"
    );
    assert_eq!(
        data(Data::Search {
            nums: vec![2, 84, 882],
            modseq: Some(917_162_500)
        }),
        "* SEARCH 2 84 882 (MODSEQ 917162500)\r\n"
    );
    assert_eq!(
        data(Data::Search {
            nums: vec![],
            modseq: None
        }),
        "* SEARCH\r\n"
    );
    assert_eq!(
        data(Data::Vanished {
            earlier: true,
            uids: SequenceSet::from_numbers([41, 43, 44, 45])
        }),
        "* VANISHED (EARLIER) 41,43:45\r\n"
    );
    assert_eq!(
        data(Data::Enabled(vec!["CONDSTORE".into()])),
        "* ENABLED CONDSTORE\r\n"
    );
}

#[test]
fn thread_sort_namespace_id_quota_metadata() {
    let leaf = |id| ThreadNode {
        id: Some(id),
        children: vec![],
    };
    let chain = |ids: &[u32]| {
        let mut node = leaf(ids[ids.len() - 1]);
        for id in ids[..ids.len() - 1].iter().rev() {
            node = ThreadNode {
                id: Some(*id),
                children: vec![node],
            };
        }
        node
    };
    // RFC 5256 §4 example.
    let t = vec![
        leaf(2),
        ThreadNode {
            id: Some(3),
            children: vec![ThreadNode {
                id: Some(6),
                children: vec![chain(&[4, 23]), chain(&[44, 7, 96])],
            }],
        },
    ];
    assert_eq!(
        data(Data::Thread(t)),
        "* THREAD (2)(3 6 (4 23)(44 7 96))\r\n"
    );
    let dummy = ThreadNode {
        id: None,
        children: vec![leaf(3), leaf(5)],
    };
    assert_eq!(data(Data::Thread(vec![dummy])), "* THREAD ((3)(5))\r\n");
    assert_eq!(data(Data::Thread(vec![])), "* THREAD\r\n");
    assert_eq!(
        data(Data::Sort {
            nums: vec![2, 84, 882],
            modseq: None
        }),
        "* SORT 2 84 882\r\n"
    );
    assert_eq!(
        data(Data::Namespace {
            personal: vec![NamespaceDesc {
                prefix: String::new(),
                delimiter: Some('/')
            }],
            other: vec![],
            shared: vec![]
        }),
        "* NAMESPACE ((\"\" \"/\")) NIL NIL\r\n"
    );
    assert_eq!(
        data(Data::Id(Some(vec![
            ("name".into(), Some("yarilo".into())),
            ("os".into(), None)
        ]))),
        "* ID (\"name\" \"yarilo\" \"os\" NIL)\r\n"
    );
    assert_eq!(data(Data::Id(None)), "* ID NIL\r\n");
    assert_eq!(
        data(Data::Quota {
            root: String::new(),
            resources: vec![("STORAGE".into(), 10, 512)]
        }),
        "* QUOTA \"\" (STORAGE 10 512)\r\n"
    );
    assert_eq!(
        data(Data::QuotaRoot {
            mailbox: Mailbox::new("INBOX"),
            roots: vec![String::new()]
        }),
        "* QUOTAROOT INBOX \"\"\r\n"
    );
    assert_eq!(
        data(Data::Metadata {
            mailbox: Some(Mailbox::new("INBOX")),
            entries: MetadataEntries::Values(vec![(
                "/private/comment".into(),
                Some(b"My comment".to_vec())
            )])
        }),
        "* METADATA INBOX (/private/comment \"My comment\")\r\n"
    );
    assert_eq!(
        data(Data::Metadata {
            mailbox: None,
            entries: MetadataEntries::Names(vec!["/shared/comment".into()])
        }),
        "* METADATA \"\" /shared/comment\r\n"
    );
}

#[test]
fn rfc3501_fetch_example_with_envelope_and_body() {
    let env = Envelope {
        date: s("Wed, 17 Jul 1996 02:23:25 -0700 (PDT)"),
        subject: s("IMAP4rev1 WG mtg summary and minutes"),
        from: vec![addr(Some("Terry Gray"), "gray", "cac.washington.edu")],
        sender: vec![addr(Some("Terry Gray"), "gray", "cac.washington.edu")],
        reply_to: vec![addr(Some("Terry Gray"), "gray", "cac.washington.edu")],
        to: vec![addr(None, "imap", "cac.washington.edu")],
        cc: vec![
            addr(None, "minutes", "CNRI.Reston.VA.US"),
            addr(Some("John Klensin"), "KLENSIN", "MIT.EDU"),
        ],
        bcc: vec![],
        in_reply_to: None,
        message_id: s("<B27397-0100000@cac.washington.edu>"),
    };
    let body = BodyStructure::Single {
        media_type: b"TEXT".to_vec(),
        subtype: b"PLAIN".to_vec(),
        params: vec![(b"CHARSET".to_vec(), b"US-ASCII".to_vec())],
        id: None,
        description: None,
        encoding: b"7BIT".to_vec(),
        size: 3028,
        kind: SinglePartKind::Text { lines: 92 },
        md5: None,
        ext: BodyExt::default(),
    };
    let r = data(Data::Fetch {
        seq: 12,
        items: vec![
            FetchItem::Flags(vec![Flag::Seen]),
            FetchItem::InternalDate(DateTime {
                date: Date::new(1996, 7, 17).unwrap(),
                hour: 2,
                minute: 44,
                second: 25,
                zone_minutes: -420,
            }),
            FetchItem::Rfc822Size(4286),
            FetchItem::Envelope(Box::new(env)),
            FetchItem::Body(Box::new(body.clone())),
        ],
    });
    assert_eq!(
        r,
        "* 12 FETCH (FLAGS (\\Seen) INTERNALDATE \"17-Jul-1996 02:44:25 -0700\" RFC822.SIZE 4286 \
ENVELOPE (\"Wed, 17 Jul 1996 02:23:25 -0700 (PDT)\" \"IMAP4rev1 WG mtg summary and minutes\" \
((\"Terry Gray\" NIL \"gray\" \"cac.washington.edu\")) ((\"Terry Gray\" NIL \"gray\" \"cac.washington.edu\")) \
((\"Terry Gray\" NIL \"gray\" \"cac.washington.edu\")) ((NIL NIL \"imap\" \"cac.washington.edu\")) \
((NIL NIL \"minutes\" \"CNRI.Reston.VA.US\")(\"John Klensin\" NIL \"KLENSIN\" \"MIT.EDU\")) NIL NIL \
\"<B27397-0100000@cac.washington.edu>\") BODY (\"TEXT\" \"PLAIN\" (\"CHARSET\" \"US-ASCII\") NIL NIL \"7BIT\" 3028 92))\r\n"
    );
    let multi = BodyStructure::Multi {
        parts: vec![body.clone(), body],
        subtype: b"MIXED".to_vec(),
        params: vec![(b"BOUNDARY".to_vec(), b"x".to_vec())],
        ext: BodyExt {
            disposition: Some(Disposition {
                kind: b"inline".to_vec(),
                params: vec![],
            }),
            language: vec![b"en".to_vec(), b"de".to_vec()],
            location: None,
        },
    };
    assert_eq!(
        data(Data::Fetch {
            seq: 1,
            items: vec![FetchItem::BodyStructure(Box::new(multi))]
        }),
        "* 1 FETCH (BODYSTRUCTURE ((\"TEXT\" \"PLAIN\" (\"CHARSET\" \"US-ASCII\") NIL NIL \"7BIT\" 3028 92 NIL NIL NIL NIL)\
(\"TEXT\" \"PLAIN\" (\"CHARSET\" \"US-ASCII\") NIL NIL \"7BIT\" 3028 92 NIL NIL NIL NIL) \"MIXED\" (\"BOUNDARY\" \"x\") (\"inline\" NIL) (\"en\" \"de\") NIL))\r\n"
    );
}

#[test]
fn fetch_sections_literals_and_literal8() {
    let r = data(Data::Fetch {
        seq: 3,
        items: vec![
            FetchItem::Uid(9),
            FetchItem::ModSeq(624_140_003),
            FetchItem::BodySection {
                section: Section {
                    part: vec![1, 2],
                    text: Some(SectionText::HeaderFields(vec!["FROM".into(), "X Y".into()])),
                },
                origin: Some(0),
                data: Some("From: a\r\n\r\n".into()),
            },
            FetchItem::Binary {
                part: vec![1],
                origin: None,
                data: Some(b"a\0b".to_vec().into()),
            },
            FetchItem::BinarySize {
                part: vec![1],
                size: 3,
            },
            FetchItem::Rfc822Text(None),
            FetchItem::SaveDate(None),
            FetchItem::EmailId("M6d99ac3275bb4e".into()),
            FetchItem::ThreadId(None),
        ],
    });
    assert_eq!(
        r,
        "* 3 FETCH (UID 9 MODSEQ (624140003) BODY[1.2.HEADER.FIELDS (FROM \"X Y\")]<0> {11}\r\nFrom: a\r\n\r\n \
BINARY[1] ~{3}\r\na\0b BINARY.SIZE[1] 3 RFC822.TEXT NIL SAVEDATE NIL EMAILID (M6d99ac3275bb4e) THREADID NIL)\r\n"
    );
}

#[test]
fn quoting_rules_choose_atom_quoted_or_literal() {
    let mut out = Vec::new();
    {
        let mut w = Writer::new(&mut out, EncodeOptions::default());
        for x in [
            &b"atom"[..],
            b"NIL",
            b"",
            b"a b",
            b"q\"b\\",
            b"line\r\nbreak",
            "ü".as_bytes(),
            b"%*",
        ] {
            w.astring(x);
            w.sp();
        }
    }
    assert_eq!(
        String::from_utf8(out).unwrap(),
        "atom \"NIL\" \"\" \"a b\" \"q\\\"b\\\\\" {11}\r\nline\r\nbreak {2}\r\nü \"%*\" "
    );
}

proptest! {
    /// Anything the writer spells as an astring reads back identically.
    #[test]
    fn astring_round_trips_through_the_parser(user in proptest::collection::vec(1u8..=255, 0..80)) {
        let mut line = b"a LOGIN ".to_vec();
        Writer::new(&mut line, EncodeOptions::default()).astring(&user);
        line.extend_from_slice(b" p\r\n");
        let (_, c) = parse_command(&line, ParseOptions::default()).unwrap();
        prop_assert_eq!(c, Command::Login { username: user, password: b"p".to_vec() });
    }

    /// Mailbox names round-trip in both modified UTF-7 and UTF-8 mode.
    #[test]
    fn mailbox_names_round_trip(name in "[^\u{0}\r\n]{1,30}", utf8 in any::<bool>()) {
        let m = Mailbox::new(name);
        let mut line = b"a DELETE ".to_vec();
        Writer::new(&mut line, EncodeOptions { utf8 }).mailbox(&m);
        line.extend_from_slice(b"\r\n");
        let (_, c) = parse_command(&line, ParseOptions { utf8_names: utf8 }).unwrap();
        prop_assert_eq!(c, Command::Delete(m));
    }

    /// Sequence sets print and parse back.
    #[test]
    fn sequence_sets_round_trip(nums in proptest::collection::vec(1u32..5000, 1..40)) {
        let set = SequenceSet::from_numbers(nums.clone());
        let line = format!("a UID EXPUNGE {set}\r\n");
        let (_, c) = parse_command(line.as_bytes(), ParseOptions::default()).unwrap();
        prop_assert_eq!(c, Command::UidExpunge(set.clone()));
        for n in nums {
            prop_assert!(set.contains(n, 5000));
        }
    }

    /// INTERNALDATE values print and parse back (APPEND date-time).
    #[test]
    fn date_times_round_trip(y in 1900u16..2100, m in 1u8..=12, d in 1u8..=28, h in 0u8..24, mi in 0u8..60, sec in 0u8..60, z in -720i16..=720) {
        let dt = DateTime { date: Date::new(y, m, d).unwrap(), hour: h, minute: mi, second: sec, zone_minutes: z };
        let line = format!("a APPEND INBOX \"{dt}\" {{1}}\r\nx\r\n");
        let (_, c) = parse_command(line.as_bytes(), ParseOptions::default()).unwrap();
        let Command::Append { messages, .. } = c else { panic!() };
        prop_assert_eq!(messages[0].date, Some(dt));
    }
}

#[test]
fn urlfetch_simple_and_extended_forms() {
    let url = "imap://joe@example.com/INBOX/;uid=20/;section=1.2;urlauth=anonymous:internal:91354a473744909de610943775f92038";
    assert_eq!(
        data(Data::UrlFetch(vec![
            (url.into(), UrlFetchValue::Simple(Some("hi".into()))),
            ("x y".into(), UrlFetchValue::Simple(None)),
        ])),
        format!("* URLFETCH {url} \"hi\" \"x y\" NIL\r\n")
    );
    // RFC 5524 §3.2: each item is its own parenthesised element.
    let structure = BodyStructure::Single {
        media_type: b"text".to_vec(),
        subtype: b"plain".to_vec(),
        params: vec![(b"charset".to_vec(), b"us-ascii".to_vec())],
        id: None,
        description: None,
        encoding: b"7bit".to_vec(),
        size: 3,
        kind: SinglePartKind::Text { lines: 0 },
        md5: None,
        ext: BodyExt::default(),
    };
    assert_eq!(
        data(Data::UrlFetch(vec![(
            url.into(),
            UrlFetchValue::Extended {
                body_part_structure: Some(Box::new(structure)),
                data: Some(UrlFetchData::Binary(Some(b"a\0b"[..].into()))),
            }
        )])),
        format!(
            "* URLFETCH {url} (BODYPARTSTRUCTURE (\"text\" \"plain\" (\"charset\" \"us-ascii\") NIL NIL \"7bit\" 3 0 NIL NIL NIL NIL)) (BINARY ~{{3}}\r\na\0b)\r\n"
        )
    );
    assert_eq!(
        data(Data::UrlFetch(vec![(
            url.into(),
            UrlFetchValue::Extended {
                body_part_structure: None,
                data: Some(UrlFetchData::Binary(None)),
            }
        )])),
        format!("* URLFETCH {url} (BINARY NIL)\r\n")
    );
    assert_eq!(
        data(Data::UrlFetch(vec![(
            url.into(),
            UrlFetchValue::Extended {
                body_part_structure: None,
                data: Some(UrlFetchData::Body("x\r\n".into())),
            }
        )])),
        format!("* URLFETCH {url} (BODY {{3}}\r\nx\r\n)\r\n")
    );
}
