//! Mailbox names as the client sees them (hierarchy separator from
//! `imap.separator`) ↔ as the store keeps them (`.` for Maildir++, `/` for
//! `LAYOUT=fs`), and LIST pattern matching (RFC 9051 §6.3.9).

/// The two separators of a session.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Names {
    pub imap: char,
    pub store: char,
}

/// Why a client name cannot be stored.
#[derive(Debug)]
pub(crate) struct BadName(pub String);

impl Names {
    /// Client name → store name. A store separator inside a level the
    /// client names cannot be represented on disk and is refused, as
    /// Dovecot does.
    pub fn to_store(self, name: &str) -> Result<String, BadName> {
        if name.eq_ignore_ascii_case("INBOX") {
            return Ok("INBOX".into());
        }
        if self.imap != self.store && name.contains(self.store) {
            return Err(BadName(format!(
                "Character not allowed in mailbox name: '{}'",
                self.store
            )));
        }
        let mut s: String = name
            .chars()
            .map(|c| if c == self.imap { self.store } else { c })
            .collect();
        // INBOX children keep INBOX's canonical spelling.
        if s.len() > 5 && s.is_char_boundary(5) && s[..5].eq_ignore_ascii_case("INBOX") {
            let rest = &s[5..];
            if rest.starts_with(self.store) {
                s = format!("INBOX{rest}");
            }
        }
        Ok(s)
    }

    /// Store name → client name.
    pub fn to_imap(self, name: &str) -> String {
        name.chars()
            .map(|c| if c == self.store { self.imap } else { c })
            .collect()
    }
}

/// Does `name` match the LIST `pattern` (`*` anything, `%` anything but
/// the separator)? INBOX matches case-insensitively. Dynamic programming,
/// so hostile patterns cost O(len(name) × len(pattern)), never more.
pub(crate) fn matches(pattern: &str, name: &str, sep: char) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let n: Vec<char> = name.chars().collect();
    let inbox_len = if name.len() >= 5
        && name.is_char_boundary(5)
        && name[..5].eq_ignore_ascii_case("INBOX")
        && (name.len() == 5 || name[5..].starts_with(sep))
    {
        5
    } else {
        0
    };
    let eq = |pc: char, i: usize| -> bool {
        let nc = n[i];
        if i < inbox_len {
            pc.eq_ignore_ascii_case(&nc)
        } else {
            pc == nc
        }
    };
    // dp[j] = pattern[..i] matches name[..j]
    let mut dp = vec![false; n.len() + 1];
    dp[0] = true;
    for &pc in &p {
        let mut next = vec![false; n.len() + 1];
        match pc {
            '*' => {
                let mut any = false;
                for j in 0..=n.len() {
                    any |= dp[j];
                    next[j] = any;
                }
            }
            '%' => {
                for j in 0..=n.len() {
                    next[j] = dp[j] || (j > 0 && next[j - 1] && n[j - 1] != sep);
                }
            }
            c => {
                for j in 1..=n.len() {
                    next[j] = dp[j - 1] && eq(c, j - 1);
                }
            }
        }
        dp = next;
    }
    dp[n.len()]
}

/// The parents of a hierarchical name: `a/b/c` → `a`, `a/b`.
pub(crate) fn parents(name: &str, sep: char) -> impl Iterator<Item = &str> {
    name.char_indices()
        .filter(move |&(_, c)| c == sep)
        .map(move |(i, _)| &name[..i])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wildcards() {
        assert!(matches("*", "a/b/c", '/'));
        assert!(matches("%", "a", '/'));
        assert!(!matches("%", "a/b", '/'));
        assert!(matches("a/%", "a/b", '/'));
        assert!(matches("a/*", "a/b/c", '/'));
        assert!(!matches("a/%", "a/b/c", '/'));
        assert!(matches("inbox", "INBOX", '/'));
        assert!(matches("InBoX/%", "INBOX/x", '/'));
        assert!(!matches("inbox", "Inboxy", '/'));
        assert!(matches("%/%", "a/b", '/'));
        assert!(matches("*b", "a/b", '/'));
        assert!(!matches("Sent", "sent", '/'));
    }

    #[test]
    fn store_names() {
        let n = Names {
            imap: '/',
            store: '.',
        };
        assert_eq!(n.to_store("a/b").unwrap(), "a.b");
        assert_eq!(n.to_store("inbox").unwrap(), "INBOX");
        assert_eq!(n.to_store("Inbox/x").unwrap(), "INBOX.x");
        assert!(n.to_store("a.b").is_err());
        assert_eq!(n.to_imap("a.b"), "a/b");
        let p: Vec<_> = parents("a/b/c", '/').collect();
        assert_eq!(p, vec!["a", "a/b"]);
    }
}
