//! The lexical side of responses: choosing atom / quoted / literal / NIL
//! (RFC 9051 §4.3, §9), literal8 for binary data (RFC 3516), modified UTF-7
//! or UTF-8 mailbox names (RFC 3501 §5.1.3, RFC 6855 §3).
//!
//! Invariant: every byte string written here reads back as the same bytes
//! with the command-side lexer (property-tested in `tests/`).

use crate::lexer::is_astring_char;
use crate::Mailbox;

/// Quoted strings longer than this are sent as literals (keeps lines short
/// and avoids pathological escaping).
const MAX_QUOTED: usize = 1024;

/// Session facts that change how responses are spelled.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EncodeOptions {
    /// IMAP4rev2 or UTF8=ACCEPT is enabled: mailbox names and quoted strings
    /// may carry UTF-8.
    pub utf8: bool,
}

/// Appends response syntax to a buffer.
#[derive(Debug)]
pub struct Writer<'a> {
    out: &'a mut Vec<u8>,
    /// Options in force.
    pub opts: EncodeOptions,
}

impl<'a> Writer<'a> {
    /// A writer appending to `out`.
    pub fn new(out: &'a mut Vec<u8>, opts: EncodeOptions) -> Self {
        Writer { out, opts }
    }

    /// Raw bytes (caller guarantees they are valid syntax).
    pub fn raw(&mut self, b: &[u8]) {
        self.out.extend_from_slice(b);
    }

    /// Raw text.
    pub fn text(&mut self, s: &str) {
        self.out.extend_from_slice(s.as_bytes());
    }

    /// A space.
    pub fn sp(&mut self) {
        self.out.push(b' ');
    }

    /// A decimal number.
    pub fn num(&mut self, n: impl std::fmt::Display) {
        use std::io::Write;
        // Writing to a Vec cannot fail.
        let _ = write!(self.out, "{n}");
    }

    /// `NIL`.
    pub fn nil(&mut self) {
        self.raw(b"NIL");
    }

    fn quotable(&self, s: &[u8]) -> bool {
        s.len() <= MAX_QUOTED
            && s.iter().all(|&b| b != 0 && b != b'\r' && b != b'\n')
            && (s.is_ascii() || (self.opts.utf8 && std::str::from_utf8(s).is_ok()))
    }

    fn quoted(&mut self, s: &[u8]) {
        self.out.push(b'"');
        for &b in s {
            if b == b'"' || b == b'\\' {
                self.out.push(b'\\');
            }
            self.out.push(b);
        }
        self.out.push(b'"');
    }

    /// A literal header `{n}\r\n` (the caller then writes n octets, e.g.
    /// streamed from a file).
    pub fn literal_header(&mut self, len: u64, binary: bool) {
        if binary {
            self.out.push(b'~');
        }
        self.out.push(b'{');
        self.num(len);
        self.raw(b"}\r\n");
    }

    /// A literal with its data.
    pub fn literal(&mut self, s: &[u8], binary: bool) {
        self.literal_header(s.len() as u64, binary);
        self.raw(s);
    }

    /// string: quoted when possible, otherwise a literal.
    pub fn string(&mut self, s: &[u8]) {
        if self.quotable(s) {
            self.quoted(s);
        } else {
            self.literal(s, false);
        }
    }

    /// nstring: NIL or string.
    pub fn nstring(&mut self, s: Option<&[u8]>) {
        match s {
            Some(s) => self.string(s),
            None => self.nil(),
        }
    }

    /// A string that must be literal8 when it holds NUL (BINARY data).
    pub fn binary_nstring(&mut self, s: Option<&[u8]>) {
        match s {
            Some(s) if s.contains(&0) => self.literal(s, true),
            other => self.nstring(other),
        }
    }

    /// astring: an atom when every byte allows it (and it is not `NIL`),
    /// otherwise a string.
    pub fn astring(&mut self, s: &[u8]) {
        if !s.is_empty() && s.iter().all(|&b| is_astring_char(b)) && !s.eq_ignore_ascii_case(b"NIL")
        {
            self.raw(s);
        } else {
            self.string(s);
        }
    }

    /// A mailbox name, in UTF-8 or modified UTF-7 per the options.
    pub fn mailbox(&mut self, m: &Mailbox) {
        let wire = m.to_wire(self.opts.utf8);
        self.astring(wire.as_bytes());
    }

    /// A quoted string that is always quoted (e.g. the hierarchy delimiter,
    /// ESEARCH tag) — falls back to a literal when it cannot be.
    pub fn always_quoted(&mut self, s: &[u8]) {
        self.string(s);
    }

    /// `(a b c)` with `f` writing each item.
    pub fn list<T>(&mut self, items: &[T], mut f: impl FnMut(&mut Self, &T)) {
        self.out.push(b'(');
        for (i, it) in items.iter().enumerate() {
            if i > 0 {
                self.sp();
            }
            f(self, it);
        }
        self.out.push(b')');
    }

    /// Text after a status or code: CR and LF become spaces so a reason can
    /// never split the response.
    pub fn resp_text(&mut self, s: &str) {
        self.out.extend(s.bytes().map(|b| {
            if b == b'\r' || b == b'\n' || b == 0 {
                b' '
            } else {
                b
            }
        }));
    }
}
