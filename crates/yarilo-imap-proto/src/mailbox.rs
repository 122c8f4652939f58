//! Mailbox names on the wire (RFC 9051 §5.1, RFC 3501 §5.1.3, RFC 6855).
//!
//! Invariant: a [`Mailbox`] holds the decoded Unicode name; `INBOX` in any
//! case is normalised to `INBOX` (RFC 9051 §5.1: INBOX is case-insensitive).
//! Any astring is a syntactically valid mailbox name: one that is not
//! valid modified UTF-7 (or UTF-8) is kept verbatim and marked
//! [`undecodable`](Mailbox::is_undecodable), so the session can answer that
//! no such mailbox exists instead of rejecting the command's syntax.

use crate::utf7;

/// A decoded mailbox name.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Mailbox(String, bool);

impl Mailbox {
    /// Builds a mailbox from a decoded name, normalising INBOX.
    pub fn new(name: impl Into<String>) -> Self {
        let name = name.into();
        if name.eq_ignore_ascii_case("INBOX") {
            Mailbox("INBOX".to_owned(), false)
        } else {
            Mailbox(name, false)
        }
    }

    /// Decodes a name as sent by the client: UTF-8 when `utf8` (IMAP4rev2 or
    /// UTF8=ACCEPT enabled), otherwise modified UTF-7.
    pub fn from_wire(bytes: &[u8], utf8: bool) -> Result<Self, utf7::Utf7Error> {
        if utf8 {
            let s = std::str::from_utf8(bytes).map_err(|_| utf7::Utf7Error)?;
            Ok(Mailbox::new(s))
        } else {
            Ok(Mailbox::new(utf7::decode(bytes)?))
        }
    }

    /// Like [`from_wire`](Self::from_wire), but a name that does not decode
    /// is kept as the client spelled it (lossily for invalid UTF-8) and
    /// marked undecodable: no mailbox can have that name.
    pub fn from_wire_lossy(bytes: &[u8], utf8: bool) -> Self {
        match Mailbox::from_wire(bytes, utf8) {
            Ok(m) => m,
            Err(_) => Mailbox(String::from_utf8_lossy(bytes).into_owned(), true),
        }
    }

    /// True when the client's spelling was not a valid encoding: the name
    /// cannot exist and cannot be created.
    pub fn is_undecodable(&self) -> bool {
        self.1
    }

    /// The name to send: UTF-8 or modified UTF-7.
    pub fn to_wire(&self, utf8: bool) -> String {
        if utf8 || self.1 {
            self.0.clone()
        } else {
            utf7::encode(&self.0)
        }
    }

    /// The decoded name.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// True for INBOX.
    pub fn is_inbox(&self) -> bool {
        self.0 == "INBOX"
    }
}

impl std::fmt::Display for Mailbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inbox_is_case_insensitive() {
        assert!(Mailbox::from_wire(b"iNbOx", false).unwrap().is_inbox());
        assert!(!Mailbox::new("INBOX/x").is_inbox());
    }

    #[test]
    fn undecodable_names_are_kept_verbatim() {
        let m = Mailbox::from_wire_lossy(b"a&'+,-b", false);
        assert!(m.is_undecodable());
        assert_eq!(m.to_wire(false), "a&'+,-b");
        assert!(!Mailbox::from_wire_lossy(b"a&-b", false).is_undecodable());
    }
}
