//! BODY[section] and BINARY[part] (RFC 9051 §6.4.5, RFC 3501 §6.4.5,
//! RFC 3516 §4.2): resolving a part path and cutting out its bytes.
//!
//! Part numbering: the parts of a multipart are numbered from 1; a
//! non-multipart message (or encapsulated message) has exactly one part,
//! 1, which is its body; the number after a message/rfc822 part refers to
//! the encapsulated message's parts. HEADER, TEXT and HEADER.FIELDS after
//! a part number need a message/rfc822 part; MIME needs a part number.

use yarilo_imap_proto::command::{Section, SectionText};

use crate::decode::{self, UnknownCte};
use crate::header;
use crate::part::{Kind, Part};

/// The part a path names, or `None`.
pub(crate) fn resolve<'p>(root: &'p Part, path: &[u32]) -> Option<&'p Part> {
    let mut cur = root;
    for (i, &n) in path.iter().enumerate() {
        let index = usize::try_from(n).ok()?.checked_sub(1)?;
        // The first number counts in the top-level message; later ones in
        // whatever the previous part contains.
        let container = if i == 0 {
            cur
        } else {
            match &cur.kind {
                Kind::Multi(_) => cur,
                Kind::Message(inner) => inner,
                Kind::Leaf => return None,
            }
        };
        cur = match &container.kind {
            Kind::Multi(children) => children.get(index)?,
            _ if index == 0 => container,
            _ => return None,
        };
    }
    Some(cur)
}

/// See [`crate::section`].
pub(crate) fn section(raw: &[u8], section: &Section) -> Option<Vec<u8>> {
    let root = Part::parse(raw);
    let part = resolve(&root, &section.part)?;
    let slice = |r: std::ops::Range<usize>| raw.get(r).map(<[u8]>::to_vec);
    // The message whose header/text a text spec addresses.
    let message = if section.part.is_empty() {
        Some(part)
    } else {
        match &part.kind {
            Kind::Message(inner) => Some(&**inner),
            _ => None,
        }
    };
    match &section.text {
        None if section.part.is_empty() => Some(raw.to_vec()),
        None => slice(part.body.clone()),
        Some(SectionText::Mime) => {
            if section.part.is_empty() {
                return None;
            }
            slice(part.header.clone())
        }
        Some(SectionText::Header) => slice(message?.header.clone()),
        Some(SectionText::Text) => slice(message?.body.clone()),
        Some(SectionText::HeaderFields(names)) => Some(filter_fields(
            raw.get(message?.header.clone())?,
            names,
            true,
        )),
        Some(SectionText::HeaderFieldsNot(names)) => Some(filter_fields(
            raw.get(message?.header.clone())?,
            names,
            false,
        )),
    }
}

/// The fields whose name is (or is not) in `names`, in message order and
/// as stored, followed by the blank line (RFC 9051 §6.4.5).
fn filter_fields(header: &[u8], names: &[String], keep: bool) -> Vec<u8> {
    let mut out = Vec::new();
    for f in header::fields(header) {
        let listed = names
            .iter()
            .any(|n| f.name.eq_ignore_ascii_case(n.as_bytes()));
        if listed == keep {
            out.extend_from_slice(f.raw);
            // A last field without a line end still gets one, so the
            // result stays a well-formed header.
            if !f.raw.ends_with(b"\n") {
                out.extend_from_slice(b"\r\n");
            }
        }
    }
    out.extend_from_slice(b"\r\n");
    out
}

/// See [`crate::binary`].
pub(crate) fn binary(raw: &[u8], path: &[u32]) -> Result<Option<Vec<u8>>, UnknownCte> {
    if path.is_empty() {
        // BINARY[] is the whole message; there is no encoding to undo.
        return Ok(Some(raw.to_vec()));
    }
    let root = Part::parse(raw);
    let Some(part) = resolve(&root, path) else {
        return Ok(None);
    };
    if !matches!(part.kind, Kind::Leaf) {
        // A multipart or message/rfc822 part: its content with the parts
        // inside decoded (RFC 5524 §4.2 via RFC 3516), each part's header
        // saying `binary`.
        let Some(decoded) = crate::recode::recode(raw, crate::recode::Target::Binary) else {
            return Ok(raw.get(part.body.clone()).map(<[u8]>::to_vec));
        };
        let root = Part::parse(&decoded);
        return Ok(
            resolve(&root, path).and_then(|p| decoded.get(p.body.clone()).map(<[u8]>::to_vec))
        );
    }
    let body = raw.get(part.body.clone()).unwrap_or_default();
    decode::transfer(body, &part.content.encoding_lower()).map(Some)
}
