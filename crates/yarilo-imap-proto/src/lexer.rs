//! The lexical layer of RFC 9051 §9 (formal syntax): atoms, strings,
//! literals, numbers, over one complete command held in memory.
//!
//! Invariants: the cursor never reads past its buffer (every access is
//! checked); nesting is bounded by [`MAX_DEPTH`]; nothing here allocates more
//! than the size of the input.

use std::borrow::Cow;

use crate::ParseError;

/// The deepest parenthesis nesting any command may use (search keys, fetch
/// attribute lists). Deeper input is a `BAD`, never a stack overflow.
pub const MAX_DEPTH: u32 = 32;

pub(crate) type PResult<T> = Result<T, ParseError>;

/// RFC 9051 atom-specials minus CTL: `( ) { SP % * " \ ]`.
pub(crate) fn is_atom_char(b: u8) -> bool {
    !matches!(
        b,
        b'(' | b')' | b'{' | b' ' | b'%' | b'*' | b'"' | b'\\' | b']'
    ) && b > 0x1f
        && b < 0x7f
}

/// ASTRING-CHAR = ATOM-CHAR / resp-specials.
pub(crate) fn is_astring_char(b: u8) -> bool {
    is_atom_char(b) || b == b']'
}

/// list-char = ATOM-CHAR / list-wildcards / resp-specials.
pub(crate) fn is_list_char(b: u8) -> bool {
    is_astring_char(b) || b == b'%' || b == b'*'
}

/// tag = 1*<any ASTRING-CHAR except "+">.
pub(crate) fn is_tag_char(b: u8) -> bool {
    is_astring_char(b) && b != b'+'
}

/// The kind of literal announced by `{n}`, `{n+}` or `~{n}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LiteralAnnounce {
    /// Octets that follow the CRLF.
    pub size: u64,
    /// `false` for a LITERAL+/LITERAL- non-synchronizing literal (RFC 7888).
    pub sync: bool,
    /// `true` for a literal8 (`~{n}`, RFC 3516): may contain NUL.
    pub binary: bool,
}

/// A cursor over one complete command (its literals inline, exactly as on the
/// wire).
#[derive(Debug, Clone)]
pub(crate) struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
    depth: u32,
    /// UTF8=ACCEPT is enabled: quoted strings may carry UTF-8 (RFC 6855).
    pub(crate) utf8: bool,
}

impl<'a> Cursor<'a> {
    pub(crate) fn new(buf: &'a [u8]) -> Self {
        Cursor {
            buf,
            pos: 0,
            depth: 0,
            utf8: true,
        }
    }

    pub(crate) fn rest(&self) -> &'a [u8] {
        self.buf.get(self.pos..).unwrap_or_default()
    }

    pub(crate) fn at_end(&self) -> bool {
        self.pos >= self.buf.len()
    }

    pub(crate) fn peek(&self) -> Option<u8> {
        self.buf.get(self.pos).copied()
    }

    pub(crate) fn peek_at(&self, off: usize) -> Option<u8> {
        self.buf.get(self.pos + off).copied()
    }

    /// Skips `n` bytes (bounded by the end of the buffer).
    pub(crate) fn skip(&mut self, n: usize) {
        self.pos = (self.pos + n).min(self.buf.len());
    }

    fn bump(&mut self) -> PResult<u8> {
        let b = self.peek().ok_or(ParseError::Eof)?;
        self.pos += 1;
        Ok(b)
    }

    pub(crate) fn expect(&mut self, b: u8, what: &'static str) -> PResult<()> {
        match self.peek() {
            Some(c) if c == b => {
                self.pos += 1;
                Ok(())
            }
            Some(_) => Err(ParseError::Expected(what)),
            None => Err(ParseError::Eof),
        }
    }

    /// Consumes `b` if it is next.
    pub(crate) fn eat(&mut self, b: u8) -> bool {
        if self.peek() == Some(b) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    pub(crate) fn sp(&mut self) -> PResult<()> {
        self.expect(b' ', "SP")
    }

    pub(crate) fn crlf(&mut self) -> PResult<()> {
        self.expect(b'\r', "CRLF")?;
        self.expect(b'\n', "CRLF")
    }

    /// Consumes `word` (ASCII, case-insensitive) if the input starts with it
    /// and the next byte does not continue an atom.
    pub(crate) fn keyword(&mut self, word: &str) -> bool {
        let w = word.as_bytes();
        let rest = self.rest();
        if rest.len() >= w.len()
            && rest[..w.len()].eq_ignore_ascii_case(w)
            && !rest.get(w.len()).is_some_and(|&b| is_atom_char(b))
        {
            self.pos += w.len();
            true
        } else {
            false
        }
    }

    /// Enters one level of parentheses (after the caller consumed `(`).
    pub(crate) fn enter(&mut self) -> PResult<()> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(ParseError::TooDeep);
        }
        Ok(())
    }

    pub(crate) fn leave(&mut self) {
        self.depth = self.depth.saturating_sub(1);
    }

    /// Takes the longest run of bytes satisfying `f` (possibly empty).
    pub(crate) fn take_while(&mut self, f: impl Fn(u8) -> bool) -> &'a [u8] {
        let start = self.pos;
        while self.peek().is_some_and(&f) {
            self.pos += 1;
        }
        &self.buf[start..self.pos]
    }

    fn take_while1(&mut self, f: impl Fn(u8) -> bool, what: &'static str) -> PResult<&'a [u8]> {
        let s = self.take_while(f);
        if s.is_empty() {
            return Err(if self.at_end() {
                ParseError::Eof
            } else {
                ParseError::Expected(what)
            });
        }
        Ok(s)
    }

    pub(crate) fn atom(&mut self) -> PResult<&'a str> {
        let s = self.take_while1(is_atom_char, "atom")?;
        // atom chars are ASCII by construction.
        std::str::from_utf8(s).map_err(|_| ParseError::Expected("atom"))
    }

    pub(crate) fn tag(&mut self) -> PResult<&'a str> {
        let s = self.take_while1(is_tag_char, "tag")?;
        std::str::from_utf8(s).map_err(|_| ParseError::Expected("tag"))
    }

    pub(crate) fn digits(&mut self) -> PResult<&'a [u8]> {
        self.take_while1(|b| b.is_ascii_digit(), "number")
    }

    /// number64 (RFC 9051): up to 2^63-1.
    pub(crate) fn number64(&mut self) -> PResult<u64> {
        let d = self.digits()?;
        let mut n: u64 = 0;
        for &b in d {
            n = n
                .checked_mul(10)
                .and_then(|n| n.checked_add(u64::from(b - b'0')))
                .ok_or(ParseError::Invalid("number"))?;
        }
        if n > i64::MAX as u64 {
            return Err(ParseError::Invalid("number"));
        }
        Ok(n)
    }

    /// number (RFC 9051): an unsigned 32-bit integer.
    pub(crate) fn number(&mut self) -> PResult<u32> {
        let n = self.number64()?;
        u32::try_from(n).map_err(|_| ParseError::Invalid("number"))
    }

    pub(crate) fn nz_number(&mut self) -> PResult<u32> {
        match self.number()? {
            0 => Err(ParseError::Invalid("nz-number")),
            n => Ok(n),
        }
    }

    /// Parses a literal announcement `{n}` / `{n+}` / `~{n}` / `~{n+}` and the
    /// CRLF after it, leaving the cursor on the first literal octet.
    pub(crate) fn literal_announce(&mut self) -> PResult<LiteralAnnounce> {
        let binary = self.eat(b'~');
        self.expect(b'{', "literal")?;
        let size = self.number64()?;
        let sync = !self.eat(b'+');
        self.expect(b'}', "}")?;
        self.crlf()?;
        Ok(LiteralAnnounce { size, sync, binary })
    }

    fn literal_body(&mut self, ann: LiteralAnnounce) -> PResult<&'a [u8]> {
        let size = usize::try_from(ann.size).map_err(|_| ParseError::Invalid("literal size"))?;
        let end = self.pos.checked_add(size).ok_or(ParseError::Eof)?;
        let data = self.buf.get(self.pos..end).ok_or(ParseError::Eof)?;
        // CHAR8 excludes NUL in a plain literal (RFC 9051 §4.3).
        if !ann.binary && data.contains(&0) {
            return Err(ParseError::Invalid("NUL in literal"));
        }
        self.pos = end;
        Ok(data)
    }

    /// literal = "{" number64 ["+"] "}" CRLF *CHAR8.
    pub(crate) fn literal(&mut self) -> PResult<&'a [u8]> {
        if self.peek() == Some(b'~') {
            return Err(ParseError::Expected("literal"));
        }
        let ann = self.literal_announce()?;
        self.literal_body(ann)
    }

    /// literal8 or literal; returns the data and whether it was literal8.
    pub(crate) fn literal_or_literal8(&mut self) -> PResult<(&'a [u8], bool)> {
        let ann = self.literal_announce()?;
        Ok((self.literal_body(ann)?, ann.binary))
    }

    /// quoted = DQUOTE *QUOTED-CHAR DQUOTE.
    pub(crate) fn quoted(&mut self) -> PResult<Cow<'a, [u8]>> {
        self.expect(b'"', "quoted string")?;
        let start = self.pos;
        // Fast path: no escapes.
        loop {
            match self.bump()? {
                b'"' => return Ok(Cow::Borrowed(&self.buf[start..self.pos - 1])),
                b'\\' => break,
                b'\r' | b'\n' | 0 => return Err(ParseError::Invalid("quoted string")),
                b if b >= 0x80 && !self.utf8 => return Err(ParseError::Invalid("8-bit quoted")),
                _ => {}
            }
        }
        let mut out = self.buf[start..self.pos - 1].to_vec();
        self.pos -= 1;
        loop {
            match self.bump()? {
                b'"' => return Ok(Cow::Owned(out)),
                b'\\' => match self.bump()? {
                    c @ (b'"' | b'\\') => out.push(c),
                    _ => return Err(ParseError::Invalid("quoted escape")),
                },
                b'\r' | b'\n' | 0 => return Err(ParseError::Invalid("quoted string")),
                b if b >= 0x80 && !self.utf8 => return Err(ParseError::Invalid("8-bit quoted")),
                b => out.push(b),
            }
        }
    }

    /// string = quoted / literal.
    pub(crate) fn string(&mut self) -> PResult<Cow<'a, [u8]>> {
        match self.peek() {
            Some(b'"') => self.quoted(),
            Some(b'{') => Ok(Cow::Borrowed(self.literal()?)),
            Some(_) => Err(ParseError::Expected("string")),
            None => Err(ParseError::Eof),
        }
    }

    /// astring = 1*ASTRING-CHAR / string.
    pub(crate) fn astring(&mut self) -> PResult<Cow<'a, [u8]>> {
        match self.peek() {
            Some(b'"' | b'{') => self.string(),
            _ => Ok(Cow::Borrowed(self.take_while1(is_astring_char, "astring")?)),
        }
    }

    /// nstring = string / "NIL".
    pub(crate) fn nstring(&mut self) -> PResult<Option<Cow<'a, [u8]>>> {
        if self.keyword("NIL") {
            Ok(None)
        } else {
            self.string().map(Some)
        }
    }

    /// list-mailbox = 1*list-char / string.
    pub(crate) fn list_mailbox(&mut self) -> PResult<Cow<'a, [u8]>> {
        match self.peek() {
            Some(b'"' | b'{') => self.string(),
            _ => Ok(Cow::Borrowed(
                self.take_while1(is_list_char, "list-mailbox")?,
            )),
        }
    }

    /// Runs `f` on a parenthesized, SP-separated, non-empty list.
    pub(crate) fn paren_list<T>(
        &mut self,
        mut f: impl FnMut(&mut Self) -> PResult<T>,
    ) -> PResult<Vec<T>> {
        self.expect(b'(', "(")?;
        self.enter()?;
        let mut out = vec![f(self)?];
        while self.eat(b' ') {
            out.push(f(self)?);
        }
        self.expect(b')', ")")?;
        self.leave();
        Ok(out)
    }

    /// Like [`paren_list`](Self::paren_list) but `()` is allowed.
    pub(crate) fn paren_list0<T>(
        &mut self,
        f: impl FnMut(&mut Self) -> PResult<T>,
    ) -> PResult<Vec<T>> {
        if self.peek() == Some(b'(') && self.peek_at(1) == Some(b')') {
            self.pos += 2;
            return Ok(Vec::new());
        }
        self.paren_list(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoted_string_unescapes() {
        let mut c = Cursor::new(br#""a\"b\\c" x"#);
        assert_eq!(c.quoted().unwrap().as_ref(), br#"a"b\c"#);
        assert_eq!(c.rest(), b" x");
    }

    #[test]
    fn literal_is_read_inline() {
        let mut c = Cursor::new(b"{3}\r\nabc)");
        assert_eq!(c.astring().unwrap().as_ref(), b"abc");
        assert_eq!(c.rest(), b")");
        let mut c = Cursor::new(b"{3+}\r\nab");
        assert_eq!(c.astring(), Err(ParseError::Eof));
    }

    #[test]
    fn huge_numbers_are_invalid_not_panics() {
        let mut c = Cursor::new(b"99999999999999999999999");
        assert!(c.number64().is_err());
        let mut c = Cursor::new(b"4294967296");
        assert!(c.number().is_err());
    }
}
