//! FETCH attributes (RFC 9051 §6.4.5, RFC 3516 BINARY, RFC 7162 CONDSTORE /
//! QRESYNC, RFC 8514 SAVEDATE, RFC 8474 OBJECTID).

/// The attribute list of a FETCH: a macro or an explicit list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FetchAttrs {
    /// `ALL` = (FLAGS INTERNALDATE RFC822.SIZE ENVELOPE)
    All,
    /// `FAST` = (FLAGS INTERNALDATE RFC822.SIZE)
    Fast,
    /// `FULL` = (FLAGS INTERNALDATE RFC822.SIZE ENVELOPE BODY)
    Full,
    /// An explicit list (one attribute without parentheses is a list of one).
    List(Vec<FetchAttr>),
}

impl FetchAttrs {
    /// The macro expanded into attributes (RFC 9051 §6.4.5).
    pub fn expand(&self) -> Vec<FetchAttr> {
        use FetchAttr::*;
        match self {
            FetchAttrs::All => vec![Flags, InternalDate, Rfc822Size, Envelope],
            FetchAttrs::Fast => vec![Flags, InternalDate, Rfc822Size],
            FetchAttrs::Full => vec![Flags, InternalDate, Rfc822Size, Envelope, Body],
            FetchAttrs::List(v) => v.clone(),
        }
    }
}

/// `<origin.count>` of a partial fetch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Partial {
    /// First octet.
    pub origin: u32,
    /// Number of octets (non-zero).
    pub count: u32,
}

/// The text part of a section spec.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum SectionText {
    /// `HEADER`
    Header,
    /// `HEADER.FIELDS (names)`, names upper-cased.
    HeaderFields(Vec<String>),
    /// `HEADER.FIELDS.NOT (names)`, names upper-cased.
    HeaderFieldsNot(Vec<String>),
    /// `TEXT`
    Text,
    /// `MIME` (only after a part number).
    Mime,
}

/// A `section` of BODY[...] or BINARY[...]: part path and optional text spec.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct Section {
    /// `1.2.3` → [1, 2, 3]; empty for the whole message.
    pub part: Vec<u32>,
    /// What of that part.
    pub text: Option<SectionText>,
}

/// One FETCH attribute.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum FetchAttr {
    /// `ENVELOPE`
    Envelope,
    /// `FLAGS`
    Flags,
    /// `INTERNALDATE`
    InternalDate,
    /// `RFC822` (IMAP4rev1)
    Rfc822,
    /// `RFC822.HEADER` (IMAP4rev1)
    Rfc822Header,
    /// `RFC822.SIZE`
    Rfc822Size,
    /// `RFC822.TEXT` (IMAP4rev1)
    Rfc822Text,
    /// `BODY` (non-extensible BODYSTRUCTURE)
    Body,
    /// `BODYSTRUCTURE`
    BodyStructure,
    /// `UID`
    Uid,
    /// `BODY[section]<partial>` / `BODY.PEEK[...]`
    BodySection {
        /// `.PEEK`: do not set \Seen.
        peek: bool,
        /// Which part.
        section: Section,
        /// Byte range.
        partial: Option<Partial>,
    },
    /// `BINARY[part]<partial>` / `BINARY.PEEK[...]` (RFC 3516)
    Binary {
        /// `.PEEK`.
        peek: bool,
        /// Part path.
        part: Vec<u32>,
        /// Byte range.
        partial: Option<Partial>,
    },
    /// `BINARY.SIZE[part]` (RFC 3516)
    BinarySize(Vec<u32>),
    /// `MODSEQ` (RFC 7162)
    ModSeq,
    /// `SAVEDATE` (RFC 8514)
    SaveDate,
    /// `EMAILID` (RFC 8474)
    EmailId,
    /// `THREADID` (RFC 8474)
    ThreadId,
}

/// FETCH modifiers (RFC 7162 §3.1.4.1, §3.2.6).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FetchModifiers {
    /// `CHANGEDSINCE modseq`
    pub changed_since: Option<u64>,
    /// `VANISHED` (UID FETCH with CHANGEDSINCE only).
    pub vanished: bool,
}
