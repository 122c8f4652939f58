//! Framing, sans-I/O: command lines, the DATA body (RFC 5321 §4.5.2
//! dot-unstuffing) and the helpers that go the other way (dot-stuffing
//! for the relay, CRLF → LF for the store).
//!
//! Invariant against SMTP smuggling: DATA ends only at `CRLF . CRLF`; a
//! bare LF never starts a line, so `LF . LF` or `LF . CRLF` is content.

use bytes::{Buf, BytesMut};

/// What [`take_line`] found in the buffer.
#[derive(Debug, PartialEq, Eq)]
pub enum Line {
    /// A line without its CRLF (or bare LF).
    Complete(Vec<u8>),
    /// A line longer than the limit; its bytes up to the LF were dropped.
    TooLong,
    /// No LF yet; read more.
    Incomplete,
}

/// Command-line framing with a bound: a line longer than `max` bytes
/// (terminator included) is reported once as [`Line::TooLong`] and then
/// skipped up to its LF, so memory stays bounded whatever the client sends.
#[derive(Debug, Default)]
pub struct LineFramer {
    discarding: bool,
}

impl LineFramer {
    pub fn take_line(&mut self, buf: &mut BytesMut, max: usize) -> Line {
        loop {
            match buf.iter().position(|&b| b == b'\n') {
                Some(i) => {
                    if self.discarding {
                        buf.advance(i + 1);
                        self.discarding = false;
                        return Line::TooLong;
                    }
                    if i + 1 > max {
                        buf.advance(i + 1);
                        return Line::TooLong;
                    }
                    let mut line = buf.split_to(i + 1).to_vec();
                    line.pop();
                    if line.last() == Some(&b'\r') {
                        line.pop();
                    }
                    return Line::Complete(line);
                }
                None => {
                    if self.discarding {
                        buf.clear();
                        return Line::Incomplete;
                    }
                    if buf.len() > max {
                        buf.clear();
                        self.discarding = true;
                        continue;
                    }
                    return Line::Incomplete;
                }
            }
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum DotState {
    /// After CRLF (or at the start of the body).
    LineStart,
    /// Inside a line; `cr` is whether the last byte was CR.
    Mid {
        cr: bool,
    },
    /// A `.` at the start of a line.
    Dot,
    /// `.` CR at the start of a line.
    DotCr,
    Done,
}

/// The message body under construction, with a size cap: past the cap
/// bytes are counted, not kept, so the reply can say 552 after the whole
/// body was read (RFC 5321 §4.5.3.1.10 wants the data consumed).
#[derive(Debug, Default)]
pub struct Body {
    pub data: Vec<u8>,
    /// Bytes received (kept or not).
    pub total: u64,
    /// 0 = no limit.
    pub cap: u64,
}

impl Body {
    pub fn new(cap: u64) -> Body {
        Body {
            data: Vec::new(),
            total: 0,
            cap,
        }
    }

    pub fn push(&mut self, bytes: &[u8]) {
        self.total += bytes.len() as u64;
        if !self.overflowed() {
            self.data.extend_from_slice(bytes);
        }
    }

    pub fn overflowed(&self) -> bool {
        self.cap > 0 && self.total > self.cap
    }
}

/// Streaming DATA reader: feed any split of the input, get unstuffed
/// content and, eventually, `done`.
#[derive(Debug)]
pub struct DotUnstuffer {
    state: DotState,
}

impl Default for DotUnstuffer {
    fn default() -> Self {
        DotUnstuffer {
            state: DotState::LineStart,
        }
    }
}

impl DotUnstuffer {
    pub fn is_done(&self) -> bool {
        self.state == DotState::Done
    }

    /// Consumes bytes of `input` into `out`; returns how many were
    /// consumed (all of them unless the terminator was found).
    pub fn feed(&mut self, input: &[u8], out: &mut Body) -> usize {
        let mut i = 0;
        while i < input.len() {
            match self.state {
                DotState::Done => return i,
                DotState::LineStart => {
                    if input[i] == b'.' {
                        self.state = DotState::Dot;
                        i += 1;
                    } else {
                        self.state = DotState::Mid { cr: false };
                    }
                }
                DotState::Mid { cr } => {
                    let rest = &input[i..];
                    match rest.iter().position(|&b| b == b'\n') {
                        Some(p) => {
                            let crlf = if p == 0 { cr } else { rest[p - 1] == b'\r' };
                            out.push(&rest[..=p]);
                            i += p + 1;
                            self.state = if crlf {
                                DotState::LineStart
                            } else {
                                DotState::Mid { cr: false }
                            };
                        }
                        None => {
                            out.push(rest);
                            let cr = rest.last() == Some(&b'\r');
                            i = input.len();
                            self.state = DotState::Mid { cr };
                        }
                    }
                }
                DotState::Dot => {
                    if input[i] == b'\r' {
                        self.state = DotState::DotCr;
                        i += 1;
                    } else {
                        // RFC 5321 §4.5.2: drop the leading dot.
                        self.state = DotState::Mid { cr: false };
                    }
                }
                DotState::DotCr => {
                    if input[i] == b'\n' {
                        self.state = DotState::Done;
                        return i + 1;
                    }
                    out.push(b"\r");
                    self.state = DotState::Mid { cr: true };
                }
            }
        }
        i
    }
}

/// Dot-stuffs `msg` for DATA to an upstream server and normalises every
/// line ending to CRLF (a bare CR or LF would let a message smuggle a
/// second one past a lenient relay); ends with `CRLF . CRLF`.
pub fn dot_stuff(msg: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(msg.len() + msg.len() / 40 + 8);
    let mut line_start = true;
    let mut i = 0;
    while i < msg.len() {
        let b = msg[i];
        if line_start && b == b'.' {
            out.push(b'.');
        }
        line_start = false;
        match b {
            b'\r' => {
                out.extend_from_slice(b"\r\n");
                if msg.get(i + 1) == Some(&b'\n') {
                    i += 1;
                }
                line_start = true;
            }
            b'\n' => {
                out.extend_from_slice(b"\r\n");
                line_start = true;
            }
            _ => out.push(b),
        }
        i += 1;
    }
    if !line_start {
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b".\r\n");
    out
}

/// CRLF → LF, as Dovecot stores Maildir files (`mail_save_crlf = no`).
pub fn crlf_to_lf(msg: &[u8], out: &mut Vec<u8>) {
    out.reserve(msg.len());
    let mut start = 0;
    let mut i = 0;
    while i + 1 < msg.len() {
        if msg[i] == b'\r' && msg[i + 1] == b'\n' {
            out.extend_from_slice(&msg[start..i]);
            start = i + 1;
            i += 2;
        } else {
            i += 1;
        }
    }
    out.extend_from_slice(&msg[start..]);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unstuff_split(input: &[u8], splits: &[usize]) -> (Vec<u8>, usize, bool) {
        let mut u = DotUnstuffer::default();
        let mut body = Body::new(0);
        let mut consumed = 0;
        let mut prev = 0;
        for &s in splits.iter().chain(std::iter::once(&input.len())) {
            if u.is_done() || s < prev {
                continue;
            }
            let n = u.feed(&input[prev..s], &mut body);
            consumed += n;
            prev = s;
            if u.is_done() {
                break;
            }
        }
        (body.data, consumed, u.is_done())
    }

    const WIRE: &[u8] = b"Subject: x\r\n\r\n..leading dot\r\n.x\r\nbare\n.\nstill\r\n.\r\nNEXT";
    const CONTENT: &[u8] = b"Subject: x\r\n\r\n.leading dot\r\nx\r\nbare\n.\nstill\r\n";

    #[test]
    fn unstuffs_and_stops_at_crlf_dot_crlf_only() {
        let (data, consumed, done) = unstuff_split(WIRE, &[]);
        assert!(done);
        assert_eq!(data, CONTENT);
        assert_eq!(&WIRE[consumed..], b"NEXT");
    }

    #[test]
    fn every_two_way_split_gives_the_same_result() {
        for a in 0..=WIRE.len() {
            for b in a..=WIRE.len() {
                let (data, consumed, done) = unstuff_split(WIRE, &[a, b]);
                assert!(done, "split {a} {b}");
                assert_eq!(data, CONTENT, "split {a} {b}");
                assert_eq!(&WIRE[consumed..], b"NEXT", "split {a} {b}");
            }
        }
    }

    #[test]
    fn empty_body() {
        let (data, consumed, done) = unstuff_split(b".\r\n", &[]);
        assert!(done && data.is_empty() && consumed == 3);
    }

    #[test]
    fn cap_counts_but_does_not_keep() {
        let mut u = DotUnstuffer::default();
        let mut body = Body::new(5);
        u.feed(b"0123456789\r\n.\r\n", &mut body);
        assert!(u.is_done());
        assert!(body.overflowed());
        assert_eq!(body.total, 12);
        assert!(body.data.len() <= 12);
    }

    #[test]
    fn stuff_round_trips_and_normalises() {
        let msg = b"a\r\n.b\n..c\rd";
        let wire = dot_stuff(msg);
        assert_eq!(wire, b"a\r\n..b\r\n...c\r\nd\r\n.\r\n");
        let (data, _, done) = unstuff_split(&wire, &[]);
        assert!(done);
        assert_eq!(data, b"a\r\n.b\r\n..c\r\nd\r\n");
    }

    #[test]
    fn line_framer_bounds_long_lines() {
        let mut f = LineFramer::default();
        let mut buf = BytesMut::from(&b"NOOP\r\n"[..]);
        assert_eq!(f.take_line(&mut buf, 10), Line::Complete(b"NOOP".to_vec()));
        assert_eq!(f.take_line(&mut buf, 10), Line::Incomplete);
        buf.extend_from_slice(&[b'x'; 30]);
        assert_eq!(f.take_line(&mut buf, 10), Line::Incomplete);
        assert!(buf.is_empty());
        buf.extend_from_slice(b"yyy\r\nQUIT\r\n");
        assert_eq!(f.take_line(&mut buf, 10), Line::TooLong);
        assert_eq!(f.take_line(&mut buf, 10), Line::Complete(b"QUIT".to_vec()));
    }

    #[test]
    fn crlf_to_lf_keeps_bare_cr() {
        let mut out = Vec::new();
        crlf_to_lf(b"a\r\nb\rc\r\n", &mut out);
        assert_eq!(out, b"a\nb\rc\n");
    }
}
