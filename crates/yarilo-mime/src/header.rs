//! Header sections (RFC 5322 §2.2, §3.2.2): splitting a message into
//! header and body, iterating fields with their exact byte spans, and
//! unfolding values.
//!
//! Invariant: every range handed out lies inside the input, so slicing
//! with it through `get` never fails; line endings may be CRLF or bare LF
//! (messages are kept as stored).

use std::ops::Range;

/// One header field as it appears in the message.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Field<'a> {
    /// The name, without trailing whitespace (obs-optional allows `Name :`).
    pub name: &'a [u8],
    /// The raw value after the colon: folding kept, final line end removed.
    pub value: &'a [u8],
    /// The whole field including its final line end, as stored.
    pub raw: &'a [u8],
}

impl Field<'_> {
    /// Does this field have the given name (ASCII case-insensitive)?
    pub fn is(&self, name: &str) -> bool {
        self.name.eq_ignore_ascii_case(name.as_bytes())
    }

    /// The value unfolded: line breaks removed, leading and trailing
    /// whitespace trimmed (the form ENVELOPE and BODYSTRUCTURE carry).
    pub fn unfolded(&self) -> Vec<u8> {
        unfold(self.value)
    }
}

/// Where the header ends: `header` includes the blank line that ends it
/// (RFC 3501 §6.4.5: BODY[HEADER] includes the blank line), `body` is the
/// rest. Without a blank line the whole input is header.
pub(crate) fn split(raw: &[u8]) -> (Range<usize>, Range<usize>) {
    let mut pos = 0;
    while pos < raw.len() {
        let (line_end, next) = line_at(raw, pos);
        if line_end == pos {
            // An empty line (CRLF or LF alone) ends the header.
            return (0..next, next..raw.len());
        }
        pos = next;
    }
    (0..raw.len(), raw.len()..raw.len())
}

/// The line starting at `pos`: (end of its content, start of the next
/// line). The content excludes the LF and a CR right before it.
pub(crate) fn line_at(raw: &[u8], pos: usize) -> (usize, usize) {
    let rest = raw.get(pos..).unwrap_or_default();
    match rest.iter().position(|&b| b == b'\n') {
        Some(i) => {
            let lf = pos + i;
            let end = if i > 0 && raw.get(lf - 1) == Some(&b'\r') {
                lf - 1
            } else {
                lf
            };
            (end, lf + 1)
        }
        None => {
            // A lone CR at the very end still counts as a line end.
            let end = if rest.last() == Some(&b'\r') {
                raw.len() - 1
            } else {
                raw.len()
            };
            (end, raw.len())
        }
    }
}

/// The fields of a header section (the input may be a whole message: the
/// iteration stops at the blank line).
pub(crate) fn fields(header: &[u8]) -> Vec<Field<'_>> {
    let mut out = Vec::new();
    let mut pos = 0;
    while pos < header.len() {
        let (line_end, mut next) = line_at(header, pos);
        if line_end == pos {
            break;
        }
        // A field runs on over continuation lines (starting with WSP).
        let mut value_end = line_end;
        while let Some(&b) = header.get(next) {
            if b != b' ' && b != b'\t' {
                break;
            }
            let (e, n) = line_at(header, next);
            value_end = e;
            next = n;
        }
        let full = header.get(pos..value_end).unwrap_or_default();
        let raw = header.get(pos..next).unwrap_or_default();
        let (name, value) = match full.iter().position(|&b| b == b':') {
            Some(colon) => (
                trim_end(full.get(..colon).unwrap_or_default()),
                full.get(colon + 1..).unwrap_or_default(),
            ),
            // A line without a colon is kept (it is part of the header
            // bytes) but never matches a real field name.
            None => (full, &b""[..]),
        };
        out.push(Field { name, value, raw });
        pos = next;
    }
    out
}

/// The first field with this name.
pub(crate) fn first<'a>(header: &'a [u8], name: &str) -> Option<Field<'a>> {
    fields(header).into_iter().find(|f| f.is(name))
}

/// Removes line breaks of folded values (RFC 5322 §2.2.3) and trims
/// surrounding whitespace.
pub(crate) fn unfold(value: &[u8]) -> Vec<u8> {
    let v: Vec<u8> = value
        .iter()
        .copied()
        .filter(|&b| b != b'\r' && b != b'\n')
        .collect();
    trim(&v).to_vec()
}

pub(crate) fn is_wsp(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\r' | b'\n')
}

pub(crate) fn trim(v: &[u8]) -> &[u8] {
    trim_end(trim_start(v))
}

pub(crate) fn trim_start(v: &[u8]) -> &[u8] {
    let start = v.iter().position(|&b| !is_wsp(b)).unwrap_or(v.len());
    v.get(start..).unwrap_or_default()
}

pub(crate) fn trim_end(v: &[u8]) -> &[u8] {
    let end = v.iter().rposition(|&b| !is_wsp(b)).map_or(0, |i| i + 1);
    v.get(..end).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_includes_blank_line_in_header() {
        let m = b"A: 1\r\nB: 2\r\n\r\nbody";
        let (h, b) = split(m);
        assert_eq!(&m[h], b"A: 1\r\nB: 2\r\n\r\n");
        assert_eq!(&m[b], b"body");
    }

    #[test]
    fn split_without_blank_line_is_all_header() {
        let m = b"A: 1\r\nB: 2\r\n";
        let (h, b) = split(m);
        assert_eq!(h, 0..m.len());
        assert!(b.is_empty());
    }

    #[test]
    fn folded_field_keeps_raw_and_unfolds_value() {
        let h = b"Subject: a\r\n  b\r\nX:y\n\n";
        let f = fields(h);
        assert_eq!(f.len(), 2);
        assert_eq!(f[0].name, b"Subject");
        assert_eq!(f[0].raw, b"Subject: a\r\n  b\r\n");
        assert_eq!(f[0].unfolded(), b"a  b");
        assert_eq!(f[1].raw, b"X:y\n");
        assert_eq!(f[1].unfolded(), b"y");
    }
}
