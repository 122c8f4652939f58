//! Message flags and their Maildir encoding.
//!
//! Maildir info `:2,<letters>` (the letters in ASCII order): `D` draft,
//! `F` flagged, `P` passed, `R` replied (\Answered), `S` seen, `T` trashed
//! (\Deleted); `a`..`z` are keywords 0..25 of `dovecot-keywords` (Dovecot
//! 2.3 behaviour). Unknown letters are preserved when flags change.

/// IMAP system flags (RFC 9051 §2.3.2), as a bit set. `\Recent` is a
/// session property and not stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub struct Flags(pub u8);

impl Flags {
    pub const SEEN: Flags = Flags(1);
    pub const ANSWERED: Flags = Flags(2);
    pub const FLAGGED: Flags = Flags(4);
    pub const DELETED: Flags = Flags(8);
    pub const DRAFT: Flags = Flags(16);
    pub const EMPTY: Flags = Flags(0);

    pub fn contains(self, other: Flags) -> bool {
        self.0 & other.0 == other.0
    }
    pub fn union(self, other: Flags) -> Flags {
        Flags(self.0 | other.0)
    }
    pub fn difference(self, other: Flags) -> Flags {
        Flags(self.0 & !other.0)
    }
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// The IMAP names of the set flags, e.g. `["\\Seen", "\\Flagged"]`.
    pub fn imap_names(self) -> Vec<&'static str> {
        let mut v = Vec::new();
        for (f, n) in IMAP_NAMES {
            if self.contains(f) {
                v.push(n);
            }
        }
        v
    }

    /// Parses one IMAP system flag name (case-insensitive).
    pub fn from_imap_name(name: &str) -> Option<Flags> {
        IMAP_NAMES
            .iter()
            .find(|(_, n)| n.eq_ignore_ascii_case(name))
            .map(|(f, _)| *f)
    }
}

const IMAP_NAMES: [(Flags, &str); 5] = [
    (Flags::ANSWERED, "\\Answered"),
    (Flags::FLAGGED, "\\Flagged"),
    (Flags::DELETED, "\\Deleted"),
    (Flags::SEEN, "\\Seen"),
    (Flags::DRAFT, "\\Draft"),
];

/// Keyword indexes (0..26) into the mailbox's `dovecot-keywords`, as a bit set.
pub type KeywordMask = u32;

/// The maximum number of keywords a Maildir filename can carry.
pub const MAX_KEYWORDS: usize = 26;

/// Flags decoded from a Maildir info string (the part after `:2,`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct MaildirInfo {
    pub flags: Flags,
    pub keywords: KeywordMask,
    /// Letters we do not interpret (`P`, …), kept as they were.
    pub other: String,
}

impl MaildirInfo {
    pub fn parse(letters: &str) -> MaildirInfo {
        let mut info = MaildirInfo::default();
        for c in letters.chars() {
            match c {
                'D' => info.flags = info.flags.union(Flags::DRAFT),
                'F' => info.flags = info.flags.union(Flags::FLAGGED),
                'R' => info.flags = info.flags.union(Flags::ANSWERED),
                'S' => info.flags = info.flags.union(Flags::SEEN),
                'T' => info.flags = info.flags.union(Flags::DELETED),
                'a'..='z' => info.keywords |= 1 << (c as u32 - 'a' as u32),
                _ => {
                    if !info.other.contains(c) {
                        info.other.push(c)
                    }
                }
            }
        }
        info
    }

    /// The info letters in ASCII order, as Maildir requires.
    pub fn letters(&self) -> String {
        let mut chars: Vec<char> = self.other.chars().collect();
        for (f, c) in [
            (Flags::DRAFT, 'D'),
            (Flags::FLAGGED, 'F'),
            (Flags::ANSWERED, 'R'),
            (Flags::SEEN, 'S'),
            (Flags::DELETED, 'T'),
        ] {
            if self.flags.contains(f) {
                chars.push(c);
            }
        }
        for i in 0..MAX_KEYWORDS as u32 {
            if self.keywords & (1 << i) != 0 {
                chars.push((b'a' + i as u8) as char);
            }
        }
        chars.sort_unstable();
        chars.dedup();
        chars.into_iter().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn info_round_trips_in_ascii_order() {
        let i = MaildirInfo::parse("SabP");
        assert_eq!(i.flags, Flags::SEEN);
        assert_eq!(i.keywords, 0b11);
        assert_eq!(i.letters(), "PSab");
        let i = MaildirInfo::parse("TSRFD");
        assert_eq!(i.letters(), "DFRST");
    }
}
