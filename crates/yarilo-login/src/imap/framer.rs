//! Pre-login IMAP framing, sans-I/O: lines and literals (RFC 9051 §4.3,
//! RFC 7888 LITERAL+) assembled into whole commands for
//! [`yarilo_imap_proto::parse_command`], SASL response lines, and — unlike
//! the session crate's receiver — the exact bytes left over, because
//! whatever a client pipelined after its LOGIN belongs to the backend.
//!
//! Invariants: `buf` + `pending` never exceed one line plus one read
//! chunk beyond `max_command`; the frames produced do not depend on how
//! the input was split.

/// What the driver must do next.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Frame {
    /// Read more.
    Incomplete,
    /// A whole command, CRLF and literals included.
    Command(Vec<u8>),
    /// A synchronizing literal was announced: send `+ OK`.
    Continue,
    /// A synchronizing literal over the limit: answer BAD; the client
    /// will not send it (RFC 9051 §7.5).
    LiteralRefused { tag: Option<String> },
    /// An over-long line, or a non-synchronizing literal over the limit:
    /// the stream can no longer be framed; the connection must close.
    Fatal(&'static str),
}

pub(crate) struct Framer {
    buf: Vec<u8>,
    pending: Vec<u8>,
    literal: usize,
    max_line: usize,
    max_literal: usize,
    max_command: usize,
}

impl Framer {
    pub fn new(max_line: usize, max_literal: usize) -> Framer {
        Framer {
            buf: Vec::new(),
            pending: Vec::new(),
            literal: 0,
            max_line,
            max_literal,
            max_command: max_line + 2 * max_literal,
        }
    }

    pub fn feed(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    /// Input received and not yet framed; the framer forgets it.
    pub fn take_rest(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.buf)
    }

    /// Drops everything buffered (after STARTTLS: bytes sent in clear
    /// before the handshake must not be executed — the classic STARTTLS
    /// command injection).
    pub fn clear(&mut self) {
        self.buf.clear();
        self.pending.clear();
        self.literal = 0;
    }

    /// The next command.
    pub fn next(&mut self) -> Frame {
        loop {
            if self.literal > 0 {
                let n = self.literal.min(self.buf.len());
                self.pending.extend(self.buf.drain(..n));
                self.literal -= n;
                if self.literal > 0 {
                    return Frame::Incomplete;
                }
            }
            let Some(line) = self.take_line() else {
                if self.buf.len() >= self.max_line {
                    return Frame::Fatal("line too long");
                }
                return Frame::Incomplete;
            };
            self.pending.extend_from_slice(&line);
            if self.pending.len() > self.max_command {
                self.pending.clear();
                return Frame::Fatal("command too long");
            }
            let body = strip_eol(&line);
            let Some((size, sync)) = literal_announce(body) else {
                return Frame::Command(std::mem::take(&mut self.pending));
            };
            if size > self.max_literal {
                let tag = tag_of(&self.pending);
                self.pending.clear();
                if sync {
                    return Frame::LiteralRefused { tag };
                }
                return Frame::Fatal("literal too large");
            }
            self.literal = size;
            if sync {
                return Frame::Continue;
            }
        }
    }

    /// A whole line without its CRLF (SASL responses); `Some(Err)` when it
    /// is too long (the connection must close).
    pub fn next_line(&mut self) -> Option<Result<Vec<u8>, ()>> {
        match self.take_line() {
            Some(line) => Some(Ok(strip_eol(&line).to_vec())),
            None if self.buf.len() >= self.max_line => Some(Err(())),
            None => None,
        }
    }

    fn take_line(&mut self) -> Option<Vec<u8>> {
        let scan = self.buf.len().min(self.max_line);
        let pos = self.buf.get(..scan)?.iter().position(|&b| b == b'\n')?;
        Some(self.buf.drain(..=pos).collect())
    }
}

fn strip_eol(line: &[u8]) -> &[u8] {
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    line.strip_suffix(b"\r").unwrap_or(line)
}

/// `{n}` / `{n+}` at the end of a line.
fn literal_announce(line: &[u8]) -> Option<(usize, bool)> {
    let body = line.strip_suffix(b"}")?;
    let (body, sync) = match body.strip_suffix(b"+") {
        Some(b) => (b, false),
        None => (body, true),
    };
    let open = body.iter().rposition(|&b| b == b'{')?;
    let digits = body.get(open + 1..)?;
    if digits.is_empty() || digits.len() > 10 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let size = std::str::from_utf8(digits).ok()?.parse::<usize>().ok()?;
    Some((size, sync))
}

/// The tag at the start of a command, when it is a valid one.
fn tag_of(cmd: &[u8]) -> Option<String> {
    let end = cmd.iter().position(|&b| b == b' ')?;
    let tag = std::str::from_utf8(cmd.get(..end)?).ok()?;
    crate::preamble::valid_tag(tag).then(|| tag.to_string())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn frames(input: &[u8], splits: &[usize]) -> (Vec<Frame>, Vec<u8>) {
        let mut f = Framer::new(1024, 64);
        let mut out = Vec::new();
        let mut last = 0;
        for &s in splits.iter().chain(std::iter::once(&input.len())) {
            f.feed(&input[last..s]);
            last = s;
            loop {
                match f.next() {
                    Frame::Incomplete => break,
                    fr => out.push(fr),
                }
            }
        }
        (out, f.take_rest())
    }

    const SESSION: &[u8] =
        b"a1 CAPABILITY\r\na2 LOGIN {5}\r\nalice {6+}\r\nsecret\r\na3 SELECT INBOX\r\n";

    #[test]
    fn literals_assemble_and_every_split_gives_the_same_frames() {
        let (whole, _) = frames(SESSION, &[]);
        assert_eq!(
            whole,
            vec![
                Frame::Command(b"a1 CAPABILITY\r\n".to_vec()),
                Frame::Continue,
                Frame::Command(b"a2 LOGIN {5}\r\nalice {6+}\r\nsecret\r\n".to_vec()),
                Frame::Command(b"a3 SELECT INBOX\r\n".to_vec()),
            ]
        );
        for i in 0..SESSION.len() {
            assert_eq!(frames(SESSION, &[i]).0, whole, "split at {i}");
        }
    }

    #[test]
    fn bytes_after_the_login_are_left_for_the_backend() {
        let mut f = Framer::new(1024, 64);
        f.feed(b"a LOGIN u p\r\nb SELECT INBOX\r\nc NO");
        assert_eq!(f.next(), Frame::Command(b"a LOGIN u p\r\n".to_vec()));
        assert_eq!(f.take_rest(), b"b SELECT INBOX\r\nc NO");
    }

    #[test]
    fn limits_refuse_or_close() {
        let (fr, _) = frames(b"x LOGIN {100}\r\nx2 NOOP\r\n", &[]);
        assert_eq!(
            fr,
            vec![
                Frame::LiteralRefused {
                    tag: Some("x".into())
                },
                Frame::Command(b"x2 NOOP\r\n".to_vec())
            ]
        );
        let (fr, _) = frames(b"x LOGIN {100+}\r\n", &[]);
        assert_eq!(fr, vec![Frame::Fatal("literal too large")]);
        let mut f = Framer::new(16, 8);
        f.feed(&[b'a'; 40]);
        assert_eq!(f.next(), Frame::Fatal("line too long"));
    }

    #[test]
    fn sasl_lines_are_bounded() {
        let mut f = Framer::new(16, 8);
        f.feed(b"AGFsaWNl\r\n*\r\n");
        assert_eq!(f.next_line(), Some(Ok(b"AGFsaWNl".to_vec())));
        assert_eq!(f.next_line(), Some(Ok(b"*".to_vec())));
        assert_eq!(f.next_line(), None);
        f.feed(&[b'A'; 20]);
        assert_eq!(f.next_line(), Some(Err(())));
    }
}
