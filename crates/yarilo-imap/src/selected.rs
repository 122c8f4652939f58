//! The selected mailbox of a session: the MSN ↔ UID map the client knows,
//! the view whose flags it has been told, and the synchronisation that
//! turns store changes (ours, other sessions', other processes') into
//! EXISTS / EXPUNGE / VANISHED / FETCH responses.
//!
//! Invariant: `uids` changes only together with the responses that tell
//! the client (EXISTS appends, EXPUNGE/VANISHED removes), so sequence
//! numbers never drift from what the client computed.

use std::sync::Arc;

use tokio::sync::broadcast;
use yarilo_imap_proto::response::{Code, Data, FetchItem, Response};
use yarilo_imap_proto::{Flag, SeqItem, SequenceSet};
use yarilo_locks::Event;
use yarilo_store::{Flags, Mailbox, MailboxView, StoreError};

/// A sequence set that names messages that do not exist (RFC 9051 §6.4.*:
/// BAD for message sequence numbers out of range).
#[derive(Debug)]
pub(crate) struct InvalidSet;

pub(crate) struct Selected {
    pub mailbox: Mailbox,
    pub read_only: bool,
    /// MSN - 1 → UID, ascending. May hold UIDs already expunged in the
    /// store whose EXPUNGE has not been sent yet.
    pub uids: Vec<u32>,
    /// The store state the client has been told about.
    pub view: Arc<MailboxView>,
    /// While expunges are held back from the client (`uids` names
    /// messages `view` no longer has): the view from before the first of
    /// them, so FETCH can still serve those messages.
    pub before_expunge: Option<Arc<MailboxView>>,
    pub events: broadcast::Receiver<Event>,
    /// SEARCHRES `$` (UIDs).
    pub saved: Vec<u32>,
    /// UIDs recent in this session (ascending).
    pub recent: Vec<u32>,
    /// Keywords announced in FLAGS.
    pub keywords: Vec<String>,
    /// CONTEXT UPDATE searches (RFC 5267), see [`crate::context`].
    pub contexts: crate::context::Contexts,
}

/// What [`Selected::sync`] may tell the client.
#[derive(Clone, Copy)]
pub(crate) struct SyncMode {
    /// EXPUNGE/VANISHED allowed (not during FETCH/STORE/SEARCH by MSN).
    pub expunges: bool,
    /// QRESYNC enabled: VANISHED instead of EXPUNGE, UID in FETCH.
    pub qresync: bool,
    /// CONDSTORE enabled: MODSEQ in FETCH.
    pub condstore: bool,
    /// IMAP4rev2 enabled: no RECENT.
    pub rev2: bool,
    /// New messages may be announced (not held back by `delay-newmail`).
    pub new_mail: bool,
}

impl Selected {
    pub fn new(mailbox: Mailbox, read_only: bool) -> Selected {
        let view = mailbox.view();
        let uids = view.uids();
        let keywords = view.keyword_names();
        let events = mailbox.subscribe();
        Selected {
            mailbox,
            read_only,
            uids,
            view,
            before_expunge: None,
            events,
            saved: Vec::new(),
            recent: Vec::new(),
            keywords,
            contexts: Default::default(),
        }
    }

    pub fn exists(&self) -> u32 {
        self.uids.len() as u32
    }

    pub fn highest_uid(&self) -> u32 {
        self.uids.last().copied().unwrap_or(0)
    }

    /// MSN of a UID in the client's numbering.
    pub fn msn_of(&self, uid: u32) -> Option<u32> {
        self.uids.binary_search(&uid).ok().map(|i| i as u32 + 1)
    }

    pub fn is_recent(&self, uid: u32) -> bool {
        self.recent.binary_search(&uid).is_ok()
    }

    /// Drains pending change events; true if any arrived (or some were
    /// lost: a lagged receiver must rescan too).
    pub fn drain_events(&mut self) -> bool {
        let mut any = false;
        loop {
            match self.events.try_recv() {
                Ok(_) => any = true,
                Err(broadcast::error::TryRecvError::Lagged(_)) => any = true,
                Err(_) => break,
            }
        }
        any
    }

    /// The permanent flags line of SELECT and of FLAGS changes.
    pub fn flag_list(&self) -> Vec<Flag> {
        let mut v = vec![
            Flag::Answered,
            Flag::Flagged,
            Flag::Deleted,
            Flag::Seen,
            Flag::Draft,
        ];
        v.extend(self.keywords.iter().map(|k| Flag::Keyword(k.clone())));
        v
    }

    /// Brings the client up to date with `new`, appending the untagged
    /// responses to `out`. `skip`: UIDs whose flag change the caller has
    /// already reported (sorted).
    pub fn sync(
        &mut self,
        new: Arc<MailboxView>,
        mode: SyncMode,
        skip: &[u32],
        newly_recent: impl FnOnce(u32) -> Option<u32>,
        out: &mut Vec<Response>,
    ) {
        let old = std::mem::replace(&mut self.view, new.clone());
        // Expunges deferred by an earlier sync leave `uids` longer than
        // the view: that is never "unchanged".
        let unchanged = self.uids.len() == new.len()
            && (Arc::ptr_eq(&old, &new)
                || (old.highest_modseq() == new.highest_modseq()
                    && old.uidnext() == new.uidnext()
                    && old.len() == new.len()
                    && old.uidvalidity() == new.uidvalidity()));
        if unchanged {
            return;
        }
        // Expunges first, so the MSNs of flag updates are current.
        if mode.expunges {
            let gone: Vec<usize> = self
                .uids
                .iter()
                .enumerate()
                .filter(|(_, u)| new.by_uid(**u).is_none())
                .map(|(i, _)| i)
                .collect();
            if !gone.is_empty() {
                // RFC 5267 §4.3.4: REMOVEFROM before the EXPUNGE.
                let doomed: Vec<u32> = gone
                    .iter()
                    .filter_map(|&i| self.uids.get(i))
                    .copied()
                    .collect();
                self.contexts.expunging(&doomed, &self.uids, out);
                if mode.qresync {
                    let uids: Vec<u32> = gone
                        .iter()
                        .filter_map(|&i| self.uids.get(i))
                        .copied()
                        .collect();
                    out.push(Response::Data(Data::Vanished {
                        earlier: false,
                        uids: SequenceSet::from_numbers(uids),
                    }));
                } else {
                    for &i in gone.iter().rev() {
                        out.push(Response::Data(Data::Expunge(i as u32 + 1)));
                    }
                }
                let gone_uids: Vec<u32> = gone
                    .iter()
                    .filter_map(|&i| self.uids.get(i))
                    .copied()
                    .collect();
                self.uids.retain(|u| gone_uids.binary_search(u).is_err());
                self.recent.retain(|u| gone_uids.binary_search(u).is_err());
                self.saved.retain(|u| gone_uids.binary_search(u).is_err());
            }
        }
        if mode.expunges {
            self.before_expunge = None;
        } else if self.before_expunge.is_none()
            && self.uids.iter().any(|u| new.by_uid(*u).is_none())
        {
            self.before_expunge = Some(old.clone());
        }
        // New keywords: FLAGS before any FETCH that uses them.
        let kw = new.keyword_names();
        if kw != self.keywords {
            self.keywords = kw;
            out.push(Response::Data(Data::Flags(self.flag_list())));
            let mut perm = self.flag_list();
            perm.push(Flag::Wildcard);
            out.push(Response::Status {
                tag: None,
                kind: yarilo_imap_proto::response::StatusKind::Ok,
                code: Some(Code::PermanentFlags(if self.read_only {
                    Vec::new()
                } else {
                    perm
                })),
                text: "Flags permitted.".into(),
            });
        }
        // Flag changes of messages the client knows.
        let known_max = self.highest_uid();
        if new.highest_modseq() != old.highest_modseq() {
            for rec in new.changed_since(old.highest_modseq()) {
                if rec.uid > known_max || skip.binary_search(&rec.uid).is_ok() {
                    continue;
                }
                let Some(msn) = self.msn_of(rec.uid) else {
                    continue;
                };
                let before = old.by_uid(rec.uid);
                if before.is_some_and(|b| b.flags == rec.flags && b.keywords == rec.keywords) {
                    continue;
                }
                let mut items = vec![FetchItem::Flags(flags_of(
                    &new,
                    rec.uid,
                    self.is_recent(rec.uid),
                ))];
                if mode.qresync {
                    items.insert(0, FetchItem::Uid(rec.uid));
                }
                if mode.condstore {
                    items.push(FetchItem::ModSeq(rec.modseq));
                }
                out.push(Response::Data(Data::Fetch { seq: msn, items }));
            }
        }
        // New messages.
        if !mode.new_mail {
            return;
        }
        let before = self.uids.len();
        let mut tail: Vec<u32> = new
            .records()
            .rev()
            .take_while(|r| r.uid > known_max)
            .map(|r| r.uid)
            .collect();
        if !tail.is_empty() {
            tail.reverse();
            self.uids.extend_from_slice(&tail);
        }
        // RFC 5267 §4.3: new and changed messages are re-evaluated by
        // `Session::context_updates` after these responses.
        self.contexts.touched(&new, old.highest_modseq(), &tail);
        if self.uids.len() != before {
            out.push(Response::Data(Data::Exists(self.exists())));
            if !self.read_only {
                if let Some(first) = newly_recent(self.highest_uid()) {
                    self.recent
                        .extend(tail.iter().copied().filter(|&u| u >= first));
                }
            }
            if !mode.rev2 {
                out.push(Response::Data(Data::Recent(self.recent.len() as u32)));
            }
        }
    }

    /// Resolves a sequence set to (MSN, UID) pairs in MSN order. UIDs that
    /// do not exist are skipped (RFC 9051: not an error for UID sets);
    /// MSNs out of range are [`InvalidSet`].
    ///
    /// The items are clamped to the mailbox and merged before anything is
    /// expanded, so the result (and the work) is bounded by the mailbox,
    /// never by the set's text: `1:*,1:*,…` repeated 16,000 times costs
    /// what one `1:*` does.
    pub fn resolve(&self, set: &SequenceSet, uid: bool) -> Result<Vec<(u32, u32)>, InvalidSet> {
        match set {
            SequenceSet::Saved => Ok(self
                .saved
                .iter()
                .filter_map(|&u| self.msn_of(u).map(|m| (m, u)))
                .collect()),
            SequenceSet::Set(items) => resolve_items(&self.uids, items, uid),
        }
    }
}

/// [`Selected::resolve`] over `uids` (MSN - 1 → UID, ascending).
fn resolve_items(
    uids: &[u32],
    items: &[SeqItem],
    uid: bool,
) -> Result<Vec<(u32, u32)>, InvalidSet> {
    // Index ranges into `uids`, half-open, ascending and disjoint.
    let spans: Vec<(usize, usize)> = if uid {
        let highest = uids.last().copied().unwrap_or(0);
        merged_ranges(items, highest)
            .into_iter()
            .map(|(a, b)| {
                (
                    uids.partition_point(|&u| u < a),
                    uids.partition_point(|&u| u <= b),
                )
            })
            .collect()
    } else {
        let largest = uids.len() as u32;
        // RFC 9051 §6.4.*: a message sequence number out of range is BAD.
        if items.iter().any(|it| {
            let (a, b) = bounds(it, largest);
            a == 0 || b > largest
        }) {
            return Err(InvalidSet);
        }
        merged_ranges(items, largest)
            .into_iter()
            .map(|(a, b)| (a as usize - 1, b as usize))
            .collect()
    };
    let total = spans.iter().map(|&(a, b)| b.saturating_sub(a)).sum();
    let mut out = Vec::with_capacity(total);
    for (a, b) in spans {
        for (i, &u) in uids.get(a..b).unwrap_or_default().iter().enumerate() {
            out.push(((a + i) as u32 + 1, u));
        }
    }
    Ok(out)
}

/// The items of a set as ascending, disjoint, non-adjacent inclusive
/// ranges, `*` meaning `largest`; numbers above `largest` are dropped
/// (nothing exists there), and 0 too. Costs O(items · log items) whatever
/// the ranges span.
pub(crate) fn merged_ranges(items: &[SeqItem], largest: u32) -> Vec<(u32, u32)> {
    let mut ranges: Vec<(u32, u32)> = items
        .iter()
        .map(|it| bounds(it, largest))
        .filter(|&(a, _)| a <= largest)
        .map(|(a, b)| (a.max(1), b.min(largest)))
        .filter(|&(a, b)| a <= b)
        .collect();
    ranges.sort_unstable();
    let mut merged: Vec<(u32, u32)> = Vec::with_capacity(ranges.len());
    for (a, b) in ranges {
        match merged.last_mut() {
            Some(last) if a <= last.1.saturating_add(1) => last.1 = last.1.max(b),
            _ => merged.push((a, b)),
        }
    }
    merged
}

/// Whether `n` is in ranges from [`merged_ranges`] (binary search).
pub(crate) fn ranges_contain(ranges: &[(u32, u32)], n: u32) -> bool {
    let i = ranges.partition_point(|&(_, b)| b < n);
    ranges.get(i).is_some_and(|&(a, _)| a <= n)
}

fn bounds(it: &SeqItem, largest: u32) -> (u32, u32) {
    match *it {
        SeqItem::One(n) => {
            let v = n.resolve(largest);
            (v, v)
        }
        SeqItem::Range(a, b) => {
            let (a, b) = (a.resolve(largest), b.resolve(largest));
            (a.min(b), a.max(b))
        }
    }
}

/// FLAGS of a message as the client sees them.
pub(crate) fn flags_of(view: &MailboxView, uid: u32, recent: bool) -> Vec<Flag> {
    let Some(rec) = view.by_uid(uid) else {
        return Vec::new();
    };
    let mut v = system_flags(rec.flags);
    if recent {
        v.push(Flag::Recent);
    }
    let info = view.info(rec);
    v.extend(info.keywords.into_iter().map(Flag::Keyword));
    v
}

pub(crate) fn system_flags(f: Flags) -> Vec<Flag> {
    let mut v = Vec::new();
    if f.contains(Flags::SEEN) {
        v.push(Flag::Seen);
    }
    if f.contains(Flags::ANSWERED) {
        v.push(Flag::Answered);
    }
    if f.contains(Flags::FLAGGED) {
        v.push(Flag::Flagged);
    }
    if f.contains(Flags::DELETED) {
        v.push(Flag::Deleted);
    }
    if f.contains(Flags::DRAFT) {
        v.push(Flag::Draft);
    }
    v
}

/// Maps a store error to the tagged NO a client should see.
pub(crate) fn store_no(tag: &str, e: &StoreError) -> Response {
    let (code, text) = match e {
        StoreError::NoMailbox(_) => (
            Some(Code::NonExistent),
            "Mailbox doesn't exist.".to_string(),
        ),
        StoreError::MailboxExists(_) => (
            Some(Code::AlreadyExists),
            "Mailbox already exists.".to_string(),
        ),
        StoreError::NotAllowed(_, why) => (Some(Code::Cannot), format!("Not allowed: {why}.")),
        StoreError::Name(n) => (Some(Code::Cannot), format!("{}.", n.reason)),
        StoreError::NoMessage(_) => (
            Some(Code::ExpungeIssued),
            "Some messages were expunged.".to_string(),
        ),
        StoreError::TooManyKeywords => (
            Some(Code::Limit),
            "Too many keywords in this mailbox.".to_string(),
        ),
        StoreError::TooLarge(_) => (Some(Code::TooBig), "Message too large.".to_string()),
        StoreError::Lock(_) | StoreError::Dotlock(_) => (
            Some(Code::InUse),
            "Mailbox is busy, try again later.".to_string(),
        ),
        StoreError::UidList(_) => (
            Some(Code::Corruption),
            "Mailbox index is damaged; the administrator has been told.".to_string(),
        ),
        StoreError::Io { .. }
        | StoreError::Location(_)
        | StoreError::Internal(_)
        | StoreError::InsecureKeyFile { .. } => (
            Some(Code::ServerBug),
            "Internal error occurred. Refer to server log for more information.".to_string(),
        ),
    };
    if matches!(
        e,
        StoreError::Io { .. }
            | StoreError::Internal(_)
            | StoreError::UidList(_)
            | StoreError::Location(_)
            | StoreError::InsecureKeyFile { .. }
    ) {
        tracing::error!(error = %e, "store operation failed");
    }
    Response::no(tag, code, text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use yarilo_imap_proto::SeqNum;

    fn range(a: SeqNum, b: SeqNum) -> SeqItem {
        SeqItem::Range(a, b)
    }

    fn all() -> SeqItem {
        range(SeqNum::Value(1), SeqNum::Largest)
    }

    /// What resolve() computed before ranges were merged: expand every
    /// item, then sort and dedup. The reference for small inputs.
    fn naive(uids: &[u32], items: &[SeqItem], uid: bool) -> Option<Vec<(u32, u32)>> {
        let mut out = Vec::new();
        for it in items {
            if uid {
                let (a, b) = bounds(it, uids.last().copied().unwrap_or(0));
                for (i, &u) in uids.iter().enumerate() {
                    if (a..=b).contains(&u) {
                        out.push((i as u32 + 1, u));
                    }
                }
            } else {
                let n = uids.len() as u32;
                let (a, b) = bounds(it, n);
                if a == 0 || b > n {
                    return None;
                }
                for m in a..=b {
                    out.push((m, uids[m as usize - 1]));
                }
            }
        }
        out.sort_unstable();
        out.dedup();
        Some(out)
    }

    #[test]
    fn repeated_full_ranges_resolve_to_each_message_once_in_mailbox_sized_memory() {
        let uids: Vec<u32> = (1..=100_000u32).map(|i| i * 2).collect();
        // What a 64 KiB command line holds: ~16,000 `1:*`.
        let items = vec![all(); 16_000];
        assert_eq!(merged_ranges(&items, 200_000), vec![(1, 200_000)]);
        for uid in [true, false] {
            let got = resolve_items(&uids, &items, uid).unwrap();
            assert_eq!(got.len(), uids.len());
            // Allocated once, for the mailbox: not 16,000 × 100,000 pairs.
            assert_eq!(got.capacity(), uids.len());
            assert_eq!(got.first(), Some(&(1, 2)));
            assert_eq!(got.last(), Some(&(100_000, 200_000)));
        }
    }

    #[test]
    fn ranges_beyond_the_mailbox_are_clamped_before_expanding() {
        let uids: Vec<u32> = vec![3, 7, 9];
        let huge = range(SeqNum::Value(1), SeqNum::Value(u32::MAX));
        let got = resolve_items(&uids, &[huge, huge], true).unwrap();
        assert_eq!(got, vec![(1, 3), (2, 7), (3, 9)]);
        assert_eq!(got.capacity(), 3);
        // By MSN the same range is out of range: BAD, nothing expanded.
        assert!(resolve_items(&uids, &[huge], false).is_err());
    }

    #[test]
    fn merged_resolution_matches_expanding_every_item() {
        // A deterministic generator: no wall clock, no seed to record.
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = |m: u32| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x % u64::from(m)) as u32
        };
        for _ in 0..500 {
            let n = next(40);
            let mut uids: Vec<u32> = (0..n).map(|_| next(120) + 1).collect();
            uids.sort_unstable();
            uids.dedup();
            let num = |v: u32| {
                if v == 0 {
                    SeqNum::Largest
                } else {
                    SeqNum::Value(v)
                }
            };
            let items: Vec<SeqItem> = (0..next(6) + 1)
                .map(|_| {
                    let (a, b) = (next(130), next(130));
                    if next(3) == 0 {
                        SeqItem::One(num(a))
                    } else {
                        range(num(a), num(b))
                    }
                })
                .collect();
            for uid in [true, false] {
                assert_eq!(
                    resolve_items(&uids, &items, uid).ok(),
                    naive(&uids, &items, uid),
                    "uids {uids:?} items {items:?} uid {uid}"
                );
            }
        }
    }

    #[test]
    fn ranges_contain_answers_membership() {
        let r = merged_ranges(
            &[
                range(SeqNum::Value(5), SeqNum::Value(3)),
                SeqItem::One(SeqNum::Value(9)),
                SeqItem::One(SeqNum::Value(6)),
            ],
            100,
        );
        assert_eq!(r, vec![(3, 6), (9, 9)]);
        let hits: Vec<u32> = (0..12).filter(|&n| ranges_contain(&r, n)).collect();
        assert_eq!(hits, vec![3, 4, 5, 6, 9]);
    }
}
