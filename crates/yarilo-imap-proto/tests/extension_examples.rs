//! Example commands from the extension RFCs (issues 5 and 6) parse to the
//! expected values.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic

use yarilo_imap_proto::command::*;
use yarilo_imap_proto::{
    parse_command, Command, Date, Flag, Mailbox, ParseOptions, SeqItem, SeqNum, SequenceSet,
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
fn extension_examples_parse() {
    // RFC 5182 SEARCHRES
    let Command::Search(s) =
        parse(r#"A282 SEARCH RETURN (SAVE) FLAGGED SINCE 1-Feb-1994 NOT FROM "Smith""#)
    else {
        panic!()
    };
    assert_eq!(s.ret, Some(vec![SearchReturn::Save]));
    assert!(matches!(
        parse("A283 FETCH $ (UID INTERNALDATE FLAGS RFC822.SIZE)"),
        Command::Fetch {
            set: SequenceSet::Saved,
            ..
        }
    ));
    let Command::Search(s) = parse("A301 UID SEARCH UID $ SMALLER 4096") else {
        panic!()
    };
    assert_eq!(
        s.keys,
        vec![SearchKey::Uid(SequenceSet::Saved), SearchKey::Smaller(4096)]
    );
    // RFC 7162 CONDSTORE / QRESYNC
    assert_eq!(
        parse("A160 SELECT INBOX (CONDSTORE)"),
        Command::Select(Select {
            mailbox: mb("INBOX"),
            condstore: true,
            qresync: None
        })
    );
    assert_eq!(
        parse("B04 SELECT INBOX (QRESYNC (67890007 90060115194045000 1:29997 (5000,7500,9000 15000,22500,27000)))"),
        Command::Select(Select {
            mailbox: mb("INBOX"),
            condstore: false,
            qresync: Some(QResync {
                uidvalidity: 67_890_007,
                modseq: 90_060_115_194_045_000,
                known_uids: Some(SequenceSet::range(1, 29997)),
                seq_match: Some((
                    SequenceSet::from_numbers([5000, 7500, 9000]),
                    SequenceSet::from_numbers([15000, 22500, 27000])
                ))
            })
        })
    );
    let Command::Fetch { modifiers, .. } =
        parse("s100 UID FETCH 300:500 (FLAGS) (CHANGEDSINCE 12345 VANISHED)")
    else {
        panic!()
    };
    assert_eq!(
        modifiers,
        FetchModifiers {
            changed_since: Some(12345),
            vanished: true
        }
    );
    assert_eq!(
        parse(r"a103 STORE 7,5,9 (UNCHANGEDSINCE 320162338) +FLAGS.SILENT (\Deleted)"),
        Command::Store(Store {
            uid: false,
            set: SequenceSet::Set(vec![
                SeqItem::One(SeqNum::Value(7)),
                SeqItem::One(SeqNum::Value(5)),
                SeqItem::One(SeqNum::Value(9))
            ]),
            unchanged_since: Some(320_162_338),
            mode: StoreMode::Add,
            silent: true,
            flags: vec![Flag::Deleted]
        })
    );
    let Command::Search(s) = parse(r#"a SEARCH MODSEQ "/flags/\\draft" all 620162338"#) else {
        panic!()
    };
    assert_eq!(
        s.keys,
        vec![SearchKey::ModSeq {
            entry: Some(("/flags/\\draft".into(), "all".into())),
            modseq: 620_162_338
        }]
    );
    // RFC 5032 WITHIN, RFC 8514 SAVEDATE
    let Command::Search(s) =
        parse("A1 SEARCH UNSEEN YOUNGER 259200 SAVEDBEFORE 1-Feb-2020 SAVEDATESUPPORTED")
    else {
        panic!()
    };
    assert_eq!(
        s.keys,
        vec![
            SearchKey::Unseen,
            SearchKey::Younger(259_200),
            SearchKey::SavedBefore(date(2020, 2, 1)),
            SearchKey::SaveDateSupported
        ]
    );
    // RFC 5258 LIST-EXTENDED, RFC 5819 LIST-STATUS, RFC 6154 SPECIAL-USE
    assert_eq!(
        parse(
            r#"A02 LIST (SUBSCRIBED RECURSIVEMATCH) "" "%" RETURN (CHILDREN STATUS (MESSAGES UNSEEN))"#
        ),
        Command::List(ListCommand {
            select: vec![ListSelect::Subscribed, ListSelect::RecursiveMatch],
            reference: String::new(),
            patterns: vec!["%".into()],
            ret: vec![
                ListReturn::Children,
                ListReturn::Status(vec![StatusItem::Messages, StatusItem::Unseen])
            ],
            extended: true
        })
    );
    let Command::List(l) = parse(r#"A04 LIST "" ("INBOX" "Drafts" "Sent/%")"#) else {
        panic!()
    };
    assert_eq!(l.patterns, vec!["INBOX", "Drafts", "Sent/%"]);
    assert_eq!(
        parse(r#"t1 CREATE "Important Messages" (USE (\Important))"#),
        Command::Create {
            mailbox: mb("Important Messages"),
            special_use: vec!["\\Important".into()]
        }
    );
    // RFC 5256 SORT / THREAD, RFC 5957, RFC 5267, RFC 9394
    let Command::Search(s) = parse("A283 SORT (SUBJECT REVERSE DATE) UTF-8 ALL") else {
        panic!()
    };
    assert_eq!(
        s.kind,
        SearchKind::Sort(vec![
            SortCriterion {
                reverse: false,
                key: SortKey::Subject
            },
            SortCriterion {
                reverse: true,
                key: SortKey::Date
            }
        ])
    );
    let Command::Search(s) = parse("C01 SORT (DISPLAYFROM) UTF-8 ALL") else {
        panic!()
    };
    assert_eq!(
        s.kind,
        SearchKind::Sort(vec![SortCriterion {
            reverse: false,
            key: SortKey::DisplayFrom
        }])
    );
    let Command::Search(s) = parse("A283 THREAD ORDEREDSUBJECT UTF-8 SINCE 5-MAR-2000") else {
        panic!()
    };
    assert_eq!(s.kind, SearchKind::Thread("ORDEREDSUBJECT".into()));
    assert_eq!(s.keys, vec![SearchKey::Since(date(2000, 3, 5))]);
    let Command::Search(s) = parse(
        "E01 UID SORT RETURN (PARTIAL 23500:24000) (REVERSE DATE) UTF-8 UNDELETED UNKEYWORD $Junk",
    ) else {
        panic!()
    };
    assert_eq!(s.ret, Some(vec![SearchReturn::Partial(23500, 24000)]));
    let Command::Search(s) =
        parse("C01 UID SEARCH RETURN (UPDATE CONTEXT COUNT PARTIAL -1:-100) KEYWORD $Junk")
    else {
        panic!()
    };
    assert_eq!(
        s.ret,
        Some(vec![
            SearchReturn::Update,
            SearchReturn::Context,
            SearchReturn::Count,
            SearchReturn::Partial(-1, -100)
        ])
    );
    assert_eq!(
        parse(r#"C02 CANCELUPDATE "C01" "C03""#),
        Command::CancelUpdate(vec!["C01".into(), "C03".into()])
    );
}

#[test]
fn issue6_extension_examples_parse() {
    // RFC 9208 QUOTA
    assert_eq!(
        parse(r#"G0001 GETQUOTA "!partition.sda4""#),
        Command::GetQuota("!partition.sda4".into())
    );
    assert_eq!(
        parse("A003 GETQUOTAROOT INBOX"),
        Command::GetQuotaRoot(mb("INBOX"))
    );
    assert_eq!(
        parse(r##"S0000 SETQUOTA "#user/alice" (STORAGE 510 MESSAGE 1000)"##),
        Command::SetQuota {
            root: "#user/alice".into(),
            limits: vec![("STORAGE".into(), 510), ("MESSAGE".into(), 1000)]
        }
    );
    // RFC 5464 METADATA
    assert_eq!(
        parse(r#"a GETMETADATA "" /shared/comment"#),
        Command::GetMetadata {
            max_size: None,
            depth: MetadataDepth::Zero,
            mailbox: None,
            entries: vec!["/shared/comment".into()]
        }
    );
    assert_eq!(
        parse(
            r#"a GETMETADATA (MAXSIZE 1024 DEPTH infinity) "INBOX" (/shared/comment /private/comment)"#
        ),
        Command::GetMetadata {
            max_size: Some(1024),
            depth: MetadataDepth::Infinity,
            mailbox: Some(mb("INBOX")),
            entries: vec!["/shared/comment".into(), "/private/comment".into()]
        }
    );
    assert_eq!(
        parse_raw(b"a SETMETADATA INBOX (/private/comment {33}\r\nMy new comment across\r\ntwo lines. /shared/x NIL)\r\n"),
        Command::SetMetadata {
            mailbox: Some(mb("INBOX")),
            entries: vec![
                ("/private/comment".into(), Some(b"My new comment across\r\ntwo lines.".to_vec())),
                ("/shared/x".into(), None)
            ]
        }
    );
    // RFC 5465 NOTIFY
    let Command::Notify(Some(n)) = parse("A01 NOTIFY SET STATUS (selected (MessageNew (uid body.peek[header.fields (from to subject)]) MessageExpunge)) (subtree Lists (MessageNew MessageExpunge)) (mailboxes (INBOX Sent) NONE)") else {
        panic!()
    };
    assert!(n.status);
    assert_eq!(n.groups.len(), 3);
    assert_eq!(n.groups[0].filter, NotifyFilter::Selected);
    assert!(matches!(&n.groups[0].events[0], NotifyEvent::MessageNew(a) if a.len() == 2));
    assert_eq!(n.groups[1].filter, NotifyFilter::Subtree(vec![mb("Lists")]));
    assert_eq!(n.groups[2].events, vec![]);
    assert_eq!(parse("A02 NOTIFY NONE"), Command::Notify(None));
    // RFC 9208 §4.3 DELETED-STORAGE; inbound XCLIENT from a trusted proxy
    assert_eq!(
        parse("a STATUS INBOX (DELETED-STORAGE DELETED)"),
        Command::Status {
            mailbox: mb("INBOX"),
            items: vec![StatusItem::DeletedStorage, StatusItem::Deleted]
        }
    );
    assert_eq!(
        parse("XCONN XCLIENT ADDR=2001:db8::1 PORT=4242 ttl=5"),
        Command::XClient(vec![
            ("ADDR".into(), "2001:db8::1".into()),
            ("PORT".into(), "4242".into()),
            ("TTL".into(), "5".into())
        ])
    );
    // RFC 4978, RFC 4467, RFC 5524
    assert_eq!(
        parse("a COMPRESS DEFLATE"),
        Command::Compress("DEFLATE".into())
    );
    assert_eq!(
        parse(
            r#"a004 GENURLAUTH "imap://joe@example.com/INBOX/;uid=20/;section=1.2;urlauth=submit+fred" INTERNAL"#
        ),
        Command::GenUrlAuth(vec![(
            "imap://joe@example.com/INBOX/;uid=20/;section=1.2;urlauth=submit+fred".into(),
            "INTERNAL".into()
        )])
    );
    assert_eq!(
        parse("a001 RESETKEY"),
        Command::ResetKey {
            mailbox: None,
            mechanisms: vec![]
        }
    );
    assert_eq!(
        parse("a002 RESETKEY INBOX INTERNAL"),
        Command::ResetKey {
            mailbox: Some(mb("INBOX")),
            mechanisms: vec!["INTERNAL".into()]
        }
    );
    let Command::UrlFetch(items) = parse(
        r#"a005 URLFETCH "imap://a/INBOX/;uid=20" ("imap://b/INBOX/;uid=1" BINARY BODYPARTSTRUCTURE)"#,
    ) else {
        panic!()
    };
    assert!(!items[0].extended);
    assert!(items[1].binary && items[1].body_part_structure && !items[1].body);
}
