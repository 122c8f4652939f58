//! Message flags and keywords (RFC 9051 §2.3.2).

use std::fmt;

/// A flag as it appears in STORE, APPEND, FLAGS and PERMANENTFLAGS.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Flag {
    /// `\Seen`
    Seen,
    /// `\Answered`
    Answered,
    /// `\Flagged`
    Flagged,
    /// `\Deleted`
    Deleted,
    /// `\Draft`
    Draft,
    /// `\Recent` (IMAP4rev1 only; only ever sent by the server).
    Recent,
    /// `\*` in PERMANENTFLAGS: new keywords may be created.
    Wildcard,
    /// Another `\`-prefixed flag (flag-extension), without the backslash.
    Extension(String),
    /// A keyword (atom), e.g. `$Forwarded`.
    Keyword(String),
}

impl Flag {
    /// Parses a flag atom including a leading backslash if any.
    pub fn parse(s: &str) -> Flag {
        match s.strip_prefix('\\') {
            Some(x) if x.eq_ignore_ascii_case("Seen") => Flag::Seen,
            Some(x) if x.eq_ignore_ascii_case("Answered") => Flag::Answered,
            Some(x) if x.eq_ignore_ascii_case("Flagged") => Flag::Flagged,
            Some(x) if x.eq_ignore_ascii_case("Deleted") => Flag::Deleted,
            Some(x) if x.eq_ignore_ascii_case("Draft") => Flag::Draft,
            Some(x) if x.eq_ignore_ascii_case("Recent") => Flag::Recent,
            Some("*") => Flag::Wildcard,
            Some(x) => Flag::Extension(x.to_owned()),
            None => Flag::Keyword(s.to_owned()),
        }
    }
}

impl fmt::Display for Flag {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Flag::Seen => f.write_str("\\Seen"),
            Flag::Answered => f.write_str("\\Answered"),
            Flag::Flagged => f.write_str("\\Flagged"),
            Flag::Deleted => f.write_str("\\Deleted"),
            Flag::Draft => f.write_str("\\Draft"),
            Flag::Recent => f.write_str("\\Recent"),
            Flag::Wildcard => f.write_str("\\*"),
            Flag::Extension(x) => write!(f, "\\{x}"),
            Flag::Keyword(k) => f.write_str(k),
        }
    }
}
