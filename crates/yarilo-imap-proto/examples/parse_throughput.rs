//! Measures how fast the receiver turns a typical command mix into typed
//! commands: `cargo run --release -p yarilo-imap-proto --example parse_throughput`.

use std::time::Instant;

use yarilo_imap_proto::{Limits, Outcome, Receiver};

fn main() {
    let mix: &[&[u8]] = &[
        b"a1 UID FETCH 1:* (UID FLAGS RFC822.SIZE INTERNALDATE BODY.PEEK[HEADER.FIELDS (FROM TO CC SUBJECT DATE MESSAGE-ID)])\r\n",
        b"a2 UID STORE 4827313:4828442 +FLAGS.SILENT (\\Seen $Forwarded)\r\n",
        b"a3 UID SEARCH RETURN (ALL COUNT) CHARSET UTF-8 OR (UNSEEN SINCE 1-Feb-2024) FROM \"alice@example.com\" NOT DELETED\r\n",
        b"a4 SELECT INBOX (QRESYNC (67890007 90060115194045000 1:29997))\r\n",
        b"a5 APPEND Sent (\\Seen) {310}\r\n",
        b"a6 NOOP\r\n",
    ];
    let mut stream = Vec::new();
    for _ in 0..20_000 {
        for c in mix {
            stream.extend_from_slice(c);
            if c.starts_with(b"a5") {
                stream.extend(std::iter::repeat_n(b'm', 310));
                stream.extend_from_slice(b"\r\n");
            }
        }
    }
    let start = Instant::now();
    let mut rx = Receiver::new(Limits::default());
    let (mut commands, mut appends) = (0u64, 0u64);
    for chunk in stream.chunks(16 * 1024) {
        rx.feed(chunk);
        loop {
            match rx.next() {
                Outcome::Incomplete => break,
                Outcome::Command { .. } => commands += 1,
                Outcome::Append {
                    event: yarilo_imap_proto::AppendEvent::Done,
                    ..
                } => appends += 1,
                Outcome::Bad { reason, .. } => {
                    eprintln!("unexpected BAD: {reason}");
                    std::process::exit(1);
                }
                _ => {}
            }
        }
    }
    let secs = start.elapsed().as_secs_f64();
    let total = commands + appends;
    println!(
        "{total} commands ({appends} APPEND) from {} MiB in {secs:.3} s: {:.0} commands/s, {:.0} MiB/s",
        stream.len() >> 20,
        total as f64 / secs,
        stream.len() as f64 / (1 << 20) as f64 / secs
    );
}
