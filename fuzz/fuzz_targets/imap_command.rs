//! Fuzzes IMAP command parsing: the grammar over the whole input, and the
//! streaming receiver fed in pieces whose sizes come from the input. Checks
//! that nothing panics and that the outcomes do not depend on the split.
#![no_main]

use libfuzzer_sys::fuzz_target;
use yarilo_imap_proto::response::EncodeOptions;
use yarilo_imap_proto::{
    parse_command, AppendEvent, Command, Expect, Limits, Outcome, ParseOptions, Receiver,
};

/// Runs a receiver over `data` cut at the given piece sizes, acting like a
/// driver (IDLE → DONE, AUTHENTICATE → SASL line), merging APPEND chunks.
fn run(data: &[u8], pieces: &[usize], utf8: bool) -> Vec<Outcome> {
    let mut rx = Receiver::new(Limits {
        max_line: 256,
        max_command: 2048,
        max_literal: 1024,
        max_append: 4096,
        max_nonsync: Some(512),
    });
    rx.set_options(ParseOptions { utf8_names: utf8 });
    let mut out: Vec<Outcome> = Vec::new();
    let mut rest = data;
    let mut i = 0;
    loop {
        let n = if rest.is_empty() {
            0
        } else {
            pieces
                .get(i % pieces.len().max(1))
                .copied()
                .unwrap_or(rest.len())
                .clamp(1, rest.len())
        };
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
                    command: Command::Authenticate { .. },
                    ..
                } => rx.expect(Expect::SaslResponse),
                // Reject every third literal the way a driver would.
                Outcome::NeedLiteral { size, .. } if size % 3 == 1 => rx.reject_literal(),
                _ => {}
            }
            if let (
                Some(Outcome::Append {
                    event: AppendEvent::Chunk(a),
                    tag,
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
                let _ = tag;
                continue;
            }
            out.push(o);
        }
        if rest.is_empty() {
            break;
        }
    }
    rx.shrink();
    out
}

/// A parsed command, spelled by the encoder, parses back to itself.
fn check_round_trip(data: &[u8], utf8: bool) {
    if let Ok((_, command)) = parse_command(data, ParseOptions { utf8_names: utf8 }) {
        let mut buf = Vec::new();
        command.encode("t", &mut buf, EncodeOptions { utf8 });
        match parse_command(&buf, ParseOptions { utf8_names: utf8 }) {
            Ok((_, back)) => assert_eq!(back, command, "round trip changed the command"),
            Err((_, e)) => panic!("encoded command does not parse: {e}: {buf:?}"),
        }
    }
}

fuzz_target!(|data: &[u8]| {
    check_round_trip(data, false);
    check_round_trip(data, true);
    if data.is_empty() {
        return;
    }
    let (ctl, body) = data.split_at(1);
    let utf8 = ctl[0] & 0x80 != 0;
    let whole = run(body, &[body.len().max(1)], utf8);
    let pieces = [
        usize::from(ctl[0] & 0x0f) + 1,
        usize::from(ctl[0] >> 4) + 1,
        1,
    ];
    let split = run(body, &pieces, utf8);
    assert_eq!(whole, split, "outcome depends on how input was split");
});
