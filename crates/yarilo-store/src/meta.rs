//! Message content through mail-parser 0.11: MIME sections for IMAP
//! `BODY[<section>]` (RFC 9051 §6.4.5) and the envelope fields.
//!
//! Invariants: never panics on any input; a section that does not exist
//! is `None` (IMAP answers it with an empty string).

use mail_parser::{Message, MessageParser, PartType};

/// What part of a section is wanted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SectionText {
    /// The whole part (`BODY[1.2]`, or the whole message for `BODY[]`).
    All,
    /// `HEADER`: the header of the message (or of a message/rfc822 part).
    Header,
    /// `TEXT`: the body of the message (or message/rfc822 part).
    Text,
    /// `MIME`: the MIME header of a numbered part.
    Mime,
}

/// The envelope inputs of a message (RFC 9051 §7.5.2 ENVELOPE).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Summary {
    pub subject: Option<String>,
    pub from: Vec<String>,
    pub to: Vec<String>,
    pub cc: Vec<String>,
    /// The Date header as unix seconds.
    pub date: Option<i64>,
    pub message_id: Option<String>,
}

fn addresses(a: Option<&mail_parser::Address>) -> Vec<String> {
    a.map(|a| {
        a.iter()
            .filter_map(|addr| addr.address().map(str::to_string))
            .collect()
    })
    .unwrap_or_default()
}

/// Envelope fields from a header section (or a whole message).
pub fn summary(data: &[u8]) -> Summary {
    let Some(m) = MessageParser::default().parse_headers(data) else {
        return Summary::default();
    };
    Summary {
        subject: m.subject().map(str::to_string),
        from: addresses(m.from()),
        to: addresses(m.to()),
        cc: addresses(m.cc()),
        date: m.date().map(|d| d.to_timestamp()),
        message_id: m.message_id().map(str::to_string),
    }
}

/// The bytes of section `path` (1-based part numbers, empty = the whole
/// message) and `text` selector.
pub fn section(raw: &[u8], path: &[u32], text: SectionText) -> Option<Vec<u8>> {
    let msg = MessageParser::default().parse(raw)?;
    section_in(&msg, path, text, 0)
}

fn slice(raw: &[u8], from: u32, to: u32) -> Option<Vec<u8>> {
    raw.get(from as usize..to as usize).map(<[u8]>::to_vec)
}

fn section_in(msg: &Message, path: &[u32], text: SectionText, depth: usize) -> Option<Vec<u8>> {
    if depth > 32 {
        return None;
    }
    let raw = msg.raw_message();
    let root = msg.root_part();
    let Some((&first, rest)) = path.split_first() else {
        return match text {
            SectionText::All => Some(raw.to_vec()),
            SectionText::Header => slice(raw, root.offset_header, root.offset_body),
            SectionText::Text => slice(raw, root.offset_body, root.offset_end),
            SectionText::Mime => None,
        };
    };
    // Part N of a non-multipart message is its body (RFC 9051 §6.4.5).
    let part = match root.sub_parts() {
        Some(ids) => msg.part(*ids.get((first as usize).checked_sub(1)?)?)?,
        None if first == 1 => root,
        None => return None,
    };
    let is_root = std::ptr::eq(part, root);
    if let PartType::Message(inner) = &part.body {
        if !rest.is_empty() || matches!(text, SectionText::Header | SectionText::Text) {
            return section_in(inner, rest, text, depth + 1);
        }
    }
    if !rest.is_empty() {
        // Deeper numbering inside a nested multipart.
        if let Some(ids) = part.sub_parts() {
            let sub = msg.part(*ids.get((rest[0] as usize).checked_sub(1)?)?)?;
            return part_bytes(raw, sub, &rest[1..], text, msg, depth + 1);
        }
        return None;
    }
    match text {
        SectionText::All if is_root => slice(raw, root.offset_body, root.offset_end),
        SectionText::All => slice(raw, part.offset_body, part.offset_end),
        SectionText::Mime => slice(raw, part.offset_header, part.offset_body),
        SectionText::Header | SectionText::Text => None,
    }
}

fn part_bytes(
    raw: &[u8],
    part: &mail_parser::MessagePart,
    rest: &[u32],
    text: SectionText,
    msg: &Message,
    depth: usize,
) -> Option<Vec<u8>> {
    if depth > 32 {
        return None;
    }
    if let PartType::Message(inner) = &part.body {
        if !rest.is_empty() || matches!(text, SectionText::Header | SectionText::Text) {
            return section_in(inner, rest, text, depth + 1);
        }
    }
    if let Some((&n, tail)) = rest.split_first() {
        let ids = part.sub_parts()?;
        let sub = msg.part(*ids.get((n as usize).checked_sub(1)?)?)?;
        return part_bytes(raw, sub, tail, text, msg, depth + 1);
    }
    match text {
        SectionText::All => slice(raw, part.offset_body, part.offset_end),
        SectionText::Mime => slice(raw, part.offset_header, part.offset_body),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIXED: &[u8] = b"From: A <a@example.org>\r\nTo: b@example.org\r\nSubject: hi\r\n\
Date: Tue, 14 Nov 2023 12:00:00 +0000\r\nMessage-ID: <x@y>\r\n\
Content-Type: multipart/mixed; boundary=\"b1\"\r\n\r\n\
--b1\r\nContent-Type: text/plain\r\n\r\nfirst part\r\n\
--b1\r\nContent-Type: text/html\r\n\r\n<p>second</p>\r\n\
--b1--\r\n";

    #[test]
    fn sections_of_a_multipart_message() {
        assert_eq!(section(MIXED, &[], SectionText::All).unwrap(), MIXED);
        let h = section(MIXED, &[], SectionText::Header).unwrap();
        assert!(h.starts_with(b"From:") && h.ends_with(b"\r\n\r\n"));
        let p1 = section(MIXED, &[1], SectionText::All).unwrap();
        assert!(
            String::from_utf8_lossy(&p1).starts_with("first part"),
            "{:?}",
            String::from_utf8_lossy(&p1)
        );
        let m2 = section(MIXED, &[2], SectionText::Mime).unwrap();
        assert!(String::from_utf8_lossy(&m2).contains("text/html"));
        assert_eq!(section(MIXED, &[3], SectionText::All), None);
        assert_eq!(section(MIXED, &[0], SectionText::All), None);
    }

    #[test]
    fn envelope_summary() {
        let s = summary(MIXED);
        assert_eq!(s.subject.as_deref(), Some("hi"));
        assert_eq!(s.from, vec!["a@example.org"]);
        assert_eq!(s.date, Some(1_699_963_200));
        assert_eq!(s.message_id.as_deref(), Some("x@y"));
    }

    #[test]
    fn garbage_never_panics() {
        for data in [
            &b""[..],
            b"\r\n\r\n",
            b"Content-Type: multipart/mixed; boundary=x\r\n\r\n--x\r\n",
        ] {
            let _ = section(data, &[1, 2, 3], SectionText::Mime);
            let _ = summary(data);
        }
    }
}
