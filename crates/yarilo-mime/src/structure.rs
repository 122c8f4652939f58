//! BODYSTRUCTURE (RFC 9051 §7.5.2, RFC 3501 §7.4.2) from the MIME tree.
//!
//! Dovecot 2.3 spellings where the RFC leaves room: defaults are
//! lower-case (`"text" "plain"`, `"7bit"`); a text part without a charset
//! parameter gets `("charset" "us-ascii")` appended; message/rfc822 is
//! always written `"message" "rfc822"`; a Content-Type that does not parse
//! as `type/subtype` counts as absent (text/plain); a multipart with no
//! parts (no boundary line found) gets one empty text/plain part so the
//! syntax stays valid. Sizes are octets of the body as stored (no CRLF
//! conversion); line counts are LF counts; a line break before a boundary
//! belongs to the boundary (RFC 2046 §5.1.1), so it counts in neither.

use yarilo_imap_proto::response::{BodyExt, BodyStructure, Disposition, SinglePartKind};

use crate::address;
use crate::content::{Content, Params};
use crate::part::{Kind, Part};

/// BODYSTRUCTURE of a parsed part.
pub(crate) fn of(raw: &[u8], part: &Part) -> BodyStructure {
    let c = &part.content;
    match &part.kind {
        Kind::Multi(children) => {
            let mut parts: Vec<BodyStructure> = children.iter().map(|p| of(raw, p)).collect();
            if parts.is_empty() {
                parts.push(empty_text());
            }
            BodyStructure::Multi {
                parts,
                subtype: c
                    .media
                    .as_ref()
                    .map_or_else(|| b"x-unknown".to_vec(), |(_, s)| s.clone()),
                params: c.params.clone(),
                ext: ext(c),
            }
        }
        Kind::Message(inner) => {
            let body = raw.get(part.body.clone()).unwrap_or_default();
            let inner_header = raw.get(inner.header.clone()).unwrap_or_default();
            single(
                c,
                b"message".to_vec(),
                b"rfc822".to_vec(),
                c.params.clone(),
                body,
                SinglePartKind::Message {
                    envelope: Box::new(address::envelope(inner_header)),
                    body: Box::new(of(raw, inner)),
                    lines: lines(body),
                },
            )
        }
        Kind::Leaf => {
            let body = raw.get(part.body.clone()).unwrap_or_default();
            let (media_type, subtype) = match &c.media {
                Some((t, s)) => (t.clone(), s.clone()),
                None => (b"text".to_vec(), b"plain".to_vec()),
            };
            let text = media_type.eq_ignore_ascii_case(b"text");
            let mut params = c.params.clone();
            let kind = if text {
                if !params
                    .iter()
                    .any(|(k, _)| k.eq_ignore_ascii_case(b"charset"))
                {
                    params.push((b"charset".to_vec(), b"us-ascii".to_vec()));
                }
                SinglePartKind::Text { lines: lines(body) }
            } else {
                SinglePartKind::Basic
            };
            single(c, media_type, subtype, params, body, kind)
        }
    }
}

fn single(
    c: &Content,
    media_type: Vec<u8>,
    subtype: Vec<u8>,
    params: Params,
    body: &[u8],
    kind: SinglePartKind,
) -> BodyStructure {
    BodyStructure::Single {
        media_type,
        subtype,
        params,
        id: c.id.clone(),
        description: c.description.clone(),
        encoding: c.encoding.clone().unwrap_or_else(|| b"7bit".to_vec()),
        size: saturate(body.len()),
        kind,
        md5: c.md5.clone(),
        ext: ext(c),
    }
}

fn ext(c: &Content) -> BodyExt {
    BodyExt {
        disposition: c.disposition.as_ref().map(|(kind, params)| Disposition {
            kind: kind.clone(),
            params: params.clone(),
        }),
        language: c.language.clone(),
        location: c.location.clone(),
    }
}

/// Dovecot's stand-in for a multipart without parts.
fn empty_text() -> BodyStructure {
    BodyStructure::Single {
        media_type: b"text".to_vec(),
        subtype: b"plain".to_vec(),
        params: vec![(b"charset".to_vec(), b"us-ascii".to_vec())],
        id: None,
        description: None,
        encoding: b"7bit".to_vec(),
        size: 0,
        kind: SinglePartKind::Text { lines: 0 },
        md5: None,
        ext: BodyExt::default(),
    }
}

fn lines(body: &[u8]) -> u32 {
    saturate(body.iter().filter(|&&b| b == b'\n').count())
}

fn saturate(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}
