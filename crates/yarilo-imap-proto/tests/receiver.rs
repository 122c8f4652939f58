//! The streaming receiver: captured sessions give the same outcomes on every
//! split, APPEND is streamed, limits hold, hostile input is a BAD and never a
//! panic.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic

use proptest::prelude::*;
use yarilo_imap_proto::command::SearchKey;
use yarilo_imap_proto::{
    AppendEvent, AppendKind, BadReason, Command, Expect, Flag, Limits, Mailbox, Outcome,
    ParseError, Receiver,
};

fn small_limits() -> Limits {
    Limits {
        max_line: 512,
        max_command: 4096,
        max_literal: 1024,
        max_append: 100_000,
        max_nonsync: None,
    }
}

/// Drives a receiver like a session would, feeding `data` in pieces of the
/// given sizes (cycled), merging consecutive APPEND chunks.
fn run(limits: Limits, data: &[u8], pieces: &[usize]) -> Vec<Outcome> {
    let mut rx = Receiver::new(limits);
    let mut out: Vec<Outcome> = Vec::new();
    let mut rest = data;
    let mut i = 0;
    loop {
        let n = pieces[i % pieces.len()]
            .clamp(1, rest.len().max(1))
            .min(rest.len());
        rx.feed(&rest[..n]);
        rest = &rest[n..];
        i += 1;
        loop {
            let o = rx.next();
            match &o {
                Outcome::Incomplete => break,
                Outcome::Command {
                    command: Command::Idle,
                    ..
                } => rx.expect(Expect::IdleDone),
                Outcome::Command {
                    command: Command::Authenticate { initial: None, .. },
                    ..
                } => rx.expect(Expect::SaslResponse),
                _ => {}
            }
            if let (
                Some(Outcome::Append {
                    event: AppendEvent::Chunk(a),
                    ..
                }),
                Outcome::Append {
                    event: AppendEvent::Chunk(b),
                    ..
                },
            ) = (out.last_mut(), &o)
            {
                let mut v = a.to_vec();
                v.extend_from_slice(b);
                *a = v.into();
                continue;
            }
            out.push(o);
        }
        if rest.is_empty() {
            break;
        }
    }
    out
}

fn session() -> Vec<u8> {
    let mut s = Vec::new();
    s.extend_from_slice(b"a1 CAPABILITY\r\n");
    s.extend_from_slice(b"a2 LOGIN {4}\r\nuser {6+}\r\nsecret\r\n");
    s.extend_from_slice(b"a3 SELECT INBOX (CONDSTORE)\r\n");
    s.extend_from_slice(b"a4 APPEND INBOX (\\Seen) {12}\r\nHello\r\nworld\r\n");
    s.extend_from_slice(
        b"a5 APPEND {6}\r\nDrafts (\\Draft) \"10-Oct-2020 10:00:00 +0000\" {3+}\r\nabc UTF8 (~{2}\r\n\0x) CATENATE (URL \"/INBOX;UIDVALIDITY=1/;UID=1\" TEXT {4}\r\nmore URL {8}\r\n/x;UID=2)\r\n",
    );
    s.extend_from_slice(b"a6 IDLE\r\nDONE\r\n");
    s.extend_from_slice(b"a7 AUTHENTICATE PLAIN\r\ndGVzdAB0ZXN0AHRlc3Q=\r\n");
    s.extend_from_slice(
        b"a8 UID FETCH 1:* (FLAGS BODY.PEEK[HEADER.FIELDS (FROM)]) (CHANGEDSINCE 5)\r\n",
    );
    s.extend_from_slice(b"a9 BOGUS\r\n");
    s.extend_from_slice(b"a10 SEARCH TEXT {99999999999}\r\n");
    s.extend_from_slice(b"a11 SEARCH TEXT {2000+}\r\n");
    s.extend_from_slice(&[b'x'; 2000]);
    s.extend_from_slice(b" ALL\r\n");
    s.extend_from_slice(b"a12 APPEND INBOX {100001}\r\n");
    s.extend_from_slice(b"a13 NOOP\0\r\n");
    s.extend_from_slice(b"a15 IDLE\r\n");
    s.extend_from_slice(&[b'x'; 600]);
    s.extend_from_slice(b"\r\n");
    s.extend_from_slice(b"a16 SEARCH TEXT ");
    s.extend_from_slice(&[b'y'; 600]);
    s.extend_from_slice(b" {3+}\r\nabc\r\n");
    s.extend_from_slice(b"a14 NOOP\r\n");
    s
}

fn cmd(tag: &str, command: Command) -> Outcome {
    Outcome::Command {
        tag: tag.into(),
        command,
    }
}

fn app(tag: &str, event: AppendEvent) -> Outcome {
    Outcome::Append {
        tag: tag.into(),
        event,
    }
}

#[test]
fn captured_session_gives_the_expected_outcomes() {
    let out = run(small_limits(), &session(), &[usize::MAX]);
    let need = |tag: &str, size, sync| Outcome::NeedLiteral {
        tag: Some(tag.into()),
        size,
        sync,
    };
    let ann = |size, sync, binary| yarilo_imap_proto::LiteralAnnounce { size, sync, binary };
    let expected = [
        cmd("a1", Command::Capability),
        need("a2", 4, true),
        need("a2", 6, false),
        cmd(
            "a2",
            Command::Login {
                username: b"user".to_vec(),
                password: b"secret".to_vec(),
            },
        ),
        // a3 is checked below by name
    ];
    assert_eq!(out[..4], expected[..]);
    assert!(
        matches!(&out[4], Outcome::Command { tag, command: Command::Select(s) } if tag == "a3" && s.condstore)
    );
    let rest = &out[5..];
    let expected_rest = [
        app(
            "a4",
            AppendEvent::Message {
                mailbox: Mailbox::new("INBOX"),
                flags: vec![Flag::Seen],
                date: None,
                kind: AppendKind::Literal(ann(12, true, false)),
            },
        ),
        app("a4", AppendEvent::Chunk("Hello\r\nworld".into())),
        app("a4", AppendEvent::LiteralEnd),
        app("a4", AppendEvent::Done),
        need("a5", 6, true),
    ];
    assert_eq!(rest[..5], expected_rest[..]);
    let Outcome::Append {
        event:
            AppendEvent::Message {
                mailbox,
                date,
                kind,
                ..
            },
        ..
    } = &rest[5]
    else {
        panic!("{:?}", rest[5])
    };
    assert_eq!(mailbox.as_str(), "Drafts");
    assert!(date.is_some());
    assert_eq!(*kind, AppendKind::Literal(ann(3, false, false)));
    let expected_a5 = [
        app("a5", AppendEvent::Chunk("abc".into())),
        app("a5", AppendEvent::LiteralEnd),
    ];
    assert_eq!(rest[6..8], expected_a5[..]);
    assert!(
        matches!(&rest[8], Outcome::Append { event: AppendEvent::Message { kind: AppendKind::Utf8(a), .. }, .. } if a.binary && a.size == 2)
    );
    let expected_a5 = [
        app("a5", AppendEvent::Chunk(b"\0x".to_vec().into())),
        app("a5", AppendEvent::LiteralEnd),
    ];
    assert_eq!(rest[9..11], expected_a5[..]);
    assert!(matches!(
        &rest[11],
        Outcome::Append {
            event: AppendEvent::Message {
                kind: AppendKind::Catenate,
                ..
            },
            ..
        }
    ));
    let expected_a5 = [
        app(
            "a5",
            AppendEvent::CatUrl("/INBOX;UIDVALIDITY=1/;UID=1".into()),
        ),
        app("a5", AppendEvent::CatText(ann(4, true, false))),
        app("a5", AppendEvent::Chunk("more".into())),
        app("a5", AppendEvent::LiteralEnd),
        need("a5", 8, true),
        app("a5", AppendEvent::CatUrl("/x;UID=2".into())),
        app("a5", AppendEvent::CatEnd),
        app("a5", AppendEvent::Done),
        cmd("a6", Command::Idle),
        Outcome::IdleDone,
        cmd(
            "a7",
            Command::Authenticate {
                mechanism: "PLAIN".into(),
                initial: None,
            },
        ),
        Outcome::SaslResponse(b"dGVzdAB0ZXN0AHRlc3Q=".to_vec()),
    ];
    assert_eq!(rest[12..24], expected_a5[..]);
    assert!(
        matches!(&rest[24], Outcome::Command { tag, command: Command::Fetch { uid: true, .. } } if tag == "a8")
    );
    let tail = [
        Outcome::Bad {
            tag: Some("a9".into()),
            reason: BadReason::Syntax(ParseError::UnknownCommand),
        },
        Outcome::Bad {
            tag: Some("a10".into()),
            reason: BadReason::LiteralTooLarge {
                size: 99_999_999_999,
                limit: 1024,
            },
        },
        Outcome::Bad {
            tag: Some("a11".into()),
            reason: BadReason::LiteralTooLarge {
                size: 2000,
                limit: 1024,
            },
        },
        Outcome::Bad {
            tag: Some("a12".into()),
            reason: BadReason::LiteralTooLarge {
                size: 100_001,
                limit: 100_000,
            },
        },
        Outcome::Bad {
            tag: Some("a13".into()),
            reason: BadReason::Syntax(ParseError::Expected("CRLF")),
        },
        cmd("a15", Command::Idle),
        Outcome::Bad {
            tag: None,
            reason: BadReason::LineTooLong,
        },
        Outcome::Bad {
            tag: Some("a16".into()),
            reason: BadReason::LineTooLong,
        },
        cmd("a14", Command::Noop),
    ];
    assert_eq!(rest[25..], tail[..]);
}

#[test]
fn every_split_of_a_captured_session_gives_the_same_outcomes() {
    let data = session();
    let whole = run(small_limits(), &data, &[usize::MAX]);
    for cut in 1..data.len() {
        let split = run(small_limits(), &data, &[cut, usize::MAX]);
        assert_eq!(whole, split, "split at {cut}");
    }
    assert_eq!(whole, run(small_limits(), &data, &[1]), "byte at a time");
    assert_eq!(
        whole,
        run(small_limits(), &data, &[7, 3, 64]),
        "uneven pieces"
    );
}

#[test]
fn append_data_is_streamed_not_buffered() {
    let mut rx = Receiver::new(small_limits());
    rx.feed(b"A APPEND INBOX {50000}\r\n");
    assert!(matches!(
        rx.next(),
        Outcome::Append {
            event: AppendEvent::Message { .. },
            ..
        }
    ));
    let mut got = 0;
    let mut ended = false;
    for _ in 0..50 {
        rx.feed(&[b'a'; 1000]);
        loop {
            match rx.next() {
                Outcome::Append {
                    event: AppendEvent::Chunk(c),
                    ..
                } => got += c.len(),
                Outcome::Append {
                    event: AppendEvent::LiteralEnd,
                    ..
                } => ended = true,
                Outcome::Incomplete => break,
                other => panic!("{other:?}"),
            }
        }
        // Nothing accumulates while streaming.
        assert!(rx.buffered() < 1000, "buffered {}", rx.buffered());
    }
    assert_eq!(got, 50_000);
    assert!(ended);
    rx.feed(b"\r\n");
    assert!(matches!(
        rx.next(),
        Outcome::Append {
            event: AppendEvent::Done,
            ..
        }
    ));
    assert_eq!(rx.next(), Outcome::Incomplete);
}

#[test]
fn rejected_sync_literal_resumes_at_next_command() {
    let mut rx = Receiver::new(small_limits());
    rx.feed(b"A APPEND INBOX {500}\r\n");
    assert!(matches!(
        rx.next(),
        Outcome::Append {
            event: AppendEvent::Message { .. },
            ..
        }
    ));
    rx.reject_literal();
    rx.feed(b"B NOOP\r\n");
    assert_eq!(rx.next(), cmd("B", Command::Noop));
    // A rejected non-synchronizing literal is read and discarded.
    rx.feed(b"C APPEND INBOX {5+}\r\nhello\r\nD NOOP\r\n");
    assert!(matches!(
        rx.next(),
        Outcome::Append {
            event: AppendEvent::Message { .. },
            ..
        }
    ));
    rx.reject_literal();
    assert_eq!(rx.next(), cmd("D", Command::Noop));
}

#[test]
fn literal_minus_limits_non_synchronizing_literals() {
    let mut rx = Receiver::new(Limits {
        max_nonsync: Some(4096),
        ..Limits::default()
    });
    let mut input = b"A LOGIN {5000+}\r\n".to_vec();
    input.extend_from_slice(&[b'u'; 5000]);
    input.extend_from_slice(b" {1+}\r\np\r\nB NOOP\r\n");
    rx.feed(&input);
    assert_eq!(
        rx.next(),
        Outcome::Bad {
            tag: Some("A".into()),
            reason: BadReason::LiteralTooLarge {
                size: 5000,
                limit: 4096
            }
        }
    );
    assert_eq!(rx.next(), cmd("B", Command::Noop));
}

#[test]
fn very_long_line_is_bad_once_and_memory_stays_bounded() {
    let mut rx = Receiver::new(small_limits());
    rx.feed(b"toolong SEARCH TEXT ");
    let mut bads = 0;
    for _ in 0..1000 {
        rx.feed(&[b'x'; 1000]);
        loop {
            match rx.next() {
                Outcome::Incomplete => break,
                Outcome::Bad {
                    tag,
                    reason: BadReason::LineTooLong,
                } => {
                    assert_eq!(tag.as_deref(), Some("toolong"));
                    bads += 1;
                }
                other => panic!("{other:?}"),
            }
        }
        assert!(rx.buffered() <= 1000 + 512);
    }
    rx.feed(b"\r\nnext NOOP\r\n");
    assert_eq!(rx.next(), cmd("next", Command::Noop));
    assert_eq!(bads, 1);
}

#[test]
fn long_line_after_a_literal_is_caught_without_more_input() {
    // Found by the fuzzer: the line-length check must not wait for the
    // next feed when a literal was consumed in the same call.
    let mut data = b"a LOGIN {3}\r\nabc".to_vec();
    data.extend_from_slice(&[b'x'; 600]);
    let whole = run(small_limits(), &data, &[usize::MAX]);
    assert_eq!(
        whole.last(),
        Some(&Outcome::Bad {
            tag: Some("a".into()),
            reason: BadReason::LineTooLong
        })
    );
    assert_eq!(whole, run(small_limits(), &data, &[3, 4, 1]));
}

#[test]
fn line_trickling_in_byte_by_byte_is_parsed() {
    // Each byte is fed and polled separately, as from a slow client; the
    // receiver scans each byte once (quadratic rescanning would make this
    // test take minutes).
    let mut line = b"a SEARCH TEXT \"".to_vec();
    line.extend(std::iter::repeat_n(b'z', 60_000));
    line.extend_from_slice(b"\"\r\n");
    let mut rx = Receiver::new(Limits::default());
    let mut got = None;
    for b in &line {
        rx.feed(std::slice::from_ref(b));
        match rx.next() {
            Outcome::Incomplete => {}
            other => got = Some(other),
        }
    }
    assert!(matches!(
        got,
        Some(Outcome::Command {
            command: Command::Search(_),
            ..
        })
    ));
}

#[test]
fn deep_nesting_is_bad_not_a_stack_overflow() {
    let mut line = b"a SEARCH ".to_vec();
    line.extend(std::iter::repeat_n(b'(', 20_000));
    line.extend_from_slice(b"ALL");
    line.extend(std::iter::repeat_n(b')', 20_000));
    line.extend_from_slice(b"\r\n");
    let mut rx = Receiver::new(Limits::default());
    rx.feed(&line);
    assert_eq!(
        rx.next(),
        Outcome::Bad {
            tag: Some("a".into()),
            reason: BadReason::Syntax(ParseError::TooDeep)
        }
    );
    let mut line = b"b SEARCH".to_vec();
    for _ in 0..10_000 {
        line.extend_from_slice(b" NOT");
    }
    line.extend_from_slice(b" ALL\r\n");
    rx.feed(&line);
    assert!(matches!(
        rx.next(),
        Outcome::Bad {
            reason: BadReason::Syntax(ParseError::TooDeep),
            ..
        }
    ));
    // Exactly at the bound still parses.
    let mut line = b"c SEARCH".to_vec();
    for _ in 0..31 {
        line.extend_from_slice(b" NOT");
    }
    line.extend_from_slice(b" ALL\r\n");
    rx.feed(&line);
    assert!(matches!(
        rx.next(),
        Outcome::Command {
            command: Command::Search(_),
            ..
        }
    ));
}

#[test]
fn nul_and_overflowing_numbers_are_bad() {
    let mut rx = Receiver::new(Limits::default());
    rx.feed(b"a LOGIN {3}\r\nu\0s p\r\n");
    assert!(matches!(rx.next(), Outcome::NeedLiteral { .. }));
    assert!(matches!(rx.next(), Outcome::Bad { tag: Some(t), .. } if t == "a"));
    rx.feed(b"b FETCH 99999999999999999999 FLAGS\r\n");
    assert!(matches!(rx.next(), Outcome::Bad { tag: Some(t), .. } if t == "b"));
    rx.feed(b"c SEARCH TEXT {99999999999999999999999}\r\n");
    assert!(matches!(rx.next(), Outcome::Bad { tag: Some(t), .. } if t == "c"));
    rx.feed(b"d SEARCH LARGER 5\r\n");
    assert!(
        matches!(rx.next(), Outcome::Command { command: Command::Search(s), .. } if s.keys == vec![SearchKey::Larger(5)])
    );
}

#[test]
fn command_too_long_counts_literals() {
    let mut rx = Receiver::new(small_limits());
    let mut input = Vec::new();
    input.extend_from_slice(b"a SETMETADATA INBOX (");
    for i in 0..8 {
        input.extend_from_slice(format!("/private/e{i} {{1000+}}\r\n").as_bytes());
        input.extend(std::iter::repeat_n(b'v', 1000));
        input.push(b' ');
    }
    input.extend_from_slice(b"/private/x NIL)\r\nb NOOP\r\n");
    let out = run(small_limits(), &input, &[usize::MAX]);
    assert!(out.iter().any(|o| matches!(o, Outcome::Bad { tag: Some(t), reason: BadReason::LiteralTooLarge { .. } | BadReason::CommandTooLong } if t == "a")));
    assert_eq!(out.last(), Some(&cmd("b", Command::Noop)));
    rx.feed(b"x NOOP\r\n");
    assert_eq!(rx.next(), cmd("x", Command::Noop));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Random input never panics and does not depend on the split.
    #[test]
    fn random_input_is_split_invariant(
        data in proptest::collection::vec(any::<u8>(), 0..600),
        a in 1usize..40,
        b in 1usize..40,
    ) {
        let whole = run(small_limits(), &data, &[usize::MAX]);
        let split = run(small_limits(), &data, &[a, b]);
        prop_assert_eq!(whole, split);
    }

    /// Tiny limits make every limit path reachable by short inputs.
    #[test]
    fn tiny_limits_are_split_invariant(
        toks in proptest::collection::vec(prop::sample::select(vec![
            "a ", "longtag1234 ", "APPEND ", "INBOX ", "{3}\r\n", "{9+}\r\n", "{40}\r\n",
            "~{2+}\r\n", "\r\n", "\n", "x", "xxxxxxxx", " ", "(", ")", "IDLE\r\n", "NOOP\r\n",
        ]), 0..40),
        a in 1usize..12,
        b in 1usize..12,
    ) {
        let tiny = Limits { max_line: 16, max_command: 64, max_literal: 32, max_append: 64, max_nonsync: Some(8) };
        let data: Vec<u8> = toks.concat().into_bytes();
        let whole = run(tiny, &data, &[usize::MAX]);
        let split = run(tiny, &data, &[a, b]);
        prop_assert_eq!(whole, split);
    }

    /// Input built from IMAP-ish tokens reaches deeper into the grammar.
    #[test]
    fn tokenised_input_is_split_invariant(
        toks in proptest::collection::vec(prop::sample::select(vec![
            "a ", "b1 ", "APPEND ", "SEARCH ", "FETCH ", "UID ", "STORE ", "LIST ", "SELECT ",
            "INBOX ", "(", ")", "{3}\r\n", "{2+}\r\n", "~{1}\r\n", "\r\n", "\"q\" ", "1:* ",
            "$ ", "NOT ", "OR ", "ALL ", "BODY[1.2.MIME]<0.5> ", "FLAGS ", "\\Seen ", "CATENATE ",
            "URL ", "TEXT ", "UTF8 ", "IDLE\r\n", "DONE\r\n", "NOOP\r\n", "x", " ",
        ]), 0..60),
        a in 1usize..20,
    ) {
        let data: Vec<u8> = toks.concat().into_bytes();
        let whole = run(small_limits(), &data, &[usize::MAX]);
        let split = run(small_limits(), &data, &[a, 1]);
        prop_assert_eq!(whole, split);
    }
}

#[test]
fn oversized_non_synchronizing_append_is_read_and_discarded() {
    let mut data = b"A APPEND INBOX {200000+}\r\n".to_vec();
    data.extend(std::iter::repeat_n(b'm', 200_000));
    data.extend_from_slice(b"\r\nB NOOP\r\n");
    let out = run(small_limits(), &data, &[4096]);
    assert_eq!(
        out,
        vec![
            Outcome::Bad {
                tag: Some("A".into()),
                reason: BadReason::LiteralTooLarge {
                    size: 200_000,
                    limit: 100_000
                }
            },
            cmd("B", Command::Noop),
        ]
    );
}

#[test]
fn second_message_of_a_multiappend_can_be_rejected() {
    let mut rx = Receiver::new(small_limits());
    rx.feed(b"A APPEND INBOX {2+}\r\nhi {50000+}\r\n");
    let mut events = Vec::new();
    loop {
        match rx.next() {
            Outcome::Incomplete => break,
            Outcome::Append { event, .. } => {
                let second = matches!(&event, AppendEvent::Message { kind: AppendKind::Literal(a), .. } if a.size == 50_000);
                events.push(event);
                if second {
                    // e.g. over the user's APPENDLIMIT: the session answers
                    // "A NO [TOOBIG]" and drops the first message too.
                    rx.reject_literal();
                }
            }
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(events.len(), 4, "{events:?}"); // Message, Chunk, LiteralEnd, Message
    rx.feed(&[b'z'; 50_000]);
    rx.feed(b"\r\nB NOOP\r\n");
    assert_eq!(rx.next(), cmd("B", Command::Noop));
}

#[test]
fn sasl_exchange_lines_and_cancel() {
    let mut rx = Receiver::new(Limits::default());
    rx.feed(b"a AUTHENTICATE SCRAM-SHA-256\r\nbiws\r\nb AUTHENTICATE PLAIN\r\n*\r\nc NOOP\r\n");
    assert!(matches!(
        rx.next(),
        Outcome::Command {
            command: Command::Authenticate { .. },
            ..
        }
    ));
    rx.expect(Expect::SaslResponse);
    assert_eq!(rx.next(), Outcome::SaslResponse(b"biws".to_vec()));
    assert!(matches!(
        rx.next(),
        Outcome::Command {
            command: Command::Authenticate { .. },
            ..
        }
    ));
    rx.expect(Expect::SaslResponse);
    assert_eq!(rx.next(), Outcome::SaslCancel);
    assert_eq!(rx.next(), cmd("c", Command::Noop));
    // Anything but DONE during IDLE is a BAD, and IDLE ends.
    rx.feed(b"d IDLE\r\nd NOOP\r\ne NOOP\r\n");
    assert!(matches!(
        rx.next(),
        Outcome::Command {
            command: Command::Idle,
            ..
        }
    ));
    rx.expect(Expect::IdleDone);
    assert!(matches!(rx.next(), Outcome::Bad { tag: None, .. }));
    assert_eq!(rx.next(), cmd("e", Command::Noop));
}
