//! yarilo's MIME layer: raw RFC 5322 messages into the values IMAP FETCH
//! and SEARCH need (ENVELOPE, BODYSTRUCTURE, BODY[section], BINARY[part],
//! header/body/text matching, the sent date).
//!
//! Implements RFC 5322 (message format, addresses, dates), RFC 2045/2046
//! (MIME entities, multipart boundaries, message/rfc822), RFC 2047
//! (encoded-words, for SEARCH), RFC 2183 (Content-Disposition), RFC 9051
//! §6.4.5 / §7.5.2 and RFC 3501 §6.4.5 / §7.4.2 (section numbering,
//! ENVELOPE, BODYSTRUCTURE) and RFC 3516 (BINARY). Where the RFCs leave
//! room the behaviour follows Dovecot 2.3 (see the module docs).
//!
//! Invariants: no function panics on any input; nesting is bounded by
//! [`MAX_DEPTH`]; bytes are taken as stored (CRLF or LF line ends are not
//! converted, so sizes and offsets match what BODY[] returns from the same
//! bytes).

mod address;
mod content;
mod date;
mod decode;
mod header;
mod part;
mod recode;
mod search;
mod section;
mod structure;
mod token;

#[cfg(test)]
mod tests;

use yarilo_imap_proto::command::Section;
use yarilo_imap_proto::response::{BodyStructure, Envelope};

pub use decode::UnknownCte;
pub use part::MAX_DEPTH;

/// ENVELOPE from a header section (or whole message). Raw header bytes
/// (not RFC 2047-decoded), unfolded; addresses per RFC 9051 §7.5.2 incl.
/// groups (group start = (NIL NIL "group" NIL), end = (NIL NIL NIL NIL));
/// sender/reply-to default to from when absent; NIL where absent.
pub fn envelope(header: &[u8]) -> Envelope {
    address::envelope(header)
}

/// BODYSTRUCTURE (extensible form data filled: md5, disposition,
/// language, location, params); sizes in octets of the encoded body as
/// stored, text line counts, message/rfc822 nesting (envelope + body +
/// lines), multipart with boundaries; defaults per RFC 2045 (text/plain;
/// charset=us-ascii, 7BIT). Never panics; depth bounded.
pub fn body_structure(raw: &[u8]) -> BodyStructure {
    structure::of(raw, &part::Part::parse(raw))
}

/// The bytes of BODY[section] before <partial> is applied; None if the
/// part does not exist (the session answers an empty string). Covers ""
/// (whole), HEADER, HEADER.FIELDS (names case-insensitive, returns
/// matching fields in message order + terminating CRLF),
/// HEADER.FIELDS.NOT, TEXT, MIME, numeric parts, nested message/rfc822
/// (1.2.HEADER etc.), and the RFC rule that part 1 of a non-multipart
/// message is its body.
///
/// Parts whose Content-Transfer-Encoding is `binary` are given as base64
/// (their MIME header saying so), so BODY never carries NUL or bare line
/// ends (as Dovecot does; BINARY[] is for the raw octets).
pub fn section(raw: &[u8], section: &Section) -> Option<Vec<u8>> {
    match recode::recode(raw, recode::Target::SevenBit) {
        Some(safe) => section::section(&safe, section),
        None => section::section(raw, section),
    }
}

/// The BODYSTRUCTURE of one body part (RFC 5524 BODYPARTSTRUCTURE): the
/// whole message's for an empty path, else the part's as FETCH
/// BODYSTRUCTURE would nest it. None if the part does not exist.
pub fn part_structure(raw: &[u8], part: &[u32]) -> Option<BodyStructure> {
    part_structure_of(raw, part)
}

/// [`part_structure`] of what [`binary`] returns for a multipart or
/// message/rfc822 part: the parts inside described decoded (sizes, lines,
/// `binary` encoding). None for a leaf or a missing part.
pub fn decoded_part_structure(raw: &[u8], part: &[u32]) -> Option<BodyStructure> {
    let root = part::Part::parse(raw);
    if matches!(section::resolve(&root, part)?.kind, part::Kind::Leaf) {
        return None;
    }
    let decoded = recode::recode(raw, recode::Target::Binary)?;
    part_structure_of(&decoded, part)
}

fn part_structure_of(raw: &[u8], part: &[u32]) -> Option<BodyStructure> {
    let root = part::Part::parse(raw);
    let p = section::resolve(&root, part)?;
    Some(structure::of(raw, p))
}

/// BINARY[part]: the decoded content (base64, quoted-printable,
/// 7bit/8bit/binary pass-through); of a multipart or message/rfc822 part,
/// its content with every part inside decoded and marked `binary`.
/// Err(UnknownCte) for an unknown Content-Transfer-Encoding (session
/// answers [UNKNOWN-CTE]).
pub fn binary(raw: &[u8], part: &[u32]) -> Result<Option<Vec<u8>>, UnknownCte> {
    section::binary(raw, part)
}

/// SEARCH HEADER <field> <needle> / FROM/TO/CC/BCC/SUBJECT:
/// case-insensitive substring over the RFC 2047-decoded, unfolded field
/// value(s); empty needle matches if the field exists.
pub fn header_matches(header: &[u8], field: &str, needle: &str) -> bool {
    search::header_matches(header, field, needle)
}

/// SEARCH FROM/TO/CC/BCC: substring (as [`header_matches`]) of the
/// field's addresses as parsed and written back, `Name <user@host>`, so
/// comments and folding inside an addr-spec do not hide it and groups are
/// searched by their members.
pub fn address_matches(header: &[u8], field: &str, needle: &str) -> bool {
    search::address_matches(header, field, needle)
}

/// SEARCH BODY: substring (case-insensitive, Unicode simple folding) in
/// the text of the body parts after transfer decoding and charset
/// conversion to UTF-8 (unknown charsets: UTF-8 when valid, else
/// Latin-1).
pub fn body_contains(raw: &[u8], needle: &str) -> bool {
    search::body_contains(raw, needle)
}

/// SEARCH TEXT: header (decoded) or body.
pub fn text_contains(raw: &[u8], needle: &str) -> bool {
    search::text_contains(raw, needle)
}

/// The Date: header as unix seconds (for SENTBEFORE/SENTON/SENTSINCE,
/// SORT later).
pub fn sent_date(header: &[u8]) -> Option<i64> {
    date::sent_date(header)
}

/// The calendar day of the Date: field as written, time and zone
/// disregarded (SEARCH SENTBEFORE/SENTON/SENTSINCE, RFC 9051 §6.4.4), as
/// days since 1970-01-01; `None` without a parsable Date:.
pub fn sent_day(header: &[u8]) -> Option<i64> {
    date::sent_day(header)
}

/// The first `field` of a header, unfolded and RFC 2047-decoded (SORT
/// SUBJECT and the THREAD subject, RFC 5256 §2.1 step 1); None when the
/// field is absent.
pub fn header_text(header: &[u8], field: &str) -> Option<String> {
    header::first(header, field).map(|f| decode::header_value(&f.unfolded()))
}

/// The first `field` of a header, unfolded, as stored (Message-ID,
/// References, In-Reply-To for THREAD).
pub fn header_raw(header: &[u8], field: &str) -> Option<Vec<u8>> {
    header::first(header, field).map(|f| f.unfolded())
}

/// The first address of an address field, skipping group markers (RFC
/// 5256 §3 "first From address"; RFC 5957 §3). The display name is
/// raw: decode it with [`decode_words`]. A missing local part or domain
/// is `None` here (not ENVELOPE's `MISSING_*` placeholders), so sort keys
/// hold only what the message says.
pub fn first_address(header: &[u8], field: &str) -> Option<yarilo_imap_proto::response::Address> {
    let f = header::first(header, field)?;
    address::parse_list(&f.unfolded())
        .into_iter()
        .find(|a| a.host.is_some())
        .map(address::without_placeholders)
}

/// RFC 2047 encoded-words decoded (an address display name, RFC 5957 §3
/// via RFC 5255 §4.6).
pub fn decode_words(raw: &[u8]) -> String {
    decode::header_value(raw)
}
