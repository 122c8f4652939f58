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
    pub fn resolve(&self, set: &SequenceSet, uid: bool) -> Result<Vec<(u32, u32)>, InvalidSet> {
        let items = match set {
            SequenceSet::Saved => {
                return Ok(self
                    .saved
                    .iter()
                    .filter_map(|&u| self.msn_of(u).map(|m| (m, u)))
                    .collect());
            }
            SequenceSet::Set(items) => items,
        };
        let mut out: Vec<(u32, u32)> = Vec::new();
        if uid {
            let largest = self.highest_uid();
            for it in items {
                let (a, b) = bounds(it, largest);
                let start = self.uids.partition_point(|&u| u < a);
                let end = self.uids.partition_point(|&u| u <= b);
                for i in start..end {
                    if let Some(&u) = self.uids.get(i) {
                        out.push((i as u32 + 1, u));
                    }
                }
            }
        } else {
            let largest = self.exists();
            for it in items {
                let (a, b) = bounds(it, largest);
                if a == 0 || b > largest {
                    return Err(InvalidSet);
                }
                for m in a..=b {
                    if let Some(&u) = self.uids.get(m as usize - 1) {
                        out.push((m, u));
                    }
                }
            }
        }
        out.sort_unstable();
        out.dedup();
        Ok(out)
    }
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
