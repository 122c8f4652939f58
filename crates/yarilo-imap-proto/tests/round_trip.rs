//! Commands survive parse → encode → parse unchanged: for RFC examples and
//! for generated search-key trees, fetch attributes and STORE commands.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic

use proptest::prelude::*;
use yarilo_imap_proto::command::*;
use yarilo_imap_proto::response::EncodeOptions;
use yarilo_imap_proto::{
    parse_command, Command, Date, Flag, ParseOptions, SeqItem, SeqNum, SequenceSet,
};

fn round_trip(c: &Command, utf8: bool) -> Command {
    let mut buf = Vec::new();
    c.encode("t1", &mut buf, EncodeOptions { utf8 });
    match parse_command(&buf, ParseOptions { utf8_names: utf8 }) {
        Ok((_, back)) => back,
        Err((_, e)) => panic!(
            "{:?} does not parse back: {e}",
            String::from_utf8_lossy(&buf)
        ),
    }
}

#[test]
fn example_commands_round_trip() {
    let lines: &[&[u8]] = &[
        b"a CAPABILITY\r\n",
        b"a ID (\"name\" \"x\" \"os\" NIL)\r\n",
        b"a ID NIL\r\n",
        b"a AUTHENTICATE PLAIN dGVzdAB0ZXN0AHRlc3Q=\r\n",
        b"a AUTHENTICATE EXTERNAL =\r\n",
        b"a LOGIN {5}\r\nus er \"p\\\\w\"\r\n",
        b"a ENABLE CONDSTORE UTF8=ACCEPT\r\n",
        b"a SELECT INBOX (CONDSTORE QRESYNC (67890007 90060115194045000 1:29997 (5000,7500 15000,22500)))\r\n",
        b"a EXAMINE \"~peter/mail/&U,BTFw-\" (QRESYNC (1 2 (1:3 4:6)))\r\n",
        b"a CREATE \"Important Messages\" (USE (\\Important \\Flagged))\r\n",
        b"a RENAME a b\r\n",
        b"a LIST (SUBSCRIBED RECURSIVEMATCH) \"\" (\"%\" INBOX) RETURN (CHILDREN STATUS (MESSAGES SIZE))\r\n",
        b"a LIST \"\" *\r\n",
        b"a LIST LCST (%)\r\n",
        b"a SEARCH CHARSET \"\xc3\xa9\" MODSEQ \"/flags/\xc3\xa9\" all 1\r\n",
        b"a CANCELUPDATE \"\xc3\xa9\"\r\n",
        b"a LIST () \"\" %\r\n",
        b"a LSUB \"#news.\" \"comp.mail.*\"\r\n",
        b"a STATUS blurdybloop (UIDNEXT MESSAGES MAILBOXID)\r\n",
        b"a APPEND saved (\\Seen $MDNSent) \" 7-Feb-1994 22:43:04 -0800\" {5}\r\nhello ~{3}\r\na\0b UTF8 (~{2}\r\nhi) CATENATE (URL \"/x;UID=1\" TEXT {2}\r\nab)\r\n",
        b"a UID EXPUNGE 3000:3002\r\n",
        b"a UID SEARCH RETURN (MIN MAX PARTIAL -1:-100) CHARSET UTF-8 OR (SEEN UNDELETED) HEADER X-Spam {3}\r\nyes UID $\r\n",
        b"a SEARCH RETURN () MODSEQ \"/flags/\\\\draft\" all 620162338 YOUNGER 5 SAVEDBEFORE 1-Feb-2020\r\n",
        b"a UID SORT RETURN (COUNT) (REVERSE DATE DISPLAYFROM) UTF-8 ALL\r\n",
        b"a THREAD REFERENCES US-ASCII TEXT gewp\r\n",
        b"a UID FETCH 1:* (FLAGS BODY.PEEK[HEADER.FIELDS (FROM \"X Y\")]<0.10> BINARY[1.2] BINARY.SIZE[] BODY[3.MIME]) (CHANGEDSINCE 5 VANISHED)\r\n",
        b"a FETCH $ ALL\r\n",
        b"a STORE 7,5,9 (UNCHANGEDSINCE 320162338) +FLAGS.SILENT (\\Deleted)\r\n",
        b"a UID MOVE 42:69 \"Sent Items\"\r\n",
        b"a CANCELUPDATE \"C01\" \"C02\"\r\n",
        b"a GETQUOTA \"\"\r\n",
        b"a SETQUOTA \"#user/alice\" (STORAGE 510)\r\n",
        b"a GETQUOTAROOT INBOX\r\n",
        b"a GETMETADATA (MAXSIZE 1024 DEPTH infinity) \"\" (/shared/comment)\r\n",
        b"a SETMETADATA INBOX (/private/comment {5}\r\nab\r\nc /shared/x NIL /shared/y ~{1}\r\n\0)\r\n",
        b"a NOTIFY SET STATUS (selected (MessageNew (UID BODY.PEEK[HEADER]) MessageExpunge)) (subtree (Lists \"A B\") NONE)\r\n",
        b"a NOTIFY NONE\r\n",
        b"a COMPRESS DEFLATE\r\n",
        b"a GENURLAUTH \"imap://joe@example.com/INBOX/;uid=20\" INTERNAL\r\n",
        b"a RESETKEY INBOX INTERNAL\r\n",
        b"a URLFETCH \"imap://a\" (\"imap://b\" BINARY BODY)\r\n",
        b"a XCLIENT ADDR=192.0.2.1 PORT=993 SESSION=abc=\r\n",
        b"a STATUS x (DELETED-STORAGE)\r\n",
    ];
    for line in lines {
        let (_, c) = parse_command(line, ParseOptions::default())
            .unwrap_or_else(|(_, e)| panic!("{:?}: {e}", String::from_utf8_lossy(line)));
        assert_eq!(
            round_trip(&c, false),
            c,
            "{:?}",
            String::from_utf8_lossy(line)
        );
        assert_eq!(
            round_trip(&c, true),
            c,
            "{:?} (utf8)",
            String::from_utf8_lossy(line)
        );
    }
}

fn arb_bytes() -> impl Strategy<Value = Vec<u8>> {
    proptest::collection::vec(1u8..=255, 0..20)
}

fn arb_atom() -> impl Strategy<Value = String> {
    "[A-Za-z0-9$_.-]{1,10}"
}

fn arb_date() -> impl Strategy<Value = Date> {
    (1990u16..2100, 1u8..=12, 1u8..=28).prop_map(|(y, m, d)| Date::new(y, m, d).unwrap())
}

fn arb_set() -> impl Strategy<Value = SequenceSet> {
    prop_oneof![
        Just(SequenceSet::Saved),
        proptest::collection::vec(
            prop_oneof![
                (1u32..1000).prop_map(|n| SeqItem::One(SeqNum::Value(n))),
                Just(SeqItem::One(SeqNum::Largest)),
                (1u32..1000, 1u32..1000)
                    .prop_map(|(a, b)| SeqItem::Range(SeqNum::Value(a), SeqNum::Value(b))),
                (1u32..1000).prop_map(|a| SeqItem::Range(SeqNum::Value(a), SeqNum::Largest)),
            ],
            1..5
        )
        .prop_map(SequenceSet::Set),
    ]
}

fn arb_leaf() -> impl Strategy<Value = SearchKey> {
    use SearchKey as K;
    prop_oneof![
        Just(K::All),
        Just(K::Answered),
        Just(K::Deleted),
        Just(K::Seen),
        Just(K::Unseen),
        Just(K::New),
        Just(K::SaveDateSupported),
        arb_bytes().prop_map(K::Bcc),
        arb_bytes().prop_map(K::Body),
        arb_bytes().prop_map(K::Subject),
        arb_bytes().prop_map(K::Text),
        (arb_atom(), arb_bytes()).prop_map(|(f, v)| K::Header(f, v)),
        arb_atom().prop_map(K::Keyword),
        arb_atom().prop_map(K::Unkeyword),
        any::<u32>().prop_map(|n| K::Larger(u64::from(n))),
        arb_date().prop_map(K::Before),
        arb_date().prop_map(K::SentOn),
        arb_date().prop_map(K::SavedSince),
        arb_set().prop_map(K::Uid),
        arb_set().prop_map(K::SequenceSet),
        (1u32..100_000).prop_map(|n| K::Younger(u64::from(n))),
        (any::<u32>(), any::<bool>()).prop_map(|(n, e)| K::ModSeq {
            entry: e.then(|| ("/flags/\\seen".to_owned(), "priv".to_owned())),
            modseq: u64::from(n)
        }),
    ]
}

fn arb_key() -> impl Strategy<Value = SearchKey> {
    arb_leaf().prop_recursive(4, 24, 4, |inner| {
        prop_oneof![
            inner.clone().prop_map(|k| SearchKey::Not(Box::new(k))),
            (inner.clone(), inner.clone())
                .prop_map(|(a, b)| SearchKey::Or(Box::new(a), Box::new(b))),
            proptest::collection::vec(inner, 1..4).prop_map(SearchKey::And),
        ]
    })
}

fn arb_fetch_attr() -> impl Strategy<Value = FetchAttr> {
    let part = proptest::collection::vec(1u32..20, 0..4);
    let partial = proptest::option::of(
        (any::<u32>(), 1u32..u32::MAX).prop_map(|(origin, count)| Partial { origin, count }),
    );
    let text = proptest::option::of(prop_oneof![
        Just(SectionText::Header),
        Just(SectionText::Text),
        proptest::collection::vec("[A-Z][A-Z0-9-]{0,8}", 1..3).prop_map(SectionText::HeaderFields),
        proptest::collection::vec("[A-Z][A-Z0-9-]{0,8}", 1..3)
            .prop_map(SectionText::HeaderFieldsNot),
    ]);
    prop_oneof![
        Just(FetchAttr::Envelope),
        Just(FetchAttr::Flags),
        Just(FetchAttr::Rfc822Size),
        Just(FetchAttr::BodyStructure),
        Just(FetchAttr::ModSeq),
        (any::<bool>(), part.clone(), text, partial.clone()).prop_map(
            |(peek, part, text, partial)| {
                FetchAttr::BodySection {
                    peek,
                    section: Section { part, text },
                    partial,
                }
            }
        ),
        (any::<bool>(), part.clone(), partial).prop_map(|(peek, part, partial)| {
            FetchAttr::Binary {
                peek,
                part,
                partial,
            }
        }),
        part.prop_map(FetchAttr::BinarySize),
    ]
}

proptest! {
    #[test]
    fn search_key_trees_round_trip(
        keys in proptest::collection::vec(arb_key(), 1..4),
        uid in any::<bool>(),
        charset in proptest::option::of(Just("UTF-8".to_owned())),
    ) {
        let c = Command::Search(SearchCommand { uid, kind: SearchKind::Search, ret: None, charset, keys });
        prop_assert_eq!(round_trip(&c, false), c);
    }

    #[test]
    fn fetch_attributes_round_trip(attrs in proptest::collection::vec(arb_fetch_attr(), 1..6), set in arb_set()) {
        let c = Command::Fetch { uid: true, set, attrs: FetchAttrs::List(attrs), modifiers: FetchModifiers::default() };
        prop_assert_eq!(round_trip(&c, false), c);
    }

    #[test]
    fn store_commands_round_trip(
        set in arb_set(),
        mode in prop_oneof![Just(StoreMode::Replace), Just(StoreMode::Add), Just(StoreMode::Remove)],
        silent in any::<bool>(),
        unchanged_since in proptest::option::of(any::<u32>().prop_map(u64::from)),
        keywords in proptest::collection::vec(arb_atom(), 0..4),
    ) {
        let mut flags = vec![Flag::Seen, Flag::Extension("Important".into())];
        flags.extend(keywords.into_iter().map(Flag::Keyword));
        let c = Command::Store(Store { uid: false, set, unchanged_since, mode, silent, flags });
        prop_assert_eq!(round_trip(&c, false), c);
    }
}
