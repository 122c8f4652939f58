//! The MIME tree of a message with exact byte offsets (RFC 2045, RFC 2046
//! §5.1.1 boundaries, §5.2.1 message/rfc822).
//!
//! Rules, following Dovecot 2.3 where the RFCs leave room:
//! - Content-* fields of the top-level message count only with
//!   `MIME-Version`; without it the message is text/plain. Parts of a
//!   multipart and encapsulated messages inherit MIME from their parent.
//! - A boundary line is `--boundary` at the start of a line, followed by
//!   optional `--` and otherwise only whitespace. The line break before it
//!   belongs to the boundary, not to the preceding part.
//! - A multipart without a closing boundary ends where its parent ends;
//!   the last part runs to there. The preamble and epilogue belong to no
//!   part.
//! - In multipart/digest the default type of a part is message/rfc822.
//! - Nesting is bounded by [`MAX_DEPTH`]: deeper parts are leaves.

use std::ops::Range;

use crate::content::Content;
use crate::header::{self, line_at};

/// Deepest nesting of multiparts and encapsulated messages parsed.
pub const MAX_DEPTH: usize = 64;

/// One node of the tree: its header, its body and what is inside.
#[derive(Debug, Clone)]
pub(crate) struct Part {
    /// The header, including the blank line that ends it.
    pub header: Range<usize>,
    /// The body (for a multipart: everything after the header, preamble
    /// and epilogue included).
    pub body: Range<usize>,
    /// The MIME facts (empty when the part is not in a MIME context).
    pub content: Content,
    /// Children.
    pub kind: Kind,
}

#[derive(Debug, Clone)]
pub(crate) enum Kind {
    /// A leaf.
    Leaf,
    /// multipart/*: the parts (possibly none for a broken message).
    Multi(Vec<Part>),
    /// message/rfc822 or message/global: the encapsulated message.
    Message(Box<Part>),
}

impl Part {
    /// Parses a whole message.
    pub fn parse(raw: &[u8]) -> Part {
        parse_entity(raw, 0..raw.len(), Context::Root, 0)
    }
}

/// Where an entity sits, which decides its defaults.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Context {
    /// The top-level message: needs MIME-Version.
    Root,
    /// An encapsulated message (message/rfc822 body).
    Message,
    /// A part of a multipart.
    Part,
    /// A part of multipart/digest (default message/rfc822).
    DigestPart,
}

fn parse_entity(raw: &[u8], range: Range<usize>, ctx: Context, depth: usize) -> Part {
    let slice = raw.get(range.clone()).unwrap_or_default();
    let (h, b) = header::split(slice);
    let header = range.start + h.start..range.start + h.end;
    let body = range.start + b.start..range.start + b.end;
    let mut content = Content::parse(raw.get(header.clone()).unwrap_or_default());
    if ctx == Context::Root && !content.mime_version {
        // Dovecot: without MIME-Version the Content-* fields are ignored.
        content = Content::default();
    }
    if ctx == Context::DigestPart && content.media.is_none() {
        content.media = Some((b"message".to_vec(), b"rfc822".to_vec()));
    }

    let kind = if depth >= MAX_DEPTH {
        Kind::Leaf
    } else if content.is("multipart", None) {
        let ctx = if content.is("multipart", Some("digest")) {
            Context::DigestPart
        } else {
            Context::Part
        };
        let parts = match content.param("boundary") {
            Some(boundary) if !boundary.is_empty() => split_parts(raw, body.clone(), boundary)
                .into_iter()
                .map(|r| parse_entity(raw, r, ctx, depth + 1))
                .collect(),
            _ => Vec::new(),
        };
        Kind::Multi(parts)
    } else if content.is("message", Some("rfc822")) || content.is("message", Some("global")) {
        Kind::Message(Box::new(parse_entity(
            raw,
            body.clone(),
            Context::Message,
            depth + 1,
        )))
    } else {
        Kind::Leaf
    };
    Part {
        header,
        body,
        content,
        kind,
    }
}

/// What a line is with respect to a boundary.
#[derive(PartialEq, Eq)]
enum Delimiter {
    No,
    Open,
    Close,
}

fn delimiter(line: &[u8], boundary: &[u8]) -> Delimiter {
    let Some(rest) = line
        .strip_prefix(b"--")
        .and_then(|l| l.strip_prefix(boundary))
    else {
        return Delimiter::No;
    };
    let (close, rest) = match rest.strip_prefix(b"--") {
        Some(r) => (true, r),
        None => (false, rest),
    };
    // RFC 2046 allows only transport padding after the boundary; this also
    // keeps `--foo` from matching a line `--foobar` of an inner multipart.
    if rest.iter().all(|&b| b == b' ' || b == b'\t') {
        if close {
            Delimiter::Close
        } else {
            Delimiter::Open
        }
    } else {
        Delimiter::No
    }
}

/// The byte ranges of the parts of a multipart body.
fn split_parts(raw: &[u8], body: Range<usize>, boundary: &[u8]) -> Vec<Range<usize>> {
    let end = body.end;
    let mut parts = Vec::new();
    // Start of the current part, once the first boundary was seen.
    let mut current: Option<usize> = None;
    let mut pos = body.start;
    // Where the previous line's content ended (its line break belongs to
    // a following boundary line).
    let mut prev_content_end = body.start;
    while pos < end {
        let (content_end, next) = line_at(raw, pos);
        let (content_end, next) = (content_end.min(end), next.min(end));
        let line = raw.get(pos..content_end).unwrap_or_default();
        let d = delimiter(line, boundary);
        if d != Delimiter::No {
            if let Some(start) = current {
                // The part ends before the line break preceding the
                // boundary; an empty part has nothing to give up.
                let part_end = if pos == start {
                    start
                } else {
                    prev_content_end.max(start)
                };
                parts.push(start..part_end);
            }
            if d == Delimiter::Close {
                return parts;
            }
            current = Some(next);
        }
        prev_content_end = content_end;
        pos = next;
    }
    if let Some(start) = current {
        // No closing boundary: the last part runs to the end.
        parts.push(start.min(end)..end);
    }
    parts
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_end_before_the_boundary_line_break() {
        let m = b"MIME-Version: 1.0\r\nContent-Type: multipart/mixed; boundary=b\r\n\r\npre\r\n--b\r\n\r\none\r\n--b\r\n\r\ntwo\r\n--b--\r\nepi\r\n";
        let p = Part::parse(m);
        let Kind::Multi(parts) = &p.kind else {
            panic!("not multipart")
        };
        assert_eq!(parts.len(), 2);
        assert_eq!(&m[parts[0].body.clone()], b"one");
        assert_eq!(&m[parts[1].body.clone()], b"two");
        assert_eq!(&m[parts[0].header.clone()], b"\r\n");
    }

    #[test]
    fn missing_close_boundary_runs_to_end() {
        let m = b"MIME-Version: 1.0\r\nContent-Type: multipart/mixed; boundary=b\r\n\r\n--b\r\n\r\none\r\n";
        let p = Part::parse(m);
        let Kind::Multi(parts) = &p.kind else {
            panic!("not multipart")
        };
        assert_eq!(&m[parts[0].body.clone()], b"one\r\n");
    }

    #[test]
    fn without_mime_version_content_type_is_ignored() {
        let m = b"Content-Type: multipart/mixed; boundary=b\r\n\r\n--b\r\n\r\none\r\n--b--\r\n";
        assert!(matches!(Part::parse(m).kind, Kind::Leaf));
    }
}
