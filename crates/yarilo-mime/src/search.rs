//! The message side of SEARCH (RFC 9051 §6.4.4): HEADER/FROM/TO/CC/BCC/
//! SUBJECT, BODY and TEXT matching.
//!
//! Matching is a case-insensitive substring test on text decoded to UTF-8:
//! header values unfolded and RFC 2047-decoded, body parts after transfer
//! decoding and charset conversion. Case folding is per character
//! lower-casing (Unicode simple folding for all but a few special cases).
//! Only text/* leaves (and the headers of encapsulated messages) are body
//! text; attachments of other types are not searched, as in Dovecot
//! without FTS.

use crate::decode;
use crate::header;
use crate::part::{Kind, Part};

/// A needle prepared once for many haystacks.
struct Needle(String);

impl Needle {
    fn new(s: &str) -> Needle {
        Needle(fold(s))
    }

    fn found_in(&self, haystack: &str) -> bool {
        self.0.is_empty() || fold(haystack).contains(&self.0)
    }
}

fn fold(s: &str) -> String {
    s.chars().flat_map(char::to_lowercase).collect()
}

/// See [`crate::header_matches`].
pub(crate) fn header_matches(header: &[u8], field: &str, needle: &str) -> bool {
    let needle = Needle::new(needle);
    header::fields(header)
        .iter()
        .filter(|f| f.is(field))
        .any(|f| needle.found_in(&decode::header_value(&f.unfolded())))
}

/// See [`crate::address_matches`].
pub(crate) fn address_matches(header: &[u8], field: &str, needle: &str) -> bool {
    let needle = Needle::new(needle);
    header::fields(header)
        .iter()
        .filter(|f| f.is(field))
        .any(|f| {
            let value = f.unfolded();
            match crate::address::search_text(&value) {
                Some(text) => needle.found_in(&text),
                // Nothing parses as an address: the text as written.
                None => needle.found_in(&decode::header_value(&value)),
            }
        })
}

/// See [`crate::body_contains`].
pub(crate) fn body_contains(raw: &[u8], needle: &str) -> bool {
    let root = Part::parse(raw);
    body_part_contains(raw, &root, &Needle::new(needle))
}

fn body_part_contains(raw: &[u8], part: &Part, needle: &Needle) -> bool {
    match &part.kind {
        Kind::Multi(children) => children.iter().any(|c| body_part_contains(raw, c, needle)),
        Kind::Message(inner) => {
            header_text_contains(raw.get(inner.header.clone()).unwrap_or_default(), needle)
                || body_part_contains(raw, inner, needle)
        }
        Kind::Leaf => {
            let c = &part.content;
            let text = c.media.is_none() || c.is("text", None);
            if !text {
                return false;
            }
            let body = raw.get(part.body.clone()).unwrap_or_default();
            let decoded = decode::transfer_lenient(body, &c.encoding_lower());
            needle.found_in(&decode::to_utf8(&decoded, c.param("charset")))
        }
    }
}

/// Any field (name or decoded value) of a header contains the needle.
fn header_text_contains(header: &[u8], needle: &Needle) -> bool {
    header::fields(header).iter().any(|f| {
        let line = format!(
            "{}: {}",
            String::from_utf8_lossy(f.name),
            decode::header_value(&f.unfolded())
        );
        needle.found_in(&line)
    })
}

/// See [`crate::text_contains`].
pub(crate) fn text_contains(raw: &[u8], needle: &str) -> bool {
    let (h, _) = header::split(raw);
    let n = Needle::new(needle);
    header_text_contains(raw.get(h).unwrap_or_default(), &n) || {
        let root = Part::parse(raw);
        body_part_contains(raw, &root, &n)
    }
}
