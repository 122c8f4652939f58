//! Sans-I/O framing for POP3.
//!
//! Input: [`LineReader`] splits bytes into lines ending in CRLF (a bare LF
//! is accepted, as Dovecot does), bounded in length. "No complete line
//! yet" is an expected outcome, never an error.
//!
//! Output: [`write_multiline`] turns a message as stored (LF or CRLF line
//! ends) into a POP3 multi-line body: CRLF line ends (RFC 1939 §3), a
//! leading `.` doubled (byte-stuffing), and the terminating `.` line; with
//! a line limit it writes what `TOP` answers (RFC 1939 §7: the header,
//! the blank line, then at most n body lines).

/// What [`LineReader::next_line`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Line {
    /// A complete line without its CRLF / LF.
    Complete(Vec<u8>),
    /// A line longer than the limit ended; its bytes were dropped.
    TooLong,
}

/// Splits input into bounded lines.
#[derive(Debug)]
pub struct LineReader {
    buf: Vec<u8>,
    max: usize,
    /// Inside an over-long line: drop bytes until its LF.
    discarding: bool,
}

impl LineReader {
    /// `max`: the longest line accepted, without the line end.
    pub fn new(max: usize) -> LineReader {
        LineReader {
            buf: Vec::new(),
            max: max.max(1),
            discarding: false,
        }
    }

    /// Appends bytes read from the client.
    pub fn feed(&mut self, data: &[u8]) {
        self.buf.extend_from_slice(data);
    }

    /// The next complete line, or `None` when more input is needed.
    pub fn next_line(&mut self) -> Option<Line> {
        let Some(nl) = self.buf.iter().position(|&b| b == b'\n') else {
            // Keep one byte of slack for a CR before the LF.
            if self.discarding || self.buf.len() > self.max + 1 {
                self.buf.clear();
                self.discarding = true;
            }
            return None;
        };
        let mut line: Vec<u8> = self.buf.drain(..=nl).collect();
        line.pop();
        if line.last() == Some(&b'\r') {
            line.pop();
        }
        if std::mem::take(&mut self.discarding) || line.len() > self.max {
            return Some(Line::TooLong);
        }
        Some(Line::Complete(line))
    }

    /// Whether bytes after the last complete line are waiting. After STLS
    /// they must be dropped (RFC 2595 §3.1: no plaintext injection).
    pub fn has_pending(&self) -> bool {
        !self.buf.is_empty() || self.discarding
    }

    /// Whether a complete line is waiting (pipelined commands).
    pub fn has_line(&self) -> bool {
        self.buf.contains(&b'\n')
    }

    /// Drops everything buffered.
    pub fn clear(&mut self) {
        self.buf.clear();
        self.discarding = false;
    }
}

/// Appends `message` to `out` as a multi-line response body, including
/// the final `.` line. With `body_lines = Some(n)` only the header, the
/// blank line after it and the first `n` body lines are written (TOP).
///
/// Returns the number of bytes of the message written (before stuffing),
/// for accounting.
pub fn write_multiline(out: &mut Vec<u8>, message: &[u8], body_lines: Option<u64>) -> usize {
    let mut in_body = false;
    let mut written_body_lines: u64 = 0;
    let mut consumed = 0usize;
    let mut rest = message;
    while !rest.is_empty() {
        if in_body {
            if let Some(max) = body_lines {
                if written_body_lines >= max {
                    break;
                }
            }
        }
        let (line, next) = match rest.iter().position(|&b| b == b'\n') {
            Some(nl) => (&rest[..nl], &rest[nl + 1..]),
            None => (rest, &rest[rest.len()..]),
        };
        consumed += rest.len() - next.len();
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.first() == Some(&b'.') {
            out.push(b'.');
        }
        out.extend_from_slice(line);
        out.extend_from_slice(b"\r\n");
        if in_body {
            written_body_lines += 1;
        } else if line.is_empty() {
            in_body = true;
        }
        rest = next;
    }
    out.extend_from_slice(b".\r\n");
    consumed
}

/// The size of `message` with CRLF line ends (what LIST and STAT report,
/// RFC 1939 §5 "exact size"), for messages whose size the store lacks.
pub fn crlf_size(message: &[u8]) -> u64 {
    let mut n = message.len() as u64;
    let mut prev = 0u8;
    for &b in message {
        if b == b'\n' && prev != b'\r' {
            n += 1;
        }
        prev = b;
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines_of(input: &[u8], max: usize, split: usize) -> Vec<Line> {
        let mut r = LineReader::new(max);
        let mut out = Vec::new();
        for chunk in input.chunks(split.max(1)) {
            r.feed(chunk);
            while let Some(l) = r.next_line() {
                out.push(l);
            }
        }
        out
    }

    #[test]
    fn lines_are_the_same_for_every_split_of_the_input() {
        let input = b"USER a\r\nPASS b c\nSTAT\r\n\r\nQUIT\r\n";
        let whole = lines_of(input, 100, input.len());
        assert_eq!(
            whole,
            vec![
                Line::Complete(b"USER a".to_vec()),
                Line::Complete(b"PASS b c".to_vec()),
                Line::Complete(b"STAT".to_vec()),
                Line::Complete(Vec::new()),
                Line::Complete(b"QUIT".to_vec()),
            ]
        );
        for split in 1..input.len() {
            assert_eq!(lines_of(input, 100, split), whole, "split {split}");
        }
    }

    #[test]
    fn an_over_long_line_is_reported_once_and_the_next_line_survives() {
        let mut input = vec![b'x'; 50];
        input.extend_from_slice(b"\r\nNOOP\r\n");
        for split in 1..input.len() {
            assert_eq!(
                lines_of(&input, 10, split),
                vec![Line::TooLong, Line::Complete(b"NOOP".to_vec())],
                "split {split}"
            );
        }
    }

    #[test]
    fn a_line_of_exactly_the_limit_is_accepted() {
        assert_eq!(
            lines_of(b"abcde\r\n", 5, 1),
            vec![Line::Complete(b"abcde".to_vec())]
        );
        assert_eq!(lines_of(b"abcdef\r\n", 5, 1), vec![Line::TooLong]);
    }

    #[test]
    fn pending_input_is_visible_for_stls() {
        let mut r = LineReader::new(100);
        r.feed(b"STLS\r\nUSER evil\r\n");
        assert_eq!(r.next_line(), Some(Line::Complete(b"STLS".to_vec())));
        assert!(r.has_pending() && r.has_line());
        r.clear();
        assert!(!r.has_pending());
    }

    fn multi(msg: &[u8], top: Option<u64>) -> String {
        let mut out = Vec::new();
        write_multiline(&mut out, msg, top);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn lf_messages_get_crlf_and_dots_are_stuffed() {
        assert_eq!(
            multi(b"Subject: a\n\n.hidden\n..two\nend\n", None),
            "Subject: a\r\n\r\n..hidden\r\n...two\r\nend\r\n.\r\n"
        );
    }

    #[test]
    fn crlf_messages_pass_unchanged_and_a_missing_last_newline_is_added() {
        assert_eq!(
            multi(b"A: b\r\n\r\nbody", None),
            "A: b\r\n\r\nbody\r\n.\r\n"
        );
        assert_eq!(multi(b"", None), ".\r\n");
    }

    #[test]
    fn top_writes_the_header_the_blank_line_and_n_body_lines() {
        let m = b"A: 1\nB: 2\n\nl1\nl2\nl3\n";
        assert_eq!(multi(m, Some(0)), "A: 1\r\nB: 2\r\n\r\n.\r\n");
        assert_eq!(multi(m, Some(2)), "A: 1\r\nB: 2\r\n\r\nl1\r\nl2\r\n.\r\n");
        assert_eq!(multi(m, Some(99)), multi(m, None));
        // No body at all: the header only.
        assert_eq!(multi(b"A: 1\n", Some(0)), "A: 1\r\n.\r\n");
    }

    #[test]
    fn crlf_size_counts_bare_lf_as_two_bytes() {
        assert_eq!(crlf_size(b"a\nb\r\n"), 6);
        assert_eq!(crlf_size(b""), 0);
    }

    proptest::proptest! {
        #[test]
        fn multiline_output_never_contains_a_bare_dot_line_before_the_end(
            msg in proptest::collection::vec(proptest::sample::select(vec![b'.', b'\r', b'\n', b'a']), 0..200)
        ) {
            let mut out = Vec::new();
            write_multiline(&mut out, &msg, None);
            let s = out;
            proptest::prop_assert!(s.ends_with(b".\r\n"));
            let body = &s[..s.len() - 3];
            // Every line ends in CRLF, and none of them is the terminator.
            proptest::prop_assert!(body.is_empty() || body.ends_with(b"\r\n"));
            for line in body.split(|&b| b == b'\n') {
                proptest::prop_assert!(line != b".\r");
            }
        }

        #[test]
        fn line_reader_never_returns_more_than_the_limit(
            input in proptest::collection::vec(proptest::sample::select(vec![b'x', b'\r', b'\n']), 0..300),
            split in 1usize..20,
        ) {
            for l in lines_of(&input, 16, split) {
                if let Line::Complete(b) = l {
                    proptest::prop_assert!(b.len() <= 16);
                }
            }
        }
    }
}
