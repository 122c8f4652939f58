//! `dovecot-keywords`: `<index> <name>` per line, index 0..25 mapping to
//! the Maildir info letters `a`..`z`.

use crate::flags::MAX_KEYWORDS;

/// The keyword table of one mailbox. Position = letter index.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Keywords {
    names: Vec<Option<String>>,
}

impl Keywords {
    /// Parses the file; malformed lines are skipped (as Dovecot does), out
    /// of range indexes ignored.
    pub fn parse(text: &str) -> Keywords {
        let mut k = Keywords::default();
        for line in text.lines() {
            let Some((idx, name)) = line.split_once(' ') else {
                continue;
            };
            let Ok(idx) = idx.parse::<usize>() else {
                continue;
            };
            if idx >= MAX_KEYWORDS || name.is_empty() {
                continue;
            }
            if k.names.len() <= idx {
                k.names.resize(idx + 1, None);
            }
            k.names[idx] = Some(name.to_string());
        }
        k
    }

    pub fn serialize(&self) -> String {
        let mut s = String::new();
        for (i, n) in self.names.iter().enumerate() {
            if let Some(n) = n {
                s.push_str(&format!("{i} {n}\n"));
            }
        }
        s
    }

    pub fn name(&self, idx: usize) -> Option<&str> {
        self.names.get(idx).and_then(|n| n.as_deref())
    }

    /// Index of `name` (IMAP keywords compare case-insensitively).
    pub fn find(&self, name: &str) -> Option<usize> {
        self.names
            .iter()
            .position(|n| n.as_deref().is_some_and(|n| n.eq_ignore_ascii_case(name)))
    }

    /// Index of `name`, adding it if there is room. `None`: all 26 letters
    /// are taken.
    pub fn find_or_add(&mut self, name: &str) -> Option<usize> {
        if let Some(i) = self.find(name) {
            return Some(i);
        }
        let free = self.names.iter().position(|n| n.is_none());
        let idx = match free {
            Some(i) => i,
            None if self.names.len() < MAX_KEYWORDS => {
                self.names.push(None);
                self.names.len() - 1
            }
            None => return None,
        };
        self.names[idx] = Some(name.to_string());
        Some(idx)
    }

    /// Names of the keywords in `mask`.
    pub fn names_of(&self, mask: u32) -> Vec<String> {
        (0..MAX_KEYWORDS)
            .filter(|i| mask & (1 << i) != 0)
            .filter_map(|i| self.name(i).map(str::to_string))
            .collect()
    }

    /// All defined names (for PERMANENTFLAGS / FLAGS).
    pub fn all(&self) -> Vec<String> {
        self.names.iter().flatten().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_adds() {
        let mut k = Keywords::parse("0 $Label1\n1 foo\nbogus\n40 x\n");
        assert_eq!(k.find("FOO"), Some(1));
        assert_eq!(k.find_or_add("bar"), Some(2));
        assert_eq!(k.names_of(0b101), vec!["$Label1", "bar"]);
        assert_eq!(k.serialize(), "0 $Label1\n1 foo\n2 bar\n");
    }
}
