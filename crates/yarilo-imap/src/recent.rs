//! `\Recent` (IMAP4rev1): a message is recent in exactly one session, the
//! first that sees it. IMAP4rev2 dropped the flag, but rev1 clients and
//! test suites still check it. Tracked per process: the highest UID a
//! session has claimed, per mailbox. Across processes (several backends on
//! one volume) a message may be recent in one session of each; that is the
//! same looseness Dovecot has with Maildir on NFS.

use std::collections::HashMap;
use std::sync::Mutex;

#[derive(Default)]
pub(crate) struct RecentTracker {
    claimed: Mutex<HashMap<(String, String), u32>>,
}

/// Bound on remembered mailboxes; past it the oldest knowledge is dropped
/// (the cost is messages that are never recent, not wrong ones).
const MAX_TRACKED: usize = 100_000;

impl RecentTracker {
    /// Claims the UIDs above what was claimed for this mailbox, up to
    /// `highest_uid`; returns the first claimed UID (claimed are
    /// `first..=highest_uid`), or `None`. The first session to ask about a
    /// mailbox starts from `floor` (UIDs at or below it are not recent).
    pub fn claim(&self, user: &str, mailbox: &str, highest_uid: u32, floor: u32) -> Option<u32> {
        let mut map = self.claimed.lock().unwrap_or_else(|p| p.into_inner());
        if map.len() >= MAX_TRACKED && !map.contains_key(&(user.to_string(), mailbox.to_string())) {
            map.clear();
        }
        let entry = map
            .entry((user.to_string(), mailbox.to_string()))
            .or_insert(floor);
        if highest_uid > *entry {
            let first = *entry + 1;
            *entry = highest_uid;
            Some(first)
        } else {
            None
        }
    }

    /// The first UID a claim would take now (`None`: nothing would be
    /// claimed), taking nothing: EXAMINE shows `\Recent` without removing
    /// it from the next SELECT (RFC 3501 §6.3.2).
    pub fn peek(&self, user: &str, mailbox: &str, highest_uid: u32, floor: u32) -> Option<u32> {
        let map = self.claimed.lock().unwrap_or_else(|p| p.into_inner());
        let claimed = map
            .get(&(user.to_string(), mailbox.to_string()))
            .copied()
            .unwrap_or(floor);
        (highest_uid > claimed).then_some(claimed + 1)
    }

    /// The highest UID claimed in this mailbox, if any session claimed
    /// (STATUS RECENT of a mailbox nobody has selected counts above it).
    pub fn claimed(&self, user: &str, mailbox: &str) -> Option<u32> {
        let map = self.claimed.lock().unwrap_or_else(|p| p.into_inner());
        map.get(&(user.to_string(), mailbox.to_string())).copied()
    }

    /// Messages from `first_uid` on were added (APPEND, COPY, MOVE) to a
    /// mailbox no session here has claimed yet: they are recent for the
    /// first session that selects it (as Dovecot treats them). `floor`:
    /// where the mailbox's `\Recent` would start otherwise.
    pub fn arrived(&self, user: &str, mailbox: &str, first_uid: u32, floor: u32) {
        let mut map = self.claimed.lock().unwrap_or_else(|p| p.into_inner());
        if map.len() >= MAX_TRACKED {
            return;
        }
        map.entry((user.to_string(), mailbox.to_string()))
            .or_insert(floor.min(first_uid.saturating_sub(1)));
    }

    /// Forget a mailbox (deleted or renamed).
    pub fn forget(&self, user: &str, mailbox: &str) {
        let mut map = self.claimed.lock().unwrap_or_else(|p| p.into_inner());
        map.remove(&(user.to_string(), mailbox.to_string()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_uid_is_claimed_once() {
        let t = RecentTracker::default();
        assert_eq!(t.claim("u", "INBOX", 5, 3), Some(4));
        assert_eq!(t.claim("u", "INBOX", 5, 0), None);
        assert_eq!(t.claim("u", "INBOX", 7, 0), Some(6));
        assert_eq!(t.claim("u", "Other", 2, 2), None);
        assert_eq!(t.peek("u", "INBOX", 9, 0), Some(8));
        assert_eq!(t.peek("u", "INBOX", 9, 0), Some(8));
        assert_eq!(t.peek("u", "New", 4, 1), Some(2));
        assert_eq!(t.claim("u", "New", 4, 1), Some(2));
    }
}
