//! FETCH (RFC 9051 §6.4.5) with BINARY (RFC 3516), CONDSTORE/QRESYNC
//! modifiers (RFC 7162), SAVEDATE (RFC 8514) and OBJECTID (RFC 8474).

use super::sequence_set;
use crate::command::{
    Command, FetchAttr, FetchAttrs, FetchModifiers, Partial, Section, SectionText,
};
use crate::lexer::{Cursor, PResult};
use crate::ParseError;

/// The deepest MIME part path accepted (`1.2.3...`).
const MAX_PART_DEPTH: usize = 64;

pub(super) fn fetch(c: &mut Cursor<'_>, uid: bool) -> PResult<Command> {
    c.sp()?;
    let set = sequence_set(c)?;
    c.sp()?;
    let attrs = if c.peek() == Some(b'(') {
        FetchAttrs::List(c.paren_list(fetch_att)?)
    } else if c.keyword("ALL") {
        FetchAttrs::All
    } else if c.keyword("FAST") {
        FetchAttrs::Fast
    } else if c.keyword("FULL") {
        FetchAttrs::Full
    } else {
        FetchAttrs::List(vec![fetch_att(c)?])
    };
    let mut modifiers = FetchModifiers::default();
    if c.eat(b' ') {
        c.paren_list(|c| {
            if c.keyword("CHANGEDSINCE") {
                c.sp()?;
                modifiers.changed_since = Some(c.number64()?);
            } else if c.keyword("VANISHED") {
                modifiers.vanished = true;
            } else {
                return Err(ParseError::Expected("fetch modifier"));
            }
            Ok(())
        })?;
        // RFC 7162 §3.2.6: VANISHED only with UID FETCH and CHANGEDSINCE.
        if modifiers.vanished && (!uid || modifiers.changed_since.is_none()) {
            return Err(ParseError::Invalid(
                "VANISHED without UID FETCH CHANGEDSINCE",
            ));
        }
    }
    Ok(Command::Fetch {
        uid,
        set,
        attrs,
        modifiers,
    })
}

/// One fetch-att (also used by NOTIFY MessageNew).
pub(crate) fn fetch_att(c: &mut Cursor<'_>) -> PResult<FetchAttr> {
    let name = c.take_while(|b| b.is_ascii_alphanumeric() || b == b'.');
    let name = std::str::from_utf8(name)
        .map_err(|_| ParseError::Expected("fetch attribute"))?
        .to_ascii_uppercase();
    let bracket = c.peek() == Some(b'[');
    use FetchAttr as A;
    Ok(match (name.as_str(), bracket) {
        ("ENVELOPE", false) => A::Envelope,
        ("FLAGS", false) => A::Flags,
        ("INTERNALDATE", false) => A::InternalDate,
        ("RFC822", false) => A::Rfc822,
        ("RFC822.HEADER", false) => A::Rfc822Header,
        ("RFC822.SIZE", false) => A::Rfc822Size,
        ("RFC822.TEXT", false) => A::Rfc822Text,
        ("BODY", false) => A::Body,
        ("BODYSTRUCTURE", false) => A::BodyStructure,
        ("UID", false) => A::Uid,
        ("MODSEQ", false) => A::ModSeq,
        ("SAVEDATE", false) => A::SaveDate,
        ("EMAILID", false) => A::EmailId,
        ("THREADID", false) => A::ThreadId,
        ("BODY" | "BODY.PEEK", true) => {
            let section = section(c)?;
            A::BodySection {
                peek: name.len() > 4,
                section,
                partial: partial(c)?,
            }
        }
        ("BINARY" | "BINARY.PEEK", true) => {
            let part = binary_section(c)?;
            A::Binary {
                peek: name.len() > 6,
                part,
                partial: partial(c)?,
            }
        }
        ("BINARY.SIZE", true) => A::BinarySize(binary_section(c)?),
        ("", _) if c.at_end() => return Err(ParseError::Eof),
        _ => return Err(ParseError::Expected("fetch attribute")),
    })
}

fn partial(c: &mut Cursor<'_>) -> PResult<Option<Partial>> {
    if !c.eat(b'<') {
        return Ok(None);
    }
    let origin = c.number()?;
    c.expect(b'.', ".")?;
    let count = c.nz_number()?;
    c.expect(b'>', ">")?;
    Ok(Some(Partial { origin, count }))
}

/// section-part = nz-number *("." nz-number); stops before ".TEXT" etc.
fn section_part(c: &mut Cursor<'_>) -> PResult<Vec<u32>> {
    let mut part = Vec::new();
    while c.peek().is_some_and(|b| b.is_ascii_digit()) {
        part.push(c.nz_number()?);
        if part.len() > MAX_PART_DEPTH {
            return Err(ParseError::Invalid("section part too deep"));
        }
        if c.peek() == Some(b'.') && c.peek_at(1).is_some_and(|b| b.is_ascii_digit()) {
            c.skip(1);
        } else {
            break;
        }
    }
    Ok(part)
}

fn binary_section(c: &mut Cursor<'_>) -> PResult<Vec<u32>> {
    c.expect(b'[', "[")?;
    let part = section_part(c)?;
    c.expect(b']', "]")?;
    Ok(part)
}

fn header_list(c: &mut Cursor<'_>) -> PResult<Vec<String>> {
    c.sp()?;
    c.paren_list(|c| {
        let s = c.astring()?;
        String::from_utf8(s.to_ascii_uppercase()).map_err(|_| ParseError::Invalid("header name"))
    })
}

fn section(c: &mut Cursor<'_>) -> PResult<Section> {
    c.expect(b'[', "[")?;
    let part = section_part(c)?;
    let mut text = None;
    // After a part number, text follows only behind a dot.
    let has_text = if part.is_empty() {
        c.peek() != Some(b']')
    } else {
        c.eat(b'.')
    };
    if has_text {
        let word = c.take_while(|b| b.is_ascii_alphabetic() || b == b'.');
        let word = word.to_ascii_uppercase();
        text = Some(match word.as_slice() {
            b"HEADER" => SectionText::Header,
            b"HEADER.FIELDS" => SectionText::HeaderFields(header_list(c)?),
            b"HEADER.FIELDS.NOT" => SectionText::HeaderFieldsNot(header_list(c)?),
            b"TEXT" => SectionText::Text,
            b"MIME" if !part.is_empty() => SectionText::Mime,
            _ => return Err(ParseError::Expected("section text")),
        });
    }
    c.expect(b']', "]")?;
    Ok(Section { part, text })
}
